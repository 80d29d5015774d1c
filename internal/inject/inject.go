// Package inject is the one path from a container's GPU request to an
// injection plan, shared by every way nctk is invoked: discover the driver,
// resolve the selected devices, check the image's requirements, and build the
// plan. nvidia-container-runtime (OCI spec edits), nvidia-container-cli
// configure (imperative, for the prestart hook and containerd) and
// nvidia-ctk cdi generate all get their plan from here; they differ only in
// how they apply it.
package inject

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/requirements"
	"github.com/nctk/nctk/internal/selector"
)

// Job is a resolved request: what to inject, from which driver, where.
type Job struct {
	// Driver says where the driver is (root, ld.so.cache, dev root).
	Driver discover.Options
	// Devices are device tokens (indices, UUIDs, bus ids, MIG ids, "all");
	// nil or empty injects no GPU (the "none" request: libraries and
	// control nodes only).
	Devices []string
	// Caps are the driver capabilities.
	Caps caps.Set
	// Requirements are NVIDIA_REQUIRE_* expressions; each must hold.
	Requirements []string
	// MIGConfig/MIGMonitor expose the global MIG capabilities.
	MIGConfig  bool
	MIGMonitor bool
	// IMEXChannels are IMEX channel numbers.
	IMEXChannels []int

	NoPersistenced  bool
	NoFabricManager bool
	NoGSPFirmware   bool

	// Target is where files land in the container.
	Target plan.Target
	// Logger receives debug output; nil discards it.
	Logger *slog.Logger
}

// Result is a computed injection.
type Result struct {
	Plan      *plan.Plan
	Driver    *discover.Driver
	Selection selector.Selection
}

// Phase names the step that failed, as NVIDIA's CLI prefixes its errors
// ("detection error: …").
type Phase string

// Phases.
const (
	PhaseDetection   Phase = "detection"
	PhaseDevice      Phase = "device"
	PhaseRequirement Phase = "requirement"
	PhaseInput       Phase = "input"
)

// Error is a failed injection with the phase it failed in.
type Error struct {
	Phase Phase
	Err   error
}

// Error prefixes the phase ("device error: …") unless the wrapped error
// already names it.
func (e *Error) Error() string {
	msg := e.Err.Error()
	if prefix := string(e.Phase) + " error: "; !strings.HasPrefix(msg, prefix) {
		msg = prefix + msg
	}
	return msg
}
func (e *Error) Unwrap() error { return e.Err }

// PhaseOf returns the phase of an injection error, "" if it is none.
func PhaseOf(err error) Phase {
	var ie *Error
	if errors.As(err, &ie) {
		return ie.Phase
	}
	return ""
}

// Run discovers the driver, selects the devices, checks the requirements and
// builds the plan.
func Run(ctx context.Context, j Job) (*Result, error) {
	log := j.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := j.Driver
	// Requirements need the CUDA version, which only the driver knows: ask
	// it for that alone first (cached per driver). Arch and brand need the
	// driver to reach the GPUs; they are asked for only when a requirement
	// is not already settled by an alternative of cuda/driver conditions.
	cudaOnly := len(j.Requirements) > 0 && !opts.Probe
	if cudaOnly {
		opts.Probe, opts.ProbeCUDAOnly = true, true
	}
	// Look up only the files the requested capabilities select: the
	// default utility,compute needs a third of the driver's libraries.
	if opts.Caps == nil && j.Caps != nil {
		opts.Caps = j.Caps
	}
	drv, err := discover.Discover(opts)
	if err != nil {
		return nil, &Error{Phase: PhaseDetection, Err: err}
	}
	for _, w := range drv.Warnings {
		log.Debug("discovery", "warning", w)
	}
	sel, err := selector.Resolve(drv, j.Devices)
	if err != nil {
		return nil, &Error{Phase: PhaseDevice, Err: err}
	}
	if cudaOnly && needsDeviceFacts(j.Requirements, selector.Selection{}.Facts(drv)) {
		opts.ProbeCUDAOnly = false
		discover.Probe(drv, opts)
		// The probe fills the driver's GPUs in place; the selection holds
		// copies, so select again (no I/O).
		if sel, err = selector.Resolve(drv, j.Devices); err != nil {
			return nil, &Error{Phase: PhaseDevice, Err: err}
		}
	}
	if len(j.Requirements) > 0 {
		if err := requirements.Check(j.Requirements, sel.Facts(drv)); err != nil {
			return nil, &Error{Phase: PhaseRequirement, Err: err}
		}
	}
	o := plan.Options{
		Caps:            j.Caps,
		MIGConfig:       j.MIGConfig,
		MIGMonitor:      j.MIGMonitor,
		IMEXChannels:    j.IMEXChannels,
		NoPersistenced:  j.NoPersistenced,
		NoFabricManager: j.NoFabricManager,
		NoGSPFirmware:   j.NoGSPFirmware,
		Target:          j.Target,
	}.Select(sel)
	p, err := plan.Build(drv, o)
	if err != nil {
		return nil, &Error{Phase: PhaseDevice, Err: err}
	}
	log.Debug("injection plan", "devices", len(p.Devices), "mounts", len(p.Mounts),
		"symlinks", len(p.Symlinks), "gpus", len(sel.GPUs))
	return &Result{Plan: p, Driver: drv, Selection: sel}, nil
}

// needsDeviceFacts reports whether checking reqs needs the devices' arch or
// brand: some requirement has an alternative testing them and no
// alternative made only of cuda and driver conditions that holds with the
// host facts f. An unparsable expression
// needs nothing more: the check reports its syntax error.
func needsDeviceFacts(reqs []string, f requirements.Facts) bool {
	for _, r := range reqs {
		e, err := requirements.Parse(r)
		if err != nil {
			return false
		}
		settled, deviceAlt := false, false
		for _, alt := range e.Alternatives {
			if slices.ContainsFunc(alt, func(c requirements.Condition) bool {
				return c.Key == requirements.KeyArch || c.Key == requirements.KeyBrand
			}) {
				deviceAlt = true
				continue
			}
			if requirements.Check([]string{alt.String()}, f) == nil {
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
