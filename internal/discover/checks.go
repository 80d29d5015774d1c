package discover

import (
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/devnum"
)

// CheckDevices reports, as *DeviceNodeError values joined together, the
// device nodes a container with the given GPUs needs but the host lacks:
// /dev/nvidiactl (every container gets it) and each GPU's
// /dev/nvidia<minor>. Missing nodes are not an error for discovery itself
// (info works without them); plan.Build checks them here, so that every
// command that builds a plan fails the same way.
func (d *Driver) CheckDevices(gpus []GPU) error {
	var errs []error
	if !d.hasControl("nvidiactl") {
		errs = append(errs, &DeviceNodeError{Path: "/dev/nvidiactl", HostPath: d.devHostPath("/dev/nvidiactl"),
			Major: devnum.MajorNVIDIA, Minor: devnum.MinorCtl, Missing: true})
	}
	for _, g := range gpus {
		if g.Node.Path == "" {
			p := fmt.Sprintf("/dev/nvidia%d", g.Minor)
			errs = append(errs, &DeviceNodeError{Path: p, HostPath: d.devHostPath(p), Major: devnum.MajorNVIDIA,
				Minor: uint32(g.Minor), Missing: true})
		}
	}
	return errors.Join(errs...)
}

func (d *Driver) hasControl(name string) bool {
	for _, n := range d.ControlNodes {
		if path.Base(n.Path) == name {
			return true
		}
	}
	return false
}

// devHostPath guesses the host path of a node from the nodes found (their
// dev root), else from the driver root.
func (d *Driver) devHostPath(p string) string {
	for _, n := range d.ControlNodes {
		if len(n.HostPath) >= len(n.Path) {
			return n.HostPath[:len(n.HostPath)-len(n.Path)] + p
		}
	}
	return join(d.Root, p)
}

// essentialLibraries are the libraries a capability cannot work without:
// with the others a container may lack a feature, without these it has
// no driver at all (CUDA without libcuda, nvidia-smi and NVML without
// libnvidia-ml).
var essentialLibraries = []struct {
	capability caps.Capability
	name       string
}{
	{caps.Utility, "libnvidia-ml.so"},
	{caps.Compute, "libcuda.so"},
}

// MissingLibraryError reports that discovery found no file of the
// driver's version for a library that a requested capability cannot work
// without.
type MissingLibraryError struct {
	// Name is the library (libcuda.so), Capability the capability that
	// needs it.
	Name       string
	Capability caps.Capability
	// Root is the driver root, Version the kernel module's version, LdCache
	// the host path of the ld.so.cache searched.
	Root    string
	Version string
	LdCache string
	// Other is a file of the library for another driver version that the
	// cache lists (host path), "" if none.
	Other string
}

func (e *MissingLibraryError) Error() string {
	found := ""
	if e.Other != "" {
		found = fmt.Sprintf(" (it lists %s, of driver %s)", e.Other, libraryVersion(e.Other))
	}
	return fmt.Sprintf("the driver's %s (needed for the %s capability) was not found: no %s.* of driver %s in the "+
		"dynamic linker cache %s resolves to a file under %s%s; is the driver's user space installed there and "+
		"ldconfig run, or a driver upgrade in progress?", e.Name, e.Capability, e.Name, e.Version, e.LdCache, e.Root, found)
}

// CheckLibraries reports, as *MissingLibraryError values joined together,
// the essential libraries of the capabilities in s that discovery did not
// find (libnvidia-ml for utility, libcuda for compute): a container that
// asks for them must not start without them. Discovery itself only warns
// (info, list and doctor describe such a host); planner.Run checks here.
func (d *Driver) CheckLibraries(s caps.Set) error {
	var errs []error
	for _, e := range essentialLibraries {
		if !s.Has(e.capability) || slices.ContainsFunc(d.Libraries, func(f File) bool { return f.Name == e.name && !f.Compat32 }) {
			continue
		}
		m := &MissingLibraryError{Name: e.name, Capability: e.capability, Root: d.Root, Version: d.Version,
			LdCache: join(d.Root, DefaultLdCache), Other: d.otherVersion[e.name]}
		if d.ident != nil && d.ident.ldcache != "" {
			m.LdCache = d.ident.ldcache
		}
		errs = append(errs, m)
	}
	return errors.Join(errs...)
}
