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
			var stx unix.Statx_t
			err = unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx)
			unix.Close(fd)
			if err != nil {
				return 0, dir, r.errorf(dir, fmt.Errorf("statx: %w", err))
			}
			if stx.Mask&unix.STATX_MNT_ID == 0 {
				return 0, dir, r.errorf(dir, ErrNoMountID)
			}
			return stx.Mnt_id, dir, nil
		}
		if (err != unix.ENOENT && err != unix.ENOTDIR) || dir == "/" {
			return 0, dir, r.errorf(dir, err)
		}
		dir = path.Dir(dir)
	}
}
