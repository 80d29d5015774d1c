package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// placeholder makes sure an object that a mount can cover exists at the
// cleaned path cp inside the root and returns it open (O_PATH, or write-only
// for a regular file it created; never following a symlink), as a raw
// descriptor the caller owns. Missing parents
// are created inside the root.
//
//   - dir: an existing directory is reused; otherwise one is created.
//   - !dir (files, sockets, device nodes): an existing non-directory is
//     reused (an image's own copy of a driver file is covered, not
//     modified); otherwise an empty regular file of mode is created with
//     O_EXCL.
//   - An existing symlink is an error wrapping ErrSymlink, naming the path:
//     the image put it there, and following it is exactly the escape of
//     CVE-2024-0132/0133; deleting the image's file is not ours to decide.
func (r *Root) placeholder(cp string, dir bool, mode uint32) (int, error) {
	fd, _, err := r.placeholderAt(cp, dir, mode)
	return fd, err
}

// entryAt is a name in a directory the journal keeps (keepDir); dir is -1
// for the container root itself.
type entryAt struct {
	dir  int
	name string
}

// placeholderAt is placeholder that also says where the placeholder is:
// its directory resolved once for every entry made in it (entryIn: a
// driver's library directory gets dozens), the journal's own descriptor.
func (r *Root) placeholderAt(cp string, dir bool, mode uint32) (int, entryAt, error) {
	if cp == "/" {
		if !dir {
			return -1, entryAt{dir: -1}, r.errorf(cp, errors.New("the container root is not a file"))
		}
		fd, err := dupCloexec(r.fd)
		return fd, entryAt{dir: -1}, err
	}
	dfd, name, err := r.entryIn(cp)
	if err != nil {
		return -1, entryAt{dir: -1}, err
	}
	fd, err := r.placeholderIn(dfd, cp, name, dir, mode)
	return fd, entryAt{dir: dfd, name: name}, err
}

// placeholderIn is placeholder for name in the directory dfd.
func (r *Root) placeholderIn(dfd int, cp, name string, dir bool, mode uint32) (int, error) {
	if !dir {
		// Create first: a driver file's mount point is usually missing from
		// the image, and the new file's own descriptor is the placeholder
		// (one lookup instead of a failed open, the create and an open of
		// what it made). Anything else (EEXIST above all) takes the loop.
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err == nil {
			r.record(r.undoRemove(dfd, name, false))
			return fd, nil
		}
	}
	for range 4 {
		fd, err := OpenNoFollow(dfd, name, unix.O_PATH)
		if err == nil {
			if err := checkPlaceholder(fd, dir); err != nil {
				unix.Close(fd)
				return -1, r.errorf(cp, err)
			}
			return fd, nil
		}
		if err == unix.ELOOP {
			return -1, r.errorf(cp, ErrSymlink)
		}
		if err != unix.ENOENT {
			return -1, r.errorf(cp, fmt.Errorf("open mount point: %w", err))
		}
		// Missing: create it, exclusively, then loop to open what we made.
		if dir {
			err = unix.Mkdirat(dfd, name, mode|0o100)
		} else {
			var cfd int
			cfd, err = unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
			if err == nil {
				unix.Close(cfd)
			}
		}
		if err == nil {
			r.record(r.undoRemove(dfd, name, dir))
			continue
		}
		if err != unix.EEXIST {
			return -1, r.errorf(cp, fmt.Errorf("create mount point: %w", err))
		}
	}
	return -1, r.errorf(cp, errors.New("create mount point: changed concurrently"))
}

// checkPlaceholder checks that the object open at fd can be covered by a
// mount of a directory (dir) or of a non-directory.
func checkPlaceholder(fd int, dir bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch t := st.Mode & unix.S_IFMT; {
	case t == unix.S_IFLNK:
		return ErrSymlink
	case dir && t != unix.S_IFDIR:
		return fmt.Errorf("mount point for a directory: %w (%s)", ErrExists, typeName(t))
	case !dir && t == unix.S_IFDIR:
		return fmt.Errorf("mount point for a file: %w (a directory)", ErrExists)
	}
	return nil
}

