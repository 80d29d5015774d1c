package specfeed

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/atomicfile"
)

// setup writes config.json with orig in a new directory and opens a feed
// on it.
func setup(t *testing.T, orig []byte) (string, *Feed, syscall.Stat_t) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, orig, 0o640); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("after Open config.json is %v (%v), want a named pipe", fi.Mode(), err)
	}
	return path, f, st
}

// readAsync opens path now and reads it to the end in the background, as
// a runtime started right after Open does.
func readAsync(t *testing.T, path string) <-chan []byte {
	t.Helper()
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan []byte, 1)
	go func() {
		defer r.Close()
		b, _ := io.ReadAll(r)
		ch <- b
	}()
	return ch
}

func recv(t *testing.T, ch <-chan []byte) []byte {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("the reader of the pipe never got to the end")
		return nil
	}
}

// checkEnd: config.json is a regular file holding want, and the directory
// holds nothing else.
func checkEnd(t *testing.T, path string, want []byte) os.FileInfo {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("config.json is %v (%v), want a regular file", fi, err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("config.json holds %q (%v), want %q", got, err, want)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %q, want config.json alone", names)
	}
	return fi
}

func TestFeed(t *testing.T) {
	orig := []byte(`{"ociVersion":"1.0.2"}`)
	final := []byte(`{"ociVersion":"1.0.2","linux":{"devices":[]}}`)
	big := []byte(`{"annotations":{"x":"` + strings.Repeat("y", 300<<10) + `"}}`) // larger than a default pipe
	for _, tt := range []struct {
		name       string
		data       []byte
		readBefore bool // the reader opens the pipe before Commit
	}{
		{"reader waiting on the pipe", final, true},
		{"reader after the commit", final, false},
		{"reader waiting, more than a default pipe holds", big, true},
		{"nobody reads, more than a default pipe holds", big, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path, f, st := setup(t, orig)
			var ch <-chan []byte
			if tt.readBefore {
				ch = readAsync(t, path)
			}
			if err := f.Commit(tt.data); err != nil {
				t.Fatal(err)
			}
			if ch != nil {
				if got := recv(t, ch); !bytes.Equal(got, tt.data) {
					t.Fatalf("the waiting reader read %d bytes, want the %d committed", len(got), len(tt.data))
				}
			}
			fi := checkEnd(t, path, tt.data)
			if fi.Mode().Perm() != 0o640 || fi.Sys().(*syscall.Stat_t).Uid != st.Uid {
				t.Fatalf("config.json mode %v uid %d, want the original's %v %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, os.FileMode(0o640), st.Uid)
			}
			if err := f.Commit(tt.data); !errors.Is(err, ErrDone) {
				t.Fatalf("second Commit: %v, want ErrDone", err)
			}
		})
	}
}

// TestKeep: the original file itself comes back (same inode), and a
// waiting reader gets its bytes.
func TestKeep(t *testing.T) {
	orig := []byte(`{"ociVersion":"1.0.2","process":{}}`)
	path, f, st := setup(t, orig)
	ch := readAsync(t, path)
	if err := f.Keep(orig); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, ch); !bytes.Equal(got, orig) {
		t.Fatalf("the waiting reader read %q, want the original", got)
	}
	fi := checkEnd(t, path, orig)
	if ino := fi.Sys().(*syscall.Stat_t).Ino; ino != st.Ino {
		t.Fatalf("config.json is inode %d, want the original file (%d)", ino, st.Ino)
	}
}

// TestRestore: the original file comes back and a waiting reader reads no
// document.
func TestRestore(t *testing.T) {
	orig := []byte(`{"ociVersion":"1.0.2"}`)
	path, f, st := setup(t, orig)
	ch := readAsync(t, path)
	if err := f.Restore(); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, ch); len(got) != 0 {
		t.Fatalf("the waiting reader read %q, want nothing", got)
	}
	fi := checkEnd(t, path, orig)
	if ino := fi.Sys().(*syscall.Stat_t).Ino; ino != st.Ino {
		t.Fatalf("config.json is inode %d, want the original file (%d)", ino, st.Ino)
	}
	if err := f.Keep(orig); !errors.Is(err, ErrDone) {
		t.Fatalf("Keep after Restore: %v, want ErrDone", err)
	}
}

