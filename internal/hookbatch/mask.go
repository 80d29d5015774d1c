package hookbatch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/rootfs"
)

// maxMountinfo bounds the mount table read (a node with thousands of
// mounts has a few MiB).
const maxMountinfo = 64 << 20

// maskName is the masking program's name on the scratch file system.
const maskName = ".nctk-hook-done"

// Mask makes prog, in this process's mount namespace, a program that exits
// 0 at once (exitProgram), bind-mounted read-only, nosuid and nodev over
// it. The program is written on a scratch tmpfs mounted over prog's
// directory for the moment it takes (a bind mount's source must be on a
// mount of the caller's namespace: a memfd's or a file's without a name is
// not), which keeps it alive once unmounted again. otherNS is the mount
// namespace that must see neither (runc's: "/proc/RUNC/ns/mnt"); this one
// must be another, and the mounts prog and its directory are on must not
// propagate mounts to any other namespace (no "shared" peer group in
// mountinfo); and this process must run under its parent's security label
// (sameLabel). The masked program must then run and exit 0, else the mask
// is taken away again. Every refusal wraps ErrNotBatched.
func Mask(prog, otherNS string) error {
	code := exitProgram(runtime.GOARCH)
	if code == nil {
		return fmt.Errorf("%w: no program to mask with on %s", ErrNotBatched, runtime.GOARCH)
	}
	self, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotBatched, err)
	}
	other, err := os.Readlink(otherNS)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotBatched, err)
	}
	if self == other {
		return fmt.Errorf("%w: the hooks run in the runtime's own mount namespace (%s)", ErrNotBatched, self)
	}
	if err := sameLabel(os.ReadFile, "/proc/thread-self", "/proc/"+strconv.Itoa(os.Getppid())); err != nil {
		return fmt.Errorf("%w: %w", ErrNotBatched, err)
	}
	real, err := filepath.EvalSymlinks(prog)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotBatched, err)
	}
	dir := filepath.Dir(real)
	target, err := unix.Open(real, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrNotBatched, real, err)
	}
	defer unix.Close(target)
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrNotBatched, dir, err)
	}
	defer unix.Close(dirfd)
	progMount, err := rootfs.MountIDOf(target)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotBatched, real, err)
	}
	dirMount, err := rootfs.MountIDOf(dirfd)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotBatched, dir, err)
	}
	if err := notShared([]string{real, dir}, []uint64{progMount, dirMount}); err != nil {
		return fmt.Errorf("%w: %w", ErrNotBatched, err)
	}
	if err := bindScratch(code, dir, dirMount, "/proc/self/fd/"+strconv.Itoa(target)); err != nil {
		return fmt.Errorf("%w: mask %s: %w", ErrNotBatched, real, err)
	}
	if err := finishMask(real); err != nil {
		if uerr := unix.Unmount(real, unix.MNT_DETACH); uerr != nil {
			return fmt.Errorf("%w: %w; and the mask stays: %w", ErrNotBatched, err, uerr)
		}
		return fmt.Errorf("%w: %w", ErrNotBatched, err)
	}
	return nil
}

// sameLabel checks that the process at self runs under the same security
// label (SELinux context, AppArmor profile: attr/current) as its parent,
// the runtime's process that runs the hooks: the check run of the mask is
// then what the runtime's own exec of it will meet. Where the module gives
// no label (the file cannot be read), both must give none.
func sameLabel(read func(string) ([]byte, error), self, parent string) error {
	mine, merr := read(self + "/attr/current")
	theirs, terr := read(parent + "/attr/current")
	if (merr != nil) != (terr != nil) || string(mine) != string(theirs) {
		return fmt.Errorf("the hook's security label %q differs from its runtime process's %q", bytes.TrimRight(mine, "\x00\n"), bytes.TrimRight(theirs, "\x00\n"))
	}
	return nil
}

// notShared checks that the mounts ids, which the paths are on, are in no
// shared peer group, reading this namespace's mount table only as far as
// the last of them (a node's table can hold thousands of mounts; the
// program's are near its start).
func notShared(paths []string, ids []uint64) error {
	f, err := hostfile.Open("/proc/thread-self/mountinfo", maxMountinfo)
	if err != nil {
		return err
	}
	defer f.Close()
	shared, err := sharedMounts(io.LimitReader(f, maxMountinfo), ids)
	if err != nil {
		return fmt.Errorf("/proc/thread-self/mountinfo: %w", err)
	}
	for i, p := range paths {
		if shared[ids[i]] {
			return fmt.Errorf("the mount that %s is on shares mounts with other namespaces", p)
		}
	}
	return nil
}

