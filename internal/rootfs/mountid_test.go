package rootfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// mountIDOf is the mount id of the directory dir on the host.
func mountIDOf(t *testing.T, dir string) uint64 {
	t.Helper()
	var stx unix.Statx_t
	must(t, unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx))
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		t.Skip("the kernel reports no mount id")
	}
	return stx.Mnt_id
}

// TestMountOf: the mount where a path would be created is the one holding
// its deepest existing directory, reached inside the root (symlinks
// resolved there).
func TestMountOf(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	must(t, os.MkdirAll(root+"/vol", 0o755))
	must(t, os.MkdirAll(root+"/usr/lib", 0o755))
	must(t, unix.Mount("tmpfs", root+"/vol", "tmpfs", 0, ""))
	t.Cleanup(func() { unix.Unmount(root+"/vol", unix.MNT_DETACH) })
	must(t, os.MkdirAll(root+"/vol/sub", 0o755))
	must(t, os.Symlink("/vol/sub", root+"/usr/lib/link"))
	must(t, os.Symlink("../../../../../../../vol", root+"/up"))
	rootID, volID := mountIDOf(t, root), mountIDOf(t, filepath.Join(root, "vol"))
	r, err := Open(root)
	must(t, err)
	defer r.Close()
	tests := []struct {
		path string
		id   uint64
		dir  string
	}{
		{"/", rootID, "/"},
		{"/usr/lib/libcuda.so.1", rootID, "/usr/lib"},
		{"/usr/lib/missing/deeper/x", rootID, "/usr/lib"},
		{"/vol/x", volID, "/vol"},
		{"/vol/sub/missing/x", volID, "/vol/sub"},
		{"/usr/lib/link/x", volID, "/usr/lib/link"}, // a symlink in the image, resolved in the root
		{"/up/x", volID, "/up"},                     // ".." climbs no higher than the root
	}
	for _, tt := range tests {
		id, dir, err := r.MountOf(tt.path)
		if err != nil || id != tt.id || dir != tt.dir {
			t.Errorf("MountOf(%s) = %d, %s, %v; want %d, %s", tt.path, id, dir, err, tt.id, tt.dir)
		}
	}
}
