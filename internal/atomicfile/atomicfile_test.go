package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// entries returns the names in dir, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func mustWrite(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustChown(t *testing.T, path string, uid, gid int) {
	t.Helper()
	if err := os.Lchown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}

func ownerOfPath(t *testing.T, path string) Owner {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := ownerOf(st)
	return Owner{uid, gid}
}

func TestWriteFile(t *testing.T) {
	root := os.Geteuid() == 0
	me := Owner{os.Geteuid(), os.Getegid()}
	type result struct {
		file  string // the regular file that must hold the new data
		mode  fs.FileMode
		owner *Owner // nil: the caller's
		link  string // when set, must still be a symbolic link to this
		files []string
	}
	tests := []struct {
		name     string
		needRoot bool
		setup    func(t *testing.T, dir string)
		path     string // relative to the test directory
		opts     Options
		want     result
	}{
		{
			name: "new file, default mode",
			path: "f",
			want: result{file: "f", mode: 0o644, files: []string{"f"}},
		},
		{
			name: "new file, mode",
			path: "f",
			opts: Options{Mode: 0o600, Sync: true},
			want: result{file: "f", mode: 0o600, files: []string{"f"}},
		},
		{
			name:  "replace: mode from options",
			setup: func(t *testing.T, dir string) { mustWrite(t, dir+"/f", "old", 0o640) },
			path:  "f",
			opts:  Options{Mode: 0o644},
			want:  result{file: "f", mode: 0o644, files: []string{"f"}},
		},
		{
			name:  "replace: mode kept",
			setup: func(t *testing.T, dir string) { mustWrite(t, dir+"/f", "old", 0o600) },
			path:  "f",
			opts:  Options{Mode: 0o644, KeepExisting: true},
			want:  result{file: "f", mode: 0o600, files: []string{"f"}},
		},
		{
			name: "keep: no file to keep, mode from options",
			path: "f",
			opts: Options{Mode: 0o640, KeepExisting: true},
			want: result{file: "f", mode: 0o640, files: []string{"f"}},
		},
		{
			name:     "replace: owner and mode kept",
			needRoot: true,
			setup: func(t *testing.T, dir string) {
				mustWrite(t, dir+"/f", "old", 0o604)
				mustChown(t, dir+"/f", 1234, 5678)
			},
			path: "f",
			opts: Options{KeepExisting: true, Owner: &Owner{42, 43}},
			want: result{file: "f", mode: 0o604, owner: &Owner{1234, 5678}, files: []string{"f"}},
		},
		{
			name:     "replace: owner from options",
			needRoot: true,
			setup: func(t *testing.T, dir string) {
				mustWrite(t, dir+"/f", "old", 0o644)
				mustChown(t, dir+"/f", 1234, 5678)
			},
			path: "f",
			opts: Options{Owner: &Owner{4321, 8765}},
			want: result{file: "f", mode: 0o644, owner: &Owner{4321, 8765}, files: []string{"f"}},
		},
		{
			name:     "replace: owner not kept without KeepExisting",
			needRoot: true,
			setup: func(t *testing.T, dir string) {
				mustWrite(t, dir+"/f", "old", 0o644)
				mustChown(t, dir+"/f", 1234, 5678)
			},
			path: "f",
			want: result{file: "f", mode: 0o644, owner: &me, files: []string{"f"}},
		},
		{
			name:     "new file: owner from options, group only",
			needRoot: true,
			path:     "f",
			opts:     Options{Owner: &Owner{-1, 8765}, KeepExisting: true},
			want:     result{file: "f", mode: 0o644, owner: &Owner{me.UID, 8765}, files: []string{"f"}},
		},
		{
			name: "symlink followed: link stays, target written with its mode",
			setup: func(t *testing.T, dir string) {
				mustWrite(t, dir+"/real", "old", 0o600)
				if err := os.Symlink("real", dir+"/link"); err != nil {
					t.Fatal(err)
				}
			},
			path: "link",
			opts: Options{FollowSymlinks: true, KeepExisting: true, Sync: true},
			want: result{file: "real", mode: 0o600, link: "real", files: []string{"link", "real"}},
		},
		{
			name:     "symlink followed: owner of the target kept",
			needRoot: true,
			setup: func(t *testing.T, dir string) {
				mustWrite(t, dir+"/real", "old", 0o640)
				mustChown(t, dir+"/real", 1234, 5678)
				if err := os.Symlink("real", dir+"/link"); err != nil {
					t.Fatal(err)
				}
				mustChown(t, dir+"/link", 99, 99)
			},
			path: "link",
			opts: Options{FollowSymlinks: true, KeepExisting: true},
			want: result{file: "real", mode: 0o640, owner: &Owner{1234, 5678}, link: "real", files: []string{"link", "real"}},
		},
		{
			name: "symlink chain into another directory followed",
			setup: func(t *testing.T, dir string) {
				if err := os.Mkdir(dir+"/sub", 0o755); err != nil {
					t.Fatal(err)
				}
				mustWrite(t, dir+"/sub/real", "old", 0o640)
				if err := os.Symlink("sub/real", dir+"/mid"); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("mid", dir+"/link"); err != nil {
					t.Fatal(err)
				}
			},
			path: "link",
			opts: Options{FollowSymlinks: true, KeepExisting: true},
			want: result{file: "sub/real", mode: 0o640, link: "mid", files: []string{"link", "mid", "sub"}},
		},
		{
			name: "symlink replaced when not followed",
			setup: func(t *testing.T, dir string) {
				mustWrite(t, dir+"/real", "old", 0o600)
				if err := os.Symlink("real", dir+"/link"); err != nil {
					t.Fatal(err)
				}
			},
			path: "link",
			opts: Options{Mode: 0o644},
			want: result{file: "link", mode: 0o644, files: []string{"link", "real"}},
		},
		{
			name: "symlink replaced when not followed, target's mode kept",
			setup: func(t *testing.T, dir string) {
				mustWrite(t, dir+"/real", "old", 0o600)
				if err := os.Symlink("real", dir+"/link"); err != nil {
					t.Fatal(err)
				}
			},
			path: "link",
			opts: Options{KeepExisting: true},
			want: result{file: "link", mode: 0o600, files: []string{"link", "real"}},
		},
		{
			name: "dangling symlink replaced even when followed",
			setup: func(t *testing.T, dir string) {
				if err := os.Symlink("nowhere", dir+"/link"); err != nil {
					t.Fatal(err)
				}
			},
			path: "link",
			opts: Options{FollowSymlinks: true, KeepExisting: true},
			want: result{file: "link", mode: 0o644, files: []string{"link"}},
		},
		{
			name: "missing parent directories created",
			path: "a/b/f",
			opts: Options{DirMode: 0o755},
			want: result{file: "a/b/f", mode: 0o644, files: []string{"a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needRoot && !root {
				t.Skip("needs root to chown")
			}
			dir := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			oldReal, _ := os.ReadFile(filepath.Join(dir, "real"))
			data := []byte("new content\n")
			if err := WriteFile(filepath.Join(dir, tt.path), data, tt.opts); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			file := filepath.Join(dir, tt.want.file)
			fi, err := os.Lstat(file)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() {
				t.Errorf("%s is %v, want a regular file", tt.want.file, fi.Mode())
			}
			if got, _ := os.ReadFile(file); string(got) != string(data) {
				t.Errorf("%s holds %q, want %q", tt.want.file, got, data)
			}
			if fi.Mode().Perm() != tt.want.mode {
				t.Errorf("mode %v, want %v", fi.Mode().Perm(), tt.want.mode)
			}
			wantOwner := me
			if tt.want.owner != nil {
				wantOwner = *tt.want.owner
			}
			if got := ownerOfPath(t, file); got != wantOwner {
				t.Errorf("owner %v, want %v", got, wantOwner)
			}
			if tt.want.link != "" {
				if got, err := os.Readlink(filepath.Join(dir, tt.path)); err != nil || got != tt.want.link {
					t.Errorf("link %s = %q, %v; want it kept pointing to %q", tt.path, got, err, tt.want.link)
				}
			}
			if oldReal != nil && tt.want.file != "real" {
				if got, _ := os.ReadFile(filepath.Join(dir, "real")); string(got) != string(oldReal) {
					t.Errorf("the replaced link's old target changed: %q", got)
				}
			}
			if got := entries(t, dir); !slices.Equal(got, tt.want.files) {
				t.Errorf("directory holds %v, want %v", got, tt.want.files)
			}
			if d := filepath.Dir(file); d != dir {
				if got := entries(t, d); !slices.Equal(got, []string{filepath.Base(file)}) {
					t.Errorf("%s holds %v, want only %s", d, got, filepath.Base(file))
				}
			}
		})
	}
}