// TestOpenRefuses: only a regular file is fed; anything else is left as
// it is.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.json")
	if err := os.WriteFile(target, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "config.json")
	if err := os.Symlink("real.json", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, filepath.Join(dir, "missing.json"), dir} {
		if _, err := Open(p); err == nil {
			t.Fatalf("Open(%s) succeeded", p)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was changed: %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("Open left files behind: %d entries", len(ents))
	}
}

// deadPid is the pid of a process that has ended (and been reaped).
func deadPid(t *testing.T) int {
	t.Helper()
	c := exec.Command("/bin/sh", "-c", "exit 0")
	if err := c.Run(); err != nil {
		t.Skipf("no /bin/sh to make a pid that has ended: %v", err)
	}
	return c.Process.Pid
}

// abandon leaves f as a process killed between Open and Commit does:
// the pipe closed, config.json still the pipe, the hard link to the
// original named after owner.
func abandon(t *testing.T, f *Feed, owner int) {
	t.Helper()
	f.pipe.Close()
	dir := filepath.Dir(f.saved)
	renamed := filepath.Join(dir, ".config.json.nctk-orig-"+strconv.Itoa(owner)+"-x")
	if err := os.Rename(f.saved, renamed); err != nil {
		t.Fatal(err)
	}
	f.saved = renamed
}

// TestRecover: a config.json a killed owner left as the pipe gets its
// original back (the same file); a live owner's feed, a regular file, and
// a pipe with two candidate originals are left alone.
func TestRecover(t *testing.T) {
	orig := []byte(`{"ociVersion":"1.0.2"}`)
	dead := deadPid(t)
	t.Run("owner killed", func(t *testing.T) {
		path, f, st := setup(t, orig)
		abandon(t, f, dead)
		ok, err := Recover(path)
		if err != nil || !ok {
			t.Fatalf("Recover = %v, %v; want true, nil", ok, err)
		}
		fi := checkEnd(t, path, orig)
		if ino := fi.Sys().(*syscall.Stat_t).Ino; ino != st.Ino {
			t.Fatalf("config.json is inode %d, want the original file (%d)", ino, st.Ino)
		}
	})
	t.Run("owner alive", func(t *testing.T) {
		path, f, _ := setup(t, orig)
		if ok, err := Recover(path); ok || err != nil {
			t.Fatalf("Recover of a live feed = %v, %v; want false, nil", ok, err)
		}
		if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("a live feed's pipe was replaced: %v %v", fi, err)
		}
		if err := f.Restore(); err != nil {
			t.Fatal(err)
		}
		checkEnd(t, path, orig)
	})
	t.Run("regular file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		if ok, err := Recover(path); ok || err != nil {
			t.Fatalf("Recover = %v, %v; want false, nil", ok, err)
		}
		checkEnd(t, path, orig)
	})
	t.Run("two originals", func(t *testing.T) {
		path, f, _ := setup(t, orig)
		abandon(t, f, dead)
		other := filepath.Join(filepath.Dir(path), ".config.json.nctk-orig-"+strconv.Itoa(dead)+"-y")
		if err := os.WriteFile(other, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		ok, err := Recover(path)
		if ok || err == nil || !strings.Contains(err.Error(), "2 saved originals") {
			t.Fatalf("Recover = %v, %v; want an error naming both", ok, err)
		}
		if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("config.json was replaced: %v %v", fi, err)
		}
	})
}

// BenchmarkFeed: what the early start adds to a create's config.json write:
// the pipe made (Open) and the final document committed (Commit), against
// the atomic write it replaces (ocispec.Save's).
func BenchmarkFeed(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 17<<10) // a CDI create's config.json
	dir := b.TempDir()
	path := filepath.Join(dir, "config.json")
	b.Run("pipe", func(b *testing.B) {
		for b.Loop() {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				b.Fatal(err)
			}
			f, err := Open(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := f.Commit(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("atomic-write", func(b *testing.B) {
		for b.Loop() {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				b.Fatal(err)
			}
			if err := atomicfile.WriteFile(path, data, atomicfile.Options{KeepExisting: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
