package configure

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/nctk/nctk/internal/rootfs"
	"golang.org/x/sys/unix"
)

// cgroupEntry is one line of /proc/PID/cgroup: "ID:controllers:path".
type cgroupEntry struct {
	ID          string
	Controllers []string
	Path        string
}

// parseProcCgroup parses /proc/PID/cgroup.
func parseProcCgroup(data []byte) ([]cgroupEntry, error) {
	var out []cgroupEntry
	for n, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		id, rest, ok1 := strings.Cut(line, ":")
		ctrls, p, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || id == "" || !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("line %d: malformed cgroup entry %q", n+1, line)
		}
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			return nil, fmt.Errorf("line %d: malformed cgroup entry %q: hierarchy id", n+1, line)
		}
		e := cgroupEntry{ID: id, Path: p}
		if ctrls != "" {
			e.Controllers = strings.Split(ctrls, ",")
		}
		out = append(out, e)
	}
	return out, nil
}

// mountEntry is the part of a /proc/PID/mountinfo line this package uses.
type mountEntry struct {
	ID         uint64 // the mount id (statx's stx_mnt_id)
	Dev        string // major:minor of the file system
	Root       string
	MountPoint string
	FSType     string
	Source     string // the mount source (a device, a file system name)
	SuperOpts  []string
}

// parseMountinfo parses /proc/PID/mountinfo.
func parseMountinfo(data []byte) ([]mountEntry, error) {
	var out []mountEntry
	n := 0
	// One string for the whole table: the lines and fields are slices of
	// it (this runs per container, over every mount of the host).
	for line := range strings.Lines(string(data)) {
		n++
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 6 || sep < 0 || len(f) < sep+3 {
			return nil, fmt.Errorf("mountinfo line %d: malformed: %q", n, strings.TrimSuffix(line, "\n"))
		}
		id, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: malformed mount id %q", n, f[0])
		}
		e := mountEntry{ID: id, Dev: f[2], Root: unescapeOctal(f[3]), MountPoint: unescapeOctal(f[4]),
			FSType: f[sep+1], Source: unescapeOctal(f[sep+2])}
		if len(f) > sep+3 {
			e.SuperOpts = strings.Split(f[sep+3], ",")
		}
		out = append(out, e)
	}
	return out, nil
}

// unescapeOctal undoes mountinfo's \NNN escapes (space, tab, newline, \).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// cgroupDir is a container's device cgroup.
type cgroupDir struct {
	Version int    // 1 (devices controller) or 2 (unified, BPF)
	Dir     string // the cgroup's directory
}

// deviceCgroupEntry picks the device cgroup's entry of a parsed
// /proc/PID/cgroup and its version: a devices controller line means cgroup
// v1; otherwise the unified "0::" line means v2 (as NVIDIA decides).
func deviceCgroupEntry(entries []cgroupEntry) (cgroupEntry, int, error) {
	for _, e := range entries {
		if hasString(e.Controllers, "devices") {
			return e, 1, nil
		}
	}
	for _, e := range entries {
		if e.ID == "0" && len(e.Controllers) == 0 {
			return e, 2, nil
		}
	}
	return cgroupEntry{}, 0, errors.New("no devices or unified cgroup entries found")
}

