package hostfile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within fails the test if fn does not return within d (a FIFO read that
// blocks would otherwise hang the test binary).
func within(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, make func(p string) error) string {
		p := filepath.Join(dir, name)
		if err := make(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	small := mk("small", func(p string) error { return os.WriteFile(p, []byte("hello\n"), 0o644) })
	atLimit := mk("at-limit", func(p string) error { return os.WriteFile(p, make([]byte, 100), 0o644) })
	over := mk("over", func(p string) error { return os.WriteFile(p, make([]byte, 101), 0o644) })
	fifo := mk("fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) })
	zero := mk("zero", func(p string) error { return os.Symlink("/dev/zero", p) })
	linked := mk("link", func(p string) error { return os.Symlink(small, p) })
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	tests := []struct {
		name    string
		path    string
		limit   int64
		want    string
		wantErr error
		inErr   string
	}{
		{"regular", small, 100, "hello\n", nil, ""},
		{"symlink to regular", linked, 100, "hello\n", nil, ""},
		{"at the limit", atLimit, 100, string(make([]byte, 100)), nil, ""},
		{"over the limit", over, 100, "", ErrTooLarge, "101 bytes, limit 100"},
		{"FIFO", fifo, 100, "", ErrNotRegular, "a FIFO"},
		{"socket", sock, 100, "", ErrNotRegular, "a socket"},
		{"/dev/zero linked in", zero, 100, "", ErrNotRegular, "a character device"},
		{"directory", dir, 100, "", ErrNotRegular, "a directory"},
		{"procfs file (size 0)", "/proc/self/status", 1 << 20, "Name:", nil, ""},
		{"procfs file over the limit", "/proc/self/status", 10, "", ErrTooLarge, "over 10 bytes"},
		{"missing", filepath.Join(dir, "missing"), 100, "", fs.ErrNotExist, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			within(t, time.Second, func() {
				got, err := ReadFile(tt.path, tt.limit)
				if tt.wantErr == nil {
					if err != nil {
						t.Fatal(err)
					}
					if !strings.HasPrefix(string(got), tt.want) {
						t.Errorf("got %.40q, want prefix %.40q", got, tt.want)
					}
					return
				}
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.inErr) {
					t.Errorf("error %q does not name %s and %q", err, tt.path, tt.inErr)
				}
			})
		})
	}
}

// TestOpenCheck: Open and Check refuse as ReadFile does.
func TestOpenCheck(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, func() {
		if f, err := Open(fifo, 100); !errors.Is(err, ErrNotRegular) {
			if f != nil {
				f.Close()
			}
			t.Errorf("Open(fifo): %v", err)
		}
		if err := Check(fifo, 100); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Check(fifo): %v", err)
		}
		if fd, err := OpenFD(fifo, 100); !errors.Is(err, ErrNotRegular) {
			if err == nil {
				syscall.Close(fd)
			}
			t.Errorf("OpenFD(fifo): %v", err)
		}
	})
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p, 100)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := Check(p, 2); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Check over the limit: %v", err)
	}
	if _, err := OpenFD(p, 2); !errors.Is(err, ErrTooLarge) {
		t.Errorf("OpenFD over the limit: %v", err)
	}
	if _, err := OpenFD(filepath.Join(dir, "missing"), 100); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenFD(missing): %v, want not-exist (PendingLibraryEntries skips those)", err)
	}
	fd, err := OpenFD(p, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	buf := make([]byte, 8)
	if n, err := syscall.Pread(fd, buf, 1); err != nil || string(buf[:n]) != "bc" {
		t.Errorf("pread of OpenFD's descriptor: %q, %v", buf[:n], err)
	}
}

// TestHugeSparseFile: a 1 GB sparse file is refused from its fstat size,
// without reading it: fast and without allocating anything like its size.
func TestHugeSparseFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ld.so.cache")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err = ReadFile(p, MaxLdCache)
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), p) {
		t.Fatalf("error %v", err)
	}
	if elapsed > 500*time.Millisecond {
		t.Errorf("took %v", elapsed)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("allocated %d bytes", alloc)
	}
}

func TestReadAll(t *testing.T) {
	if got, err := ReadAll(strings.NewReader("abc"), "stdin", 3); err != nil || string(got) != "abc" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := ReadAll(strings.NewReader("abcd"), "stdin", 3); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "stdin") {
		t.Errorf("over the limit: %v", err)
	}
}

func TestReadFD(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(fifo, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := ReadFD(fd, "rootfs/etc/ld.so.cache", 100); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "rootfs/etc/ld.so.cache") {
		t.Errorf("ReadFD(fifo): %v", err)
	}
}

// TestReadFileAt: a file relative to a directory descriptor is read and
// refused as ReadFile reads and refuses a path, errors naming display; the
// descriptor keeps reading the directory after it was renamed.
func TestReadFileAt(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/version"), []byte("NVRM version: 535\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "proc/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.Rename(root, root+".away"); err != nil {
		t.Fatal(err)
	}
	fd := int(d.Fd())
	b, err := ReadFileAt(fd, "proc/version", "/shown/proc/version", MaxProc)
	if err != nil || string(b) != "NVRM version: 535\n" {
		t.Errorf("ReadFileAt = %q, %v", b, err)
	}
	within(t, 2*time.Second, func() {
		_, err = ReadFileAt(fd, "proc/fifo", "/shown/proc/fifo", MaxProc)
	})
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "/shown/proc/fifo") {
		t.Errorf("FIFO: %v, want ErrNotRegular naming /shown/proc/fifo", err)
	}
	if _, err := ReadFileAt(fd, "proc/version", "/shown/proc/version", 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := ReadFileAt(fd, "proc/missing", "/shown/proc/missing", MaxProc); !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), "/shown/proc/missing") {
		t.Errorf("missing: %v, want ErrNotExist naming /shown/proc/missing", err)
	}
	// OpenAt: the same checks, an *os.File named as shown.
	f, err := OpenAt(fd, "proc/version", "/shown/proc/version", MaxProc)
	if err != nil || f.Name() != "/shown/proc/version" {
		t.Fatalf("OpenAt = %v, %v", f, err)
	}
	f.Close()
	within(t, 2*time.Second, func() {
		_, err = OpenAt(fd, "proc/fifo", "/shown/proc/fifo", MaxProc)
	})
	if !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenAt FIFO: %v, want ErrNotRegular", err)
	}
	if _, err := OpenAt(fd, "proc/version", "/shown/proc/version", 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("OpenAt over the limit: %v, want ErrTooLarge", err)
	}
}
