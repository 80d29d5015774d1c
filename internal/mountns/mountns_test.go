package mountns

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNSThread: the thread sees the other namespace's mounts; no other
// thread of the process does, before, during or after.
func TestNSThread(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("unshare(1) not found: %v", err)
	}
	cmd := exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount -t tmpfs none %s && touch %s/marker && echo ready && exec sleep 1000", dir, dir))
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("helper not ready: %q %v", buf, err)
	}
	nsfd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(nsfd)

	th, err := Enter(nsfd)
	must(t, err)
	seen := func() bool { _, err := os.Stat(dir + "/marker"); return err == nil }
	var inside bool
	must(t, th.Do(func() error { inside = seen(); return nil }))
	if !inside {
		t.Error("the namespace thread does not see the other namespace's mount")
	}
	// Meanwhile, every other thread stays in our namespace.
	var wg sync.WaitGroup
	var leaked bool
	var mu sync.Mutex
	for range 50 {
		wg.Go(func() {
			if seen() {
				mu.Lock()
				leaked = true
				mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		})
	}
	wg.Wait()
	th.Close()
	if leaked || seen() {
		t.Error("another thread sees the container's namespace")
	}
	// Many threads in a row: none is the main thread, and the process's own
	// namespace (as /proc/self shows it) never changes.
	self, _ := os.Readlink("/proc/self/ns/mnt")
	for range 200 {
		th, err := Enter(nsfd)
		must(t, err)
		var tid int
		must(t, th.Do(func() error { tid = unix.Gettid(); return nil }))
		th.Close()
		if tid == unix.Getpid() {
			t.Fatal("the namespace thread is the main thread")
		}
		if now, _ := os.Readlink("/proc/self/ns/mnt"); now != self {
			t.Fatalf("the process's mount namespace changed: %s -> %s", self, now)
		}
	}
	// A bad namespace descriptor is reported.
	if _, err := Enter(-1); err == nil {
		t.Error("Enter(-1) succeeded")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (mount namespaces); running as uid %d", os.Geteuid())
	}
}
