package configure

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// mountTables are the container's mount table, read from its namespace
// before pivot_root: its own mounts below the rootfs, and outside it the
// mounts of the namespace it was cloned from (the runtime's, the host's).
type mountTables struct {
	rootfs    string
	container []mountEntry
	byID      map[uint64]mountEntry
	// host are the mounts that are not below the rootfs: a file system
	// mounted there is reachable outside the container.
	host []mountEntry
}

// newMountTables parses the container's /proc/PID/mountinfo for the
// container root rootfs (a path in the container's namespace, before
// pivot_root).
func newMountTables(containerInfo []byte, rootfs string) (*mountTables, error) {
	c, err := parseMountinfo(containerInfo)
	if err != nil {
		return nil, fmt.Errorf("container mount table: %w", err)
	}
	t := &mountTables{rootfs: path.Clean(rootfs), container: c, byID: make(map[uint64]mountEntry, len(c))}
	for _, m := range c {
		t.byID[m.ID] = m
		if !t.belowRootfs(m.MountPoint) {
			t.host = append(t.host, m)
		}
	}
	return t, nil
}

// belowRootfs reports whether mp is strictly below the rootfs.
func (t *mountTables) belowRootfs(mp string) bool {
	_, ok := underPath(path.Clean(mp), t.rootfs)
	return ok && path.Clean(mp) != t.rootfs
}

// byPath is the mount holding the container path dir by its mount point
// alone (the deepest mount point above it; the last one listed for the
// same point), for kernels that report no mount id.
func (t *mountTables) byPath(dir string) (mountEntry, bool) {
	full := path.Join(t.rootfs, dir)
	var best mountEntry
	found := false
	for _, m := range t.container {
		if _, ok := underPath(full, path.Clean(m.MountPoint)); ok && (!found || len(path.Clean(m.MountPoint)) >= len(path.Clean(best.MountPoint))) {
			best, found = m, true
		}
	}
	return best, found
}

// hostSource returns the host path that m (a mount below the rootfs)
// shows, and whether m is a host file system at all: a file system the
// caller also has mounted outside the rootfs (a bind of a host directory,
// a docker volume). A file system only the container has (the engine's
// tmpfs at /dev, a --tmpfs) and procfs (nothing can be created in it) are
// not.
func (t *mountTables) hostSource(m mountEntry) (string, bool) {
	if m.FSType == "proc" {
		return "", false
	}
	shared := false
	for _, h := range t.host {
		if h.Dev != m.Dev {
			continue
		}
		shared = true
		if rel, ok := underPath(m.Root, h.Root); ok {
			return path.Join(h.MountPoint, rel), true
		}
	}
	if shared {
		return m.Source + ":" + m.Root, true
	}
	return "", false
}

// plannedPath is a container path configure creates or changes.
type plannedPath struct {
	path string
	// ifMissing: an object already there is covered by a mount, nothing
	// is created (a device node on a host /dev bound into the container).
	ifMissing bool
	// hostOK: on a host file system the path is left out rather than
	// refused (a GPU's /dev link on a host /dev bound into the container,
	// where the host's own link is for the container to see).
	hostOK bool
}

// plannedPaths are the container paths Apply creates or changes for p:
// mount points, symlinks, device nodes, the links below /dev (hostOK), the
// /proc/driver/nvidia view, and, when ld.so.cache is updated, /etc and
// /etc/ld.so.conf.d (and with a compat directory, the directories ldconfig
// makes links in).
func plannedPaths(p *plan.Plan, opts Options, compat string) []plannedPath {
	var out []plannedPath
	if p.Proc != nil {
		out = append(out, plannedPath{path: rootfs.ContainerProcDriver})
	}
	for _, s := range p.DevSymlinks {
		out = append(out, plannedPath{path: s.Link, hostOK: true})
	}
	for _, m := range p.Mounts {
		out = append(out, plannedPath{path: m.Destination})
	}
	for _, s := range p.Symlinks {
		out = append(out, plannedPath{path: s.Link})
	}
	if !opts.NoDevBind {
		for _, d := range p.Devices {
			out = append(out, plannedPath{path: d.Path, ifMissing: true})
		}
	}
	if len(p.LdconfigDirs) > 0 || compat != "" {
		out = append(out, plannedPath{path: "/etc/ld.so.cache"}, plannedPath{path: "/etc/ld.so.conf.d/00-nctk.conf"})
	}
	if compat != "" {
		for _, d := range append(append([]string(nil), p.LdconfigDirs...), compat) {
			out = append(out, plannedPath{path: path.Join(d, "libcuda.so.1")})
		}
	}
	return out
}

