package rootfs

import (
	"errors"
	"fmt"
	"path"

	"golang.org/x/sys/unix"
)

// ErrNoMountID is returned (wrapped) by MountOf when the kernel does not
// report mount ids (statx STATX_MNT_ID, Linux 5.8).
var ErrNoMountID = errors.New("the kernel reports no mount id (statx STATX_MNT_ID needs Linux 5.8)")

// MountOf returns the id of the mount holding the deepest directory on the
// way to p that exists inside the root (p's parent, or the nearest of its
// ancestors when those are missing: where creating p would land), and that
// directory's container path. Directories are resolved inside the root,
// symlinks included, as mkdirAll resolves them. The id is the one
// /proc/PID/mountinfo lists first on each line.
func (r *Root) MountOf(p string) (uint64, string, error) {
	cp, err := clean(p)
	if err != nil {
		return 0, "", r.errorf(p, err)
	}
	dir := path.Dir(cp)
	for {
		fd, err := r.openDir(dir)
		if err == nil {
			id, _, err := fdMountID(fd, unix.STATX_MNT_ID)
			unix.Close(fd)
			if err != nil {
				return 0, dir, r.errorf(dir, err)
			}
			return id, dir, nil
		}
		if (err != unix.ENOENT && err != unix.ENOTDIR) || dir == "/" {
			return 0, dir, r.errorf(dir, err)
		}
		dir = path.Dir(dir)
	}
}

// MountIDOf returns the id of the mount the file fd refers to is on (an
// O_PATH descriptor will do), the one /proc/PID/mountinfo lists first on
// each line; ErrNoMountID, wrapped, before Linux 5.8.
func MountIDOf(fd int) (uint64, error) {
	id, _, err := fdMountID(fd, unix.STATX_MNT_ID)
	return id, err
}

// fdMountID is the id of the mount fd is on, of the kind asked for
// (STATX_MNT_ID, the one mountinfo lists, or STATX_MNT_ID_UNIQUE, Linux
// 6.8's 64-bit id, which is never reused) or, where the kernel has only
// the former, that one; kind says which it is.
func fdMountID(fd int, want uint32) (id uint64, kind uint32, err error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, int(want), &stx); err != nil {
		return 0, 0, fmt.Errorf("statx: %w", err)
	}
	for _, k := range []uint32{want, unix.STATX_MNT_ID} {
		if stx.Mask&k != 0 {
			return stx.Mnt_id, k, nil
		}
	}
	return 0, 0, ErrNoMountID
}