// TestWriteFileReplacePipe: with ReplacePipe a named pipe is replaced by
// the file, which keeps the pipe's mode and owner (KeepExisting).
func TestWriteFileReplacePipe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := syscall.Mkfifo(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), Options{KeepExisting: true, ReplacePipe: true}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o640 {
		t.Fatalf("after the write: %v (%v), want a regular file with mode 0640", st, err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "new" {
		t.Fatalf("content %q (%v)", got, err)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Fatalf("directory holds %v", got)
	}
}

func TestWriteFileRefuses(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T, dir string)
		path       string
		opts       Options
		notRegular bool
	}{
		{
			name: "missing directory",
			path: "missing/f",
		},
		{
			name:       "directory",
			setup:      func(t *testing.T, dir string) { os.Mkdir(dir+"/f", 0o755) },
			path:       "f",
			opts:       Options{DirMode: 0o755},
			notRegular: true,
		},
		{
			name: "non-empty directory",
			setup: func(t *testing.T, dir string) {
				os.MkdirAll(dir+"/f/x", 0o755)
			},
			path:       "f",
			opts:       Options{KeepExisting: true},
			notRegular: true,
		},
		{
			name: "FIFO behind a followed link",
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(dir+"/fifo", 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("fifo", dir+"/f"); err != nil {
					t.Fatal(err)
				}
			},
			path:       "f",
			opts:       Options{FollowSymlinks: true, KeepExisting: true, Sync: true},
			notRegular: true,
		},
		{
			name: "FIFO",
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(dir+"/f", 0o644); err != nil {
					t.Fatal(err)
				}
			},
			path:       "f",
			notRegular: true,
		},
		{
			name:  "parent is a file",
			setup: func(t *testing.T, dir string) { mustWrite(t, dir+"/p", "x", 0o644) },
			path:  "p/f",
			opts:  Options{DirMode: 0o755},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			before := entries(t, dir)
			err := WriteFile(filepath.Join(dir, tt.path), []byte("new"), tt.opts)
			if err == nil {
				t.Fatal("no error")
			}
			var nr *NotRegularError
			if errors.As(err, &nr) != tt.notRegular {
				t.Errorf("error %v: NotRegularError = %v, want %v", err, !tt.notRegular, tt.notRegular)
			}
			if got := entries(t, dir); !slices.Equal(got, before) {
				t.Errorf("directory holds %v, had %v", got, before)
			}
		})
	}
}

