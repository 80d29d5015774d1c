package rootfs

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// undo reverses one change a Root made. Each holds its own descriptors.
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
// ForceSymlink replaced) restored, changed modes set back.
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
}

// undoRemove removes name from dirfd (a directory when dir is set).
func undoRemove(dirfd int, name string, dir bool) undo {
	d, err := unix.Dup(dirfd)
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
		done: func() { unix.Close(d) },
	}
}

// undoSymlink restores the symlink name in dirfd to point to old.
func undoSymlink(dirfd int, name, old string) undo {
	d, err := unix.Dup(dirfd)
	if err != nil {
		return undo{}
	}
	return undo{
		desc: "replace symlink " + name,
		run:  func() error { return replaceSymlink(d, name, old) },
		done: func() { unix.Close(d) },
	}
}

// undoMount lazily unmounts the mount whose root mntfd refers to.
func undoMount(mntfd int, desc string) undo {
	d, err := unix.Dup(mntfd)
	if err != nil {
		return undo{}
	}
	return undo{
		desc: "mount " + desc,
		run: func() error {
			err := unix.Unmount(procFdPath(d), unix.MNT_DETACH)
			if err == unix.EINVAL || err == unix.ENOENT {
				return nil // not mounted (any more)
			}
			return err
		},
		done: func() { unix.Close(d) },
	}
}

// procFdPath is the magic link naming descriptor fd of this process.
func procFdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
