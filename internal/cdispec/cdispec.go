// Package cdispec renders the driver as a CDI (Container Device Interface)
// spec, the file container engines (Podman, Docker 25+, containerd 1.7+,
// CRI-O, Kubernetes device plugins) read from /etc/cdi and /var/run/cdi to
// give a container devices by name (nvidia.com/gpu=0), and resolves CDI
// device names for the runtime's CDI mode: ResolveCached returns the container
// edits the spec files give them, PlanFor a plan holding those edits, which
// ocispec.Apply writes with the CDI library's editor.
//
// A spec is built from the same plans as every other path: Render builds
// them with plan.Build from a discovery result and a device selection
// (which Generate gets from planner.Run). The plan for a container with no
// GPU gives the spec-level edits (control nodes, driver libraries at their
// driver-root paths, binaries at /usr/bin, IPC sockets, firmware, and the
// createContainer hook of internal/ocispec that creates the library links
// and updates the ld.so.cache: by default one nvidia-cdi-hook call chaining
// the steps, see Options.SeparateHooks); the plan for one GPU, minus the former,
// gives that device's edits. The spec stays within CDI 0.5.0 (the newest version
// Podman 4.3 reads): no annotations, no additionalGids; its cdiVersion is the
// lowest its content needs, as the CDI library computes it.
//
// Besides that GPU spec (ModeNVML), Generate renders NVIDIA's other modes:
// the management spec (RenderManagement: every device node in one "all"
// device), the IMEX channel spec (RenderIMEX) and a feature's spec
// (RenderFeature: nvidia-fs, InfiniBand, gdrdrv, NVSwitch nodes).
// TransformRoot moves a spec's host or container paths to another root
// (nvidia-ctk cdi transform root).
//
// The /proc/driver/nvidia view the runtime builds (a tmpfs holding the
// selected GPUs' directories only) is not part of a CDI spec: an engine
// applies the spec-level hooks once and each device's hooks once per device,
// so per-device views could not be merged into one. Like NVIDIA's, the spec
// instead runs disable-device-node-modification once, so that the driver
// library in the container does not try to create device nodes.
package cdispec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/planner"
	"github.com/nctk/nctk/internal/selector"
)

// Defaults of a generated spec.
const (
	DefaultVendor = "nvidia.com"
	DefaultClass  = "gpu"
	// DefaultHookPath is the nvidia-cdi-hook used when none is found on
	// PATH.
	DefaultHookPath = "/usr/bin/nvidia-cdi-hook"
	// BinDir is where driver binaries land in the container.
	BinDir = "/usr/bin"
	// AllDevice is the name of the device that holds every other one.
	AllDevice = "all"
	// VoidEnv keeps NVIDIA's legacy prestart hook (and nctk's runtime)
	// from injecting the driver a second time into a container that got
	// its devices through CDI.
	VoidEnv = "NVIDIA_VISIBLE_DEVICES=void"
	// MaxCompatVersion is the newest cdiVersion Podman 4.3 (CDI library
	// v0.5) reads; Render never needs more.
	MaxCompatVersion = "0.5.0"
)

// NameStrategy says how devices are named.
type NameStrategy string

// Device naming strategies.
const (
	// NameIndex names devices by index: 0, 1:0 (GPU 1, MIG device 0).
	NameIndex NameStrategy = "index"
	// NameUUID names devices by UUID: GPU-…, MIG-….
	NameUUID NameStrategy = "uuid"
	// NameTypeIndex names devices by type and index: gpu0, mig1:0.
	NameTypeIndex NameStrategy = "type-index"
)

// DefaultNameStrategies are index and uuid, as in nvidia-ctk.
func DefaultNameStrategies() []NameStrategy { return []NameStrategy{NameIndex, NameUUID} }

// ParseNameStrategy reads a --device-name-strategy value.
func ParseNameStrategy(s string) (NameStrategy, error) {
	switch n := NameStrategy(strings.TrimSpace(s)); n {
	case NameIndex, NameUUID, NameTypeIndex:
		return n, nil
	}
	return "", fmt.Errorf("device name strategy %q: want index, uuid or type-index", s)
}

