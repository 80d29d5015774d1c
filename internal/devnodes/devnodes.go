// Package devnodes creates the NVIDIA device nodes a host lacks (when the
// driver is loaded but nothing ran nvidia-modprobe or udev rules) and the
// /dev/char/<major>:<minor> symlinks systemd needs to resolve them (without
// those, a `systemctl daemon-reload` can drop the device cgroup rules of
// running GPU containers: the "NVML: Unknown Error" problem).
//
// Majors and minors come from the running driver: /proc/devices,
// /proc/driver/nvidia/gpus/*/information, /proc/driver/nvidia-caps/mig-minors
// and the capability files under /proc/driver/nvidia/capabilities; modes and
// ownership from /proc/driver/nvidia/params (DeviceFileMode/UID/GID; 0666
// root:root when absent), as the driver's own nvidia-modprobe does.
//
// Everything is relative to a proc root (normally "/") and a dev root
// (normally "/" so that nodes go to /dev), so tests run against a fake
// procfs and a temporary /dev. Existing correct nodes are kept; an entry of
// the wrong kind or with the wrong device number is reported, never
// replaced.
package devnodes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/devnum"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/procfs"
)

const (
	// DefaultMode is the driver's default DeviceFileMode.
	DefaultMode uint32 = 0o666
	// CapsDir is the directory of the nvidia-caps nodes.
	CapsDir = "/dev/nvidia-caps"
)

// Set selects kinds of nodes.
type Set struct {
	// Control: nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools.
	Control bool
	// GPUs: /dev/nvidiaN for every GPU the driver lists.
	GPUs bool
	// Caps: the MIG config and monitor capability nodes under
	// /dev/nvidia-caps (when the nvidia-caps major is registered).
	Caps bool
}

// All selects every kind.
func All() Set { return Set{Control: true, GPUs: true, Caps: true} }

// Expected returns the nodes the loaded driver implies, read from the proc
// files under procRoot, sorted by path. A driver that is not loaded (no
// nvidia major in /proc/devices) is an error.
func Expected(procRoot string, s Set) ([]discover.DeviceNode, error) {
	devs, err := procfs.ReadDevices(filepath.Join(procRoot, procfs.DevicesPath))
	if err != nil {
		return nil, err
	}
	gpuMajor, ok := devs.GPUMajor()
	if !ok {
		return nil, fmt.Errorf("%s lists no %q character device: is the NVIDIA driver loaded?",
			filepath.Join(procRoot, procfs.DevicesPath), procfs.DevNVIDIA)
	}
	mode, uid, gid, err := fileParams(procRoot)
	if err != nil {
		return nil, err
	}
	node := func(path string, major, minor uint32) discover.DeviceNode {
		return discover.DeviceNode{Path: path, Major: major, Minor: minor, Mode: mode, UID: uid, GID: gid}
	}
	var nodes []discover.DeviceNode
	if s.Control {
		nodes = append(nodes, node("/dev/nvidiactl", gpuMajor, devnum.MinorCtl), node("/dev/nvidia-modeset", gpuMajor, devnum.MinorModeset))
		if uvm, ok := devs.CharMajor(procfs.DevNVIDIAUVM); ok {
			nodes = append(nodes, node("/dev/nvidia-uvm", uvm, devnum.MinorUVM), node("/dev/nvidia-uvm-tools", uvm, devnum.MinorUVMTools))
		}
	}
	if s.GPUs {
		minors, err := gpuMinors(procRoot)
		if err != nil {
			return nil, err
		}
		for _, m := range minors {
			nodes = append(nodes, node("/dev/nvidia"+strconv.Itoa(int(m)), gpuMajor, m))
		}
	}
	if s.Caps {
		if capsMajor, ok := devs.CharMajor(procfs.DevNVIDIACaps); ok {
			caps, err := capNodes(procRoot, capsMajor, uid, gid)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, caps...)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Path < nodes[j].Path })
	return nodes, nil
}

