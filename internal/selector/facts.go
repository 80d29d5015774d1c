package selector

import (
	"strconv"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/requirements"
)

// Facts returns the host values requirements are checked against for this
// selection: the driver's version and CUDA version, and one entry per
// selected GPU and per selected MIG device (with its parent's arch and
// brand), as libnvidia-container evaluates them.
func (s Selection) Facts(d *discover.Driver) requirements.Facts {
	var f requirements.Facts
	if d != nil {
		f.CUDA, f.Driver, f.CUDAUnknown = d.CUDAVersion, d.Version, d.CUDAUnknown
	}
	for _, g := range s.GPUs {
		f.Devices = append(f.Devices, requirements.DeviceFacts{Index: strconv.Itoa(g.Index), UUID: g.UUID, Arch: g.Arch, Brand: g.Brand})
	}
	for _, m := range s.MIG {
		f.Devices = append(f.Devices, requirements.DeviceFacts{Index: m.Name(), UUID: m.MIG.UUID, Arch: m.Parent.Arch, Brand: m.Parent.Brand})
	}
	return f
}