// Options configures a generated spec.
type Options struct {
	// Vendor and Class make the spec's kind, vendor/class; empty means
	// nvidia.com and gpu.
	Vendor, Class string
	// NameStrategies name each device once per strategy; nil means
	// DefaultNameStrategies.
	NameStrategies []NameStrategy
	// NoAllDevice leaves out the "all" device.
	NoAllDevice bool
	// Caps selects the driver files; nil or empty means every capability.
	Caps caps.Set
	// NoProbe keeps Generate from probing the driver (loading its NVML in
	// a child process) for MIG device UUIDs; MIG devices without one are
	// then named by index only.
	NoProbe bool
	// Hook says how the createContainer hooks run nvidia-cdi-hook: its
	// absolute host path (empty: DefaultHookPath) and the ldconfig
	// update-ldcache runs. A hook path whose base name is nvidia-ctk runs
	// the hooks as `nvidia-ctk hook …`. Its InProcessLdcache is ignored:
	// SeparateHooks decides.
	Hook ocispec.HookConfig
	// SeparateHooks writes NVIDIA's hook layout: one createContainer hook
	// per step (create-symlinks, update-ldcache --folder running the host
	// ldconfig, disable-device-node-modification), which any
	// nvidia-cdi-hook runs. Without it the spec has one createContainer
	// hook that runs the steps in that order in one nvidia-cdi-hook
	// process (the ";" chain) and passes update-ldcache the libraries
	// (--lib), so that ld.so.cache is written in-process: nctk's
	// nvidia-cdi-hook only, and nctk's runtime does that hook's work
	// itself before the container starts.
	SeparateHooks bool
	// Mode is what the spec describes; "" means ModeNVML.
	Mode Mode
	// DisabledHooks names hooks (NVIDIA's names: create-symlinks,
	// update-ldcache, disable-device-node-modification, …) the spec leaves
	// out; AllHooks leaves out every hook.
	DisabledHooks []string
	// Chmod writes NVIDIA's chmod hook (--enable-hook chmod; off by
	// default, as in NVIDIA 1.20): for each device with nodes in /dev/dri
	// or /dev/nvidia-caps, those directories made 0755 in the container
	// (a workaround for runtimes that create them without search
	// permission for others).
	Chmod bool
	// NoIPC leaves out the IPC sockets and the MPS directory (NVIDIA's
	// disable-ipc-discoverer feature flag).
	NoIPC bool
}

// HookNames returns the hooks nctk's specs can carry, by name.
func HookNames() []string {
	return []string{hookargs.NameCreateSymlinks, hookargs.NameEnableCudaCompat, hookargs.NameUpdateLdcache, hookargs.NameDisableDeviceNodeModification,
		hookargs.NameUpdateApplicationProfile, hookargs.NameChmod}
}

// AllHooks in Options.DisabledHooks leaves out every hook.
const AllHooks = "all"

// CheckHookName reports whether name is a hook NVIDIA's or nctk's
// nvidia-cdi-hook has (the names --disable-hooks and --enable-hooks take).
func CheckHookName(name string) error {
	if slices.Contains(hookargs.Names(), name) {
		return nil
	}
	return fmt.Errorf("unknown hook %q: want one of %s", name, strings.Join(hookargs.Names(), ", "))
}

