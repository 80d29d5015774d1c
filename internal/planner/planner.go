// Package planner is the one path from a container's GPU request to a plan
// (internal/plan): discover the driver, resolve the selected devices, check
// the image's requirements, and build the plan (Run). Prepare does it for a
// container's OCI spec, with the request read from the spec (SpecJob) and
// the image layout detected in its rootfs (ImageTarget).
//
// nvidia-container-runtime (Prepare: OCI spec edits and the bundle's
// rootfs), nvidia-container-cli configure (Run: applied to a created
// container, for the prestart hook, dockerd's --gpus path and containerd)
// and nvidia-ctk cdi generate (Run, then per-device plans rendered as a CDI
// spec) get their plan from here; they differ in how they apply it.
// nvidia-container-cli list builds its plan with plan.Build from the same
// options, without a requirement check.
package planner

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/requirements"
	"github.com/nctk/nctk/internal/selector"
)

// Job is a validated request with where to compute it: which driver, and
// where files land in the container.
type Job struct {
	// Request is what to inject. Its Devices are device tokens (indices,
	// UUIDs, bus ids, MIG ids, "all"); none injects no GPU (the "none"
	// request: libraries and control nodes only). Its Requirements must
	// all hold.
	Request request.Request
	// Driver says where the driver is (root, ld.so.cache, dev root).
	Driver discover.Options
	// Target is where files land in the container.
	Target plan.Target
	// NoAdditionalGIDs leaves the plan's AdditionalGIDs empty (config
	// features.no-additional-gids-for-device-nodes).
	NoAdditionalGIDs bool
	// Logger receives debug output; nil discards it.
	Logger *slog.Logger
}

// Result is a computed plan with the discovery result and the device
// selection it was built from.
type Result struct {
	Plan      *plan.Plan
	Driver    *discover.Driver
	Selection selector.Selection
}

