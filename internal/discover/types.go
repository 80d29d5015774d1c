// Package discover answers the question every part of nctk starts from: on
// this host, or under a driver root such as /run/nvidia/driver, which NVIDIA
// driver is installed, which GPUs exist, and which files a container needs
// for a given set of driver capabilities.
//
// Discovery is pure Go and reads only files: /proc/driver/nvidia, /sys,
// /dev and the driver root's ld.so.cache. Facts that only the driver itself
// knows (the CUDA version it supports, compute capabilities) come from the
// driver's own libraries when they can be loaded, and every such value
// records where it came from; nothing is invented.
package discover

import (
	"fmt"
	"log/slog"
	"path"
	"slices"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/driverprobe"
)

// Options select what and where to discover.
type Options struct {
	// Root is the driver root; "" means "/".
	Root string
	// DevRoot is where device nodes are looked up; "" means Root.
	DevRoot string
	// LdCache is the ld.so.cache path inside Root; "" means /etc/ld.so.cache.
	LdCache string
	// SearchPath lists binary directories (inside Root) in lookup order;
	// nil means the standard PATH directories.
	SearchPath []string
	// MPSPipeDir overrides /tmp/nvidia-mps (CUDA_MPS_PIPE_DIRECTORY).
	MPSPipeDir string
	// Probe, when true, loads the driver's libcuda to learn the CUDA version
	// and compute capabilities (in a separate process).
	Probe bool
	// ProbeCUDAOnly limits the probe to the CUDA version (no compute
	// capabilities, brands or MIG UUIDs): what cuda>= requirements need.
	// Such a result is complete, hence cached, also on hosts where cuInit
	// cannot succeed.
	ProbeCUDAOnly bool

	// Caps, when not nil, limits the libraries and binaries looked up
	// (resolved inside the root, ELF headers read) to those this
	// capability set selects: Driver.LibrariesFor and BinariesFor return
	// for it what a full discovery returns. libnvidia-ml and libcuda are
	// looked up whatever Caps says (they decide LibraryVersion and the
	// version mismatch error, and the driver probe loads them). nil finds
	// every file (list, info, CDI generation).
	Caps caps.Set
	// ConfigSearchPaths, when set, are the host directories (absolute,
	// not below Root) where the graphics configuration files (EGL, Vulkan,
	// X.Org, OpenCL) are looked up instead of the driver root's /etc,
	// /usr/local/share and /usr/share: NVIDIA's --config-search-path.
	ConfigSearchPaths []string
	// Features names the feature-gated device families to look for
	// (Driver.Features); nil looks for none.
	Features []Feature

	// ProcRoot is where /proc/driver/nvidia and /proc/devices are read;
	// "" means Root.
	ProcRoot string
	// ProbeConfig tunes the driver probe: cache directory, timeout, the
	// executable re-run as the probe child.
	ProbeConfig driverprobe.Config
	// Logger receives debug records: what was selected, skipped, missing
	// (NVIDIA's CLI writes the same into its --debug log). nil discards.
	Logger *slog.Logger
	// cacheRegularProc makes procCache cache proc files that are not
	// procfs too (tests: fixture roots have no procfs, and reading their
	// files costs nothing worth caching).
	cacheRegularProc bool
}

// Source says where a value came from.
type Source string

// Value sources.
const (
	SourceUnknown  Source = ""
	SourceProcfs   Source = "procfs"   // /proc/driver/nvidia
	SourceSysfs    Source = "sysfs"    // /sys/bus/pci
	SourceFilename Source = "filename" // library file names
	SourceLibcuda  Source = "libcuda"  // the driver's libcuda.so (cuDriverGetVersion, cuDeviceGetAttribute)
	SourceNVML     Source = "nvml"     // the driver's libnvidia-ml.so
	SourceCache    Source = "cache"    // a cached probe result for the same driver files
)

// File is one driver file a container may need.
type File struct {
	// Name is what was looked up (a library prefix such as "libcuda.so", a
	// binary name, an IPC name).
	Name string
	// Capability is the capability group that selects the file.
	Capability caps.Capability
	// Path is the file's path as seen inside the driver root, with symlinks
	// resolved inside that root (e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03).
	Path string
	// HostPath is Path joined with the driver root: the path to open or
	// bind-mount from the host.
	HostPath string
	// SONAME is the ELF DT_SONAME for libraries (e.g. libcuda.so.1).
	SONAME string
	// DevLink, for a library, is the name of its development link
	// (libcuda.so) when the driver root has one as a symlink in the
	// library's directory: NVIDIA's tools then create it in the container.
	DevLink string `json:",omitempty"`
	// CacheFlags are a library's ld.so.cache flags (ELF class, ABI,
	// architecture) as the root's cache records them: ldconfig's own
	// classification of this file. 0 when unknown.
	CacheFlags int32
	// Compat32 marks a 32-bit library.
	Compat32 bool
	// Dest, when not "", is where a container gets the file if not at Path
	// (the Vulkan ICD and layer files go below /etc).
	Dest string `json:",omitempty"`
	// Library marks a graphics file that is a shared library (its SONAME
	// set): it goes into the container's ld.so.cache.
	Library bool `json:",omitempty"`
	// Dir marks a directory (the MPS pipe directory).
	Dir bool
}

