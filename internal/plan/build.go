package plan

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/ldcache"
)

// Target says where driver files land in the container. Libraries go to
// LibDir (32-bit ones to Lib32Dir) and binaries to BinDir, so that the
// image's own loader and PATH find them whatever the host layout is. An empty
// LibDir or Lib32Dir keeps each library at its driver-root path (what a CDI
// spec does, since it is written before any image is known).
type Target struct {
	LibDir   string
	Lib32Dir string
	BinDir   string
}

// DebianTarget is the layout of Debian-family images.
func DebianTarget() Target {
	return Target{LibDir: "/usr/lib/x86_64-linux-gnu", Lib32Dir: "/usr/lib/i386-linux-gnu", BinDir: "/usr/bin"}
}

// MIGSelection is a selected MIG device with its parent GPU.
type MIGSelection struct {
	Parent discover.GPU
	Device discover.MIGDevice
}

// Options is what the container asked for, resolved against the driver.
type Options struct {
	// Caps are the driver capabilities (NVIDIA_DRIVER_CAPABILITIES).
	Caps caps.Set
	// GPUs are the selected full GPUs (parents of selected MIG devices
	// included); an empty list injects no GPU (the "none" request).
	GPUs []discover.GPU
	// MIG are the selected MIG devices.
	MIG []MIGSelection
	// MIGConfig and MIGMonitor expose the global MIG config / monitor
	// capabilities ("all" requests; privileged containers only).
	MIGConfig  bool
	MIGMonitor bool
	// IMEXChannels are the IMEX channel numbers to inject.
	IMEXChannels []int

	NoPersistenced  bool
	NoFabricManager bool
	NoGSPFirmware   bool

	Target Target
}

// ErrMissingDevice is returned when a selected device has no node.
var ErrMissingDevice = errors.New("device node missing")

// Build computes the plan for one container from the driver's discovery
// result and the container's resolved request.
func Build(d *discover.Driver, o Options) (*Plan, error) {
	if d == nil {
		return nil, errors.New("build injection plan: no driver discovery result")
	}
	p := &Plan{}

	// Device nodes: the control nodes the capabilities select, then the
	// selected GPUs and their MIG capabilities.
	for _, n := range d.ControlNodesFor(o.Caps) {
		p.addDevice(n)
	}
	for _, g := range o.GPUs {
		if g.Node.Path == "" {
			return nil, fmt.Errorf("GPU %d (%s): /dev/nvidia%d: %w", g.Index, g.UUID, g.Minor, ErrMissingDevice)
		}
		p.addDevice(g.Node)
	}
	for _, m := range o.MIG {
		for _, n := range []discover.DeviceNode{m.Device.GIAccess, m.Device.CIAccess} {
			if n.Path == "" {
				return nil, fmt.Errorf("MIG device %s on GPU %d: capability node: %w", m.Device.UUID, m.Parent.Index, ErrMissingDevice)
			}
			p.addDevice(n)
		}
	}
	if o.MIGConfig || o.MIGMonitor {
		for _, n := range d.CapsNodes {
			p.addDevice(n)
		}
	}
	for _, ch := range o.IMEXChannels {
		name := fmt.Sprintf("channel%d", ch)
		i := slices.IndexFunc(d.IMEXChannels, func(n discover.DeviceNode) bool { return path.Base(n.Path) == name })
		if i < 0 {
			return nil, fmt.Errorf("IMEX channel %d: /dev/nvidia-caps-imex-channels/%s: %w", ch, name, ErrMissingDevice)
		}
		p.addDevice(d.IMEXChannels[i])
	}

	// Driver files.
	ro := []string{OptRO, OptNoSuid, OptNoDev, OptRBind, OptRPrivate}
	var libDirs []string
	injected := map[string]bool{} // container paths already mounted
	for _, f := range d.LibrariesFor(o.Caps) {
		dir := o.Target.LibDir
		if f.Compat32 {
			dir = o.Target.Lib32Dir
		}
		if dir == "" {
			dir = path.Dir(f.Path)
		}
		dst := path.Join(dir, path.Base(f.Path))
		if injected[dst] {
			continue
		}
		injected[dst] = true
		m := Mount{Source: f.HostPath, Destination: dst, Kind: KindFile, Options: ro}
		if f.CacheFlags != 0 {
			m.Library = &ldcache.Library{SONAME: f.SONAME, Flags: f.CacheFlags}
		}
		p.Mounts = append(p.Mounts, m)
		if !slices.Contains(libDirs, dir) {
			libDirs = append(libDirs, dir)
		}
		if f.SONAME != "" && f.SONAME != path.Base(f.Path) {
			p.addSymlink(path.Join(dir, f.SONAME), path.Base(f.Path))
		}
		for link, target := range devLinks(path.Base(f.Path), f.SONAME) {
			p.addSymlink(path.Join(dir, link), target)
		}
	}
	p.LdconfigDirs = libDirs
	for _, f := range d.BinariesFor(o.Caps) {
		dst := f.Path
		if o.Target.BinDir != "" {
			dst = path.Join(o.Target.BinDir, f.Name)
		}
		p.Mounts = append(p.Mounts, Mount{Source: f.HostPath, Destination: dst, Kind: KindFile, Options: ro})
	}
	for _, f := range d.IPCsFor(o.Caps) {
		switch {
		case o.NoPersistenced && strings.Contains(f.Name, "persistenced"),
			o.NoFabricManager && strings.Contains(f.Name, "fabricmanager"):
			continue
		}
		kind := KindSocket
		if f.Dir {
			kind = KindDir
		}
		p.Mounts = append(p.Mounts, Mount{Source: f.HostPath, Destination: f.Path, Kind: kind,
			Options: []string{OptNoSuid, OptNoDev, OptNoExec, OptRBind, OptRPrivate}})
	}
	if !o.NoGSPFirmware {
		for _, f := range d.Firmware {
			p.Mounts = append(p.Mounts, Mount{Source: f.HostPath, Destination: f.Path, Kind: KindFile, Options: ro})
		}
	}

	// The /proc/driver/nvidia view: only the selected GPUs' directories.
	if len(d.ProcFiles) > 0 {
		v := &ProcView{HostDir: path.Dir(d.ProcFiles[0])}
		for _, f := range d.ProcFiles {
			v.Files = append(v.Files, path.Base(f))
		}
		for _, g := range o.GPUs {
			v.GPUDirs = append(v.GPUDirs, g.BusID)
		}
		for _, m := range o.MIG {
			for _, f := range []string{m.Device.GIAccessProc, m.Device.CIAccessProc} {
				if rel, ok := procRel(f); ok {
					v.Expose = append(v.Expose, rel)
				}
			}
		}
		if o.MIGConfig {
			v.Expose = append(v.Expose, "capabilities/mig/config")
		}
		if o.MIGMonitor {
			v.Expose = append(v.Expose, "capabilities/mig/monitor")
		}
		p.Proc = v
	}
	return p, nil
}

