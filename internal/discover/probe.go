package discover

import (
	"context"
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
		x.warn("CUDA version unknown: no libcuda.so of driver %s found", d.Version)
		return
	}
	req := driverprobe.Request{Libcuda: libcuda, NVML: nvml, ModuleVersion: d.Version}
	for _, g := range d.GPUs {
		req.BusIDs = append(req.BusIDs, g.BusID)
	}
	res, err := driverprobe.Probe(ctx, req, x.opts.ProbeConfig)
	if err != nil {
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
		x.warn("CUDA version unknown: %s", res.CUDAError)
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
