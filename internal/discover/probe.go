package discover

import (
	"context"
	"fmt"
	"strings"

	"github.com/nctk/nctk/internal/driverprobe"
)

// probe asks the driver's own libraries (out of process, see driverprobe)
// for the CUDA version and each GPU's compute capability and brand. What
// cannot be learnt stays unknown, with a warning saying why.
func (x *discoverer) probe(ctx context.Context) {
	d := x.d
	var libcuda, nvml string
	for _, f := range d.Libraries {
		if f.Compat32 {
			continue
		}
		switch f.Name {
		case "libcuda.so":
			libcuda = f.HostPath
		case "libnvidia-ml.so":
			nvml = f.HostPath
		}
	}
	if libcuda == "" {
		d.CUDAUnknown = fmt.Sprintf("no libcuda.so of driver %s found", d.Version)
		x.warn("CUDA version unknown: %s", d.CUDAUnknown)
		return
	}
	req := driverprobe.Request{Libcuda: libcuda, NVML: nvml, ModuleVersion: d.Version}
	if x.opts.ProbeCUDAOnly {
		req.NVML, nvml = "", ""
	}
	for _, g := range d.GPUs {
		if x.opts.ProbeCUDAOnly {
			break
		}
		req.BusIDs = append(req.BusIDs, g.BusID)
		for _, m := range g.MIGDevices {
			req.MIGLayout = append(req.MIGLayout, fmt.Sprintf("%s/gi%d/ci%d", g.BusID, m.GI, m.CI))
		}
	}
	res, err := driverprobe.Probe(ctx, req, x.opts.ProbeConfig)
	if err != nil {
		d.CUDAUnknown = err.Error()
		x.warn("CUDA version, architectures and brands unknown: %v", err)
		return
	}
	src := SourceLibcuda
	nvmlSrc := SourceNVML
	if res.Source == driverprobe.SourceCache {
		src, nvmlSrc = SourceCache, SourceCache
	}
	x.log.Debug("driver probe", "source", res.Source, "cuda", res.CUDADriverVersion,
		"dlopen", res.DlopenDuration, "probe", res.ProbeDuration, "cache", res.CacheNote)
	if res.CUDADriverVersion > 0 {
		d.CUDADriverVersion = res.CUDADriverVersion
		d.CUDAVersion = res.CUDAVersion()
		d.CUDAVersionSource = src
	} else {
		d.CUDAUnknown = res.CUDAError
		x.warn("CUDA version unknown: %s", res.CUDAError)
	}
	if x.opts.ProbeCUDAOnly {
		return
	}
	var noArch, noBrand []string
	for i := range d.GPUs {
		g := &d.GPUs[i]
		if a, ok := res.Arch(g.BusID); ok {
			g.Arch, g.ArchSource = a, src
		} else {
			noArch = append(noArch, g.BusID)
		}
		if b, ok := res.Brand(g.BusID); ok {
			g.Brand, g.BrandSource = b, nvmlSrc
		} else if nvml != "" {
			noBrand = append(noBrand, g.BusID)
		}
	}
	x.migFromNVML(res)
	if len(noArch) > 0 {
		why := res.DeviceError
		if why == "" {
			why = res.CUDAError
		}
		if why == "" {
			why = "libcuda did not report these devices"
		}
		x.warn("architecture unknown for GPU %s: %s", strings.Join(noArch, ", "), why)
	}
	if len(noBrand) > 0 {
		why := res.NVMLError
		if why == "" {
			why = "NVML did not report these devices"
		}
		x.warn("brand unknown for GPU %s: %s", strings.Join(noBrand, ", "), why)
	}
}

// migFromNVML takes MIG mode and MIG device UUIDs from NVML's answers: the
// UUIDs exist nowhere else. Devices are matched to the procfs ones by
// GPU and compute instance ids.
func (x *discoverer) migFromNVML(res *driverprobe.Result) {
	for i := range x.d.GPUs {
		g := &x.d.GPUs[i]
		info, ok := res.MIG[g.BusID]
		if !ok {
			continue
		}
		g.MIGCapable = true
		g.MIGEnabled = info.Enabled
		for _, nm := range info.Devices {
			found := false
			for j := range g.MIGDevices {
				m := &g.MIGDevices[j]
				if m.GI == nm.GI && m.CI == nm.CI {
					m.UUID, found = nm.UUID, true
				}
			}
			if !found {
				x.warn("GPU %d: NVML reports MIG device %s (GI %d, CI %d) that %s does not show", g.Index, nm.UUID, nm.GI, nm.CI, g.MIGCapsDir)
			}
		}
		for _, m := range g.MIGDevices {
			if m.UUID == "" {
				x.warn("GPU %d: no UUID for MIG device %d (GI %d, CI %d): NVML did not report it", g.Index, m.Index, m.GI, m.CI)
			}
		}
	}
}
