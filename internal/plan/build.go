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
	"github.com/nctk/nctk/internal/selector"
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

// Options is what the container asked for, resolved against the driver.
type Options struct {
	// Caps are the driver capabilities (NVIDIA_DRIVER_CAPABILITIES).
	Caps caps.Set
	// GPUs are the selected full GPUs (parents of selected MIG devices
	// included); an empty list injects no GPU (the "none" request).
	GPUs []discover.GPU
	// MIG are the selected MIG devices.
	MIG []selector.SelectedMIG
	// MIGConfig and MIGMonitor expose the MIG config / monitor capability
	// and the MIG capabilities of the selected MIG-capable GPUs ("all"
	// requests; the runtime allows them to privileged containers only),
	// instead of the selected MIG devices' access capabilities.
	MIGConfig  bool
	MIGMonitor bool
	// AllDevices says the devices were selected by "all": MIG then holds
	// every MIG device, which MIGConfig and MIGMonitor allow (with
	// specific MIG devices they are an error).
	AllDevices bool
	// IMEXChannels are the IMEX channel numbers to inject.
	IMEXChannels []int
	// Features are the feature-gated device families to inject: the
	// nodes and files discovery found for them (discovered with
	// discover.Options.Features naming them).
	Features []discover.Feature
	// NoAdditionalGIDs leaves Plan.AdditionalGIDs empty (NVIDIA's
	// no-additional-gids-for-device-nodes).
	NoAdditionalGIDs bool

	NoPersistenced  bool
	NoFabricManager bool
	// NoIPC leaves out every IPC endpoint: the daemon sockets and the MPS
	// pipe directory.
	NoIPC         bool
	NoGSPFirmware bool
	// NoGraphics leaves out what graphics and display bring besides the
	// libraries: the graphics files, the GPUs' DRM nodes and links, the
	// GBM link (NVIDIA's management spec has none of them).
	NoGraphics bool

	Target Target
}

// Select returns o with the devices of sel: its GPUs (parents of its MIG
// devices included), its MIG devices, and whether it was "all". Every
// command that builds a plan from a device list (planner.Run for the
// runtime, configure and cdi generate; nvidia-container-cli list) sets the
// devices through it.
func (o Options) Select(sel selector.Selection) Options {
	o.GPUs = sel.GPUs
	o.MIG = sel.MIG
	o.AllDevices = sel.All
	return o
}

// ErrMissingDevice matches a *MissingDeviceError (errors.Is).
var ErrMissingDevice = errors.New("device node missing")

// MissingDeviceError reports the device nodes a plan needs that the host
// lacks. Build returns it before anything else is computed, whichever
// command asked (runtime, configure, list, cdi generate), so that a
// container never starts without a node it was promised. It matches
// ErrMissingDevice.
type MissingDeviceError struct {
	// Errs has one error per missing node, each naming the node and how to
	// create it: *discover.DeviceNodeError values (joined) for nvidiactl
	// and the GPUs' nodes, plain errors for MIG capability and IMEX
	// channel nodes.
	Errs []error
}

