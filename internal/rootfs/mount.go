package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is what a mount source is: the type OpenSource requires of the host
// object and the placeholder Attach makes for it.
type Kind int

// The kinds of mount source.
const (
	KindFile   Kind = iota + 1 // a regular file
	KindDir                    // a directory
	KindSocket                 // a UNIX socket
	// KindAny is whatever the host path resolves to, its symlinks
	// followed as a bind mount's source is: a CDI spec's mount, whose
	// host path the spec names without saying what it is.
	KindAny
)

// MountFlags are the per-mount attributes nctk sets.
type MountFlags struct {
	ReadOnly  bool
	NoSuid    bool
	NoDev     bool
	NoExec    bool
	Recursive bool // rbind: include submounts of a directory source
}

// ParseMountOptions maps OCI mount options to MountFlags. Propagation
// options (rprivate, private, …) and "bind" are accepted and ignored: every
// mount nctk makes is private. Unknown options are an error naming them.
func ParseMountOptions(opts []string) (MountFlags, error) {
	var f MountFlags
	for _, o := range opts {
		switch o {
		case "ro":
			f.ReadOnly = true
		case "rw":
			f.ReadOnly = false
		case "nosuid":
			f.NoSuid = true
		case "nodev":
			f.NoDev = true
		case "noexec":
			f.NoExec = true
		case "rbind":
			f.Recursive = true
		case "bind", "rprivate", "private", "rslave", "slave", "suid", "dev", "exec":
		default:
			return f, fmt.Errorf("unsupported mount option %q", o)
		}
	}
	return f, nil
}

// bits returns f both as mount_setattr attributes and as mount(2) flags.
func (f MountFlags) bits() (attr uint64, ms uintptr) {
	for _, b := range []struct {
		set  bool
		attr uint64
		ms   uintptr
	}{
		{f.ReadOnly, unix.MOUNT_ATTR_RDONLY, unix.MS_RDONLY},
		{f.NoSuid, unix.MOUNT_ATTR_NOSUID, unix.MS_NOSUID},
		{f.NoDev, unix.MOUNT_ATTR_NODEV, unix.MS_NODEV},
		{f.NoExec, unix.MOUNT_ATTR_NOEXEC, unix.MS_NOEXEC},
	} {
		if b.set {
			attr |= b.attr
			ms |= b.ms
		}
	}
	return attr, ms
}

// attrs returns f as mount_setattr attributes.
func (f MountFlags) attrs() uint64 { a, _ := f.bits(); return a }

// msFlags returns f as mount(2) flags.
func (f MountFlags) msFlags() uintptr { _, m := f.bits(); return m }

// Source is a host object checked and ready to be bind-mounted into a
// container root: its O_PATH descriptor and, where the kernel has the new
// mount API, a detached clone of it (open_tree) with the mount attributes
// already applied. What Attach mounts is this object, whatever happens to
// the path it was opened by.
//
// A Source is prepared where its path is meaningful (the host mount
// namespace) and may be attached in another mount namespace (the
// container's). It can be attached once.
type Source struct {
	path  string
	dir   bool
	flags MountFlags
	fd    int // O_PATH to the object
	tree  int // detached mount (open_tree), -1 if unavailable
	st    unix.Stat_t
	used  bool
	// follow: path's symlinks are followed (KindAny).
	follow bool
}

// Close releases the source's descriptors (an unattached clone vanishes).
func (s *Source) Close() error {
	if s == nil {
		return nil
	}
	if s.tree >= 0 {
		unix.Close(s.tree)
		s.tree = -1
	}
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	return nil
}

// OpenSource opens the host object at hostPath for a bind mount of the given
// kind with OCI options opts. The last component must not be a symlink
// (discovery hands over resolved paths) and the object's type must match the
// kind: a regular file for KindFile, a directory for KindDir, a socket for
// KindSocket.
func OpenSource(hostPath string, kind Kind, opts []string) (*Source, error) {
	want := map[Kind]uint32{KindFile: unix.S_IFREG, KindDir: unix.S_IFDIR, KindSocket: unix.S_IFSOCK}[kind]
	if want == 0 && kind != KindAny {
		return nil, fmt.Errorf("mount source %s: unknown mount kind %d", hostPath, kind)
	}
	s, err := openSource(hostPath, opts, kind == KindAny)
	if err != nil {
		return nil, err
	}
	t := s.st.Mode & unix.S_IFMT
	if want != 0 && t != want {
		s.Close()
		return nil, fmt.Errorf("mount source %s: unexpected file type: %s, want %s", hostPath, typeName(t), typeName(want))
	}
	s.dir = t == unix.S_IFDIR
	if err := s.clone(); err != nil {
		s.Close()
		return nil, err
	}
	s.dropFD()
	return s, nil
}

