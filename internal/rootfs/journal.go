package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// undo reverses one change a Root made. The directory it works in is the
// journal's (keepDir); other descriptors it holds are its own.
type undo struct {
	desc string
	run  func() error
	done func() // releases descriptors without undoing
}

func (r *Root) record(u undo) {
	if u.run != nil {
		r.journal = append(r.journal, u)
	}
}

// Rollback undoes every change recorded since the Root was opened (or since
// the last Commit), newest first: mounts are lazily unmounted, created
// files, directories and symlinks are removed, replaced symlinks (and files
// ForceSymlink or WriteFile replaced) restored, changed modes set back.
// It returns the errors it met, joined; it does not stop at the first.
func (r *Root) Rollback() error {
	var errs []error
	for i := len(r.journal) - 1; i >= 0; i-- {
		u := r.journal[i]
		if err := u.run(); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", u.desc, err))
		}
		if u.done != nil {
			u.done()
		}
	}
	r.journal = nil
	r.closeDirs()
	return errors.Join(errs...)
}

// Commit forgets the journal: the changes made so far stay.
func (r *Root) Commit() {
	for _, u := range r.journal {
		if u.done != nil {
			u.done()
		}
	}
	r.journal = nil
	r.closeDirs()
}

// dirKey identifies a directory (device and inode) while a descriptor of
// it is open.
type dirKey struct{ dev, ino uint64 }