func (e *MissingDeviceError) Error() string {
	var msgs []string
	for _, err := range e.Errs {
		msgs = append(msgs, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the errors of the missing nodes.
func (e *MissingDeviceError) Unwrap() []error { return e.Errs }

// Is reports whether target is ErrMissingDevice.
func (e *MissingDeviceError) Is(target error) bool { return target == ErrMissingDevice }

// MIGSelectionError reports MIG configuration or monitoring asked for
// together with specific MIG devices: as in NVIDIA's CLI, they go only
// with no MIG device or with every device ("all").
type MIGSelectionError struct {
	// Option is what was asked for: GrantMIGConfig or GrantMIGMonitor
	// (the nvidia-container-cli option and its error phase).
	Option string
}

func (e *MIGSelectionError) Error() string {
	return fmt.Sprintf("cannot enable %s with specific MIG devices selected", e.Option)
}

// procDir is where the driver's proc entries are, as Device.Proc and
// ProcView.Expose entries are relative to it.
const procDir = "/proc/driver/nvidia/"

// Build computes the plan for one container from the driver's discovery
// result and the container's resolved request. It fails with a
// *MIGSelectionError for MIG configuration or monitoring with specific MIG
// devices, and with a *MissingDeviceError when a node the container gets
// does not exist on the host.
//
// Device nodes come in this order: the driver-wide nodes the capabilities
// select, the selected GPUs, the selected MIG devices' access capabilities
// (left out with MIG configuration or monitoring, which expose whole
// GPUs' MIG capabilities instead), IMEX channels, the nodes of the asked
// features (Options.Features, each feature's nodes by path), then the MIG config and
// monitor capabilities with the MIG capabilities of the selected
// MIG-capable GPUs (none when no selected GPU is MIG-capable).
//
// Unless o.NoAdditionalGIDs, the plan's AdditionalGIDs are the groups of
// its nodes that a process outside them could not open (see
// additionalGIDs).
func Build(d *discover.Driver, o Options) (*Plan, error) {
	if d == nil {
		return nil, errors.New("build injection plan: no driver discovery result")
	}
	if len(o.MIG) > 0 && !o.AllDevices {
		if o.MIGConfig {
			return nil, &MIGSelectionError{Option: GrantMIGConfig}
		}
		if o.MIGMonitor {
			return nil, &MIGSelectionError{Option: GrantMIGMonitor}
		}
	}
	p := &Plan{DriverVersion: d.Version}
	var missing []error
	if err := d.CheckDevices(o.GPUs); err != nil {
		missing = append(missing, err)
	}
	var expose []string
	exposeRel := func(rel string) {
		if rel != "" && !slices.Contains(expose, rel) {
			expose = append(expose, rel)
		}
	}

	for _, n := range d.ControlNodesFor(o.Caps) {
		p.addDevice(n, DeviceDriver, "", "")
	}
	graphics := (o.Caps.Has(caps.Graphics) || o.Caps.Has(caps.Display)) && !o.NoGraphics
	for _, g := range o.GPUs {
		if g.Node.Path != "" {
			p.addDevice(g.Node, DeviceGPU, "", "")
		}
		// A GPU here as the parent of selected MIG devices gives them no
		// DRM node: NVIDIA gives a MIG device the GPU's DRM nodes only for
		// graphics-capable (+gfx) MIG profiles.
		if !graphics || slices.ContainsFunc(o.MIG, func(m selector.SelectedMIG) bool { return m.Parent.Index == g.Index }) {
			continue
		}
		// The GPU's DRM nodes and their by-path links (NVIDIA's graphics
		// modifier and spec generator give them with the GPU).
		for _, n := range g.DRMNodes {
			p.addDevice(n, DeviceGPU, "", "")
		}
		for _, l := range g.DRMLinks {
			if !slices.ContainsFunc(p.DevSymlinks, func(s Symlink) bool { return s.Link == l.Path }) {
				p.DevSymlinks = append(p.DevSymlinks, Symlink{Link: l.Path, Target: l.Target})
			}
		}
	}
	migAdmin := o.MIGConfig || o.MIGMonitor
	for _, m := range o.MIG {
		if migAdmin {
			break
		}
		grant := m.MIG.UUID
		if grant == "" {
			grant = fmt.Sprintf("%d:%d", m.Parent.Index, m.MIG.Index)
		}
		for _, c := range []struct {
			node discover.DeviceNode
			proc string
		}{{m.MIG.GIAccess, m.MIG.GIAccessProc}, {m.MIG.CIAccess, m.MIG.CIAccessProc}} {
			rel, _ := procRel(c.proc)
			if c.node.Path == "" {
				missing = append(missing, fmt.Errorf("missing device node for MIG device %s of GPU %d: no /dev/nvidia-caps node for %s "+
					"(create the MIG capability nodes: nvidia-ctk system create-device-nodes)", grant, m.Parent.Index, c.proc))
				continue
			}
			p.addDevice(c.node, DeviceMIG, grant, rel)
			exposeRel(rel)
		}
	}
	for _, ch := range o.IMEXChannels {
		name := fmt.Sprintf("channel%d", ch)
		i := slices.IndexFunc(d.IMEXChannels, func(n discover.DeviceNode) bool { return path.Base(n.Path) == name })
		if i < 0 {
			missing = append(missing, fmt.Errorf("missing device /dev/nvidia-caps-imex-channels/%s (IMEX channel %d: "+
				"the host has no node for it; create the channel or ask for one that exists)", name, ch))
			continue
		}
		p.addDevice(d.IMEXChannels[i], DeviceIMEX, "", "")
	}
	for _, f := range o.Features {
		for _, n := range d.FeatureDevicesFor(f).Nodes {
			p.addDevice(n, DeviceFeature, string(f), "")
		}
	}
	var migGPUs []discover.GPU
	if migAdmin {
		migGPUs = slices.DeleteFunc(slices.Clone(o.GPUs), func(g discover.GPU) bool { return !g.MIGCapable })
	}
	for _, a := range []struct {
		on    bool
		grant string
		node  discover.DeviceNode
	}{{o.MIGConfig, GrantMIGConfig, d.MIGConfig}, {o.MIGMonitor, GrantMIGMonitor, d.MIGMonitor}} {
		if !a.on || len(migGPUs) == 0 {
			continue
		}
		rel := "capabilities/mig/" + strings.TrimPrefix(a.grant, "mig-")
		if a.node.Path == "" {
			missing = append(missing, fmt.Errorf("missing device node for the MIG %s capability (%s%s names none in /dev/nvidia-caps; "+
				"create the MIG capability nodes: nvidia-ctk system create-device-nodes)", strings.TrimPrefix(a.grant, "mig-"), procDir, rel))
		} else {
			p.addDevice(a.node, DeviceMIGAdmin, a.grant, rel)
		}
		exposeRel(rel)
		for _, g := range migGPUs {
			rel, _ := procRel(g.MIGCapsDir)
			exposeRel(rel)
			for _, n := range g.MIGCapNodes {
				p.addDevice(n, DeviceMIGAdmin, g.UUID, rel)
			}
		}
	}
	if len(missing) > 0 {
		return nil, &MissingDeviceError{Errs: missing}
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
		m := Mount{Source: f.HostPath, Destination: dst, Kind: KindFile, Options: ro, Class: MountLibrary}
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
		if f.DevLink != "" {
			target := f.SONAME
			if target == "" {
				target = path.Base(f.Path)
			}
			if target != f.DevLink {
				p.addSymlink(path.Join(dir, f.DevLink), target)
			}
		}
	}
	// Graphics files: libraries go where the other libraries go, the
	// rest to their own paths (Vulkan's below /etc).
	for _, f := range d.GraphicsFor(o.Caps) {
		if o.NoGraphics {
			break
		}
		dst := f.Path
		if f.Dest != "" {
			dst = f.Dest
		}
		if f.Library && o.Target.LibDir != "" {
			dst = path.Join(o.Target.LibDir, path.Base(f.Path))
		}
		if injected[dst] {
			continue
		}
		injected[dst] = true
		m := Mount{Source: f.HostPath, Destination: dst, Kind: KindFile, Options: ro, Class: MountGraphics}
		if f.Library && f.CacheFlags != 0 {
			m.Library = &ldcache.Library{SONAME: f.SONAME, Flags: f.CacheFlags}
		}
		p.Mounts = append(p.Mounts, m)
		dir, base := path.Split(dst)
		dir = path.Clean(dir)
		if f.Library {
			if !slices.Contains(libDirs, dir) {
				libDirs = append(libDirs, dir)
			}
			if f.SONAME != "" && f.SONAME != base {
				p.addSymlink(path.Join(dir, f.SONAME), base)
			}
		}
		for link, target := range graphicsLinks(base, d.LibraryVersion) {
			p.addSymlink(path.Join(dir, link), target)
		}
	}
	if graphics {
		// gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1 next to
		// the allocator library, as NVIDIA's graphics discoverer makes it.
		for _, m := range p.Mounts {
			if m.Class == MountLibrary && path.Base(m.Destination) == "libnvidia-allocator.so."+d.LibraryVersion {
				p.addSymlink(path.Join(path.Dir(m.Destination), "gbm", "nvidia-drm_gbm.so"), "../libnvidia-allocator.so.1")
			}
		}
	}
	p.LdconfigDirs = libDirs
	for _, f := range d.BinariesFor(o.Caps) {
		dst := f.Path
		if o.Target.BinDir != "" {
			dst = path.Join(o.Target.BinDir, f.Name)
		}
		p.Mounts = append(p.Mounts, Mount{Source: f.HostPath, Destination: dst, Kind: KindFile, Options: ro, Class: MountBinary})
	}
	for _, f := range d.IPCsFor(o.Caps) {
		switch {
		case o.NoIPC,
			o.NoPersistenced && strings.Contains(f.Name, "persistenced"),
			o.NoFabricManager && strings.Contains(f.Name, "fabricmanager"):
			continue
		}
		kind := KindSocket
		if f.Dir {
			kind = KindDir
		}
		p.Mounts = append(p.Mounts, Mount{Source: f.HostPath, Destination: f.Path, Kind: kind,
			Options: []string{OptNoSuid, OptNoDev, OptNoExec, OptRBind, OptRPrivate}, Class: MountIPC})
	}
	if !o.NoGSPFirmware {
		for _, f := range d.Firmware {
			p.Mounts = append(p.Mounts, Mount{Source: f.HostPath, Destination: f.Path, Kind: KindFile, Options: ro, Class: MountFirmware})
		}
	}

	for _, f := range o.Features {
		for _, file := range d.FeatureDevicesFor(f).Files {
			kind := KindFile
			if file.Dir {
				kind = KindDir
			}
			p.Mounts = append(p.Mounts, Mount{Source: file.HostPath, Destination: file.Path, Kind: kind, Options: ro, Class: MountFeature})
		}
	}
	if !o.NoAdditionalGIDs {
		p.AdditionalGIDs = additionalGIDs(p.Devices)
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
		v.Expose = expose
		p.Proc = v
	}
	return p, nil
}

// additionalGIDs returns the groups a process needs to open devs, by
// NVIDIA's rule: the group of each node that is not both world-readable
// and world-writable, unless that group is root's; each once.
func additionalGIDs(devs []Device) []uint32 {
	var out []uint32
	for _, d := range devs {
		if d.GID == 0 || d.FileMode&0o006 == 0o006 || slices.Contains(out, d.GID) {
			continue
		}
		out = append(out, d.GID)
	}
	return out
}

func (p *Plan) addDevice(n discover.DeviceNode, class DeviceClass, grant, proc string) {
	if slices.ContainsFunc(p.Devices, func(d Device) bool { return d.Path == n.Path }) {
		return
	}
	mode := n.Mode & 0o777
	if mode == 0 {
		mode = 0o666
	}
	p.Devices = append(p.Devices, Device{Path: n.Path, HostPath: n.HostPath, Major: n.Major, Minor: n.Minor,
		FileMode: mode, UID: n.UID, GID: n.GID, Class: class, Grant: grant, Proc: proc})
}

func (p *Plan) addSymlink(link, target string) {
	if slices.ContainsFunc(p.Symlinks, func(s Symlink) bool { return s.Link == link }) {
		return
	}
	p.Symlinks = append(p.Symlinks, Symlink{Link: link, Target: target})
}

// devLinks returns the development links NVIDIA's CLI creates next to the
// libraries whatever the host has: libcuda.so -> libcuda.so.1,
// libGLX_indirect.so.0 -> libGLX_nvidia.so.<version>,
// libnvidia-opticalflow.so -> libnvidia-opticalflow.so.1. Build adds, for
// every library, the development link the host has next to it
// (discover.File.DevLink), pointing to the SONAME, as NVIDIA's spec
// generator does.
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

// graphicsLinks returns the development links NVIDIA's graphics discoverer
// makes next to a graphics library whose name ends in the driver version:
// libnvidia-vulkan-producer.so and libglxserver_nvidia.so, pointing to the
// file.
func graphicsLinks(base, version string) map[string]string {
	for _, lib := range []string{"libnvidia-vulkan-producer.so", "libglxserver_nvidia.so"} {
		if version != "" && base == lib+"."+version {
			return map[string]string{lib: base}
		}
	}
	return nil
}

// procRel returns p relative to /proc/driver/nvidia when it lies below it.
func procRel(p string) (string, bool) {
	i := strings.Index(p, procDir)
	if i < 0 {
		return "", false
	}
	return p[i+len(procDir):], true
}
