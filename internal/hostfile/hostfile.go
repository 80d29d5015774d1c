// Package hostfile is the one bounded, type-checked reader of the files
// nctk parses: the driver root's /proc and /sys files, ld.so.cache (the
// host's and an image's), config.toml, CDI specs, config.json and the like.
//
// A file is opened with O_NONBLOCK (so opening a FIFO cannot block) and
// checked with fstat before anything is read: a FIFO, socket, device or
// directory where a regular file is expected is refused at once, and so is
// a regular file whose size is over the limit of its kind. Proc and sysfs
// files, which report size 0 or 4096, are read up to the limit and refused
// if longer. Every error names the file and wraps ErrNotRegular or
// ErrTooLarge where one of those is the cause.
package hostfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Size limits per kind of file, far above what real hosts have.
const (
	// MaxProc bounds a driver /proc or /sys file (mig-minors, the largest,
	// is about 100 KiB on a 32-GPU host).
	MaxProc = 4 << 20
	// MaxConfig bounds a configuration file (config.toml, os-release, an
	// engine's config, a cache nctk wrote itself).
	MaxConfig = 4 << 20
	// MaxLdCache bounds an ld.so.cache (100,000 entries take about 10 MiB).
	MaxLdCache = 32 << 20
	// MaxCDISpec bounds a CDI spec file.
	MaxCDISpec = 32 << 20
	// MaxLibrary bounds a shared library whose ELF headers are read (the
	// largest driver and CUDA libraries are a few hundred MiB).
	MaxLibrary = 2 << 30
)

var (
	// ErrNotRegular: the file is a FIFO, socket, device or directory.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file is larger than the limit of its kind.
	ErrTooLarge = errors.New("file too large")
)

// ReadFile reads the regular file at path, at most limit bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	fd, size, err := open(path, limit)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readFD(fd, path, size, limit)
}

// ReadFileAt reads the regular file name relative to the directory
// descriptor dirfd (unix.AT_FDCWD: the working directory) as ReadFile
// reads a path; display is the file's name in errors.
func ReadFileAt(dirfd int, name, display string, limit int64) ([]byte, error) {
	fd, size, err := openAt(dirfd, name, display, limit)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readFD(fd, display, size, limit)
}

// ReadFD reads the open file descriptor fd (opened by the caller, for
// example relative to a root, with O_NONBLOCK) as ReadFile reads a path;
// name is the file's name in errors. fd is not closed.
func ReadFD(fd int, name string, limit int64) ([]byte, error) {
	size, err := check(fd, name, limit)
	if err != nil {
		return nil, err
	}
	return readFD(fd, name, size, limit)
}

// Open opens the regular file at path for a streaming parser, refusing it
// as ReadFile does; the caller bounds its reads by limit (LimitReader)
// and closes the file.
func Open(path string, limit int64) (*os.File, error) {
	fd, _, err := open(path, limit)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// OpenAt is Open for the file name relative to the directory descriptor
// dirfd (unix.AT_FDCWD: the working directory); display is the file's name
// in errors and the os.File's.
func OpenAt(dirfd int, name, display string, limit int64) (*os.File, error) {
	fd, _, err := openAt(dirfd, name, display, limit)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), display), nil
}

// OpenFD is Open without the os.File: the bare descriptor (no poller
// registration, fewer system calls), for callers that read it with pread
// and close it themselves.
func OpenFD(path string, limit int64) (int, error) {
	fd, _, err := open(path, limit)
	return fd, err
}

// Check reports whether path is a regular file of at most limit bytes
// (following symlinks), as ReadFile would find it, without reading it.
func Check(path string, limit int64) error {
	fd, _, err := open(path, limit)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// ReadAll reads r (a pipe, such as a hook's stdin) to the end, refusing
// more than limit bytes; name is r's name in errors.
func ReadAll(r io.Reader, name string, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)}
	}
	return data, nil
}

// open opens path without blocking and checks it; it returns the fd and
// the size fstat reported.
func open(path string, limit int64) (int, int64, error) {
	return openAt(unix.AT_FDCWD, path, path, limit)
}

// openAt is open for name relative to dirfd, named display in errors.
func openAt(dirfd int, name, display string, limit int64) (int, int64, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.ENXIO {
		// A socket (or a device without its driver) cannot be opened:
		// say what it is rather than "no such device or address".
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, 0) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			return -1, 0, &fs.PathError{Op: "read", Path: display, Err: fmt.Errorf("%w: %s", ErrNotRegular, kind(st.Mode))}
		}
	}
	if err != nil {
		return -1, 0, &fs.PathError{Op: "open", Path: display, Err: err}
	}
	size, err := check(fd, display, limit)
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, size, nil
}

// check fstats fd: a regular file of at most limit bytes (as reported).
// CheckFD refuses the open file fd (named name in errors) unless it is a
// regular file of at most limit bytes: the check ReadFD makes before reading,
// for a caller that reads the file itself.
func CheckFD(fd int, name string, limit int64) error {
	_, err := check(fd, name, limit)
	return err
}

func check(fd int, name string, limit int64) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %s", ErrNotRegular, kind(st.Mode))}
	}
	if st.Size > limit {
		return 0, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, st.Size, limit)}
	}
	return st.Size, nil
}

// readFD reads fd to the end: size (from fstat; 0 for proc files) sizes
// the buffer, and more than limit bytes is an error.
func readFD(fd int, name string, size, limit int64) ([]byte, error) {
	buf := make([]byte, 0, max(size+1, 512))
	for {
		if int64(len(buf)) > limit {
			return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)}
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := unix.Read(fd, buf[len(buf):min(int64(cap(buf)), limit+1)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// kind names a non-regular file type.
func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}