// resolveDeviceCgroup locates the device cgroup whose /proc/PID/cgroup
// entry is want (deviceCgroupEntry: of version 1 or 2), given the mount
// table of the caller (mounts, its parsed self/mountinfo) and the prefix
// under which those mounts are visible (procRoot, "" for the host).
func resolveDeviceCgroup(want cgroupEntry, version int, mounts []mountEntry, procRoot string) (cgroupDir, error) {
	var notUnder []string
	for _, m := range mounts {
		if version == 1 && (m.FSType != "cgroup" || !hasString(m.SuperOpts, "devices")) {
			continue
		}
		if version == 2 && m.FSType != "cgroup2" {
			continue
		}
		if m.Root == "/.." || strings.HasPrefix(m.Root, "/../") {
			return cgroupDir{}, fmt.Errorf("cgroup mount %s: root %s is outside this cgroup namespace", m.MountPoint, m.Root)
		}
		rel, ok := underPath(want.Path, m.Root)
		if !ok {
			notUnder = append(notUnder, m.MountPoint+" (root "+m.Root+")")
			continue
		}
		if !path.IsAbs(m.MountPoint) || strings.Contains(m.MountPoint+"/", "/../") {
			return cgroupDir{}, fmt.Errorf("cgroup mount point %q is not a clean absolute path", m.MountPoint)
		}
		dir := path.Join(m.MountPoint, rel)
		if procRoot != "" {
			// Standalone mode: the mounts lie in the container's rootfs,
			// which the image controls; resolve the directory inside it.
			var err error
			if dir, err = securejoin.SecureJoin(procRoot, dir); err != nil {
				return cgroupDir{}, fmt.Errorf("cgroup directory %s in %s: %w", path.Join(m.MountPoint, rel), procRoot, err)
			}
		}
		return cgroupDir{Version: version, Dir: dir}, nil
	}
	kind := "devices cgroup (v1)"
	if version == 2 {
		kind = "cgroup2"
	}
	if len(notUnder) > 0 {
		return cgroupDir{}, fmt.Errorf("cgroup %s is not below any %s mount: %s", want.Path, kind, strings.Join(notUnder, ", "))
	}
	return cgroupDir{}, fmt.Errorf("cgroup subsystem devices not found: no %s mount", kind)
}

// underPath returns p relative to root when p is root or below it.
func underPath(p, root string) (string, bool) {
	for c := range strings.SplitSeq(p, "/") {
		if c == ".." {
			return "", false // outside our cgroup namespace (or crafted)
		}
	}
	p, root = path.Clean(p), path.Clean(root)
	if root == "/" {
		return p, true
	}
	if p == root {
		return "/", true
	}
	if strings.HasPrefix(p, root+"/") {
		return p[len(root):], true
	}
	return "", false
}

// deviceCgroup is the container's device cgroup directory, opened once:
// the standalone mode's file system check and every later write (v1
// devices.allow/devices.deny, v2 BPF attach) go through fd, never through
// the path again, so a rename in the image's rootfs between the check and
// the writes cannot swap in another directory.
type deviceCgroup struct {
	cgroupDir
	fd int // O_RDONLY|O_DIRECTORY
}

// Close releases the directory.
func (d *deviceCgroup) Close() {
	if d != nil && d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// lookupDeviceCgroup reads the container's PID/cgroup in proc (the /proc
// of procRoot, "" for the host's), finds the device cgroup — on the host
// first where hosts mount it (standardDeviceCgroup below cgroupRoot), else
// with our own mount table (self) — and opens the directory found.
func lookupDeviceCgroup(proc *procDir, procRoot string, pid int, self func() ([]mountEntry, error), cgroupRoot string) (*deviceCgroup, error) {
	cgRel := path.Join(strconv.Itoa(pid), "cgroup")
	cgData, err := proc.readFile(cgRel)
	if err != nil {
		return nil, err
	}
	entries, err := parseProcCgroup(cgData)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", proc.name(cgRel), err)
	}
	want, version, err := deviceCgroupEntry(entries)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", proc.name(cgRel), err)
	}
	if procRoot == "" {
		if cg := standardDeviceCgroup(cgroupRoot, want, version, pid); cg != nil {
			return cg, nil
		}
	}
	mounts, err := self()
	if err != nil {
		return nil, err
	}
	d, err := resolveDeviceCgroup(want, version, mounts, procRoot)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", proc.name(cgRel), err)
	}
	if procRoot == "" {
		fd, err := openCgroupDir(d.Dir)
		if err != nil {
			return nil, err
		}
		return &deviceCgroup{cgroupDir: d, fd: fd}, nil
	}
	// Standalone mode: the directory lies in the image's rootfs; it is
	// opened inside the root with no symlink followed (securejoin already
	// resolved the image's symlinks; one now is a concurrent swap) and
	// must be a cgroup file system, not the image's own files.
	fd, err := openInRootNoSymlinks(procRoot, d.Dir)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", d.Dir, err)
	}
	if err := checkCgroupFS(fd, d); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &deviceCgroup{cgroupDir: d, fd: fd}, nil
}

