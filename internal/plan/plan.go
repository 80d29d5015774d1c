// Package plan computes what a GPU container gets: device nodes (with device
// cgroup rules for exactly the selected GPUs and asked feature devices, and
// the supplementary groups needed to open them), read-only bind mounts of
// driver files, symlinks, the ld.so.cache update, the /proc/driver/nvidia
// view and environment.
//
// A Plan is declarative; Build computes it (internal/planner runs Build
// for a container's request). It is applied in two ways that share it:
// nvidia-container-runtime writes its devices, mounts, environment, CDI
// edits and /proc/driver/nvidia view hook into the OCI spec
// (internal/ocispec) and creates its symlinks and ld.so.cache entries in
// the bundle's rootfs itself (internal/rootfs); nvidia-container-cli
// configure applies its devices (with their cgroup rules), mounts,
// symlinks, ld.so.cache entries and /proc/driver/nvidia view to a created
// container (internal/configure). nvidia-ctk cdi generate renders plans as
// a CDI spec (internal/cdispec) and nvidia-container-cli list prints a
// plan's host paths. No applier decides what to inject.
package plan

import (
	"maps"
	"path"
	"slices"
	"strings"

	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/ldcache"
)

// Mount options every driver-file bind mount carries.
const (
	OptRO       = "ro"
	OptNoSuid   = "nosuid"
	OptNoDev    = "nodev"
	OptNoExec   = "noexec"
	OptRBind    = "rbind"
	OptRPrivate = "rprivate"
)

// MountKind says what a mount's source is.
type MountKind int

// Mount kinds.
const (
	KindFile   MountKind = iota // a regular file (library, binary, firmware)
	KindDir                     // a directory (MPS pipe dir, proc GPU dir)
	KindSocket                  // a UNIX socket (persistenced, fabricmanager)
)

// DeviceClass says why a container gets a device node (nvidia-container-cli
// list prints the classes in separate sections).
type DeviceClass int

// Device classes.
const (
	// DeviceOther is a node of no class below (one from a CDI spec).
	DeviceOther DeviceClass = iota
	// DeviceDriver is a driver-wide node the capabilities select
	// (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset).
	DeviceDriver
	// DeviceGPU is a selected GPU's /dev/nvidia<minor>.
	DeviceGPU
	// DeviceMIG is an access capability (GPU or compute instance) of a
	// selected MIG device.
	DeviceMIG
	// DeviceIMEX is an IMEX channel.
	DeviceIMEX
	// DeviceMIGAdmin is the MIG config or monitor capability, or a
	// selected GPU's MIG capability that comes with them.
	DeviceMIGAdmin
	// DeviceFeature is a node of a feature-gated device family
	// (discover.Feature: nvidia-fs, InfiniBand, gdrdrv, NVSwitch); Grant
	// names the feature.
	DeviceFeature
)

// MIG grant names of DeviceMIGAdmin nodes that are not a GPU's (see
// Device.Grant).
const (
	GrantMIGConfig  = "mig-config"
	GrantMIGMonitor = "mig-monitor"
)

// Device is a device node the container gets and may open.
type Device struct {
	// Path is the node's path in the container (/dev/nvidia1).
	Path string
	// HostPath is the host node (under the dev root) it mirrors.
	HostPath string
	Major    uint32
	Minor    uint32
	// FileMode holds permission bits for the node in the container.
	FileMode uint32
	UID      uint32
	GID      uint32
	// Class says why the container gets the node.
	Class DeviceClass
	// Grant, for a feature's node (DeviceFeature), names the feature. For
	// MIG capability nodes (DeviceMIG, DeviceMIGAdmin) it names what
	// brought the node in: the MIG device's UUID (or gpu:mig index
	// when it has none), the GPU's UUID for its MIG capabilities, or
	// GrantMIGConfig / GrantMIGMonitor. Consecutive nodes with one Grant
	// are one group: list prints the group's /proc entries, then its nodes.
	Grant string `json:",omitempty"`
	// Proc, for a MIG capability node, is the /proc/driver/nvidia entry
	// that names it, relative to that directory
	// (capabilities/gpu1/mig/gi1/access); the plan's ProcView exposes it.
	Proc string `json:",omitempty"`
}

// MountClass says what kind of driver file a mount injects
// (nvidia-container-cli list prints the classes in separate sections).
type MountClass int

