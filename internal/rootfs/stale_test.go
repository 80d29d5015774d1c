package rootfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Skipf("run /bin/true: %v", err)
	}
	return cmd.Process.Pid
}

// TestRemoveStaleTemps: the temporary files of a dead process, named as
// WriteFile, Symlink and Rollback name them, go; those of a live process,
// other names, directories and what lies outside the directory stay.
func TestRemoveStaleTemps(t *testing.T) {
	dir := t.TempDir()
	host := t.TempDir() // a symlinked etc must not lead here
	dead, live := strconv.Itoa(deadPID(t)), strconv.Itoa(os.Getpid())
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gone := []string{".ld.so.cache.nctk-" + dead + "-0", ".00-nctk.conf.nctk-" + dead + "-3", ".ld.so.cache.nctk-" + dead + "-u1"}
	kept := []string{".ld.so.cache.nctk-" + live + "-0", "ld.so.cache", ".ld.so.cache.nctk-x-0", "ld.so.cache.nctk-" + dead + "-0",
		".ld.so.cache.nctk-" + dead + "-0.bak"}
	for _, n := range append(slices.Clone(gone), kept...) {
		write(filepath.Join(dir, "etc", n))
	}
	if err := os.Symlink("libcuda.so.1", filepath.Join(dir, "etc", ".libcuda.so.nctk-link-"+dead+"-0")); err != nil {
		t.Fatal(err)
	}
	gone = append(gone, ".libcuda.so.nctk-link-"+dead+"-0")
	// The image's FIFO a killed ForceSymlink had swapped out.
	if err := syscall.Mkfifo(filepath.Join(dir, "etc", ".fifo.nctk-old-"+dead+"-0"), 0o644); err != nil {
		t.Fatal(err)
	}
	gone = append(gone, ".fifo.nctk-old-"+dead+"-0")
	if err := os.Mkdir(filepath.Join(dir, "etc", ".d.nctk-"+dead+"-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, ".d.nctk-"+dead+"-0")
	hostFile := filepath.Join(host, ".passwd.nctk-"+dead+"-0")
	write(hostFile)
	if err := os.Symlink(host, filepath.Join(dir, "hostetc")); err != nil {
		t.Fatal(err)
	}

	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// What a Root's write into dir removes, dir's stale reads forgotten.
	scan := func(dir string) ([]string, error) {
		t.Helper()
		fd, err := r.openDir(dir)
		if err == syscall.ENOENT {
			return nil, nil // resolved inside the root: nothing there
		}
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		r.stale = staleScan{}
		r.removeStaleIn(fd, dir)
		return r.RemovedStale()
	}
	removed, err := scan("/etc")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	var want []string
	for _, n := range gone {
		want = append(want, "/etc/"+n)
	}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, n := range kept {
		if _, err := os.Lstat(filepath.Join(dir, "etc", n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	// An absolute symlink to a host directory resolves inside the root.
	if removed, err := scan("/hostetc"); err != nil || len(removed) != 0 {
		t.Errorf("scan(/hostetc) = %v, %v", removed, err)
	}
	if _, err := os.Stat(hostFile); err != nil {
		t.Errorf("host file: %v", err)
	}
}

// TestWriteFileRollbackRestores: Rollback puts back what WriteFile
// replaced, a regular file with its content, mode and owner, and a symlink
// with its target, and leaves no temporary file.
func TestWriteFileRollbackRestores(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "etc/ld.so.cache")
	if err := os.WriteFile(cache, []byte("the image's cache"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(cache, 12, 34); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "etc/ld.so.conf")
	if err := os.Symlink("/usr/share/ld.so.conf", link); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, p := range []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/new"} {
		if err := r.WriteFile(p, []byte("nctk's"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteFile(p, []byte("nctk's again"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Rollback(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(cache)
	if err != nil || string(data) != "the image's cache" {
		t.Errorf("ld.so.cache = %q, %v", data, err)
	}
	fi, err := os.Lstat(cache)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o640 || st.Uid != 12 || st.Gid != 34 {
		t.Errorf("ld.so.cache mode %v owner %d:%d, want -rw-r----- 12:34", fi.Mode(), st.Uid, st.Gid)
	}
	if target, err := os.Readlink(link); err != nil || target != "/usr/share/ld.so.conf" {
		t.Errorf("ld.so.conf -> %q, %v", target, err)
	}
	names, err := os.ReadDir(filepath.Join(dir, "etc"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	if want := []string{"ld.so.cache", "ld.so.conf"}; !slices.Equal(got, want) {
		t.Errorf("etc holds %v, want %v", got, want)
	}
}

// TestRemoveStaleWhereWritten: a Root removes a gone process's temporaries
// from a directory the first time it writes a file there or a link it makes
// finds an entry already there (ForceSymlink too, and whatever the entry
// points to), each directory once; a directory where it only makes new
// links is not read. RemovedStale reports what went.
func TestRemoveStaleWhereWritten(t *testing.T) {
	dead := strconv.Itoa(deadPID(t))
	tests := []struct {
		name string
		op   func(r *Root) error
		read bool
	}{
		{"WriteFile", func(r *Root) error { return r.WriteFile("/lib/x.conf", []byte("x"), 0o644) }, true},
		{"new link", func(r *Root) error { return r.Symlink("libcuda.so.1", "/lib/new.so") }, false},
		{"link over another", func(r *Root) error { return r.Symlink("libcuda.so.1", "/lib/old.so") }, true},
		{"link already there", func(r *Root) error { return r.Symlink("libcuda.so.0", "/lib/old.so") }, true},
		{"ForceSymlink over a file", func(r *Root) error { return r.ForceSymlink("libcuda.so.1", "/lib/file") }, true},
		{"ForceSymlink, new", func(r *Root) error { return r.ForceSymlink("libcuda.so.1", "/lib/new.so") }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lib := filepath.Join(dir, "lib")
			if err := os.Mkdir(lib, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("libcuda.so.0", filepath.Join(lib, "old.so")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(lib, "file"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			stale := ".old.so.nctk-link-" + dead + "-0"
			put := func() {
				if err := os.WriteFile(filepath.Join(lib, stale), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			put()
			r, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := tc.op(r); err != nil {
				t.Fatal(err)
			}
			removed, err := r.RemovedStale()
			if err != nil {
				t.Fatal(err)
			}
			_, lerr := os.Lstat(filepath.Join(lib, stale))
			if read := os.IsNotExist(lerr); read != tc.read || (len(removed) == 1) != tc.read {
				t.Fatalf("removed %v (reported %q), want %v", read, removed, tc.read)
			}
			if tc.read && removed[0] != "/lib/"+stale {
				t.Errorf("reported %q", removed)
			}
			// Once per directory and Root.
			put()
			if err := tc.op(r); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(lib, stale)); err != nil && tc.read {
				t.Errorf("read again: %v", err)
			}
		})
	}
}

// TestSymlinkResolvesDirOnce: the links of one directory share one
// journal-owned descriptor of it, resolved by the first (a directory
// renamed away meanwhile keeps getting them: nothing in a container runs
// during a create); Commit forgets it, and a later link resolves the path
// again.
func TestSymlinkResolvesDirOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "usr/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	link := func(name string) {
		t.Helper()
		if err := r.Symlink("t", "/usr/lib/"+name); err != nil {
			t.Fatal(err)
		}
	}
	link("l0")
	if err := os.Rename(filepath.Join(dir, "usr/lib"), filepath.Join(dir, "usr/old")); err != nil {
		t.Fatal(err)
	}
	link("l1")
	if _, err := os.Lstat(filepath.Join(dir, "usr/old/l1")); err != nil {
		t.Errorf("the second link resolved the directory again: %v", err)
	}
	if n := r.KeptDirs(); n != 1 {
		t.Errorf("%d directory descriptors kept for links in one directory, want 1", n)
	}
	r.Commit()
	link("l2")
	if _, err := os.Lstat(filepath.Join(dir, "usr/lib/l2")); err != nil {
		t.Errorf("after Commit, the link went to the old directory: %v", err)
	}
}

// staleRE is the names stalePID accepts, as an expression: the tests'
// oracle.
var staleRE = regexp.MustCompile(`^\..+\.nctk-(?:link-|old-)?([0-9]+)-u?[0-9]+$`)

// checkStalePID compares stalePID with staleRE on name.
func checkStalePID(t *testing.T, name string) {
	t.Helper()
	pid, ok := stalePID(name)
	m := staleRE.FindStringSubmatch(name)
	want, err := 0, error(nil)
	if m != nil {
		want, err = strconv.Atoi(m[1])
	}
	if ok != (m != nil && err == nil) || ok && pid != want {
		t.Errorf("stalePID(%q) = %d, %v; the expression gives %v", name, pid, ok, m)
	}
}

func TestStalePID(t *testing.T) {
	for _, n := range []string{
		".libcuda.so.1.nctk-123-4", ".ld.so.cache.nctk-123-u4", ".libcuda.so.nctk-link-77-0", ".x.nctk-old-9-1",
		".x.nctk-link-old-9-1", "x.nctk-1-2", "..nctk-1-2", ".a.nctk-1-", ".a.nctk--2", ".a.nctk-1-u", ".a.nctk-1-2x",
		".a.nctk-1-2.nctk-3-4", ".a.nctk-3-4.nctk-x", ".a.nctk-.nctk-5-6", ".a.nctk-99999999999999999999-1",
		".a.nctk-link-1-u2", ".a.nctk-u1-2", ".a.nctk-1-uu2", ".a.nctk-١-2", ".\n.nctk-0-0", ".a\nb.nctk-1-2", ".a.nctk-1-2\n", "\n.a.nctk-1-2", "",
	} {
		checkStalePID(t, n)
	}
}

func FuzzStalePID(f *testing.F) {
	for _, n := range []string{".libcuda.so.1.nctk-123-4", ".x.nctk-old-9-u1", ".a.nctk-.nctk-5-6", ".a.nctk-link-1-2.nctk-x"} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, name string) { checkStalePID(t, name) })
}
