package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"github.com/nctk/nctk/internal/hostfile"
	"golang.org/x/sys/unix"
)

// ErrSymlink is returned (wrapped) when a destination inside the root is a
// symlink in the image and following it is not allowed.
var ErrSymlink = errors.New("is a symlink in the container image (not followed)")

// ErrNotDir is returned (wrapped) when a path component inside the root that
// must be a directory is something else.
var ErrNotDir = errors.New("is not a directory")

// ErrExists is returned (wrapped) when an existing object in the root has a
// type that the requested operation may not replace.
var ErrExists = errors.New("already exists with another type")

// Root is an open container root. All paths given to its methods are paths
// as seen from inside the container ("/usr/lib/x86_64-linux-gnu/libcuda.so");
// relative paths are taken relative to the root.
//
// A Root is not safe for concurrent use; it is bound to the mount namespace
// of the thread that opened it.
type Root struct {
	path string
	fd   int
	// noOpenat2 is set after openat2 returned ENOSYS; resolution then uses
	// the securejoin fallback.
	noOpenat2 bool
	// legacyMount forces mounts through /proc/self/fd (tests; old kernels).
	legacyMount bool
	journal     []undo
	// dirs holds one descriptor per directory the journal's entries name
	// (keepDir), closed with the journal.
	dirs map[dirKey]int
	// libFacts answer for library files UpdateLdCache would inspect (nil:
	// none; UseLibFacts).
	libFacts LibFacts
	// entryDirs holds the directories Symlink, MountPoint and Attach made
	// entries in, by container path: journal-owned descriptors (keepDir),
	// forgotten with them or when a directory mount may cover one
	// (coverDirs).
	entryDirs map[string]int
	// stale is what the removal of earlier runs' temporaries did
	// (stale.go).
	stale staleScan
}

// Open opens the container root at path (a host path, or a path in the
// mount namespace of the calling thread). The root itself may be reached
// through host symlinks; nothing below it is followed outside it.
func Open(path string) (*Root, error) {
	if path == "" {
		return nil, errors.New("open container root: empty path")
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open container root %s: %w", path, err)
	}
	return &Root{path: path, fd: fd}, nil
}

// Path returns the path the root was opened with.
func (r *Root) Path() string { return r.path }

// Close releases the root and the journal's descriptors. It does not undo
// anything; call Rollback first for that.
func (r *Root) Close() error {
	r.Commit()
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		return fmt.Errorf("close container root %s: %w", r.path, err)
	}
	return nil
}

// clean turns a container path into a cleaned absolute path and rejects
// paths that cannot name an object (empty, NUL bytes).
func clean(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	return path.Clean("/" + p), nil
}

// split returns the parent directory and last component of a cleaned
// absolute path; the root itself has no last component.
func split(p string) (dir, name string, err error) {
	if p == "/" {
		return "", "", errors.New("the container root itself is not a valid target")
	}
	dir, name = path.Split(p)
	return path.Clean(dir), name, nil
}

// errorf formats an error naming the container path and the root.
func (r *Root) errorf(p string, err error) error {
	return fmt.Errorf("%s (in container root %s): %w", p, r.path, err)
}

// resolve opens p (a cleaned absolute container path) inside the root,
// following symlinks inside the root, with open flags flags.
func (r *Root) resolve(p string, flags int) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	if !r.noOpenat2 {
		how := unix.OpenHow{
			Flags:   uint64(flags | unix.O_CLOEXEC),
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		}
		for range 16 {
			fd, err := unix.Openat2(r.fd, rel, &how)
			if err == unix.EAGAIN || err == unix.EINTR {
				continue // a concurrent rename or mount; retry
			}
			if err == unix.ENOSYS {
				r.noOpenat2 = true
				break
			}
			return fd, err
		}
		if !r.noOpenat2 {
			return -1, unix.EAGAIN
		}
	}
	return r.resolveFallback(rel, flags)
}