// Mount classes.
const (
	// MountOther is a mount of no class below (one from a CDI spec).
	MountOther MountClass = iota
	MountLibrary
	MountBinary
	// MountIPC is an IPC endpoint: a daemon socket or the MPS pipe
	// directory.
	MountIPC
	MountFirmware
	// MountFeature is a file or directory a feature brings (GDS: the udev
	// database, cuFile's configuration).
	MountFeature
	// MountGraphics is a graphics, display or OpenCL file (Vulkan ICD,
	// EGL vendor and platform files and libraries, X.Org modules, …).
	MountGraphics
)

// Mount is a bind mount of a host file into the container.
type Mount struct {
	// Source is the host path (under the driver root), never a path inside
	// the container rootfs.
	Source string
	// Destination is the path in the container.
	Destination string
	Kind        MountKind
	// Options are OCI mount options: ro,nosuid,nodev,rbind,rprivate for
	// files; sockets and the MPS dir are writable and noexec.
	Options []string
	// Library, for a driver library, is what the container's ld.so.cache
	// needs to know about the file (SONAME and cache flags, from
	// discovery), so that the cache update does not read it again; nil:
	// the update reads the file.
	Library *ldcache.Library `json:"library,omitempty"`
	// Class says what kind of driver file the mount injects.
	Class MountClass `json:",omitempty"`
}

// Symlink is a link created inside the container root: Link (a container
// path) points to Target (relative or absolute as in the host driver).
type Symlink struct {
	Link   string
	Target string
}

// ProcView describes the container's /proc/driver/nvidia: a tmpfs holding
// copies of the driver's params (with ModifyDeviceFiles set to 0), version
// and registry files, plus the proc directories of the selected GPUs only.
type ProcView struct {
	// HostDir is /proc/driver/nvidia on the host (under the driver root).
	HostDir string
	// Files are the names copied from HostDir (params, version, registry).
	Files []string
	// GPUDirs are the bus ids whose gpus/<bus id> directory is exposed.
	GPUDirs []string
	// Expose lists further paths relative to HostDir that are bound
	// read-only into the view (MIG access files such as
	// capabilities/gpu0/mig/gi1/access, or capabilities/mig/config).
	Expose []string
}

// Plan is what one container gets.
type Plan struct {
	// Devices are the nodes created in the container; each one is also
	// allowed (rw) in the container's device cgroup, and nothing else is.
	Devices []Device
	// Mounts are bind mounts of driver files, in order.
	Mounts []Mount
	// Symlinks are created after the mounts.
	Symlinks []Symlink
	// DevSymlinks are links below /dev (the selected GPUs'
	// /dev/dri/by-path links): the container's /dev exists only once the
	// low-level runtime has set it up, so they are always made by a
	// createContainer hook, never in the rootfs beforehand.
	DevSymlinks []Symlink
	// LdconfigDirs are container directories holding injected libraries;
	// when non-empty the libraries there (LdcacheLibs) are added to the
	// container's ld.so.cache, in process and inside the root
	// (rootfs.Root.UpdateLdCache), and the directories are listed in an
	// ld.so.conf.d drop-in. Only for an image's newer CUDA compat
	// libraries does configure run the host's ldconfig, confined to the
	// container root, over them instead.
	LdconfigDirs []string
	// Proc is the /proc/driver/nvidia view, nil for none.
	Proc *ProcView
	// Env is added to the container process environment (KEY=VALUE).
	Env []string
	// AdditionalGIDs are groups the container process gets so that it can
	// open the plan's device nodes: the group of each node that is not
	// both world-readable and world-writable and whose group is not root
	// (NVIDIA's rule), each once, in device order. The runtime adds them
	// to process.user.additionalGids.
	AdditionalGIDs []uint32
	// DriverVersion is the host driver's version (580.126.09) the plan
	// was built from, "" for a plan of CDI edits only: the runtime
	// compares an image's CUDA compat libcuda with it
	// (internal/cudacompat).
	DriverVersion string `json:",omitempty"`
	// CDI are the container edits of CDI devices (the runtime's CDI mode:
	// NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0, cdi.k8s.io/ annotations), held
	// verbatim as the CDI spec files give them — every field of every CDI
	// version, whatever the vendor — and applied by the CDI library's own
	// editor after the entries above, exactly as Podman, Docker and
	// containerd apply them (ocispec.Apply). nil: no CDI device.
	CDI *cdispecs.ContainerEdits
	// CDILibs are what ld.so.cache records about host library files CDI
	// mounts (by host path), known already (cdispec.PlanFor takes them
	// from its resolved-spec cache when the files are unchanged); the
	// runtime reads the others.
	CDILibs map[string]ldcache.Library
}