func (p *Plan) addDevice(n discover.DeviceNode) {
	if slices.ContainsFunc(p.Devices, func(d Device) bool { return d.Path == n.Path }) {
		return
	}
	mode := n.Mode & 0o777
	if mode == 0 {
		mode = 0o666
	}
	p.Devices = append(p.Devices, Device{Path: n.Path, HostPath: n.HostPath, Major: n.Major, Minor: n.Minor,
		FileMode: mode, UID: n.UID, GID: n.GID})
}

func (p *Plan) addSymlink(link, target string) {
	if slices.ContainsFunc(p.Symlinks, func(s Symlink) bool { return s.Link == link }) {
		return
	}
	p.Symlinks = append(p.Symlinks, Symlink{Link: link, Target: target})
}

// devLinks returns the development links NVIDIA's CLI creates next to the
// libraries: libcuda.so -> libcuda.so.1, libGLX_indirect.so.0 ->
// libGLX_nvidia.so.<version>, libnvidia-opticalflow.so ->
// libnvidia-opticalflow.so.1.
func devLinks(base, soname string) map[string]string {
	switch {
	case strings.HasPrefix(base, "libcuda.so.") && soname != "":
		return map[string]string{"libcuda.so": soname}
	case strings.HasPrefix(base, "libGLX_nvidia.so."):
		return map[string]string{"libGLX_indirect.so.0": base}
	case strings.HasPrefix(base, "libnvidia-opticalflow.so.") && soname != "":
		return map[string]string{"libnvidia-opticalflow.so": soname}
	}
	return nil
}

// procRel returns p relative to /proc/driver/nvidia when it lies below it.
func procRel(p string) (string, bool) {
	const dir = "/proc/driver/nvidia/"
	i := strings.Index(p, dir)
	if i < 0 {
		return "", false
	}
	return p[i+len(dir):], true
}