func typeName(t uint32) string {
	switch t {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return "an unknown file type"
}

// Symlink creates the symlink link -> target inside the root. Missing
// parents of link are created inside the root. The target is stored as
// given (it is resolved by the container's own lookups, inside its root).
//
//   - link already a symlink to target: nothing to do.
//   - link a symlink to something else: replaced atomically (a new link
//     renamed over it); the old one is restored by Rollback.
//   - link an existing file, directory or other object: an error wrapping
//     ErrExists; the image's file is not removed.
func (r *Root) Symlink(target, link string) error {
	if target == "" {
		return r.errorf(link, errors.New("symlink with an empty target"))
	}
	if len(target) >= unix.PathMax || strings.IndexByte(target, 0) >= 0 {
		return r.errorf(link, fmt.Errorf("invalid symlink target %q", target))
	}
	cp, err := clean(link)
	if err != nil {
		return r.errorf(link, err)
	}
	dfd, name, err := r.entryIn(cp)
	if err != nil {
		return err
	}
	return r.symlinkAt(dfd, name, target, cp)
}

// entryIn resolves the clean container path cp (not the root) for an entry
// made in its directory: the directory's journal descriptor (entryDir:
// created if missing, resolved once per directory) and the entry's name
// in it.
func (r *Root) entryIn(cp string) (dfd int, name string, err error) {
	parent, name, err := split(cp)
	if err != nil {
		return -1, "", r.errorf(cp, err)
	}
	if dfd, err = r.entryDir(parent); err != nil {
		return -1, "", err
	}
	return dfd, name, nil
}

// entryDir returns a descriptor of the directory parent inside the root
// (created if missing) that the journal owns: the links, mount points and
// mounts of one directory (a driver's dozens in its library directory)
// resolve it once, and their journal entries share it; coverDirs forgets
// them when a directory mount may cover one.
func (r *Root) entryDir(parent string) (int, error) {
	if d, ok := r.entryDirs[parent]; ok {
		return d, nil
	}
	dfd, err := r.mkdirAll(parent, 0o755)
	if err != nil {
		return -1, err
	}
	d, err := r.keepDir(dfd)
	unix.Close(dfd) // a fresh descriptor: keepDir kept a copy or had one
	if err != nil {
		return -1, r.errorf(parent, err)
	}
	if r.entryDirs == nil {
		r.entryDirs = make(map[string]int)
	}
	r.entryDirs[parent] = d
	return d, nil
}

// symlinkAt is Symlink for the link name in the directory dirfd (the
// container path cp), resolved already.
func (r *Root) symlinkAt(dfd int, name, target, cp string) error {
	for range 4 {
		// Created first: in a fresh container layer the link is not
		// there, and a lookup that misses costs what the create costs.
		err := unix.Symlinkat(target, dfd, name)
		if err == nil {
			r.record(r.undoRemove(dfd, name, false))
			return nil
		}
		if err != unix.EEXIST {
			return r.errorf(cp, fmt.Errorf("create symlink to %s: %w", target, err))
		}
		// Something is there already: an earlier run may have been
		// killed replacing it (stale.go).
		r.removeStaleIn(dfd, path.Dir(cp))
		old, err := readlinkat(dfd, name)
		switch {
		case err == nil && old == target:
			return nil
		case err == nil:
			if err := replaceSymlink(dfd, name, target); err != nil {
				return r.errorf(cp, fmt.Errorf("replace symlink: %w", err))
			}
			r.record(r.undoSymlink(dfd, name, old))
			return nil
		case err == unix.EINVAL:
			var st unix.Stat_t
			if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				return r.errorf(cp, fmt.Errorf("create symlink to %s: %w (%s)", target, ErrExists, typeName(st.Mode&unix.S_IFMT)))
			}
			continue
		case err != unix.ENOENT:
			return r.errorf(cp, fmt.Errorf("create symlink: %w", err))
		}
		// Removed meanwhile: create it again.
	}
	return r.errorf(cp, errors.New("create symlink: changed concurrently"))
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= unix.PathMax {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, len(buf)*4)
	}
}

// replaceSymlink atomically makes name in dirfd a symlink to target: a new
// link with a temporary name is renamed over name. Renaming never follows
// the old link, and fails (EISDIR/ENOTDIR) rather than replacing a
// directory.
func replaceSymlink(dirfd int, name, target string) error {
	for i := range 100 {
		tmp := "." + name + ".nctk-link-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(i)
		err := unix.Symlinkat(target, dirfd, tmp)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return err
		}
		// Only a symlink may be replaced: check right before the rename.
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFLNK {
			unix.Unlinkat(dirfd, tmp, 0)
			return fmt.Errorf("%w (%s)", ErrExists, typeName(st.Mode&unix.S_IFMT))
		}
		if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
			unix.Unlinkat(dirfd, tmp, 0)
			return err
		}
		return nil
	}
	return unix.EEXIST
}