// DeviceNode is a character device the driver provides: one discovery
// found, and one internal/devnodes expects or creates.
type DeviceNode struct {
	// Path is the node's path as seen inside the dev root (/dev/nvidia0).
	Path string
	// HostPath is Path joined with the dev root ("" for a node that is only
	// expected, not found: devnodes.Expected).
	HostPath string
	Major    uint32
	Minor    uint32
	// Mode holds the permission bits of the host node.
	Mode uint32
	UID  uint32
	GID  uint32
}

// Dev returns the node's device number.
func (n DeviceNode) Dev() uint64 { return devMkdev(n.Major, n.Minor) }

// ID returns "<major>:<minor>", the node's name under /dev/char.
func (n DeviceNode) ID() string { return fmt.Sprintf("%d:%d", n.Major, n.Minor) }

// MIGDevice is a MIG instance on a GPU.
type MIGDevice struct {
	// Index is the MIG device's index on its parent GPU (the M in "N:M").
	Index int
	UUID  string
	GI    int
	CI    int
	// GIAccess and CIAccess are the capability nodes guarding the GPU
	// instance and compute instance (/dev/nvidia-caps/nvidia-capN), and
	// GIAccessProc/CIAccessProc the proc files naming them.
	GIAccess     DeviceNode
	CIAccess     DeviceNode
	GIAccessProc string
	CIAccessProc string
}

// GPU is one NVIDIA GPU.
type GPU struct {
	// Index is the enumeration index (ordered by PCI bus id, as NVML does).
	Index int
	// Minor is the device minor number (/dev/nvidia<Minor>).
	Minor int
	UUID  string
	// BusID is the PCI bus id in NVIDIA's form, 00000000:41:00.0.
	BusID string
	Model string
	// Brand is NVML's brand name (Tesla, GeForce, Nvidia, …) or "" if unknown.
	Brand       string
	BrandSource Source
	// Arch is the CUDA compute capability "major.minor" or "" if unknown.
	Arch       string
	ArchSource Source
	Node       DeviceNode
	// ProcDir is /proc/driver/nvidia/gpus/<bus id> inside the root.
	ProcDir string
	// MIGCapable and MIGEnabled describe MIG mode; MIGDevices lists
	// instances when enabled. MIGCapsDir is
	// /proc/driver/nvidia/capabilities/gpu<minor>.
	MIGCapable bool
	MIGEnabled bool
	MIGDevices []MIGDevice
	MIGCapsDir string
	// MIGCapNodes are the existing /dev/nvidia-caps nodes of this GPU's MIG
	// capabilities (every mig-minors entry "gpu<minor>/…"), in minor order:
	// what --mig-config/--mig-monitor expose for the GPU.
	MIGCapNodes []DeviceNode
	// DRMNodes are the GPU's /dev/dri nodes (card, render) named by its
	// sysfs drm/ directory, and DRMLinks the /dev/dri/by-path links to
	// them: what graphics and display containers get with the GPU.
	DRMNodes []DeviceNode `json:",omitempty"`
	DRMLinks []DRMLink    `json:",omitempty"`
}

// DRMLink is a /dev/dri/by-path link (Path) and its target as the host has
// it (../card1).
type DRMLink struct {
	Path   string
	Target string
}