// Run discovers the driver, selects the devices, checks the requirements and
// builds the plan. Errors are *phase.Error: initialization (no usable
// driver), detection (another discovery error), device, requirement, or
// mig-config / mig-monitor (a *plan.MIGSelectionError).
func Run(ctx context.Context, j Job) (*Result, error) {
	log := j.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	req := j.Request
	opts := j.Driver
	// Requirements need the CUDA version, which only the driver knows: ask
	// it for that alone first (cached per driver). Arch and brand need the
	// driver to reach the GPUs; they are asked for only when a requirement
	// is not already settled by an alternative of cuda/driver conditions.
	cudaOnly := len(req.Requirements) > 0 && !opts.Probe
	if cudaOnly {
		opts.Probe, opts.ProbeCUDAOnly = true, true
	}
	// Look up only the files the requested capabilities select: the
	// default utility,compute needs a third of the driver's libraries.
	if opts.Caps == nil && req.Caps != nil {
		opts.Caps = req.Caps
	}
	if opts.Features == nil {
		opts.Features = req.Features
	}
	drv, err := discover.Discover(opts)
	if err != nil {
		return nil, &phase.Error{Phase: DiscoveryPhase(err), Err: err}
	}
	for _, w := range drv.Warnings {
		log.Debug("discovery", "warning", w)
	}
	// A container that asks for compute or utility does not start without
	// libcuda or libnvidia-ml: a driver whose files are missing (being
	// upgraded, half installed) is an error, not a container without its
	// driver.
	if req.Caps != nil {
		if err := drv.CheckLibraries(req.Caps); err != nil {
			return nil, &phase.Error{Phase: phase.Initialization, Err: err}
		}
	}
	// Whether the devices' facts are needed depends on the driver's alone
	// (see needsDeviceFacts), so the probe is decided, and run, before the
	// devices are selected: the probe fills the driver's GPUs in place and
	// the selection, made once, holds copies with the probed arch, brand
	// and MIG UUIDs.
	if cudaOnly && needsDeviceFacts(req.Requirements, selector.Selection{}.Facts(drv)) {
		opts.ProbeCUDAOnly = false
		discover.Probe(drv, opts)
	}
	sel, err := selector.Resolve(drv, req.Devices)
	if err != nil {
		return nil, &phase.Error{Phase: phase.Device, Err: err}
	}
	if len(req.Requirements) > 0 {
		if err := requirements.Check(req.Requirements, sel.Facts(drv)); err != nil {
			return nil, &phase.Error{Phase: phase.Requirement, Err: err}
		}
	}
	o := plan.Options{
		Caps:             req.Caps,
		MIGConfig:        req.MIGConfig,
		MIGMonitor:       req.MIGMonitor,
		IMEXChannels:     req.IMEXChannels,
		Features:         req.Features,
		NoAdditionalGIDs: j.NoAdditionalGIDs,
		NoPersistenced:   req.NoPersistenced,
		NoFabricManager:  req.NoFabricManager,
		NoGSPFirmware:    req.NoGSPFirmware,
		Target:           j.Target,
	}.Select(sel)
	p, err := plan.Build(drv, o)
	if err != nil {
		ph := phase.Device
		if me := (*plan.MIGSelectionError)(nil); errors.As(err, &me) {
			ph = phase.Phase(me.Option) // mig-config or mig-monitor, as NVIDIA's CLI words it
		}
		return nil, &phase.Error{Phase: ph, Err: err}
	}
	// NVIDIA's per-container devices tell the container where libcuda is,
	// as its written specs do.
	if req.PerContainer {
		if kv := p.LibcudaDirEnv(); kv != "" && !slices.Contains(p.Env, kv) {
			p.Env = append(p.Env, kv)
		}
	}
	// The plan names the driver's files by path; make sure the driver is
	// still the one discovery read (its root not renamed away or replaced
	// meanwhile, the same kernel module, every planned file there) before
	// anyone uses those paths.
	if err := drv.Verify(planPaths(p)); err != nil {
		return nil, &phase.Error{Phase: phase.Initialization, Err: err}
	}
	log.Debug("injection plan", "devices", len(p.Devices), "mounts", len(p.Mounts),
		"symlinks", len(p.Symlinks), "gpus", len(sel.GPUs))
	return &Result{Plan: p, Driver: drv, Selection: sel}, nil
}

// planPaths returns the host paths a plan names: its mounts' sources and its
// device nodes' host paths (what Driver.Verify checks).
func planPaths(p *plan.Plan) []string {
	out := make([]string, 0, len(p.Mounts)+len(p.Devices))
	for _, m := range p.Mounts {
		out = append(out, m.Source)
	}
	for _, d := range p.Devices {
		if d.HostPath != "" {
			out = append(out, d.HostPath)
		}
	}
	return out
}

// DiscoveryPhase is the phase of a discover.Discover error, in NVIDIA's
// words: a host with no usable driver (none found, or kernel module and
// libraries of different versions) is an initialization error, any other a
// detection error.
func DiscoveryPhase(err error) phase.Phase {
	var noDriver *discover.NoDriverError
	var mismatch *discover.VersionMismatchError
	if errors.As(err, &noDriver) || errors.As(err, &mismatch) {
		return phase.Initialization
	}
	return phase.Detection
}

// needsDeviceFacts reports whether checking reqs needs the devices' arch or
// brand: some requirement has an alternative testing them and no
// alternative made only of cuda and driver conditions that holds with the
// host facts f.
func needsDeviceFacts(reqs []requirements.Expr, f requirements.Facts) bool {
	for _, e := range reqs {
		settled, deviceAlt := false, false
		for _, alt := range e.Alternatives {
			if slices.ContainsFunc(alt, func(c requirements.Condition) bool {
				return c.Key == requirements.KeyArch || c.Key == requirements.KeyBrand
			}) {
				deviceAlt = true
				continue
			}
			one := requirements.Expr{Source: alt.String(), Alternatives: []requirements.Alternative{alt}}
			if requirements.Check([]requirements.Expr{one}, f) == nil {
				settled = true
				break
			}
		}
		if !settled && deviceAlt {
			return true
		}
	}
	return false
}
