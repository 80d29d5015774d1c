package procfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nctk/nctk/internal/runcache"
)

// TestCache: a proc file is read once per module load (its contents
// then come from the cache, even when the file changed in place: the
// driver's do not while it stays loaded); a reload, another file or a
// file not on procfs is read again; without a cache everything is read.
func TestCache(t *testing.T) {
	dir, note := runcache.Open(t.TempDir())
	if dir == nil {
		t.Fatal(note)
	}
	file := filepath.Join(t.TempDir(), "params")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load, loaded := "boot x load 1", true
	onProc := true
	mk := func(d *runcache.Dir) func(string) ([]byte, error) {
		c := NewCache(d)
		if c != nil {
			c.moduleLoad = func() (string, bool) { return load, loaded }
			c.onProc = func(string) bool { return onProc }
		}
		return c.ReadFile
	}
	expect := func(read func(string) ([]byte, error), want string) {
		t.Helper()
		got, err := read(file)
		if err != nil || string(got) != want {
			t.Errorf("read: %q, %v; want %q", got, err, want)
		}
	}
	write("ModifyDeviceFiles: 1\n")
	expect(mk(dir), "ModifyDeviceFiles: 1\n")
	write("ModifyDeviceFiles: 2\n") // same inode
	expect(mk(dir), "ModifyDeviceFiles: 1\n")
	load = "boot x load 2" // the module reloaded
	expect(mk(dir), "ModifyDeviceFiles: 2\n")
	loaded = false // no module: read
	write("ModifyDeviceFiles: 3\n")
	expect(mk(dir), "ModifyDeviceFiles: 3\n")
	loaded, onProc = true, false // not procfs: read
	write("ModifyDeviceFiles: 4\n")
	expect(mk(dir), "ModifyDeviceFiles: 4\n")
	onProc = true
	expect(mk(nil), "ModifyDeviceFiles: 4\n") // no cache: read
	// A file that cannot be read is an error, and nothing is kept.
	if _, err := mk(dir)(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file read")
	}
}
