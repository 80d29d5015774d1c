package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hostfile"
)

func openTestRoot(t *testing.T) (*Root, string) {
	t.Helper()
	dir := t.TempDir()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

// TestForceSymlink: a file, FIFO or link at the link path is replaced; a
// directory is refused; Rollback brings the replaced object back.
func TestForceSymlink(t *testing.T) {
	r, dir := openTestRoot(t)
	if err := os.WriteFile(dir+"/file", []byte("image"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(dir+"/fifo", 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir+"/dir", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/file", "/fifo", "/new"} {
		if err := r.ForceSymlink("target", name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, _ := os.Readlink(dir + name); got != "target" {
			t.Errorf("%s -> %q", name, got)
		}
	}
	if err := r.ForceSymlink("target", "/dir"); !errors.Is(err, ErrExists) {
		t.Errorf("over a directory: %v, want ErrExists", err)
	}
	if err := r.Rollback(); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(dir + "/file"); err != nil || string(data) != "image" {
		t.Errorf("file after rollback: %q, %v", data, err)
	}
	if st, err := os.Lstat(dir + "/fifo"); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo after rollback: %v, %v", st, err)
	}
	if _, err := os.Lstat(dir + "/new"); err == nil {
		t.Error("new link kept after rollback")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("entries after rollback: %v", ents)
	}
	// Commit drops the replaced file.
	if err := r.ForceSymlink("t2", "/file"); err != nil {
		t.Fatal(err)
	}
	r.Commit()
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("entries after commit: %v", ents)
	}
}

func TestOpenRegular(t *testing.T) {
	r, dir := openTestRoot(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(dir+"/small", []byte("abc"), 0o644))
	must(unix.Mkfifo(dir+"/fifo", 0o644))
	must(os.Symlink("/small", dir+"/abs"))
	must(os.Symlink("../../../small", dir+"/climb"))
	tests := []struct {
		path string
		err  error
	}{
		{"/small", nil},
		{"/abs", nil},
		{"/climb", nil},
		{"/fifo", hostfile.ErrNotRegular},
		{"/", hostfile.ErrNotRegular},
		{"/big", hostfile.ErrTooLarge},
		{"/missing", unix.ENOENT},
	}
	must(os.WriteFile(dir+"/big", make([]byte, 11), 0o644))
	for _, tc := range tests {
		f, err := r.OpenRegular(tc.path, 10)
		if tc.err == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.path, err)
				continue
			}
			buf := make([]byte, 8)
			n, _ := f.ReadAt(buf, 0)
			if string(buf[:n]) != "abc" {
				t.Errorf("%s: read %q", tc.path, buf[:n])
			}
			f.Close()
			continue
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.path, err, tc.err)
		}
	}
}

func TestChmodAndLstat(t *testing.T) {
	r, dir := openTestRoot(t)
	host := t.TempDir()
	if err := os.Chmod(host, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, dir+"/escape"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Chmod("/escape", 0o755); !errors.Is(err, unix.ENOENT) {
		t.Errorf("chmod through a link to a host path: %v, want ENOENT inside the root", err)
	}
	if st, _ := os.Stat(host); st.Mode().Perm() != 0o700 {
		t.Errorf("host mode changed: %v", st.Mode())
	}
	if err := os.MkdirAll(filepath.Join(dir, host), 0o700); err != nil {
		t.Fatal(err)
	}
	changed, err := r.Chmod("/escape", 0o751)
	if err != nil || !changed {
		t.Fatalf("chmod: %v, %v", changed, err)
	}
	if changed, err := r.Chmod("/escape", 0o751); err != nil || changed {
		t.Errorf("chmod again: %v, %v; want no change", changed, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, host)); st.Mode().Perm() != 0o751 {
		t.Errorf("mode inside the root: %v", st.Mode())
	}
	st, err := r.Lstat("/escape")
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("Lstat of a link: %o, %v", st.Mode, err)
	}
	r.Rollback()
	if st, _ := os.Stat(filepath.Join(dir, host)); st.Mode().Perm() != 0o700 {
		t.Errorf("mode after rollback: %v", st.Mode())
	}
}