// resolveFallback resolves rel inside the root with filepath-securejoin's
// pathrs-lite (for kernels without openat2) and reopens the result with
// flags.
func (r *Root) resolveFallback(rel string, flags int) (int, error) {
	dup, err := dupCloexec(r.fd)
	if err != nil {
		return -1, err
	}
	rootFile := os.NewFile(uintptr(dup), r.path)
	defer rootFile.Close()
	h, err := pathrs.OpenatInRoot(rootFile, rel)
	if err != nil {
		return -1, unwrapErrno(err)
	}
	defer h.Close()
	if flags&unix.O_PATH != 0 {
		return dupCloexec(int(h.Fd()))
	}
	f, err := pathrs.Reopen(h, flags)
	if err != nil {
		return -1, unwrapErrno(err)
	}
	fd, err := dupCloexec(int(f.Fd()))
	f.Close()
	return fd, err
}

// unwrapErrno returns the errno inside err, or err.
func unwrapErrno(err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// openDir resolves p inside the root as a directory (O_PATH).
func (r *Root) openDir(p string) (int, error) {
	return r.resolve(p, unix.O_PATH|unix.O_DIRECTORY)
}

// mkdirAll resolves or creates the directory p inside the root and returns
// an O_PATH descriptor to it. Components that exist are resolved inside the
// root (symlinks included); missing ones are created with mode relative to
// their already-resolved parent and reopened without following symlinks.
func (r *Root) mkdirAll(p string, mode uint32) (int, error) {
	if fd, err := r.openDir(p); err == nil {
		return fd, nil
	} else if err != unix.ENOENT {
		return -1, r.mkdirError(p, err)
	}
	comps := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur, err := dupCloexec(r.fd)
	if err != nil {
		return -1, r.errorf(p, err)
	}
	prefix := ""
	for _, c := range comps {
		prefix += "/" + c
		next, err := r.openDir(prefix)
		if err == unix.ENOENT {
			next, err = r.mkdirat(cur, prefix, c, mode)
		}
		unix.Close(cur)
		if err != nil {
			return -1, r.mkdirError(prefix, err)
		}
		cur = next
	}
	return cur, nil
}

// mkdirat creates name in the directory dirfd (which is prefix's parent)
// and opens it without following symlinks.
func (r *Root) mkdirat(dirfd int, prefix, name string, mode uint32) (int, error) {
	created := true
	if err := unix.Mkdirat(dirfd, name, mode); err != nil {
		if err != unix.EEXIST {
			return -1, err
		}
		created = false
		// Something appeared meanwhile, or a dangling symlink is in the
		// way: resolve again inside the root.
		if fd, err := r.openDir(prefix); err == nil {
			return fd, nil
		}
	}
	fd, err := OpenNoFollow(dirfd, name, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		if (err == unix.ELOOP || err == unix.ENOTDIR) && isSymlinkAt(dirfd, name) {
			// Like mkdir -p: a symlink whose target does not exist inside
			// the root is not followed to create it.
			return -1, fmt.Errorf("%w: dangling (its target does not exist inside the root)", ErrSymlink)
		}
		return -1, err
	}
	if created {
		r.record(r.undoRemove(dirfd, name, true))
	}
	return fd, nil
}

func (r *Root) mkdirError(p string, err error) error {
	switch err {
	case unix.ENOTDIR:
		err = fmt.Errorf("a component %w", ErrNotDir)
	case unix.ENOENT:
		err = fmt.Errorf("%w (a dangling symlink in the image?)", err)
	}
	return r.errorf(p, fmt.Errorf("create directory: %w", err))
}

// OpenNoFollow opens name relative to dirfd with open flags flags (plus
// O_NOFOLLOW|O_CLOEXEC) without following any symlink or magic link, name
// resolved beneath dirfd. Without openat2 (before Linux 5.6) name must be a
// single component (EINVAL otherwise), which O_NOFOLLOW then guards alone.
// Root's methods resolve a whole container path with Root.resolve; this is
// for one component below a directory already resolved (and for callers
// outside this package that walk a rootfs themselves).
func OpenNoFollow(dirfd int, name string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(dirfd, name, &how)
	if err == unix.ENOSYS {
		if strings.ContainsRune(name, '/') || name == ".." {
			return -1, unix.EINVAL
		}
		return unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return fd, err
}

func isSymlinkAt(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// Stat returns information about p inside the root, following symlinks
// inside the root.
func (r *Root) Stat(p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	cp, err := clean(p)
	if err != nil {
		return st, r.errorf(p, err)
	}
	fd, err := r.resolve(cp, unix.O_PATH)
	if err != nil {
		return st, r.errorf(cp, err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, r.errorf(cp, err)
	}
	return st, nil
}

// Exists reports whether p exists inside the root (following symlinks
// inside the root).
func (r *Root) Exists(p string) bool {
	_, err := r.Stat(p)
	return err == nil
}

// ReadFile reads the regular file p inside the root (at most limit bytes;
// limit <= 0 means 16 MiB) with hostfile.ReadFD: a FIFO, socket or device
// is refused at once, and a file whose size is over limit is refused before
// anything is read.
func (r *Root) ReadFile(p string, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = 16 << 20
	}
	cp, err := clean(p)
	if err != nil {
		return nil, r.errorf(p, err)
	}
	fd, err := r.resolve(cp, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, r.errorf(cp, err)
	}
	defer unix.Close(fd)
	data, err := hostfile.ReadFD(fd, cp, limit)
	if err != nil {
		return nil, r.hostfileErr(cp, err)
	}
	return data, nil
}

// hostfileErr wraps an error of hostfile's fd checks for cp: the
// fs.PathError hostfile adds is dropped, since r.errorf names cp.
func (r *Root) hostfileErr(cp string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return r.errorf(cp, err)
}

// WriteFile writes data to the regular file p inside the root, replacing it
// atomically (a temporary file renamed over p). An existing symlink at p is
// replaced, never followed; an existing directory is an error. Rollback
// removes a file WriteFile created and puts back one it replaced (the old
// regular file's content, mode and owner, read from a descriptor held since
// the write; an old symlink as it was).
func (r *Root) WriteFile(p string, data []byte, mode fs.FileMode) error {
	cp, err := clean(p)
	if err != nil {
		return r.errorf(p, err)
	}
	dir, name, err := split(cp)
	if err != nil {
		return r.errorf(cp, err)
	}
	dfd, err := r.mkdirAll(dir, 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	r.removeStaleIn(dfd, dir)
	existed := false
	var restore undo
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return r.errorf(cp, fmt.Errorf("write file: %w (a directory)", ErrExists))
		}
		existed = true
		if restore, err = r.undoReplace(dfd, name, st); err != nil {
			return r.errorf(cp, fmt.Errorf("write file: keep the old file for rollback: %w", err))
		}
	}
	tmp, fd, err := createTemp(dfd, name, uint32(mode.Perm()))
	if err != nil {
		if restore.done != nil {
			restore.done()
		}
		return r.errorf(cp, fmt.Errorf("write file: %w", err))
	}
	werr := writeAll(fd, data)
	if werr == nil {
		werr = unix.Fchmod(fd, uint32(mode.Perm()))
	}
	unix.Close(fd)
	if werr == nil {
		werr = unix.Renameat(dfd, tmp, dfd, name)
	}
	if werr != nil {
		unix.Unlinkat(dfd, tmp, 0)
		if restore.done != nil {
			restore.done()
		}
		return r.errorf(cp, fmt.Errorf("write file: %w", werr))
	}
	if existed {
		r.record(restore)
	} else {
		r.record(r.undoRemove(dfd, name, false))
	}
	return nil
}

// createTemp creates a new regular file next to name in dirfd.
func createTemp(dirfd int, name string, mode uint32) (string, int, error) {
	for i := range 100 {
		tmp := "." + name + ".nctk-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err == unix.EEXIST {
			continue
		}
		return tmp, fd, err
	}
	return "", -1, unix.EEXIST
}

func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// ReadDir returns the names in the directory p inside the root (following
// symlinks inside the root), unsorted.
func (r *Root) ReadDir(p string) ([]string, error) {
	cp, err := clean(p)
	if err != nil {
		return nil, r.errorf(p, err)
	}
	fd, err := r.resolve(cp, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, r.errorf(cp, err)
	}
	f := os.NewFile(uintptr(fd), cp)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, r.errorf(cp, err)
	}
	return names, nil
}

// dupCloexec duplicates fd close-on-exec (dup(2) clears the flag): no
// descriptor of a container root reaches a process started meanwhile (the
// low-level runtime, a confined ldconfig).
func dupCloexec(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}