// InjectsLibcuda reports whether p mounts a libcuda.so.<version> (compute):
// only then can an image's CUDA compat libcuda be used over it.
func (p *Plan) InjectsLibcuda() bool { return slices.ContainsFunc(p.Mounts, isLibcuda) }

// isLibcuda reports whether m mounts the driver's libcuda.so.<version>.
func isLibcuda(m Mount) bool {
	b := path.Base(m.Destination)
	return m.Kind == KindFile && strings.HasPrefix(b, "libcuda.so.") && strings.Count(b, ".") > 2
}

// Merge returns a plan holding a's entries, then b's (for a container that
// asks for devices by index and by CDI name at once); their CDI container
// edits are merged by mergeCDI (cdiedit.Merge: the CDI library's rules,
// lists appended, b's intelRdt wins), which gets nil for a plan without.
func Merge(a, b *Plan, mergeCDI func(a, b *cdispecs.ContainerEdits) *cdispecs.ContainerEdits) *Plan {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	m := *a
	m.Devices = slices.Concat(a.Devices, b.Devices)
	m.Mounts = slices.Concat(a.Mounts, b.Mounts)
	m.Symlinks = slices.Concat(a.Symlinks, b.Symlinks)
	m.DevSymlinks = slices.Concat(a.DevSymlinks, b.DevSymlinks)
	m.LdconfigDirs = slices.Concat(a.LdconfigDirs, b.LdconfigDirs)
	m.Env = slices.Concat(a.Env, b.Env)
	m.AdditionalGIDs = slices.Clone(a.AdditionalGIDs)
	for _, g := range b.AdditionalGIDs {
		if !slices.Contains(m.AdditionalGIDs, g) {
			m.AdditionalGIDs = append(m.AdditionalGIDs, g)
		}
	}
	if m.DriverVersion == "" {
		m.DriverVersion = b.DriverVersion
	}
	m.CDI = mergeCDI(a.CDI, b.CDI)
	if len(b.CDILibs) > 0 {
		m.CDILibs = maps.Clone(a.CDILibs)
		if m.CDILibs == nil {
			m.CDILibs = map[string]ldcache.Library{}
		}
		maps.Copy(m.CDILibs, b.CDILibs)
	}
	if m.Proc == nil {
		m.Proc = b.Proc
	}
	return &m
}

// LdcacheLibs returns the container paths of p's libraries that go into the
// container's ld.so.cache (rootfs.Root.UpdateLdCache and
// PendingLibraryEntries, the update-ldcache hook's --lib): the library
// files mounted into p.LdconfigDirs, then the links created there (SONAME
// and development links), each once.
func (p *Plan) LdcacheLibs() []string {
	var out []string
	add := func(dst string) {
		if slices.Contains(p.LdconfigDirs, path.Dir(dst)) && !slices.Contains(out, dst) {
			out = append(out, dst)
		}
	}
	for _, m := range p.Mounts {
		if m.Kind == KindFile {
			add(m.Destination)
		}
	}
	for _, s := range p.Symlinks {
		add(s.Link)
	}
	return out
}

// LibcudaDirEnvName names the container directories holding
// libcuda.so.<driver version>, ':'-joined, as NVIDIA's specs and its
// per-container (jit-cdi) devices set it.
const LibcudaDirEnvName = "NVIDIA_CTK_LIBCUDA_DIR"

// LibcudaDirEnv returns LibcudaDirEnvName=<the container directories of the
// plan's libcuda.so.<version> mounts>, "" when the plan mounts no libcuda.
func (p *Plan) LibcudaDirEnv() string {
	var dirs []string
	for _, m := range p.Mounts {
		if d := path.Dir(m.Destination); isLibcuda(m) && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return ""
	}
	return LibcudaDirEnvName + "=" + strings.Join(dirs, ":")
}