// Driver is the result of discovery.
type Driver struct {
	// Root is the driver root discovery ran against ("/" for the host).
	Root string
	// Version is the kernel module's NVRM version from
	// /proc/driver/nvidia/version (e.g. 535.261.03).
	Version string
	// LibraryVersion is the version in the driver libraries' file names. It
	// equals Version on a healthy host.
	LibraryVersion string
	// CUDAVersion is the CUDA version the driver supports ("12.2"), with
	// CUDAVersionSource saying where it came from; "" if unknown.
	CUDAVersion       string
	CUDAVersionSource Source
	// CUDAUnknown says why CUDAVersion is unknown after a probe ("" when
	// it is known or no probe ran).
	CUDAUnknown string
	// CUDADriverVersion is the raw cuDriverGetVersion value (12020), 0 if unknown.
	CUDADriverVersion int

	// Libraries holds the 64-bit libraries of every group, then the 32-bit
	// ones, each in NVIDIA's lookup order.
	Libraries []File
	Binaries  []File
	IPCs      []File
	Firmware  []File
	// Graphics are the graphics, display and OpenCL files NVIDIA's spec
	// generator mounts (Vulkan ICD and layer files, EGL vendor and
	// external-platform files and libraries, X.Org modules, xorg.conf.d
	// files, nvoptix.bin, the OpenCL vendor file), in NVIDIA's order;
	// selected by graphics or display (GraphicsFor).
	Graphics []File

	// ControlNodes are the driver-wide nodes present: nvidiactl,
	// nvidia-uvm, nvidia-uvm-tools, nvidia-modeset.
	ControlNodes []DeviceNode
	// CapsNodes are /dev/nvidia-caps/* nodes (MIG config/monitor, …).
	CapsNodes []DeviceNode
	// IMEXChannels are /dev/nvidia-caps-imex-channels/channel* nodes.
	IMEXChannels []DeviceNode
	// Features holds, for each feature Options.Features names, the nodes
	// and files found (FeatureDevicesFor).
	Features []FeatureDevices
	// MIGConfig and MIGMonitor are the nvidia-caps nodes guarding MIG
	// configuration and monitoring (mig-minors "config" and "monitor");
	// zero (Path "") when absent.
	MIGConfig  DeviceNode
	MIGMonitor DeviceNode

	GPUs []GPU

	// ProcFiles are the files of /proc/driver/nvidia that a container's view
	// of that directory copies (params, version, registry), as host paths.
	ProcFiles []string
	// LibDirs are the directories (inside Root) holding the driver's 64-bit
	// libraries, then 32-bit ones.
	LibDirs []string
	// Warnings lists things that were looked for and not found.
	Warnings []string

	// ident is what Verify compares: the identity of the driver discovery
	// read (nil for a Driver not made by Discover).
	ident *identity
	// otherVersion maps a core library (libcuda.so, libnvidia-ml.so) that
	// was found only for another driver version to that file's host path,
	// for CheckLibraries' error.
	otherVersion map[string]string
}

// LibrariesFor returns the libraries a capability set selects, 64-bit first,
// with 32-bit ones only when the set holds compat32.
func (d *Driver) LibrariesFor(s caps.Set) []File {
	groups := map[caps.Capability]bool{}
	for _, g := range s.LibraryCapabilities() {
		groups[g] = true
	}
	compat32 := s.Has(caps.Compat32)
	return filterFiles(d.Libraries, func(f File) bool { return groups[f.Capability] && (!f.Compat32 || compat32) })
}

// BinariesFor returns the binaries a capability set selects.
func (d *Driver) BinariesFor(s caps.Set) []File {
	return filterFiles(d.Binaries, func(f File) bool { return s.Has(f.Capability) })
}

// ControlNodesFor returns the driver-wide nodes a capability set selects:
// nvidiactl always, nvidia-uvm and nvidia-uvm-tools with the compute
// libraries (compute or video), nvidia-modeset with display.
func (d *Driver) ControlNodesFor(s caps.Set) []DeviceNode {
	compute := slices.Contains(s.LibraryCapabilities(), caps.Compute)
	var out []DeviceNode
	for _, n := range d.ControlNodes {
		switch path.Base(n.Path) {
		case "nvidiactl":
		case "nvidia-uvm", "nvidia-uvm-tools":
			if !compute {
				continue
			}
		case "nvidia-modeset":
			if !s.Has(caps.Display) {
				continue
			}
		default:
			continue
		}
		out = append(out, n)
	}
	return out
}

// GraphicsFor returns the graphics files a capability set selects: all of
// them with graphics or display, none otherwise.
func (d *Driver) GraphicsFor(s caps.Set) []File {
	if !s.Has(caps.Graphics) && !s.Has(caps.Display) {
		return nil
	}
	return d.Graphics
}

// IPCsFor returns the IPC endpoints a capability set selects.
func (d *Driver) IPCsFor(s caps.Set) []File {
	return filterFiles(d.IPCs, func(f File) bool { return s.Has(f.Capability) })
}

// filterFiles returns the files keep accepts, in order.
func filterFiles(files []File, keep func(File) bool) []File {
	var out []File
	for _, f := range files {
		if keep(f) {
			out = append(out, f)
		}
	}
	return out
}
