package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxSymlinks bounds symlink expansion during one resolution, like the
// kernel's MAXSYMLINKS (40).
const maxSymlinks = 40

// inRoot resolves paths inside a root directory: every symlink, absolute or
// relative, is interpreted as if root were "/", and ".." never climbs above
// root. It memoises lstat and readlink results, so resolving many files in
// the same directories costs one system call per distinct component.
type inRoot struct {
	root  string  // host path of the root, cleaned; "/" for the host
	pin   *pinned // the root's descriptor, nil to read by name
	lstat map[string]lstatResult
}

type lstatResult struct {
	mode   fs.FileMode
	target string // symlink target when mode is a symlink
	err    error
}

// newInRoot returns a resolver for the root at host path root whose
// system calls go through pin, the root's descriptor (nil: by name).
func newInRoot(root string, pin *pinned) *inRoot {
	root = path.Clean(root)
	if pin == nil {
		pin = &pinned{path: root, sys: root, fd: -1}
	}
	return &inRoot{root: root, pin: pin, lstat: map[string]lstatResult{}}
}

// host returns the host path of an in-root path: what results and
// messages name.
func (r *inRoot) host(p string) string { return rootJoin(r.root, p) }

// loc returns where system calls find an in-root path.
func (r *inRoot) loc(p string) loc { return r.pin.loc(p) }

// rootJoin joins an absolute in-root path to a root.
func rootJoin(root, p string) string {
	if root == "/" {
		return p
	}
	if p == "/" {
		return root
	}
	return root + p
}

// stat returns what resolution needs to know about one path: whether it
// is a symlink (and its target) or exists as something else. readlink
// answers both in one system call for the common cases (a symlink, or
// EINVAL for an existing non-symlink); only its other failures need an
// lstat to tell "missing" from "unreadable".
func (r *inRoot) stat(p string) lstatResult {
	if res, ok := r.lstat[p]; ok {
		return res
	}
	var res lstatResult
	target, err := readlink(r.loc(p))
	switch {
	case err == nil:
		res.mode, res.target = fs.ModeSymlink, target
	case errors.Is(err, syscall.EINVAL):
		res.mode = 0 // exists, not a symlink; its type is not needed
	default:
		res.err = &fs.PathError{Op: "lstat", Path: r.host(p), Err: err}
	}
	r.lstat[p] = res
	return res
}

// readlink is os.Readlink without its retries and allocations for the
// common short target.
func readlink(l loc) (string, error) {
	var buf [256]byte
	for size := len(buf); ; size *= 2 {
		b := buf[:]
		if size > len(buf) {
			b = make([]byte, size)
		}
		n, err := unix.Readlinkat(l.dirfd, l.name, b)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(b[:n]), nil
		}
		if size >= 1<<16 {
			return "", syscall.ENAMETOOLONG
		}
	}
}

// resolve returns the in-root path p refers to, with every symlink
// resolved inside the root. p is interpreted relative to the root's "/". It
// fails if a component does not exist (the error wraps fs.ErrNotExist), is
// not a directory where one is needed, or if symlinks loop.
func (r *inRoot) resolve(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("resolve %q inside %s: %w", p, r.root, syscall.EINVAL)
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	resolved := "/"
	rest := p
	links := 0
	for rest != "" {
		var comp string
		rest = strings.TrimLeft(rest, "/")
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			comp, rest = rest[:i], rest[i:]
		} else {
			comp, rest = rest, ""
		}
		switch comp {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, comp)
		st := r.stat(next)
		if st.err != nil {
			return "", fmt.Errorf("resolve %s inside %s: %w", p, r.root, st.err)
		}
		if st.mode&fs.ModeSymlink == 0 {
			// A non-directory followed by more components fails at the
			// next component's readlink with ENOTDIR.
			resolved = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("resolve %s inside %s: %w", p, r.root, syscall.ELOOP)
		}
		if strings.HasPrefix(st.target, "/") {
			resolved = "/"
		}
		rest = st.target + "/" + rest
		if strings.HasSuffix(rest, "/") {
			rest = strings.TrimRight(rest, "/")
		}
	}
	return resolved, nil
}

// statFollow resolves p inside the root and returns the result and its
// type and permission bits.
func (r *inRoot) statFollow(p string) (string, fs.FileMode, error) {
	real, err := r.resolve(p)
	if err != nil {
		return "", 0, err
	}
	l := r.loc(real)
	var st unix.Stat_t
	if err := unix.Fstatat(l.dirfd, l.name, &st, 0); err != nil {
		return "", 0, &fs.PathError{Op: "stat", Path: l.host, Err: err}
	}
	return real, fileMode(st.Mode), nil
}

// fileMode converts a stat mode to an fs.FileMode: type and permission
// bits (setuid, setgid and sticky included).
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