// openInRootNoSymlinks opens the directory p, a path below root (as
// securejoin returns it), one component at a time beneath the previous one
// with no symlink followed (rootfs.OpenNoFollow, which needs single
// components without openat2).
func openInRootNoSymlinks(root, p string) (int, error) {
	root = path.Clean(root)
	rel, ok := underPath(path.Clean(p), root)
	if !ok || !path.IsAbs(p) {
		return -1, fmt.Errorf("%s is not below the container root %s", p, root)
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open container root %s: %w", root, err)
	}
	comps := strings.Split(strings.Trim(rel, "/"), "/")
	if rel == "/" {
		comps = []string{"."}
	}
	for i, c := range comps {
		flags := unix.O_PATH | unix.O_DIRECTORY
		if i == len(comps)-1 {
			flags = unix.O_RDONLY | unix.O_DIRECTORY
		}
		next, err := rootfs.OpenNoFollow(fd, c, flags)
		if err != nil {
			// O_PATH|O_NOFOLLOW reaches a symlink itself, which
			// O_DIRECTORY then refuses (ENOTDIR); name it.
			var st unix.Stat_t
			if errors.Is(err, unix.ELOOP) || unix.Fstatat(fd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = fmt.Errorf("%w: %w", rootfs.ErrSymlink, err)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", path.Join(root, path.Join(comps[:i+1]...)), err)
		}
		fd = next
	}
	return fd, nil
}

// checkCgroupFS checks that fd, d's opened directory, is on a cgroup file
// system of its version (v1 cgroup or cgroup2).
func checkCgroupFS(fd int, d cgroupDir) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("statfs cgroup %s: %w", d.Dir, err)
	}
	want, kind := int64(unix.CGROUP_SUPER_MAGIC), "cgroup (v1)"
	if d.Version == 2 {
		want, kind = unix.CGROUP2_SUPER_MAGIC, "cgroup2"
	}
	if st.Type != want {
		return fmt.Errorf("cgroup %s is not on a %s file system (type %#x): standalone mode needs the cgroup hierarchy mounted in the container rootfs", d.Dir, kind, st.Type)
	}
	return nil
}

// deviceRule is one "allow c MAJ:MIN rw" rule.
type deviceRule struct{ Major, Minor uint32 }

func (r deviceRule) String() string { return fmt.Sprintf("c %d:%d rw", r.Major, r.Minor) }

// cgroupChange is applied device rules that can be reverted.
type cgroupChange interface {
	// Revert undoes the change (and releases it).
	Revert() error
	// Release keeps the change.
	Release()
}

// allowDevicesV1 appends an allow rule per device to the v1 devices
// cgroup opened at dirfd (dir names it in messages), skipping rules the
// cgroup already grants (so that reverting never takes away access the
// container had before). Its files are opened relative to dirfd.
func allowDevicesV1(dirfd int, dir string, rules []deviceRule) (cgroupChange, error) {
	list, err := readCgroupFile(dirfd, dir, "devices.list")
	if err != nil {
		return nil, fmt.Errorf("read device cgroup: %w", err)
	}
	granted := parseDevicesList(list)
	allow, err := openCgroupFile(dirfd, dir, "devices.allow")
	if err != nil {
		return nil, err
	}
	defer allow.Close()
	// devices.deny is opened now, through the same directory, for Revert.
	deny, err := openCgroupFile(dirfd, dir, "devices.deny")
	if err != nil {
		return nil, err
	}
	ch := &v1Change{deny: deny}
	for _, r := range rules {
		if granted.allows(r) {
			continue
		}
		// One rule per write: the kernel parses a single rule per call.
		if _, err := allow.Write([]byte(r.String())); err != nil {
			ch.Revert()
			return nil, fmt.Errorf("write %q to %s: %w", r.String(), allow.Name(), err)
		}
		ch.added = append(ch.added, r)
	}
	return ch, nil
}