// Generate discovers the driver described by job.Driver, selects the devices
// in job.Request.Devices (nil means all) and renders the spec. The
// capabilities and job.Target are taken from o; requirements are not
// checked.
//
// Discovery reads files only, except on a host with MIG devices when
// devices are named by UUID: MIG device UUIDs exist only in NVML, so the
// driver is then probed (job.Driver.Probe), which costs a child process.
//
// A mode other than nvml (o.Mode) discovers the driver once, with the
// mode's feature if it names one, and renders RenderManagement,
// RenderIMEX (job.Request.Devices selecting channels) or RenderFeature.
func Generate(ctx context.Context, job planner.Job, o Options) (*cdi.Spec, error) {
	if o.Mode != "" && o.Mode != ModeNVML {
		return generateMode(ctx, job, o)
	}
	if len(job.Request.Devices) == 0 {
		job.Request.Devices = []string{AllDevice}
	}
	job.Request.Caps = capsOf(o)
	job.Target = plan.Target{BinDir: BinDir}
	job.Request.Requirements = nil
	res, err := planner.Run(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("generate CDI spec: %w", err)
	}
	if !job.Driver.Probe && !o.NoProbe && needsMIGUUIDs(res.Selection, o) {
		job.Driver.Probe = true
		if res, err = planner.Run(ctx, job); err != nil {
			return nil, fmt.Errorf("generate CDI spec: %w", err)
		}
	}
	return Render(res.Driver, res.Selection, o)
}

// needsMIGUUIDs reports whether a MIG device is selected, has no UUID and
// is to be named by UUID.
func needsMIGUUIDs(sel selector.Selection, o Options) bool {
	strategies := o.NameStrategies
	if len(strategies) == 0 {
		strategies = DefaultNameStrategies()
	}
	if !slices.Contains(strategies, NameUUID) {
		return false
	}
	return slices.ContainsFunc(sel.MIG, func(m selector.SelectedMIG) bool { return m.MIG.UUID == "" })
}

// baseOptions are the plan options every device's plan starts from.
func baseOptions(o Options) plan.Options {
	return plan.Options{Caps: capsOf(o), Target: plan.Target{BinDir: BinDir}, NoIPC: o.NoIPC}
}

func capsOf(o Options) caps.Set {
	if len(o.Caps) == 0 {
		return caps.Full()
	}
	return o.Caps
}

// device is one GPU or MIG device of the spec before naming.
type device struct {
	names []string
	edits cdi.ContainerEdits
}

// Render builds the spec for the selected devices of a discovered driver.
// Devices come in GPU index order (each GPU, then its MIG devices; a GPU
// in MIG mode is offered through its MIG devices only), each under one
// name per strategy, then "all".
func Render(d *discover.Driver, sel selector.Selection, o Options) (*cdi.Spec, error) {
	if d == nil {
		return nil, errors.New("render CDI spec: no driver discovery result")
	}
	vendor, class := o.Vendor, o.Class
	if vendor == "" {
		vendor = DefaultVendor
	}
	if class == "" {
		class = DefaultClass
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("render CDI spec: vendor %q: %w", vendor, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return nil, fmt.Errorf("render CDI spec: class %q: %w", class, err)
	}
	strategies := o.NameStrategies
	if len(strategies) == 0 {
		strategies = DefaultNameStrategies()
	}
	for _, s := range strategies {
		if _, err := ParseNameStrategy(string(s)); err != nil {
			return nil, fmt.Errorf("render CDI spec: %w", err)
		}
	}
	hc, err := hookConfig(o)
	if err != nil {
		return nil, err
	}

	base := baseOptions(o)
	common, err := plan.Build(d, base)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}

	gpus := slices.Clone(sel.GPUs)
	slices.SortFunc(gpus, func(a, b discover.GPU) int { return a.Index - b.Index })
	migs := slices.Clone(sel.MIG)
	slices.SortFunc(migs, func(a, b selector.SelectedMIG) int {
		if a.Parent.Index != b.Parent.Index {
			return a.Parent.Index - b.Parent.Index
		}
		return a.MIG.Index - b.MIG.Index
	})

	var devices []device
	for _, g := range gpus {
		if !g.MIGEnabled {
			po := base
			po.GPUs = []discover.GPU{g}
			p, err := plan.Build(d, po)
			if err != nil {
				return nil, fmt.Errorf("render CDI spec: %w", err)
			}
			idx := strconv.Itoa(g.Index)
			devices = append(devices, device{
				names: deviceNames(strategies, idx, "gpu"+idx, g.UUID),
				edits: withDevHooks(deviceEdits(p, common), p, hc, o),
			})
		}
		for _, m := range migs {
			if m.Parent.Index != g.Index {
				continue
			}
			po := base
			po.GPUs = []discover.GPU{m.Parent}
			po.MIG = []selector.SelectedMIG{m}
			p, err := plan.Build(d, po)
			if err != nil {
				return nil, fmt.Errorf("render CDI spec: %w", err)
			}
			idx := fmt.Sprintf("%d:%d", g.Index, m.MIG.Index)
			devices = append(devices, device{
				names: deviceNames(strategies, idx, "mig"+idx, m.MIG.UUID),
				edits: withDevHooks(deviceEdits(p, common), p, hc, o),
			})
		}
	}
	if len(devices) == 0 {
		return nil, errors.New("render CDI spec: no device selected (a CDI spec needs at least one device)")
	}

	hc.InProcessLdcache = !o.SeparateHooks
	spec := &cdi.Spec{Kind: vendor + "/" + class, ContainerEdits: commonEdits(common, hc, !o.SeparateHooks, o.DisabledHooks)}
	seen := map[string]bool{}
	var all cdi.ContainerEdits
	for _, dev := range devices {
		for _, n := range dev.names {
			if seen[n] {
				continue
			}
			seen[n] = true
			spec.Devices = append(spec.Devices, cdi.Device{Name: n, ContainerEdits: cloneEdits(dev.edits)})
		}
		mergeEdits(&all, dev.edits)
	}
	if !o.NoAllDevice && !seen[AllDevice] {
		spec.Devices = append(spec.Devices, cdi.Device{Name: AllDevice, ContainerEdits: all})
	}
	return withVersion(spec)
}