// TestWriteFileFailureCleanup fails each step in turn: the target keeps its
// content, mode and owner, and no temporary file is left.
func TestWriteFileFailureCleanup(t *testing.T) {
	injected := errors.New("injected")
	all := Options{Sync: true, KeepExisting: true, FollowSymlinks: true, Owner: &Owner{os.Geteuid() + 1, os.Getegid() + 1}}
	// With every option on and a new file, write goes through each step.
	var seen []step
	dir := t.TempDir()
	if err := write(filepath.Join(dir, "f"), nil, all, func(s step) error { seen = append(seen, s); return nil }); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("needs root to chown: %v", err)
		}
		t.Fatal(err)
	}
	if want := []step{stepCreate, stepWrite, stepChmod, stepChown, stepSync, stepClose, stepRename, stepSyncDir}; !slices.Equal(seen, want) {
		t.Fatalf("steps %v, want %v", seen, want)
	}

	tests := []struct {
		step step
		name string
	}{
		{stepCreate, "create"},
		{stepWrite, "write"},
		{stepChmod, "chmod"},
		{stepChown, "chown"},
		{stepSync, "sync"},
		{stepClose, "close"},
		{stepRename, "rename"},
	}
	for _, tt := range tests {
		for _, existing := range []bool{true, false} {
			name := tt.name + "/new"
			if existing {
				name = tt.name + "/existing"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "f")
				if existing {
					mustWrite(t, path, "old", 0o600)
				}
				before := entries(t, dir)
				opts := all
				opts.KeepExisting = false // so that the chown step runs for an existing file too
				err := write(path, []byte("new"), opts, func(s step) error {
					if s == tt.step {
						return injected
					}
					return nil
				})
				if !errors.Is(err, injected) {
					t.Fatalf("error %v, want the injected one", err)
				}
				if got := entries(t, dir); !slices.Equal(got, before) {
					t.Errorf("directory holds %v, had %v", got, before)
				}
				if !existing {
					return
				}
				if got, _ := os.ReadFile(path); string(got) != "old" {
					t.Errorf("content %q, want the old one", got)
				}
				if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
					t.Errorf("mode %v, want 0600", fi.Mode().Perm())
				}
			})
		}
	}

	// A failed directory sync comes after the rename: the new content is in
	// place, the error says so, and no temporary file is left.
	dir = t.TempDir()
	path := filepath.Join(dir, "f")
	mustWrite(t, path, "old", 0o600)
	err := write(path, []byte("new"), Options{Sync: true}, func(s step) error {
		if s == stepSyncDir {
			return injected
		}
		return nil
	})
	if !errors.Is(err, injected) {
		t.Fatalf("error %v, want the injected one", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Errorf("content %q after the rename", got)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"f"}) {
		t.Errorf("directory holds %v", got)
	}
}

// TestWriteFileNoSyncSteps checks that without Sync nothing is synced and
// that an owner equal to the caller's is not set again.
func TestWriteFileNoSyncSteps(t *testing.T) {
	var seen []step
	dir := t.TempDir()
	o := Options{Owner: &Owner{os.Geteuid(), os.Getegid()}}
	if err := write(filepath.Join(dir, "f"), []byte("x"), o, func(s step) error { seen = append(seen, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []step{stepCreate, stepWrite, stepChmod, stepClose, stepRename}; !slices.Equal(seen, want) {
		t.Errorf("steps %v, want %v", seen, want)
	}
}
