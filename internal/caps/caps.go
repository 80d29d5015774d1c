// Package caps defines NVIDIA driver capabilities (NVIDIA_DRIVER_CAPABILITIES)
// and what each one selects from a driver installation: library name
// prefixes, binaries and IPC endpoints.
//
// The lists follow libnvidia-container's per-capability selection so that
// nctk injects the same files NVIDIA's CLI does.
package caps

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Capability is one driver capability.
type Capability string

// The capabilities a container can request.
const (
	Utility  Capability = "utility"
	Compute  Capability = "compute"
	Video    Capability = "video"
	Graphics Capability = "graphics"
	Display  Capability = "display"
	NGX      Capability = "ngx"
	Compat32 Capability = "compat32"
)

// All lists every capability in NVIDIA's canonical order.
func All() []Capability {
	return []Capability{Compat32, Compute, Display, Graphics, NGX, Utility, Video}
}

// Set is a set of capabilities.
type Set map[Capability]bool

// Default is what a container gets when NVIDIA_DRIVER_CAPABILITIES is unset or empty.
func Default() Set { return Set{Utility: true, Compute: true} }

// Full returns a set holding every capability.
func Full() Set {
	s := Set{}
	for _, c := range All() {
		s[c] = true
	}
	return s
}

// Parse reads a comma-separated capability list such as "compute,utility"
// or "all". Whitespace around items is ignored and empty items are dropped.
// An empty list yields an empty set (callers apply the default).
func Parse(v string) (Set, error) {
	s := Set{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if item == "all" {
			maps.Copy(s, Full())
			continue
		}
		c := Capability(item)
		if !slices.Contains(All(), c) {
			return nil, fmt.Errorf("unknown driver capability %q (valid: all, %s)", item, joinCaps(All()))
		}
		s[c] = true
	}
	return s, nil
}

// Has reports whether c is in the set.
func (s Set) Has(c Capability) bool { return s[c] }

// List returns the set's capabilities sorted by name.
func (s Set) List() []Capability {
	out := make([]Capability, 0, len(s))
	for c, ok := range s {
		if ok {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// String renders the set as a comma-separated list.
func (s Set) String() string { return joinCaps(s.List()) }

// Intersect returns the capabilities present in both sets.
func (s Set) Intersect(o Set) Set {
	r := Set{}
	for c, ok := range s {
		if ok && o[c] {
			r[c] = true
		}
	}
	return r
}

// LibraryCapabilities returns which library groups a capability set
// selects. Video implies compute libraries and display implies graphics
// libraries, as in NVIDIA's CLI. Compat32 is not a group of its own: it asks
// for the 32-bit variants of the selected groups.
func (s Set) LibraryCapabilities() []Capability {
	var out []Capability
	if s[Utility] {
		out = append(out, Utility)
	}
	if s[Compute] || s[Video] {
		out = append(out, Compute)
	}
	if s[NGX] {
		out = append(out, NGX)
	}
	if s[Video] {
		out = append(out, Video)
	}
	if s[Graphics] || s[Display] {
		out = append(out, Graphics)
	}
	return out
}

func joinCaps(cs []Capability) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c)
	}
	return strings.Join(parts, ",")
}

// Libraries returns the ld.so.cache key prefixes a library group selects
// (nil for a capability that is not a library group). Order matters only for
// logging; lookups are by prefix.
func Libraries(group Capability) []string {
	return map[Capability][]string{
		Utility: {"libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"},
		Compute: {
			"libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so", "libnvidia-gpucomp.so",
			"libnvidia-ptxjitcompiler.so", "libnvidia-fatbinaryloader.so", "libnvidia-allocator.so",
			"libnvidia-compiler.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
			"libnvidia-nvvm.so", "libnvidia-tileiras.so",
		},
		Video: {"libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so"},
		Graphics: {
			"libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so", "libnvidia-glsi.so",
			"libnvidia-fbc.so", "libnvidia-ifr.so", "libnvidia-rtcore.so", "libnvoptix.so",
			// GLVND vendor libraries.
			"libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so", "libGLESv1_CM_nvidia.so",
			"libnvidia-glvkspirv.so", "libnvidia-cbl.so",
		},
		NGX: {"libnvidia-ngx.so"},
	}[group]
}

// LibraryGroupOrder is the order in which groups are looked up and listed
// (NVIDIA's order: utility, compute, ngx, video, graphics).
func LibraryGroupOrder() []Capability { return []Capability{Utility, Compute, NGX, Video, Graphics} }

// Binaries returns the driver binaries a capability selects.
func Binaries(c Capability) []string {
	switch c {
	case Utility:
		return []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager"}
	case Compute:
		return []string{"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}
	}
	return nil
}

// IPC describes one driver IPC endpoint a capability selects.
type IPC struct {
	Capability Capability
	// Path is the default host path; for MPS it may be overridden by
	// CUDA_MPS_PIPE_DIRECTORY.
	Path string
	// Name identifies the endpoint for --no-persistenced/--no-fabricmanager.
	Name string
	Dir  bool
}

// IPCs lists the IPC endpoints in NVIDIA's order.
func IPCs() []IPC {
	return []IPC{
		{Capability: Utility, Path: "/var/run/nvidia-persistenced/socket", Name: "persistenced"},
		{Capability: Utility, Path: "/var/run/nvidia-fabricmanager/socket", Name: "fabricmanager"},
		{Capability: Compute, Path: "/tmp/nvidia-mps", Name: "mps", Dir: true},
	}
}