// hookConfig is o.Hook with the default hook path.
func hookConfig(o Options) (ocispec.HookConfig, error) {
	hc := o.Hook
	if hc.Path == "" {
		hc.Path = DefaultHookPath
	}
	if !path.IsAbs(hc.Path) {
		return hc, fmt.Errorf("render CDI spec: nvidia-cdi-hook path %q: want an absolute path", hc.Path)
	}
	return hc, nil
}

// deviceNames returns a device's names under each strategy, leaving out
// names CDI does not allow (an old-style MIG UUID holds slashes).
func deviceNames(strategies []NameStrategy, index, typeIndex, uuid string) []string {
	var names []string
	for _, s := range strategies {
		var n string
		switch s {
		case NameIndex:
			n = index
		case NameTypeIndex:
			n = typeIndex
		case NameUUID:
			n = uuid
		}
		if n == "" || parser.ValidateDeviceName(n) != nil || slices.Contains(names, n) {
			continue
		}
		names = append(names, n)
	}
	return names
}

// commonEdits are the spec-level edits: everything a container with no GPU
// gets, the hooks but the disabled ones (chained into one with chain), and
// the environment.
func commonEdits(p *plan.Plan, hc ocispec.HookConfig, chain bool, disabled []string) cdi.ContainerEdits {
	e := cdi.ContainerEdits{Env: []string{VoidEnv}}
	if kv := p.LibcudaDirEnv(); kv != "" {
		e.Env = append(e.Env, kv)
	}
	for _, kv := range p.Env {
		if !slices.Contains(e.Env, kv) {
			e.Env = append(e.Env, kv)
		}
	}
	for _, dv := range p.Devices {
		e.DeviceNodes = append(e.DeviceNodes, deviceNode(dv))
	}
	for _, m := range p.Mounts {
		e.Mounts = append(e.Mounts, mount(m))
	}
	e.Hooks = hooks(p, hc, chain, disabled)
	return e
}

