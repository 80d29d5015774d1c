package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/nctk/nctk/internal/hostfile"
	"golang.org/x/sys/unix"
)

// OpenRegular opens the regular file p inside the root (following symlinks
// inside the root) for reading, with O_NONBLOCK so that a FIFO cannot
// block the open. A FIFO, socket, device or directory is refused (an error
// wrapping hostfile.ErrNotRegular), and so is a file larger than limit
// (hostfile.ErrTooLarge). The caller closes the file.
func (r *Root) OpenRegular(p string, limit int64) (*os.File, error) {
	cp, err := clean(p)
	if err != nil {
		return nil, r.errorf(p, err)
	}
	fd, err := r.resolve(cp, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, r.errorf(cp, err)
	}
	if err := hostfile.CheckFD(fd, cp, limit); err != nil {
		unix.Close(fd)
		return nil, r.hostfileErr(cp, err)
	}
	return os.NewFile(uintptr(fd), r.path+cp), nil
}

// Lstat returns information about p inside the root without following p
// itself if it is a symlink (its parent directories are resolved inside
// the root).
func (r *Root) Lstat(p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	cp, err := clean(p)
	if err != nil {
		return st, r.errorf(p, err)
	}
	if cp == "/" {
		return r.Stat(cp)
	}
	dir, name, err := split(cp)
	if err != nil {
		return st, r.errorf(cp, err)
	}
	dfd, err := r.openDir(dir)
	if err != nil {
		return st, r.errorf(dir, err)
	}
	defer unix.Close(dfd)
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, r.errorf(cp, err)
	}
	return st, nil
}

// Chmod sets the permission bits (perm & 0777) of p inside the root,
// following symlinks inside the root: the object is opened O_PATH (a
// device node is never opened) and changed through its descriptor, so a
// symlink in the image can never redirect the change to a host file. It
// reports whether the mode changed; an object that has the mode already is
// left alone. The old mode is journaled (Rollback restores it).
func (r *Root) Chmod(p string, perm fs.FileMode) (bool, error) {
	cp, err := clean(p)
	if err != nil {
		return false, r.errorf(p, err)
	}
	fd, err := r.resolve(cp, unix.O_PATH)
	if err != nil {
		return false, r.errorf(cp, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return false, r.errorf(cp, err)
	}
	want := uint32(perm.Perm())
	old := st.Mode & 0o7777
	if old == want {
		unix.Close(fd)
		return false, nil
	}
	// fchmod refuses O_PATH descriptors; its /proc/self/fd magic link
	// names exactly the object opened.
	if err := unix.Fchmodat(unix.AT_FDCWD, procFdPath(fd), want, 0); err != nil {
		unix.Close(fd)
		return false, r.errorf(cp, fmt.Errorf("chmod: %w", err))
	}
	r.record(undo{
		desc: "chmod " + cp,
		run:  func() error { return unix.Fchmodat(unix.AT_FDCWD, procFdPath(fd), old, 0) },
		done: func() { unix.Close(fd) },
	})
	return true, nil
}

// ForceSymlink is Symlink, except that an existing regular file, device,
// FIFO or socket at link is replaced too (atomically: the new link is
// exchanged with it); only a directory there is an error wrapping
// ErrExists. The replaced object is restored by Rollback (except on a
// filesystem without RENAME_EXCHANGE, where it is renamed over).
func (r *Root) ForceSymlink(target, link string) error {
	err := r.Symlink(target, link)
	if !errors.Is(err, ErrExists) {
		return err
	}
	cp, _ := clean(link) // Symlink checked it
	parent, name, _ := split(cp)
	dfd, err := r.openDir(parent)
	if err != nil {
		return r.errorf(parent, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return r.errorf(cp, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return r.errorf(cp, fmt.Errorf("create symlink to %s: %w (a directory)", target, ErrExists))
	}
	for i := range 100 {
		tmp := "." + name + ".nctk-old-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		err := unix.Symlinkat(target, dfd, tmp)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return r.errorf(cp, fmt.Errorf("create symlink: %w", err))
		}
		// Exchange never follows either name; the old object keeps
		// living under tmp until Commit removes it or Rollback
		// exchanges it back.
		err = unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_EXCHANGE)
		if err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP {
			// A filesystem without exchange: a plain rename replaces
			// the object (not restored by Rollback).
			if err = unix.Renameat(dfd, tmp, dfd, name); err == nil {
				return nil
			}
		}
		if err != nil {
			unix.Unlinkat(dfd, tmp, 0)
			return r.errorf(cp, fmt.Errorf("replace with symlink: %w", err))
		}
		var now unix.Stat_t
		if unix.Fstatat(dfd, tmp, &now, unix.AT_SYMLINK_NOFOLLOW) == nil && now.Mode&unix.S_IFMT == unix.S_IFDIR {
			// A directory was swapped in concurrently: put it back.
			unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_EXCHANGE)
			unix.Unlinkat(dfd, tmp, 0)
			return r.errorf(cp, fmt.Errorf("create symlink to %s: %w (a directory)", target, ErrExists))
		}
		d, err := r.keepDir(dfd)
		if err != nil {
			unix.Unlinkat(dfd, tmp, 0)
			return nil
		}
		r.record(undo{
			desc: "replace " + cp,
			run:  func() error { return unix.Renameat2(d, tmp, d, name, unix.RENAME_EXCHANGE) },
			done: func() { unix.Unlinkat(d, tmp, 0) },
		})
		return nil
	}
	return r.errorf(cp, errors.New("replace with symlink: no temporary name"))
}

// MkdirAll creates the directory p inside the root with its missing
// parents (mode perm, less the umask), resolving existing components
// inside the root. Created directories are journaled.
func (r *Root) MkdirAll(p string, perm fs.FileMode) error {
	cp, err := clean(p)
	if err != nil {
		return r.errorf(p, err)
	}
	fd, err := r.mkdirAll(cp, uint32(perm.Perm()))
	if err != nil {
		return err
	}
	return unix.Close(fd)
}