// openCgroupFile opens the cgroup file name in dirfd for writing.
func openCgroupFile(dirfd int, dir, name string) (*os.File, error) {
	p := path.Join(dir, name)
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// readCgroupFile reads the cgroup file name in dirfd.
func readCgroupFile(dirfd int, dir, name string) ([]byte, error) {
	p := path.Join(dir, name)
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	defer unix.Close(fd)
	return readAllLimited(fd, p)
}

type v1Change struct {
	deny  *os.File // the cgroup's devices.deny
	added []deviceRule
}

func (c *v1Change) Release() {
	c.added = nil
	c.close()
}

func (c *v1Change) close() {
	if c.deny != nil {
		c.deny.Close()
		c.deny = nil
	}
}

func (c *v1Change) Revert() error {
	defer c.close()
	if len(c.added) == 0 || c.deny == nil {
		return nil
	}
	var errs []error
	for _, r := range c.added {
		if _, err := c.deny.Write([]byte(r.String())); err != nil {
			errs = append(errs, fmt.Errorf("write %q to %s: %w", r.String(), c.deny.Name(), err))
		}
	}
	c.added = nil
	return errors.Join(errs...)
}

// devicesList is a parsed v1 devices.list.
type devicesList []devicesListEntry

type devicesListEntry struct {
	typ          byte   // 'a', 'c' or 'b'
	major, minor string // number or "*"
	access       string
}

func parseDevicesList(data []byte) devicesList {
	var out devicesList
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || len(f[0]) != 1 {
			continue
		}
		maj, min, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		out = append(out, devicesListEntry{typ: f[0][0], major: maj, minor: min, access: f[2]})
	}
	return out
}

func (l devicesList) allows(r deviceRule) bool {
	for _, e := range l {
		if e.typ != 'a' && e.typ != 'c' {
			continue
		}
		if (e.major == "*" || e.major == strconv.FormatUint(uint64(r.Major), 10)) &&
			(e.minor == "*" || e.minor == strconv.FormatUint(uint64(r.Minor), 10)) &&
			strings.Contains(e.access, "r") && strings.Contains(e.access, "w") {
			return true
		}
	}
	return false
}

// standardDeviceCgroup opens the device cgroup of pid where hosts mount
// it — the devices hierarchy at root/devices (v1), the unified one at root
// (v2) — with e's path below it, and returns it only when that directory
// proves to be pid's own: a cgroup file system of the version, with the
// devices controller's files for v1, listing pid in its cgroup.procs (a
// process is in one cgroup per hierarchy). Anything else (another mount
// layout, a cgroup namespace whose root is not the mount's, a file system
// that is not cgroup) is nil: the caller reads the mount table instead.
func standardDeviceCgroup(root string, e cgroupEntry, version, pid int) *deviceCgroup {
	if strings.Contains(e.Path+"/", "/../") {
		return nil
	}
	d := cgroupDir{Version: version, Dir: path.Join(root, e.Path)}
	if version == 1 {
		d.Dir = path.Join(root, "devices", e.Path)
	}
	fd, err := openCgroupDir(d.Dir)
	if err != nil {
		return nil
	}
	if checkCgroupFS(fd, d) != nil || version == 1 && unix.Faccessat(fd, "devices.allow", unix.F_OK, 0) != nil || !listsProcess(fd, pid) {
		unix.Close(fd)
		return nil
	}
	return &deviceCgroup{cgroupDir: d, fd: fd}
}

// listsProcess reports whether the cgroup directory dirfd's cgroup.procs
// lists pid.
func listsProcess(dirfd, pid int) bool {
	fd, err := unix.Openat(dirfd, "cgroup.procs", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	want := strconv.Itoa(pid)
	// A container's cgroup holds its init (and what the engine put there):
	// a few lines. Larger ones are read to the end.
	var buf [512]byte
	var rest []byte
	for {
		n, err := unix.Read(fd, buf[:])
		if n <= 0 || err != nil {
			return false
		}
		rest = append(rest, buf[:n]...)
		for {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			if string(rest[:i]) == want {
				return true
			}
			rest = rest[i+1:]
		}
	}
}

// openCgroupDir opens a cgroup directory for BPF attachment.
func openCgroupDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return fd, nil
}