// hooks are the createContainer hooks ocispec.Hooks gives p (symlinks, the
// ld.so.cache update: what nvidia-container-runtime does in the rootfs
// itself) with enable-cuda-compat --host-driver-version between them when
// p injects libcuda (NVIDIA's order: the image's newer CUDA compat
// libraries are put first before the cache update, which keeps them
// first), in place of the /proc/driver/nvidia view
// disable-device-node-modification, and update-application-profile when p
// mounts graphics files, less those disabled names (all of them
// for AllHooks); with chain, merged into one call (ocispec.Chain) that runs
// them in that order.
func hooks(p *plan.Plan, hc ocispec.HookConfig, chain bool, disabled []string) []*cdi.Hook {
	q := *p
	q.Proc = nil
	hs := ocispec.Hooks(&q, hc)
	if p.DriverVersion != "" && p.InjectsLibcuda() {
		compat := ocispec.Hook{Path: hc.Path,
			Args: hookargs.Command(hookargs.EnableCudaCompat{HostDriverVersion: p.DriverVersion}), Env: hookargs.Env()}
		i := slices.IndexFunc(hs, func(h ocispec.Hook) bool { return len(h.Args) > 1 && h.Args[1] == hookargs.NameUpdateLdcache })
		if i < 0 {
			i = len(hs)
		}
		hs = slices.Insert(hs, i, compat)
	}
	if p.Proc != nil {
		hs = append(hs, ocispec.Hook{Path: hc.Path,
			Args: hookargs.Command(hookargs.DisableDeviceNodeModification{}), Env: hookargs.Env()})
	}
	// With graphics files, the driver application profile that limits
	// EGL and Vulkan to the container's GPUs (NVIDIA's spec-level hook).
	if slices.ContainsFunc(p.Mounts, func(m plan.Mount) bool { return m.Class == plan.MountGraphics }) {
		hs = append(hs, ocispec.Hook{Path: hc.Path,
			Args: hookargs.Command(hookargs.UpdateApplicationProfile{}), Env: hookargs.Env()})
	}
	hs = slices.DeleteFunc(hs, func(h ocispec.Hook) bool {
		return len(h.Args) > 1 && hookDisabled(disabled, h.Args[1])
	})
	if chain {
		hs = ocispec.Chain(hs)
	}
	out := make([]*cdi.Hook, 0, len(hs))
	for _, h := range hs {
		args := hookargs.CommandFor(hc.Path, h.Args)
		out = append(out, &cdi.Hook{HookName: "createContainer", Path: h.Path, Args: args, Env: slices.Clone(h.Env)})
	}
	return out
}

// hookDisabled reports whether the hook name is left out of the spec
// (Options.DisabledHooks: by name, or AllHooks).
func hookDisabled(disabled []string, name string) bool {
	return slices.Contains(disabled, AllHooks) || slices.Contains(disabled, name)
}

// withDevHooks adds to a device's edits e the hook that makes its plan's
// links below /dev (the GPU's /dev/dri/by-path links), unless
// create-symlinks is disabled: one hook per device, as NVIDIA's.
func withDevHooks(e cdi.ContainerEdits, p *plan.Plan, hc ocispec.HookConfig, o Options) cdi.ContainerEdits {
	h := ocispec.SymlinksHook(p.DevSymlinks)
	if h != nil && !hookDisabled(o.DisabledHooks, hookargs.NameCreateSymlinks) {
		args := hookargs.CommandFor(hc.Path, hookargs.Command(*h))
		e.Hooks = append(e.Hooks, &cdi.Hook{HookName: "createContainer", Path: hc.Path, Args: args, Env: hookargs.Env()})
	}
	if c := chmodHook(e.DeviceNodes, hc, o); c != nil {
		e.Hooks = append(e.Hooks, c)
	}
	return e
}