// keepDir returns a descriptor of the directory dirfd refers to that the
// journal owns until Commit or Rollback: one per directory, however many
// entries name it. The threads of a Go process share one descriptor table,
// and each time that table grows past 64, 128, ... entries the kernel waits
// for an RCU grace period (11–12 ms each on a 16-vCPU VM): a descriptor per
// entry crossed those marks in every create with a GPU's worth of links and
// mounts.
func (r *Root) keepDir(dirfd int) (int, error) {
	for _, d := range r.dirs {
		if d == dirfd {
			return dirfd, nil // one of the journal's own
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return -1, err
	}
	k := dirKey{uint64(st.Dev), st.Ino}
	if d, ok := r.dirs[k]; ok {
		return d, nil
	}
	d, err := dupCloexec(dirfd)
	if err != nil {
		return -1, err
	}
	if r.dirs == nil {
		r.dirs = make(map[dirKey]int)
	}
	r.dirs[k] = d
	return d, nil
}

// KeptDirs is how many directory descriptors the journal holds.
func (r *Root) KeptDirs() int { return len(r.dirs) }

// closeDirs closes the journal's directory descriptors.
func (r *Root) closeDirs() {
	for _, d := range r.dirs {
		unix.Close(d)
	}
	r.dirs = nil
	r.entryDirs = nil
}

// undoRemove removes name from dirfd (a directory when dir is set).
func (r *Root) undoRemove(dirfd int, name string, dir bool) undo {
	d, err := r.keepDir(dirfd)
	if err != nil {
		return undo{}
	}
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	return undo{
		desc: "create " + name,
		run: func() error {
			err := unix.Unlinkat(d, name, flags)
			if err == unix.ENOENT || (dir && (err == unix.ENOTEMPTY || err == unix.EEXIST || err == unix.EBUSY)) {
				return nil // gone already, or someone else's content is inside
			}
			return err
		},
	}
}

// undoSymlink restores the symlink name in dirfd to point to old.
func (r *Root) undoSymlink(dirfd int, name, old string) undo {
	d, err := r.keepDir(dirfd)
	if err != nil {
		return undo{}
	}
	return undo{
		desc: "replace symlink " + name,
		run:  func() error { return replaceSymlink(d, name, old) },
	}
}

// undoMount lazily unmounts the mount whose root mntfd refers to (at the
// container path desc).
func (r *Root) undoMount(mntfd int, desc string) undo {
	d, err := dupCloexec(mntfd)
	if err != nil {
		return undo{}
	}
	return r.undoMountOwned(d, desc)
}

// undoMountOwned is undoMount taking over mntfd: the journal closes it.
func (r *Root) undoMountOwned(d int, desc string) undo {
	own := r.ownRoot()
	return undo{
		desc: "mount " + desc,
		run:  func() error { return detach(d, desc, own) },
		done: func() { unix.Close(d) },
	}
}

// ownRoot reports whether the root is the calling thread's own root (a
// container's, from a thread in its mount namespace after pivot_root).
func (r *Root) ownRoot() bool { return filepath.Clean(r.path) == "/" }

// detach lazily unmounts the mount whose root fd refers to, at the
// container path cp; one that is not mounted (any more) is no error. The
// mount is named through /proc/self/fd, unless own: the root is the
// calling thread's own (ownRoot), whose /proc, if any, is the container's
// procfs, where this process has no /proc/self. There it is named by cp,
// which the kernel resolves inside that root, once cp is found to lead to
// that very mount (its mount ID).
func detach(fd int, cp string, own bool) error {
	if !own {
		err := unix.Unmount(procFdPath(fd), unix.MNT_DETACH)
		if err == unix.EINVAL || err == unix.ENOENT {
			return nil
		}
		return err
	}
	id, kind, err := fdMountID(fd, unix.STATX_MNT_ID_UNIQUE)
	if err != nil {
		return err
	}
	at, err := unix.Open(cp, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return err
	}
	got, gotKind, err := fdMountID(at, kind)
	unix.Close(at)
	if err != nil || gotKind != kind || got != id {
		return nil // not mounted there (any more)
	}
	return unix.Unmount(cp, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
}

// undoAttached lazily unmounts the mount just attached from the clone
// tree at at (the container path desc): it closes tree and, at rollback,
// opens at's name again (the lookup lands on the mount's root) and
// unmounts what it finds only if its mount ID is the one attached — a
// mount since made over it, or the name replaced, is not ours and is left.
// Without a mount ID (kernels before 5.8) or a kept directory the journal
// holds the clone as undoMountOwned does.
func (r *Root) undoAttached(tree int, at entryAt, desc string) undo {
	id, kind, err := fdMountID(tree, unix.STATX_MNT_ID_UNIQUE)
	if err != nil || at.dir < 0 {
		return r.undoMountOwned(tree, desc)
	}
	unix.Close(tree)
	own := r.ownRoot()
	return undo{
		desc: "mount " + desc,
		run: func() error {
			fd, err := OpenNoFollow(at.dir, at.name, unix.O_PATH)
			if err == unix.ENOENT {
				return nil
			}
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			if got, gotKind, err := fdMountID(fd, kind); err != nil || gotKind != kind || got != id {
				return nil // not ours (any more)
			}
			return detach(fd, desc, own)
		},
	}
}

// procFdPath is the magic link naming descriptor fd of this process.
func procFdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// undoReplace prepares the undo of replacing name in dirfd (st its
// lstat): a symlink is put back with its target; a regular file's content,
// mode and owner are copied back from a descriptor opened now (the old
// inode lives on after the rename); any other type is left as replaced.
func (r *Root) undoReplace(dirfd int, name string, st unix.Stat_t) (undo, error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		old, err := readlinkat(dirfd, name)
		if err != nil {
			return undo{}, err
		}
		d, err := r.keepDir(dirfd)
		if err != nil {
			return undo{}, err
		}
		return undo{
			desc: "replace " + name,
			run: func() error {
				return renameInto(d, name, func(tmp string) error { return unix.Symlinkat(old, d, tmp) })
			},
		}, nil
	case unix.S_IFREG:
		d, err := r.keepDir(dirfd)
		if err != nil {
			return undo{}, err
		}
		fd, err := OpenNoFollow(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
		if err != nil {
			return undo{}, err
		}
		return undo{
			desc: "replace " + name,
			run: func() error {
				return renameInto(d, name, func(tmp string) error {
					out, err := unix.Openat(d, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
					if err != nil {
						return err
					}
					defer unix.Close(out)
					if err := copyFD(out, fd); err != nil {
						return err
					}
					if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
						return err
					}
					return unix.Fchmod(out, st.Mode&0o7777)
				})
			},
			done: func() { unix.Close(fd) },
		}, nil
	}
	return undo{}, nil
}

// renameInto creates a temporary object next to name in dirfd with mk
// and renames it over name; the temporary is removed when either fails.
func renameInto(dirfd int, name string, mk func(tmp string) error) error {
	for i := range 100 {
		tmp := "." + name + ".nctk-" + strconv.Itoa(os.Getpid()) + "-u" + strconv.Itoa(i)
		err := mk(tmp)
		if err == unix.EEXIST {
			continue
		}
		if err == nil {
			err = unix.Renameat(dirfd, tmp, dirfd, name)
		}
		if err != nil {
			unix.Unlinkat(dirfd, tmp, 0)
		}
		return err
	}
	return unix.EEXIST
}

// copyFD copies the whole content of src (from offset 0) to dst.
func copyFD(dst, src int) error {
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, err := unix.Pread(src, buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if err := writeAll(dst, buf[:n]); err != nil {
			return err
		}
		off += int64(n)
	}
}
