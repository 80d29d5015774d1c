package configure

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hostfile"
)

// TestSpecialProcAndCgroupFiles: a FIFO where a proc or cgroup file is
// read (mounted over it, say) is refused at once with an error naming it;
// the read used to block on it.
func TestSpecialProcAndCgroupFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"mountinfo", "devices.list"} {
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := &procDir{fd: fd, path: dir}
	defer d.Close()
	for _, tc := range []struct {
		name string
		read func() ([]byte, error)
	}{
		{"mountinfo", func() ([]byte, error) { return d.readFile("mountinfo") }},
		{"devices.list", func() ([]byte, error) { return readCgroupFile(fd, dir, "devices.list") }},
	} {
		done := make(chan error, 1)
		go func() { _, err := tc.read(); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, hostfile.ErrNotRegular) || !strings.Contains(err.Error(), filepath.Join(dir, tc.name)) {
				t.Errorf("%s: %v, want a not-a-regular-file error naming it", tc.name, err)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: still blocked after 1s", tc.name)
		}
	}
}
