package e2e

import (
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/e2e"
)

// opensDuring runs f and returns how often the file at path was opened
// meanwhile (inotify's IN_OPEN, which an exec of the file raises too; its
// closes are watched as well, since inotify merges an event into an
// unread one just like it).
func opensDuring(t *testing.T, path string, f func()) int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_CLOSE); err != nil {
		t.Fatalf("inotify watch %s: %v", path, err)
	}
	f()
	n := 0
	buf := make([]byte, 64<<10)
	for {
		m, err := unix.Read(fd, buf)
		if err == unix.EAGAIN || m <= 0 {
			return n
		}
		if err != nil {
			t.Fatalf("inotify read: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= m; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&unix.IN_OPEN != 0 {
				n++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// checkOneHookProcess runs a container of image ref with a spec in
// NVIDIA's layout (class sepgpu: nctk's --separate-hooks spec, five hook
// entries) through engine (podman's or docker's command line), whose
// runtime (runc or crun) runs the entries itself: nctk's hook binary
// starts once (the first entry does the others' work and masks their
// program in the container's mount namespace: internal/hookbatch), and
// that mask is not among the container's mounts.
func checkOneHookProcess(t *testing.T, engine func(args ...string) e2e.Result, ref string, extra ...string) {
	t.Helper()
	var res e2e.Result
	argv := append(append([]string{"run", "--rm", "--device", "nvidia.com/sepgpu=2"}, extra...),
		ref, "/bin/sh", "-c", "grep -c nctk-hook-done /proc/self/mountinfo; ls -l /usr/local/nvidia/lib64/libcuda.so.1 2>/dev/null || ls -l /usr/lib/x86_64-linux-gnu/libcuda.so.1")
	hook := tool(t, "nvidia-cdi-hook")
	n := opensDuring(t, hook, func() { res = engine(argv...) })
	if !res.OK() {
		t.Fatalf("run: %s", res)
	}
	if n != 1 {
		t.Errorf("%s started %d times for the five hook entries, want once", hook, n)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) < 2 || lines[0] != "0" || !strings.Contains(lines[1], "libcuda.so.1 -> ") {
		t.Errorf("container: the mask among its mounts, or no libcuda.so.1 link:\n%s", res.Stdout)
	}
}
