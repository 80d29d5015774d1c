package rootfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDescriptorsCloseOnExec: every descriptor a Root holds while it works
// (the root, the journal's directories, the directories its links and
// mount points resolve once) is close-on-exec, so that a process started
// meanwhile (the low-level runtime the wrapper starts early, a confined
// ldconfig) never inherits a directory of a container root.
func TestDescriptorsCloseOnExec(t *testing.T) {
	e := newEnv(t)
	must(t, os.MkdirAll(filepath.Join(e.root, "usr/lib"), 0o755))
	r := e.open(t)
	must(t, r.Symlink("libcuda.so.1", "/usr/lib/libcuda.so"))
	must(t, r.MountPoint("/usr/lib/libcuda.so.1", false))
	must(t, r.MountPoint("/opt/nvidia/dir", true))
	must(t, r.WriteFile("/etc/ld.so.conf.d/x.conf", []byte("/usr/lib\n"), 0o644))
	dir := e.root
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(target, dir) {
			continue
		}
		held++
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue // closed since the listing
		}
		if flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("descriptor %d (%s) is not close-on-exec", fd, target)
		}
	}
	if held < 2 {
		t.Fatalf("the Root holds %d descriptors of its tree; the test looks at nothing", held)
	}
}