// fileParams returns the mode and owner the driver gives its nodes.
func fileParams(procRoot string) (mode, uid, gid uint32, err error) {
	path := filepath.Join(procRoot, procfs.ParamsPath)
	params, err := procfs.ReadParams(path)
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultMode, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, err
	}
	mode = DefaultMode
	if v, ok, err := params.Uint(procfs.ParamDeviceFileMode); err != nil {
		return 0, 0, 0, fmt.Errorf("%s: %w", path, err)
	} else if ok {
		if v > 0o777 {
			return 0, 0, 0, fmt.Errorf("%s: %s %d is not a permission mode", path, procfs.ParamDeviceFileMode, v)
		}
		mode = uint32(v)
	}
	for _, p := range []struct {
		key string
		dst *uint32
	}{{procfs.ParamDeviceFileUID, &uid}, {procfs.ParamDeviceFileGID, &gid}} {
		v, ok, err := params.Uint(p.key)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		if ok {
			if v > 1<<31-1 {
				return 0, 0, 0, fmt.Errorf("%s: %s %d out of range", path, p.key, v)
			}
			*p.dst = uint32(v)
		}
	}
	return mode, uid, gid, nil
}

// gpuMinors returns the device minors of the GPUs the driver lists.
func gpuMinors(procRoot string) ([]uint32, error) {
	dir := filepath.Join(procRoot, procfs.GPUsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	seen := map[uint32]string{}
	var minors []uint32
	for _, e := range entries {
		path := filepath.Join(dir, e.Name(), procfs.InformationFile)
		info, err := procfs.ReadGPUInformation(path)
		if err != nil {
			return nil, err
		}
		if info.Minor < 0 || info.Minor > devnum.MaxGPUMinor {
			return nil, fmt.Errorf("%s: device minor %d collides with the driver-wide nodes", path, info.Minor)
		}
		m := uint32(info.Minor)
		if other, dup := seen[m]; dup {
			return nil, fmt.Errorf("%s: device minor %d is also that of %s", path, m, other)
		}
		seen[m] = e.Name()
		minors = append(minors, m)
	}
	sort.Slice(minors, func(i, j int) bool { return minors[i] < minors[j] })
	return minors, nil
}

// capNodes returns the MIG config and monitor capability nodes.
func capNodes(procRoot string, major, uid, gid uint32) ([]discover.DeviceNode, error) {
	minors, err := procfs.ReadMIGMinors(filepath.Join(procRoot, procfs.MIGMinorsPath))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var nodes []discover.DeviceNode
	for _, c := range []struct {
		name string
		mode uint32 // the driver's default when its access file is absent
	}{{procfs.MIGConfig, 0o400}, {procfs.MIGMonitor, 0o444}} {
		minor, ok := minors[c.name]
		if !ok {
			continue
		}
		mode := c.mode
		accessPath := filepath.Join(procRoot, procfs.CapabilitiesDir, "mig", c.name)
		if data, err := procfs.ReadFile(accessPath); err == nil {
			access, err := procfs.ParseCapAccessFile(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", accessPath, err)
			}
			if access.Minor != minor {
				return nil, fmt.Errorf("%s: minor %d, but %s says %d", accessPath, access.Minor,
					filepath.Join(procRoot, procfs.MIGMinorsPath), minor)
			}
			if access.Mode != 0 {
				mode = uint32(access.Mode) & uint32(fs.ModePerm)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		nodes = append(nodes, discover.DeviceNode{Path: CapsDir + "/nvidia-cap" + strconv.Itoa(int(minor)), Major: major, Minor: minor, Mode: mode, UID: uid, GID: gid})
	}
	return nodes, nil
}

// devDir returns devRoot's /dev directory.
func devDir(devRoot string) string { return filepath.Join(devRoot, "dev") }

// devRel returns n.Path relative to /dev, refusing a path outside it.
func devRel(n discover.DeviceNode) (string, error) {
	rel, ok := strings.CutPrefix(n.Path, "/dev/")
	if !ok || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("node path %q is not below /dev", n.Path)
	}
	return rel, nil
}

// perm returns n's permission bits.
func perm(n discover.DeviceNode) uint32 { return n.Mode & uint32(fs.ModePerm) }

// Status is what happened to one node or link.
type Status int

// Statuses.
const (
	// Created: the node or link was created.
	Created Status = iota
	// WouldCreate: it is missing; a dry run created nothing.
	WouldCreate
	// Exists: a correct one exists and was kept.
	Exists
	// Mismatch: something else is at the path; it was left alone.
	Mismatch
)

func (s Status) String() string {
	switch s {
	case Created:
		return "created"
	case WouldCreate:
		return "would create"
	case Exists:
		return "exists"
	case Mismatch:
		return "mismatch"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Result is the outcome for one node.
type Result struct {
	Node   discover.DeviceNode
	Path   string // absolute path of the node
	Status Status
	Detail string
}

// MismatchError lists the entries that are in the way.
type MismatchError struct{ Results []Result }

func (e *MismatchError) Error() string {
	parts := make([]string, len(e.Results))
	for i, r := range e.Results {
		parts[i] = r.Path + ": " + r.Detail
	}
	return "left alone, not what the driver expects: " + strings.Join(parts, "; ")
}

// CreateNodes makes the missing nodes under devRoot/dev (dry run: only
// reports them). Correct existing nodes are kept even if their mode or
// owner differ (the administrator may have changed them; Detail says so);
// other entries at a node's path are reported in a *MismatchError after
// every node was handled. Creating needs CAP_MKNOD.
func CreateNodes(devRoot string, nodes []discover.DeviceNode, dryRun bool) ([]Result, error) {
	dev := devDir(devRoot)
	var results, bad []Result
	for _, n := range nodes {
		r, err := createNode(dev, n, dryRun)
		if err != nil {
			return results, err
		}
		results = append(results, r)
		if r.Status == Mismatch {
			bad = append(bad, r)
		}
	}
	if len(bad) > 0 {
		return results, &MismatchError{Results: bad}
	}
	return results, nil
}

func createNode(dev string, n discover.DeviceNode, dryRun bool) (Result, error) {
	rel, err := devRel(n)
	if err != nil {
		return Result{}, err
	}
	path := filepath.Join(dev, rel)
	r := Result{Node: n, Path: path}
	st, err := os.Lstat(path)
	switch {
	case err == nil:
		r.Status, r.Detail = checkNode(st, n)
		return r, nil
	case !errors.Is(err, fs.ErrNotExist):
		return r, fmt.Errorf("checking %s: %w", path, err)
	}
	if dryRun {
		r.Status = WouldCreate
		return r, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return r, fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := unix.Mknod(path, unix.S_IFCHR|perm(n), int(n.Dev())); err != nil {
		if errors.Is(err, fs.ErrExist) { // created meanwhile: check it
			if st, err := os.Lstat(path); err == nil {
				r.Status, r.Detail = checkNode(st, n)
				return r, nil
			}
		}
		return r, fmt.Errorf("mknod %s %s: %w", path, n.ID(), err)
	}
	// mknod applied the umask; set the exact mode and owner.
	if err := unix.Fchmodat(unix.AT_FDCWD, path, perm(n), 0); err != nil {
		return r, fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Lchown(path, int(n.UID), int(n.GID)); err != nil {
		return r, fmt.Errorf("chown %s: %w", path, err)
	}
	r.Status = Created
	return r, nil
}

// checkNode compares an existing entry with the node it should be.
func checkNode(st fs.FileInfo, n discover.DeviceNode) (Status, string) {
	if st.Mode().Type() != fs.ModeDevice|fs.ModeCharDevice {
		return Mismatch, fmt.Sprintf("is %s, want character device %s", describeType(st.Mode()), n.ID())
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return Exists, ""
	}
	if got := uint64(sys.Rdev); got != n.Dev() {
		return Mismatch, fmt.Sprintf("is character device %d:%d, want %s", unix.Major(got), unix.Minor(got), n.ID())
	}
	var notes []string
	if uint32(st.Mode().Perm()) != perm(n) {
		notes = append(notes, fmt.Sprintf("mode %04o (driver default %04o)", st.Mode().Perm(), perm(n)))
	}
	if sys.Uid != n.UID || sys.Gid != n.GID {
		notes = append(notes, fmt.Sprintf("owner %d:%d (driver default %d:%d)", sys.Uid, sys.Gid, n.UID, n.GID))
	}
	return Exists, strings.Join(notes, ", ")
}

func describeType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "an entry of type " + m.Type().String()
}

// Scan returns the NVIDIA character device nodes that exist under
// devRoot/dev (nvidia*, nvidia-caps/*, nvidia-caps-imex-channels/*), with
// their device numbers and host paths, sorted by path.
func Scan(devRoot string) ([]discover.DeviceNode, error) {
	dev := devDir(devRoot)
	var nodes []discover.DeviceNode
	for _, pattern := range []string{"nvidia*", strings.TrimPrefix(CapsDir, "/dev/") + "/*", "nvidia-caps-imex-channels/*"} {
		matches, err := filepath.Glob(filepath.Join(dev, pattern))
		if err != nil {
			return nil, fmt.Errorf("scanning %s: %w", dev, err)
		}
		for _, m := range matches {
			st, err := os.Lstat(m)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return nil, fmt.Errorf("scanning %s: %w", dev, err)
			}
			sys, ok := st.Sys().(*syscall.Stat_t)
			if st.Mode().Type() != fs.ModeDevice|fs.ModeCharDevice || !ok {
				continue
			}
			rel, err := filepath.Rel(dev, m)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, discover.DeviceNode{Path: "/dev/" + filepath.ToSlash(rel), HostPath: m,
				Major: unix.Major(uint64(sys.Rdev)), Minor: unix.Minor(uint64(sys.Rdev)),
				Mode: uint32(st.Mode().Perm()), UID: sys.Uid, GID: sys.Gid})
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Path < nodes[j].Path })
	return nodes, nil
}

// LinkResult is the outcome for one /dev/char symlink.
type LinkResult struct {
	Node   discover.DeviceNode
	Link   string // absolute path of the link
	Target string // what it points to (relative when under the same root)
	Status Status
	Detail string
}

// CreateCharSymlinks makes charDir/<major>:<minor> a symlink to each node
// (its Path under devRoot), relative like udev's (/dev/char/195:0 ->
// ../nvidia0). A link already pointing at the node, or at another path
// that is the same device, is kept; any other entry is reported in a
// *MismatchError after every link was handled.
func CreateCharSymlinks(devRoot, charDir string, nodes []discover.DeviceNode, dryRun bool) ([]LinkResult, error) {
	dev := devDir(devRoot)
	var results []LinkResult
	var bad []Result
	for _, n := range nodes {
		rel, err := devRel(n)
		if err != nil {
			return results, err
		}
		target := filepath.Join(dev, rel)
		link := filepath.Join(charDir, n.ID())
		if rel, err := filepath.Rel(charDir, target); err == nil {
			target = rel
		}
		r := LinkResult{Node: n, Link: link, Target: target}
		st, err := os.Lstat(link)
		switch {
		case err == nil:
			r.Status, r.Detail = checkLink(link, st, target, n)
		case !errors.Is(err, fs.ErrNotExist):
			return results, fmt.Errorf("checking %s: %w", link, err)
		case dryRun:
			r.Status = WouldCreate
		default:
			if err := os.MkdirAll(charDir, 0o755); err != nil {
				return results, fmt.Errorf("creating %s: %w", charDir, err)
			}
			if err := os.Symlink(target, link); err != nil {
				return results, fmt.Errorf("symlink %s -> %s: %w", link, target, err)
			}
			r.Status = Created
		}
		results = append(results, r)
		if r.Status == Mismatch {
			bad = append(bad, Result{Node: n, Path: link, Status: Mismatch, Detail: r.Detail})
		}
	}
	if len(bad) > 0 {
		return results, &MismatchError{Results: bad}
	}
	return results, nil
}

func checkLink(link string, st fs.FileInfo, target string, n discover.DeviceNode) (Status, string) {
	if st.Mode()&fs.ModeSymlink == 0 {
		return Mismatch, fmt.Sprintf("is %s, want a symbolic link to %s", describeType(st.Mode()), target)
	}
	cur, err := os.Readlink(link)
	if err != nil {
		return Mismatch, err.Error()
	}
	if cur == target {
		return Exists, ""
	}
	// Another name for the same device (udev may link /dev/char/195:0 to
	// an alias) is fine.
	var sys unix.Stat_t
	if err := unix.Stat(link, &sys); err == nil && sys.Mode&unix.S_IFMT == unix.S_IFCHR && uint64(sys.Rdev) == n.Dev() {
		return Exists, "points to " + cur
	}
	return Mismatch, fmt.Sprintf("points to %s, want %s", cur, target)
}
