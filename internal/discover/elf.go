package discover

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/ldcache"
)

// readSONAME returns the DT_SONAME of the ELF shared object at l ("" if
// it has none), reading through the caller-owned head buffer buf (nil: a
// new one), so that discovery reads every library through one buffer.
func readSONAME(l loc, buf *[4096]byte) (string, error) {
	lib, err := inspectELF(l, buf)
	if err != nil {
		return "", fmt.Errorf("read ELF SONAME of %s: %w", l.host, err)
	}
	return lib.SONAME, nil
}

// inspectELF returns what ld.so.cache records about the shared object at
// l (ldcache.Inspect: its SONAME and flags), reading through buf as
// readSONAME does.
func inspectELF(l loc, buf *[4096]byte) (ldcache.Library, error) {
	var lib ldcache.Library
	err := withELF(l, buf, func(r io.ReaderAt, size int64) (err error) {
		lib, err = ldcache.Inspect(r, size)
		return err
	})
	return lib, err
}

// readABITag returns the GNU ABI note of the shared object at l (see
// ldcache.ABITag), reading through buf as readSONAME does.
func readABITag(l loc, buf *[4096]byte) (uint32, error) {
	var v uint32
	err := withELF(l, buf, func(r io.ReaderAt, size int64) (err error) {
		v, err = ldcache.ABITag(r, size)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read ELF ABI note of %s: %w", l.host, err)
	}
	return v, nil
}

// withELF opens l and calls read with a headReader over it (buf nil: a
// new head buffer) and the file's size as far as the head read tells it:
// exact for a file shorter than the head, else an upper bound (an fstat
// per library would cost more than the rest of the read).
func withELF(l loc, buf *[4096]byte, read func(r io.ReaderAt, size int64) error) error {
	fd, err := unix.Openat(l.dirfd, l.name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: l.host, Err: err}
	}
	defer syscall.Close(fd)
	if buf == nil {
		buf = new([4096]byte)
	}
	n, err := syscall.Pread(fd, buf[:], 0)
	if err != nil {
		return &fs.PathError{Op: "read", Path: l.host, Err: err}
	}
	r := &headReader{fd: fd, head: buf[:n], short: n < len(buf)}
	size := int64(math.MaxInt64)
	if r.short {
		size = int64(n)
	}
	return read(r, size)
}

// headReader is an io.ReaderAt over a file descriptor whose first 4 KiB
// (head) were read once: reads inside them are served from memory, so the
// ELF header and program headers (and for small objects everything) cost
// one pread. It bypasses os.File, whose poller registration costs system
// calls that a handful of reads from a regular file does not need.
type headReader struct {
	fd    int
	head  []byte
	short bool // the file ends within head
}

func (r *headReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off+int64(len(p)) <= int64(len(r.head)) {
		return copy(p, r.head[off:]), nil
	}
	if r.short && off >= int64(len(r.head)) {
		return 0, io.EOF
	}
	total := 0
	for total < len(p) {
		n, err := syscall.Pread(r.fd, p[total:], off+int64(total))
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, io.EOF
		}
		total += n
	}
	return total, nil
}
