package planner

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/request"
)

// SpecJob turns a container's OCI spec into a Job: the request from its
// environment, mounts and annotations (request.FromSpec), the driver root
// from config.toml, and the target layout from the container's rootfs. A nil
// Job means the container asks for no GPU. CDI device names are returned in
// the request for the caller's CDI path. Errors are *phase.Error.
func SpecJob(spec *specs.Spec, rootfsPath string, cfg *config.Config) (*Job, request.Request, error) {
	if cfg == nil {
		cfg = config.Default()
	}
	req, err := request.FromSpec(spec, cfg)
	if err != nil {
		return nil, req, err
	}
	if !req.WantsGPUs() {
		return nil, req, nil
	}
	target, err := ImageTarget(rootfsPath)
	if err != nil {
		return nil, req, &phase.Error{Phase: phase.Input, Err: fmt.Errorf("container rootfs: %w", err)}
	}
	return &Job{
		Request: req,
		Driver:  discover.Options{Root: cfg.CLI.Root, LdCache: cfg.CLI.LdCache},
		Target:  target,
		// NVIDIA's opt-out of additionalGids.
		NoAdditionalGIDs: cfg.Features.NoAdditionalGIDsForDeviceNodes,
	}, req, nil
}

// Prepare computes the plan for the container described by spec, whose
// root filesystem is at rootfsPath. It returns nil for a container that
// asks for no GPU.
func Prepare(ctx context.Context, spec *specs.Spec, rootfsPath string, cfg *config.Config) (*Result, request.Request, error) {
	j, req, err := SpecJob(spec, rootfsPath, cfg)
	if err != nil || j == nil {
		return nil, req, err
	}
	r, err := Run(ctx, *j)
	return r, req, err
}