// checkUserMounts returns a *plan.UserMountError for the first of paths that
// lies below a mount of a host file system in the container root r (the
// directory where it would be created is looked up inside the root, and
// its mount found by id in t); such paths with hostOK are returned in
// onHost instead. It changes nothing.
func checkUserMounts(r *rootfs.Root, tables func() (*mountTables, error), paths []plannedPath) (onHost []string, err error) {
	// The mount holding the root directory itself: the container's own
	// rootfs. Any other mount met inside the root lies below it (compared
	// by id, not by path: the rootfs path may name a symlink).
	rootID, _, err := r.MountOf("/")
	if err != nil && !errors.Is(err, rootfs.ErrNoMountID) {
		return nil, err
	}
	// Most paths share a directory (the driver's libraries, its tools):
	// each directory is looked up once (nothing changes meanwhile).
	type mountAt struct {
		id  uint64
		dir string
		err error
	}
	seen := map[string]mountAt{}
	for _, pp := range paths {
		if pp.ifMissing {
			if st, err := r.Lstat(pp.path); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Mode&unix.S_IFMT != unix.S_IFLNK {
				continue
			}
		}
		key := path.Dir(path.Clean(pp.path))
		at, known := seen[key]
		if !known {
			at.id, at.dir, at.err = r.MountOf(pp.path)
			seen[key] = at
		}
		id, dir, err := at.id, at.dir, at.err
		if err != nil && !errors.Is(err, rootfs.ErrNoMountID) {
			return nil, err
		}
		if err == nil && id == rootID {
			continue // on the container's own root: no table needed
		}
		t, terr := tables()
		if terr != nil {
			return nil, terr
		}
		var m mountEntry
		var ok bool
		switch {
		case err != nil: // rootfs.ErrNoMountID
			if m, ok = t.byPath(dir); ok && !t.belowRootfs(m.MountPoint) {
				continue
			}
		default:
			m, ok = t.byID[id]
		}
		if !ok {
			// Mounted after the table was read: refuse rather than guess.
			return nil, fmt.Errorf("%s: the mount holding %s (id %d) is not in the container's mount table; retry", pp.path, dir, id)
		}
		if src, host := t.hostSource(m); host {
			if pp.hostOK {
				onHost = append(onHost, pp.path)
				continue
			}
			return nil, &plan.UserMountError{Path: path.Clean(pp.path), Destination: strings.TrimPrefix(path.Clean(m.MountPoint), t.rootfs), Source: src}
		}
	}
	return onHost, nil
}

// mountSource reads the mount tables Apply may need, each once and only
// when asked: the container's (PID/mountinfo: the user-mount check, which
// needs it when a path lies on a mount other than the container root's,
// such as the engine's /dev) and the caller's (self/mountinfo: the device
// cgroup's mount, when it is not where hosts mount it:
// standardDeviceCgroup). A read costs about a millisecond per thousand
// mounts (a busy host has that many: every container's overlay and
// volumes), with the parse after it.
type mountSource struct {
	proc *procDir
	c    Container
	// selfMounts is the caller's parsed mount table (self/mountinfo).
	selfMounts func() ([]mountEntry, error)
	// mountTables are the container's parsed mount table (PID/mountinfo).
	mountTables func() (*mountTables, error)
}

func newMountSource(proc *procDir, c Container) *mountSource {
	s := &mountSource{proc: proc, c: c}
	s.selfMounts = sync.OnceValues(s.readSelf)
	s.mountTables = sync.OnceValues(s.readTables)
	return s
}

// mountTableError is a mount table that could not be read or parsed: the
// container's state, not a failure of what Apply changes.
type mountTableError struct{ err error }

func (e *mountTableError) Error() string { return e.err.Error() }
func (e *mountTableError) Unwrap() error { return e.err }

func (s *mountSource) readSelf() ([]mountEntry, error) {
	data, err := s.proc.readFile("self/mountinfo")
	if err != nil {
		return nil, &mountTableError{err}
	}
	m, err := parseMountinfo(data)
	if err != nil {
		return nil, &mountTableError{fmt.Errorf("%s: %w", s.proc.name("self/mountinfo"), err)}
	}
	return m, nil
}

func (s *mountSource) readTables() (*mountTables, error) {
	rel := path.Join(strconv.Itoa(s.c.PID), "mountinfo")
	ci, err := s.proc.readFile(rel)
	if err != nil {
		return nil, &mountTableError{err}
	}
	t, err := newMountTables(ci, s.c.Rootfs)
	if err != nil {
		return nil, &mountTableError{fmt.Errorf("%s: %w", s.proc.name(rel), err)}
	}
	return t, nil
}
