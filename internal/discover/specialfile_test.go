package discover

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hostfile"
)

// TestSpecialFilesInDriverRoot: a FIFO or a device (a /dev/zero twin) in
// place of a driver root file discovery parses is refused at once with an
// error naming the file; nothing blocks (before hostfile, a FIFO there
// blocked discovery for good).
func TestSpecialFilesInDriverRoot(t *testing.T) {
	const bus = "00000000:41:00.0"
	files := []string{
		"/proc/driver/nvidia/version",
		"/proc/driver/nvidia/gpus/" + bus + "/information",
		"/proc/devices",
		"/etc/ld.so.cache",
	}
	kinds := []struct {
		name string
		make func(p string) error
	}{
		{"FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"device", func(p string) error {
			err := unix.Mknod(p, syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 5)))
			if errors.Is(err, unix.EPERM) {
				t.Skipf("cannot create device nodes (%v): needs CAP_MKNOD", err)
			}
			return err
		}},
	}
	for _, f := range files {
		for _, k := range kinds {
			t.Run(k.name+" "+f, func(t *testing.T) {
				m := newMiniRoot(t)
				m.driver("535.261.03")
				m.gpu(bus, 0, "GPU-11111111-2222-3333-4444-555555555555")
				m.lib("/usr/lib/x86_64-linux-gnu", "libnvidia-ml", "535.261.03", 64)
				m.lib("/usr/lib/x86_64-linux-gnu", "libcuda", "535.261.03", 64)
				m.writeCache()
				if err := os.Remove(m.path(f)); err != nil {
					t.Fatal(err)
				}
				if err := k.make(m.path(f)); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { _, err := m.discover(nil); done <- err }()
				select {
				case err := <-done:
					if !errors.Is(err, hostfile.ErrNotRegular) || !strings.Contains(err.Error(), m.path(f)) {
						t.Errorf("error %v, want one naming %s as not a regular file", err, m.path(f))
					}
				case <-time.After(time.Second):
					t.Fatal("discovery still blocked after 1s")
				}
			})
		}
	}
}