// chmodHook is NVIDIA's chmod hook for a device's nodes (Options.Chmod):
// the directories /dev/dri and /dev/nvidia-caps that hold some of them,
// in node order, made 0755; nil when there is none or the hook is not
// asked for.
func chmodHook(nodes []*cdi.DeviceNode, hc ocispec.HookConfig, o Options) *cdi.Hook {
	if !o.Chmod || hookDisabled(o.DisabledHooks, hookargs.NameChmod) {
		return nil
	}
	h := hookargs.Chmod{Mode: 0o755}
	for _, n := range nodes {
		if dir := path.Dir(n.Path); (dir == "/dev/dri" || dir == "/dev/nvidia-caps") && !slices.Contains(h.Paths, dir) {
			h.Paths = append(h.Paths, dir)
		}
	}
	if len(h.Paths) == 0 {
		return nil
	}
	return &cdi.Hook{HookName: "createContainer", Path: hc.Path, Args: hookargs.CommandFor(hc.Path, hookargs.Command(h)), Env: hookargs.Env()}
}

// deviceEdits are what the plan p for one device adds to the common plan:
// its device nodes (and mounts and variables, should a plan ever have
// per-device ones).
func deviceEdits(p, common *plan.Plan) cdi.ContainerEdits {
	var e cdi.ContainerEdits
	for _, dv := range p.Devices {
		if !slices.ContainsFunc(common.Devices, func(c plan.Device) bool { return c.Path == dv.Path }) {
			e.DeviceNodes = append(e.DeviceNodes, deviceNode(dv))
		}
	}
	for _, m := range p.Mounts {
		if !slices.ContainsFunc(common.Mounts, func(c plan.Mount) bool { return c.Destination == m.Destination }) {
			e.Mounts = append(e.Mounts, mount(m))
		}
	}
	for _, kv := range p.Env {
		if !slices.Contains(common.Env, kv) {
			e.Env = append(e.Env, kv)
		}
	}
	return e
}

// deviceNode is a plan device as a CDI device node: a character device the
// container may read and write (no mknod), with the host node's mode and
// group; hostPath only when it differs (a separate dev root).
func deviceNode(d plan.Device) *cdi.DeviceNode {
	n := &cdi.DeviceNode{Path: d.Path, Type: "c", Major: int64(d.Major), Minor: int64(d.Minor), Permissions: "rw"}
	if d.HostPath != "" && d.HostPath != d.Path {
		n.HostPath = d.HostPath
	}
	if d.FileMode != 0 {
		m := fileMode(d.FileMode)
		n.FileMode = &m
	}
	if d.GID != 0 {
		g := d.GID
		n.GID = &g
	}
	return n
}

// fileMode is a node's permission bits as an os.FileMode.
func fileMode(m uint32) os.FileMode { return os.FileMode(m & 0o777) }

func mount(m plan.Mount) *cdi.Mount {
	return &cdi.Mount{HostPath: m.Source, ContainerPath: m.Destination, Options: slices.Clone(m.Options)}
}

// mergeEdits appends to dst what src has and dst lacks (device nodes by
// path, mounts by container path, variables).
func mergeEdits(dst *cdi.ContainerEdits, src cdi.ContainerEdits) {
	for _, n := range src.DeviceNodes {
		if !slices.ContainsFunc(dst.DeviceNodes, func(x *cdi.DeviceNode) bool { return x.Path == n.Path }) {
			c := *n
			dst.DeviceNodes = append(dst.DeviceNodes, &c)
		}
	}
	for _, m := range src.Mounts {
		if !slices.ContainsFunc(dst.Mounts, func(x *cdi.Mount) bool { return x.ContainerPath == m.ContainerPath }) {
			c := *m
			c.Options = slices.Clone(m.Options)
			dst.Mounts = append(dst.Mounts, &c)
		}
	}
	for _, kv := range src.Env {
		if !slices.Contains(dst.Env, kv) {
			dst.Env = append(dst.Env, kv)
		}
	}
	for _, h := range src.Hooks {
		c := *h
		c.Args = slices.Clone(h.Args)
		c.Env = slices.Clone(h.Env)
		dst.Hooks = append(dst.Hooks, &c)
	}
}

// cloneEdits copies a device's edits so that no two devices share a node.
func cloneEdits(e cdi.ContainerEdits) cdi.ContainerEdits {
	var c cdi.ContainerEdits
	mergeEdits(&c, e)
	return c
}