// bindScratch mounts a scratch tmpfs over dir (on the mount before),
// writes code there as an executable and bind-mounts it over target (a
// path to the file to mask that the tmpfs does not hide: its /proc/self/fd
// link), then unmounts the tmpfs again, whatever happened. The file is
// written through a descriptor of the directory that is checked to be the
// new tmpfs; "/" is refused (a mount over the root is not seen by paths
// from it).
func bindScratch(code []byte, dir string, before uint64, target string) (err error) {
	if dir == "/" {
		return errors.New("the program is in /: no scratch file system over the root")
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16k,nr_inodes=4,mode=0700"); err != nil {
		return fmt.Errorf("scratch tmpfs over %s: %w", dir, err)
	}
	defer func() {
		if uerr := unix.Unmount(dir, unix.MNT_DETACH); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unmount the scratch tmpfs over %s: %w", dir, uerr))
		}
	}()
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the scratch tmpfs over %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(dfd, &fs); err != nil {
		return fmt.Errorf("scratch tmpfs over %s: %w", dir, err)
	}
	if after, err := rootfs.MountIDOf(dfd); err != nil || after == before || fs.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("%s is not the scratch tmpfs mounted over it (mount %d, before %d, type %#x, %v)", dir, after, before, fs.Type, err)
	}
	fd, err := unix.Openat(dfd, maskName, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o555)
	if err != nil {
		return fmt.Errorf("create the masking program: %w", err)
	}
	defer unix.Close(fd)
	if n, err := unix.Write(fd, code); err != nil || n != len(code) {
		return fmt.Errorf("write the masking program: %d bytes, %v", n, err)
	}
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the masking program: %w", err)
	}
	return nil
}

// finishMask makes the mount over prog private, read-only, nosuid and
// nodev, and runs it.
func finishMask(prog string) error {
	if err := unix.Mount("", prog, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mask of %s private: %w", prog, err)
	}
	if err := unix.Mount("", prog, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the mask of %s read-only: %w", prog, err)
	}
	p, err := os.StartProcess(prog, []string{"nctk-hook-done"}, &os.ProcAttr{Env: []string{}})
	if err != nil {
		return fmt.Errorf("run the mask of %s: %w", prog, err)
	}
	st, err := p.Wait()
	if err != nil || !st.Success() {
		return fmt.Errorf("run the mask of %s: %v %v", prog, st, err)
	}
	return nil
}

// maxMountinfoLine bounds a line of the mount table (an overlay's with
// many layers runs to a few KiB).
const maxMountinfoLine = 1 << 20

// sharedMounts reads a mount table (the text of /proc/PID/mountinfo) up to
// the last line of the mounts ids and reports for each whether it is in a
// shared peer group: its optional fields, between the mount options and
// "-", hold "shared:N". A mount not listed, or a malformed line before the
// last of them, is an error.
func sharedMounts(r io.Reader, ids []uint64) (map[uint64]bool, error) {
	want := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	found := make(map[uint64]bool, len(ids))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMountinfoLine)
	for n := 1; len(want) > 0 && sc.Scan(); n++ {
		id, shared, err := mountinfoShared(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if want[id] {
			delete(want, id)
			found[id] = shared
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for id := range want {
		return nil, fmt.Errorf("mount %d not listed", id)
	}
	return found, nil
}

// mountinfoShared returns the mount id of a mountinfo line and whether its
// optional fields name a shared peer group.
func mountinfoShared(line []byte) (id uint64, shared bool, err error) {
	f := bytes.Fields(line)
	if len(f) < 7 {
		return 0, false, fmt.Errorf("%d fields", len(f))
	}
	id, err = strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("mount id %q", f[0])
	}
	sep := slices.IndexFunc(f[6:], func(b []byte) bool { return string(b) == "-" })
	if sep < 0 {
		return 0, false, errors.New("no \"-\" after the optional fields")
	}
	for _, o := range f[6 : 6+sep] {
		if bytes.HasPrefix(o, []byte("shared:")) {
			return id, true, nil
		}
	}
	return id, false, nil
}
