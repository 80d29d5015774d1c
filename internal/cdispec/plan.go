package cdispec

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/plan"
)

// PlanFor resolves CDI device names against the spec files in specDirs and
// returns what they add to a container as an injection plan, so that the
// runtime applies CDI requests through the same spec editor as every other
// request (keeping the config.json fields runtime-spec does not know).
func PlanFor(names, specDirs []string) (*plan.Plan, error) {
	e, err := Edits(names, specDirs)
	if err != nil {
		return nil, err
	}
	p := &plan.Plan{}
	if e.Process != nil {
		p.Env = append(p.Env, e.Process.Env...)
	}
	if e.Linux != nil {
		for _, d := range e.Linux.Devices {
			if d.Type != "c" {
				return nil, fmt.Errorf("CDI device node %s: type %q: only character devices are supported", d.Path, d.Type)
			}
			dev := plan.Device{Path: d.Path, HostPath: d.Path, Major: uint32(d.Major), Minor: uint32(d.Minor), FileMode: 0o666}
			if d.FileMode != nil {
				dev.FileMode = uint32(d.FileMode.Perm())
			}
			if d.UID != nil {
				dev.UID = *d.UID
			}
			if d.GID != nil {
				dev.GID = *d.GID
			}
			p.Devices = append(p.Devices, dev)
		}
	}
	for _, m := range e.Mounts {
		p.Mounts = append(p.Mounts, plan.Mount{Source: m.Source, Destination: m.Destination, Options: m.Options})
	}
	if h := e.Hooks; h != nil {
		for _, st := range []struct {
			name  string
			hooks []specs.Hook
		}{
			//lint:ignore SA1019 CDI specs may still carry prestart hooks.
			{"prestart", h.Prestart},
			{"createRuntime", h.CreateRuntime}, {"createContainer", h.CreateContainer},
			{"startContainer", h.StartContainer}, {"poststart", h.Poststart}, {"poststop", h.Poststop},
		} {
			for _, hk := range st.hooks {
				p.Hooks = append(p.Hooks, plan.Hook{Stage: st.name, Path: hk.Path, Args: hk.Args, Env: hk.Env, Timeout: hk.Timeout})
			}
		}
	}
	return p, nil
}
