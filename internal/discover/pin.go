package discover

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hostfile"
)

// pinned is a host directory that one discovery reads through a
// descriptor held open from its first read to its last. A driver root is
// renamed away and back, or replaced, while containers are created (a
// driver upgrade, the GPU Operator's driver container restarting): read by
// name, one discovery could see part of the tree and then nothing, and
// leave files out of the plan without an error. Read relative to the
// descriptor (readlinkat, fstatat, openat: loc), the whole discovery sees
// the one directory it opened first; Driver.Verify then checks that the
// name still leads to it before the plan's paths are handed on.
type pinned struct {
	// path is the host path, used in results and messages.
	path string
	// sys is the prefix of the few reads that take a path, not a
	// descriptor (mig-minors, feature globs): /proc/self/fd/N, or path
	// when the directory is not pinned or there is no procfs.
	sys string
	// fd is the descriptor, -1 when the directory is not pinned: the
	// host's "/", which cannot be renamed, or a directory that could not
	// be opened (openErr).
	fd int
	id fileID
	// openErr is why the directory could not be opened. Discovery then
	// stops (Discover): read by name instead, a root renamed away while it
	// was opened and back a moment later would be read in part.
	openErr error
}

// fileID identifies a file: device and inode.
type fileID struct{ dev, ino uint64 }

// pin opens dir (a cleaned absolute host path) for discovery; a directory
// that cannot be opened is left unpinned with the reason in openErr.
func pin(dir string) *pinned {
	p := &pinned{path: dir, sys: dir, fd: -1}
	if dir == "/" {
		return p
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		p.openErr = &fs.PathError{Op: "open", Path: dir, Err: err}
		return p
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return p
	}
	p.fd, p.id = fd, fileID{dev: st.Dev, ino: st.Ino}
	// The path-taking reads go through /proc/self/fd, which needs a
	// procfs; without one they read by name.
	sys := "/proc/self/fd/" + strconv.Itoa(fd)
	var via unix.Stat_t
	if err := unix.Stat(sys, &via); err == nil && via.Dev == st.Dev && via.Ino == st.Ino {
		p.sys = sys
	}
	return p
}

// loc is where system calls find a file: a directory descriptor and a
// name relative to it (unix.AT_FDCWD and an absolute path for a file read
// by name), and the host path that messages name.
type loc struct {
	dirfd int
	name  string
	host  string
}

// hostLoc is the loc of a host path read by name.
func hostLoc(p string) loc { return loc{dirfd: unix.AT_FDCWD, name: p, host: p} }

// loc returns the loc of the absolute path q below the directory: relative
// to the descriptor (whose own name may change meanwhile) when pinned.
func (p *pinned) loc(q string) loc {
	if p.fd < 0 {
		return hostLoc(p.host(q))
	}
	rel := strings.TrimLeft(q, "/")
	if rel == "" {
		rel = "."
	}
	return loc{dirfd: p.fd, name: rel, host: p.host(q)}
}

// readFile reads the regular file at l, at most limit bytes (hostfile's
// checks: a FIFO, device or oversized file is refused).
func (l loc) readFile(limit int64) ([]byte, error) {
	return hostfile.ReadFileAt(l.dirfd, l.name, l.host, limit)
}

// readDir lists the directory at l, sorted by name as os.ReadDir does.
func (l loc) readDir() ([]fs.DirEntry, error) {
	fd, err := unix.Openat(l.dirfd, l.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: l.host, Err: err}
	}
	f := os.NewFile(uintptr(fd), l.host)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// stat stats the file at l, following a final symlink.
func (l loc) stat(st *unix.Stat_t) error {
	if err := unix.Fstatat(l.dirfd, l.name, st, 0); err != nil {
		return &fs.PathError{Op: "stat", Path: l.host, Err: err}
	}
	return nil
}

// readProc reads the /proc file at l and parses it with parse, naming the
// file in errors (what procfs's readers do for a path).
func readProc[T any](l loc, parse func([]byte) (T, error)) (T, error) {
	var zero T
	data, err := l.readFile(hostfile.MaxProc)
	if err != nil {
		return zero, err
	}
	v, err := parse(data)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", l.host, err)
	}
	return v, nil
}

// close releases the descriptor.
func (p *pinned) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// at returns the path of the absolute path q below the directory for the
// reads that take a path (loc for the others).
func (p *pinned) at(q string) string { return join(p.sys, q) }

// host returns the host path of q below the directory, for results and
// messages.
func (p *pinned) host(q string) string { return join(p.path, q) }

// unpin rewrites the descriptor paths in s into host paths.
func (p *pinned) unpin(s string) string {
	if p.sys == p.path {
		return s
	}
	s = strings.ReplaceAll(s, p.sys+"/", joinSlash(p.path))
	if strings.HasSuffix(s, p.sys) {
		s = strings.TrimSuffix(s, p.sys) + p.path
	}
	return s
}

// joinSlash returns dir with one trailing slash.
func joinSlash(dir string) string {
	if strings.HasSuffix(dir, "/") {
		return dir
	}
	return dir + "/"
}

// pinnedError is an error of a discovery that read through pinned
// directories: its message names host paths, not descriptor paths, and it
// unwraps to the error itself, so typed errors are still found.
type pinnedError struct {
	err  error
	pins []*pinned
}

func (e *pinnedError) Error() string {
	s := e.err.Error()
	for _, p := range e.pins {
		s = p.unpin(s)
	}
	return s
}

func (e *pinnedError) Unwrap() error { return e.err }