// OpenDevice opens the host device node at hostPath for a bind mount. It
// must be a character device with the given major:minor numbers (the
// checked node, not one an image or a race put at the path).
func OpenDevice(hostPath string, major, minor uint32, opts []string) (*Source, error) {
	s, err := openSource(hostPath, opts, false)
	if err != nil {
		return nil, err
	}
	if t := s.st.Mode & unix.S_IFMT; t != unix.S_IFCHR {
		s.Close()
		return nil, fmt.Errorf("invalid device node %s: %s, want a character device", hostPath, typeName(t))
	}
	rdev := uint64(s.st.Rdev)
	if unix.Major(rdev) != major || unix.Minor(rdev) != minor {
		s.Close()
		return nil, fmt.Errorf("invalid device node %s: device %d:%d, want %d:%d", hostPath, unix.Major(rdev), unix.Minor(rdev), major, minor)
	}
	if s.flags.NoDev {
		s.Close()
		return nil, fmt.Errorf("device node %s: option nodev would make it unusable", hostPath)
	}
	if err := s.clone(); err != nil {
		s.Close()
		return nil, err
	}
	s.dropFD()
	return s, nil
}

// dropFD closes the host path's descriptor of a source whose clone exists:
// a mount needs only the clone (see keepDir for what each descriptor more
// can cost). A bind without the clone reopens the path and insists on the
// object checked (reopen).
func (s *Source) dropFD() {
	if s.tree >= 0 && s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// reopen opens the source's host path again, refusing anything but the
// object opened and checked first.
func (s *Source) reopen() (int, error) {
	how := unix.O_PATH | unix.O_CLOEXEC
	if !s.follow {
		how |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(s.path, how, 0)
	if err != nil {
		return -1, err
	}
	if !sameFile(fd, &s.st) {
		unix.Close(fd)
		return -1, errors.New("source changed since it was checked")
	}
	return fd, nil
}

// openSource opens hostPath; with follow its symlinks are followed,
// without a symlink there is an error.
func openSource(hostPath string, opts []string, follow bool) (*Source, error) {
	flags, err := ParseMountOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("mount source %s: %w", hostPath, err)
	}
	if !strings.HasPrefix(hostPath, "/") {
		return nil, fmt.Errorf("mount source %s: not an absolute path", hostPath)
	}
	how := unix.O_PATH | unix.O_CLOEXEC
	if !follow {
		how |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(hostPath, how, 0)
	if err != nil {
		return nil, fmt.Errorf("open mount source %s: %w", hostPath, err)
	}
	s := &Source{path: hostPath, flags: flags, fd: fd, tree: -1, follow: follow}
	if err := unix.Fstat(fd, &s.st); err != nil {
		s.Close()
		return nil, fmt.Errorf("stat mount source %s: %w", hostPath, err)
	}
	if s.st.Mode&unix.S_IFMT == unix.S_IFLNK {
		s.Close()
		return nil, fmt.Errorf("mount source %s: %w", hostPath, errors.New("is a symlink (want the resolved file)"))
	}
	return s, nil
}

// clone makes the detached mount with the source's attributes. ENOSYS
// (kernels before 5.2/5.12) leaves tree at -1: Attach then binds by fd.
func (s *Source) clone() error {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	if s.flags.Recursive && s.dir {
		flags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(s.fd, "", flags)
	if err == unix.ENOSYS {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clone mount source %s: open_tree: %w", s.path, err)
	}
	attr := unix.MountAttr{Attr_set: s.flags.attrs(), Propagation: unix.MS_PRIVATE}
	setFlags := uint(unix.AT_EMPTY_PATH)
	if s.flags.Recursive {
		setFlags |= unix.AT_RECURSIVE
	}
	if err := unix.MountSetattr(tree, "", setFlags, &attr); err != nil {
		unix.Close(tree)
		if err == unix.ENOSYS {
			return nil
		}
		return fmt.Errorf("set mount attributes of %s: mount_setattr: %w", s.path, err)
	}
	s.tree = tree
	return nil
}

// Attach mounts the source over dst inside the root, creating the mount
// point first: an existing object of the right type is covered, a symlink
// is an error wrapping ErrSymlink. The new mount is private and carries the
// source's flags from the start.
func (r *Root) Attach(s *Source, dst string) error {
	cp, err := clean(dst)
	if err != nil {
		return r.errorf(dst, err)
	}
	if s == nil {
		return r.errorf(cp, errors.New("mount: closed source"))
	}
	if s.used {
		return r.errorf(cp, fmt.Errorf("mount %s: source already attached", s.path))
	}
	if s.fd < 0 && s.tree < 0 {
		return r.errorf(cp, errors.New("mount: closed source"))
	}
	ph, at, err := r.placeholderAt(cp, s.dir, placeholderMode(s))
	if err != nil {
		return err
	}
	defer unix.Close(ph)
	if s.dir {
		r.coverDirs()
	}
	if s.tree >= 0 && !r.legacyMount {
		err = unix.MoveMount(s.tree, "", ph, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		if err != nil {
			return r.errorf(cp, fmt.Errorf("mount %s: move_mount: %w", s.path, err))
		}
		s.used = true
		tree := s.tree
		s.tree = -1
		// A shared parent makes the attached mount shared: make it private
		// again so that nothing mounted later propagates through it.
		attr := unix.MountAttr{Propagation: unix.MS_PRIVATE}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			r.record(r.undoMountOwned(tree, cp))
			return r.errorf(cp, fmt.Errorf("mount %s: make private: %w", s.path, err))
		}
		// The journal names the mount by its place and ID and the clone's
		// descriptor is closed (see keepDir for what each descriptor more
		// can cost).
		r.record(r.undoAttached(tree, at, cp))
		return nil
	}
	if err := r.legacyBind(s, cp, ph); err != nil {
		return err
	}
	s.used = true
	return nil
}

// coverDirs forgets the directories entryIn resolved: a directory mount
// the Root is about to make may cover one of them (mounted at or above
// it), and later entries there must go into the mount. Every mount of a
// directory (Attach, MountTmpfs) calls it.
func (r *Root) coverDirs() { r.entryDirs = nil }

// MountPoint makes the mount point a later Attach of a directory (dir) or
// of anything else at dst will cover, as Attach would make it (missing
// parents and the placeholder created, journaled; an existing object of
// the right type left as it is; a symlink is an error wrapping
// ErrSymlink), without mounting: the runtime makes them in the image
// before the create for the mounts it attaches after it.
func (r *Root) MountPoint(dst string, dir bool) error {
	mode := uint32(0o644)
	if dir {
		mode = 0o755
	}
	cp, err := clean(dst)
	if err != nil {
		return r.errorf(dst, err)
	}
	fd, err := r.placeholder(cp, dir, mode)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// placeholderMode is the mode of a placeholder created for s.
func placeholderMode(s *Source) uint32 {
	if s.dir {
		return 0o755
	}
	return 0o644
}

// legacyBind bind-mounts s onto the placeholder ph through /proc/self/fd
// magic links (kernels without open_tree), then remounts it with its flags.
func (r *Root) legacyBind(s *Source, cp string, ph int) error {
	flags := uintptr(unix.MS_BIND)
	if s.flags.Recursive && s.dir {
		flags |= unix.MS_REC
	}
	src := s.fd
	if src < 0 {
		// Given up for the clone (dropFD); a bind needs the path's object.
		alt, err := s.reopen()
		if err != nil {
			return r.errorf(cp, fmt.Errorf("mount %s: %w", s.path, err))
		}
		defer unix.Close(alt)
		src = alt
	}
	err := unix.Mount(procFdPath(src), procFdPath(ph), "", flags, "")
	if err == unix.EINVAL && src == s.fd {
		// The source lives in another mount namespace (prepared on the
		// host, attached in the container's). Before pivot_root the
		// container's namespace still shows the host's files: reopen the
		// path here and insist it is the very object that was checked.
		alt, oerr := s.reopen()
		if oerr != nil {
			return r.errorf(cp, fmt.Errorf("mount %s: %w", s.path, oerr))
		}
		defer unix.Close(alt)
		err = unix.Mount(procFdPath(alt), procFdPath(ph), "", flags, "")
	}
	if err != nil {
		return r.errorf(cp, fmt.Errorf("mount %s: %w", s.path, err))
	}
	// Reopen the mount point: the lookup now lands on the new mount's root.
	mnt, err := r.reopenMounted(cp, s.dir)
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	r.record(r.undoMount(mnt, cp))
	if !sameFile(mnt, &s.st) {
		return r.errorf(cp, fmt.Errorf("mount %s: mounted object is not the source", s.path))
	}
	remount := unix.MS_BIND | unix.MS_REMOUNT | s.flags.msFlags()
	if err := unix.Mount("", procFdPath(mnt), "", remount, ""); err != nil {
		return r.errorf(cp, fmt.Errorf("remount %s: %w", s.path, err))
	}
	if err := unix.Mount("", procFdPath(mnt), "", unix.MS_PRIVATE, ""); err != nil {
		return r.errorf(cp, fmt.Errorf("make %s private: %w", cp, err))
	}
	return nil
}

// reopenMounted opens cp (whose parent exists) without following a final
// symlink; after a mount, this yields the mounted root.
func (r *Root) reopenMounted(cp string, dir bool) (int, error) {
	if cp == "/" {
		return dupCloexec(r.fd)
	}
	parent, name, err := split(cp)
	if err != nil {
		return -1, r.errorf(cp, err)
	}
	dfd, err := r.openDir(parent)
	if err != nil {
		return -1, r.errorf(cp, err)
	}
	defer unix.Close(dfd)
	flags := unix.O_PATH
	if dir {
		flags |= unix.O_DIRECTORY
	}
	fd, err := OpenNoFollow(dfd, name, flags)
	if err != nil {
		return -1, r.errorf(cp, fmt.Errorf("reopen mount point: %w", err))
	}
	return fd, nil
}

func sameFile(fd int, want *unix.Stat_t) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
}

// TmpfsFile is a file created in a tmpfs before it is exposed.
type TmpfsFile struct {
	Name string // relative to the tmpfs root, no ".." components
	Data []byte
	Mode fs.FileMode
}

// Tmpfs describes a tmpfs mount and its initial content.
type Tmpfs struct {
	Mode  fs.FileMode // of the tmpfs root
	Size  string      // tmpfs size= option ("" = 1m)
	Dirs  []string    // relative directories to create (parents first)
	Files []TmpfsFile
	Flags MountFlags // applied after the content is written
}

// MountTmpfs mounts a tmpfs holding t's content at dst inside the root
// (creating the directory if needed). The content is written before the
// tmpfs is attached (new mount API) and t.Flags (typically ro) are set
// before anything in the container can see it.
func (r *Root) MountTmpfs(dst string, t Tmpfs) error {
	cp, err := clean(dst)
	if err != nil {
		return r.errorf(dst, err)
	}
	for _, d := range t.Dirs {
		if !validRel(d) {
			return r.errorf(cp, fmt.Errorf("tmpfs directory %q: not a relative path inside the tmpfs", d))
		}
	}
	for _, f := range t.Files {
		if !validRel(f.Name) {
			return r.errorf(cp, fmt.Errorf("tmpfs file %q: not a relative path inside the tmpfs", f.Name))
		}
	}
	size := t.Size
	if size == "" {
		size = "1m"
	}
	mode := t.Mode.Perm()
	if mode == 0 {
		mode = 0o755
	}
	data := fmt.Sprintf("mode=%o,size=%s", uint32(mode), size)
	ph, err := r.placeholder(cp, true, 0o755)
	if err != nil {
		return err
	}
	defer unix.Close(ph)
	r.coverDirs()
	if !r.legacyMount {
		mnt, err := newTmpfs(data)
		if err == nil {
			defer unix.Close(mnt)
			if err := populate(mnt, t); err != nil {
				return r.errorf(cp, err)
			}
			attr := unix.MountAttr{Attr_set: t.Flags.attrs(), Propagation: unix.MS_PRIVATE}
			if err := unix.MountSetattr(mnt, "", unix.AT_EMPTY_PATH, &attr); err != nil {
				return r.errorf(cp, fmt.Errorf("set tmpfs attributes: %w", err))
			}
			if err := unix.MoveMount(mnt, "", ph, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
				return r.errorf(cp, fmt.Errorf("mount tmpfs: move_mount: %w", err))
			}
			r.record(r.undoMount(mnt, cp))
			return nil
		}
		if err != unix.ENOSYS {
			return r.errorf(cp, fmt.Errorf("create tmpfs: %w", err))
		}
	}
	// Legacy: mount through the placeholder's magic link, fill, remount.
	if err := unix.Mount("tmpfs", procFdPath(ph), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		return r.errorf(cp, fmt.Errorf("mount tmpfs: %w", err))
	}
	mnt, err := r.reopenMounted(cp, true)
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	r.record(r.undoMount(mnt, cp))
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(mnt, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		return r.errorf(cp, errors.New("mount tmpfs: mount point does not show the new tmpfs"))
	}
	if err := populate(mnt, t); err != nil {
		return r.errorf(cp, err)
	}
	flags := uintptr(unix.MS_REMOUNT|unix.MS_BIND) | t.Flags.msFlags()
	if err := unix.Mount("", procFdPath(mnt), "", flags, ""); err != nil {
		return r.errorf(cp, fmt.Errorf("remount tmpfs: %w", err))
	}
	return unix.Mount("", procFdPath(mnt), "", unix.MS_PRIVATE, "")
}

// newTmpfs creates a detached tmpfs mount (fsopen/fsmount).
func newTmpfs(data string) (int, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fsfd)
	for _, kv := range strings.Split(data, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return -1, fmt.Errorf("tmpfs option %s: %w", kv, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("tmpfs: %w", err)
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
}

// populate writes t's directories and files below the tmpfs root mnt.
func populate(mnt int, t Tmpfs) error {
	for _, d := range t.Dirs {
		parts := strings.Split(d, "/")
		for i := range parts {
			p := strings.Join(parts[:i+1], "/")
			if err := unix.Mkdirat(mnt, p, 0o555); err != nil && err != unix.EEXIST {
				return fmt.Errorf("tmpfs directory %s: %w", p, err)
			}
		}
	}
	for _, f := range t.Files {
		mode := uint32(f.Mode.Perm())
		if mode == 0 {
			mode = 0o444
		}
		fd, err := unix.Openat(mnt, f.Name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err != nil {
			return fmt.Errorf("tmpfs file %s: %w", f.Name, err)
		}
		err = writeAll(fd, f.Data)
		if err == nil {
			err = unix.Fchmod(fd, mode)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("tmpfs file %s: %w", f.Name, err)
		}
	}
	return nil
}

// validRel reports whether p is a relative path with no "..", "." or empty
// components.
func validRel(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") {
		return false
	}
	for c := range strings.SplitSeq(p, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}

// DataOptions are the options of a mount of generated content
// (DataSource, the /proc/driver/nvidia view): read-only, no set-id, no
// devices, nothing executable.
func DataOptions() []string { return []string{"ro", "nosuid", "nodev", "noexec"} }

// DataSource returns a Source that is a file holding data, on a tmpfs of
// its own, for mounting generated content (a rewritten proc file) over a
// file in the container. The file is read-only and the mount carries opts.
func DataSource(name string, data []byte, opts []string) (*Source, error) {
	return dataSource(name, data, opts, false)
}

// dataSource is DataSource; scratch forces the path for kernels before 6.15.
func dataSource(name string, data []byte, opts []string, scratch bool) (*Source, error) {
	flags, err := ParseMountOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("data mount %s: %w", name, err)
	}
	mnt, err := newTmpfs(fmt.Sprintf("mode=755,size=%d", len(data)+4096))
	if err != nil {
		return nil, fmt.Errorf("data mount %s: create tmpfs: %w", name, err)
	}
	defer unix.Close(mnt)
	if err := populate(mnt, Tmpfs{Files: []TmpfsFile{{Name: "data", Data: data, Mode: 0o444}}}); err != nil {
		return nil, fmt.Errorf("data mount %s: %w", name, err)
	}
	s := &Source{path: "tmpfs:" + name, flags: flags, fd: -1, tree: -1}
	if s.fd, err = OpenNoFollow(mnt, "data", unix.O_PATH); err != nil {
		return nil, fmt.Errorf("data mount %s: %w", name, err)
	}
	if err := unix.Fstat(s.fd, &s.st); err != nil {
		s.Close()
		return nil, fmt.Errorf("data mount %s: %w", name, err)
	}
	// Cloning from a detached mount needs Linux 6.15; before that, attach
	// the tmpfs to a private scratch directory for the time of the clone.
	if !scratch {
		if err := s.clone(); err == nil && s.tree >= 0 {
			return s, nil
		}
	}
	dir, err := os.MkdirTemp("", "nctk-data-")
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("data mount %s: %w", name, err)
	}
	defer os.Remove(dir)
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		s.Close()
		return nil, fmt.Errorf("data mount %s: attach scratch tmpfs: %w", name, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	unix.Close(s.fd)
	if s.fd, err = unix.Open(dir+"/data", unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		s.Close()
		return nil, fmt.Errorf("data mount %s: %w", name, err)
	}
	if err := s.clone(); err != nil || s.tree < 0 {
		s.Close()
		return nil, fmt.Errorf("data mount %s: clone: %v (needs the new mount API, Linux 5.12+)", name, err)
	}
	return s, nil
}
