package configure

import (
	"errors"
	"fmt"
	"path"

	"github.com/nctk/nctk/internal/hostfile"
	"golang.org/x/sys/unix"
)

// ErrNotProcfs is returned (wrapped) in standalone mode when ROOTFS/proc is
// not a procfs mount: missing, a symlink, or a directory of the image's own
// files.
var ErrNotProcfs = errors.New("not a procfs mount: standalone mode needs /proc mounted in the container rootfs")

// maxProcFile bounds what is read from a proc file (mountinfo of a host with
// many mounts is the largest).
const maxProcFile = 16 << 20

// procDir is an open /proc: the host's (supervised mode) or, in standalone
// mode, the procfs mounted at ROOTFS/proc, opened inside the rootfs without
// following any symlink and checked to be a procfs. The container's files
// (PID/ns/mnt, PID/cgroup, self/mountinfo) are opened relative to it, never
// by a path through the rootfs, which the image controls.
type procDir struct {
	fd   int
	path string // for messages: /proc or ROOTFS/proc
	// standalone is set when the directory lies in a container rootfs;
	// files read from it are then checked to be procfs files too.
	standalone bool
}

// openProcDir opens procRoot's /proc ("" for the host's).
func openProcDir(procRoot string) (*procDir, error) {
	if procRoot == "" {
		fd, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open /proc: %w", err)
		}
		return &procDir{fd: fd, path: "/proc"}, nil
	}
	p := path.Join(procRoot, "proc")
	// Opened inside the root with no symlink or magic link followed, as
	// the cgroup directory is (openInRootNoSymlinks).
	fd, err := openInRootNoSymlinks(procRoot, p)
	if err != nil {
		return nil, fmt.Errorf("%s is %w: %w", p, ErrNotProcfs, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("statfs %s: %w", p, err)
	}
	if st.Type != unix.PROC_SUPER_MAGIC {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is %w (file system type %#x)", p, ErrNotProcfs, st.Type)
	}
	return &procDir{fd: fd, path: p, standalone: true}, nil
}

// Close releases the directory.
func (d *procDir) Close() {
	if d != nil && d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// name is rel's path for messages.
func (d *procDir) name(rel string) string { return path.Join(d.path, rel) }

// open opens rel (PID/ns/mnt, self/mountinfo …) relative to the directory.
func (d *procDir) open(rel string, flags int) (int, error) {
	fd, err := unix.Openat(d.fd, rel, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", d.name(rel), err)
	}
	return fd, nil
}

// readFile reads the proc file rel. In standalone mode the file must be a
// procfs file (not something mounted over it).
func (d *procDir) readFile(rel string) ([]byte, error) {
	fd, err := d.open(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if d.standalone {
		var st unix.Statfs_t
		if err := unix.Fstatfs(fd, &st); err != nil {
			return nil, fmt.Errorf("statfs %s: %w", d.name(rel), err)
		}
		if st.Type != unix.PROC_SUPER_MAGIC {
			return nil, fmt.Errorf("%s is not a procfs file (file system type %#x)", d.name(rel), st.Type)
		}
	}
	return readAllLimited(fd, d.name(rel))
}

// readAllLimited reads fd (a proc or cgroup file, whose size is not
// reported, opened O_NONBLOCK) to the end with hostfile.ReadFD: anything
// but a regular file is refused, and more than maxProcFile bytes is an
// error. Errors name name.
func readAllLimited(fd int, name string) ([]byte, error) {
	return hostfile.ReadFD(fd, name, maxProcFile)
}
