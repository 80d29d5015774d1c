package inject

import (
	"context"
	"fmt"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/request"
)

// SpecJob turns a container's OCI spec into a Job: the request from its
// environment, mounts and annotations (request.FromSpec), the driver root
// from config.toml, and the target layout from the container's rootfs. A nil
// Job means the container asks for no GPU. CDI device names are returned in
// the request for the caller's CDI path.
func SpecJob(spec *specs.Spec, rootfsPath string, cfg *config.Config) (*Job, request.Request, error) {
	if cfg == nil {
		cfg = config.Default()
	}
	req, err := request.FromSpec(spec, cfg)
	if err != nil {
		return nil, req, &Error{Phase: PhaseInput, Err: err}
	}
	if req.Void || (len(req.Devices) == 0 && !req.All && !req.None) {
		return nil, req, nil
	}
	j, err := RequestJob(req, cfg)
	if err != nil {
		return nil, req, err
	}
	if j.Target, err = ImageTarget(rootfsPath); err != nil {
		return nil, req, &Error{Phase: PhaseInput, Err: fmt.Errorf("container rootfs: %w", err)}
	}
	return j, req, nil
}

// RequestJob turns a parsed request into a Job (without a target layout).
func RequestJob(req request.Request, cfg *config.Config) (*Job, error) {
	j := &Job{
		Driver:       discover.Options{Root: cfg.CLI.Root, LdCache: cfg.CLI.LdCache},
		Caps:         req.Caps,
		Requirements: req.Requirements,
		MIGConfig:    req.MIGConfig != "",
		MIGMonitor:   req.MIGMonitor != "",
	}
	switch {
	case req.All:
		j.Devices = []string{"all"}
	case req.None:
	default:
		j.Devices = req.Devices
	}
	for _, v := range []struct{ name, val string }{
		{request.EnvMIGConfigDevices, req.MIGConfig}, {request.EnvMIGMonitorDevices, req.MIGMonitor},
	} {
		if v.val != "" && v.val != "all" {
			return nil, &Error{Phase: PhaseInput, Err: fmt.Errorf("%s=%q: only \"all\" is supported", v.name, v.val)}
		}
	}
	for _, c := range req.IMEXChannels {
		n, err := strconv.ParseUint(c, 10, 32)
		if err != nil || n >= 1<<20 {
			return nil, &Error{Phase: PhaseInput, Err: fmt.Errorf("%s: invalid channel %q (want a decimal number below 1048576)", request.EnvIMEXChannels, c)}
		}
		j.IMEXChannels = append(j.IMEXChannels, int(n))
	}
	return j, nil
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
