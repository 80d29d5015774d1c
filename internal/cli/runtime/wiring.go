package runtime

// This file is the seam to the packages around the wrapper: the config file
// (internal/config) and the planning path (internal/planner, with
// internal/cdispec for CDI device names), behind a preparer.

import (
	"context"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cdiedit"
	"github.com/nctk/nctk/internal/cdispec"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/planner"
)

// loadConfig finds and parses config.toml as NVIDIA's tools do
// (config.Load). config writes nothing to stderr, which matters here: a runc
// wrapper's stderr is part of what engines parse (containerd reads `state`
// output with stderr mixed in). Warnings stay in Config.Warnings.
func loadConfig(e *app.Env) (*config.Config, error) { return config.Load(e.Environ) }

// input is what a preparer gets for one container.
type input struct {
	// Spec is the container's OCI spec (read only).
	Spec *specs.Spec
	// Rootfs is the container root: root.path made absolute against the
	// bundle.
	Rootfs string
	// Bundle is the absolute bundle directory.
	Bundle string
	Config *config.Config
	// CDICacheDir is the resolved-spec cache directory of CDI mode
	// (cdispec.ResolveCached); "" for none.
	CDICacheDir string
}

// preparer computes a container's plan; a nil plan means the container is
// not a GPU container and is left alone.
type preparer interface {
	Prepare(ctx context.Context, in input) (*plan.Plan, error)
}

// preparerFunc adapts a function to preparer.
type preparerFunc func(ctx context.Context, in input) (*plan.Plan, error)

// Prepare calls f.
func (f preparerFunc) Prepare(ctx context.Context, in input) (*plan.Plan, error) { return f(ctx, in) }

// defaultPlanner is the production preparer: planner.Prepare for the
// container's request, merged with the plan of its CDI device names
// (cdispec.PlanFor against the configured spec directories, through the
// resolved-spec cache in in.CDICacheDir).
func defaultPlanner() preparer {
	return preparerFunc(func(ctx context.Context, in input) (*plan.Plan, error) {
		res, req, err := planner.Prepare(ctx, in.Spec, in.Rootfs, in.Config)
		if err != nil {
			return nil, err
		}
		var p *plan.Plan
		if res != nil {
			p = res.Plan
		}
		if len(req.CDIDevices) > 0 {
			// CDI mode: device names (NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,
			// cdi.k8s.io/ annotations) resolved against the spec dirs.
			var dirs []string
			if in.Config != nil {
				dirs = in.Config.Runtime.Modes.CDI.SpecDirs
			}
			cp, err := cdispec.PlanFor(req.CDIDevices, dirs, in.CDICacheDir)
			if err != nil {
				return nil, err
			}
			p = plan.Merge(p, cp, cdiedit.Merge)
		}
		return p, nil
	})
}
