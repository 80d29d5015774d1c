package runtime

import (
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/cdispec"
	"github.com/nctk/nctk/internal/plan"
)

// appliedEdits is the plan of a config.json to which the engine has applied
// a CDI spec itself (Podman, Docker 25+, containerd's CRI), when the engine
// then runs this runtime (a Kubernetes runtime class naming it) and the
// spec's createContainer hooks include this installation's own
// nvidia-cdi-hook: CDI edits holding config.json's createContainer hooks
// from the first of its own on (the CDI library appends a spec's hooks
// after the engine's) and its bind mounts of host paths (what the hooks'
// libraries are mounted from), which injectPlan lifts as it lifts a
// spec's, writing back the hooks before them and those that stay
// (ocispec.HookConfig.Applied). It also returns the hooks before them.
// nil when there is nothing of its own to lift.
func (r *Runtime) appliedEdits(spec *specs.Spec) (*plan.Plan, []*cdispecs.Hook) {
	if spec.Hooks == nil {
		return nil, nil
	}
	own := r.ownHook()
	first := slices.IndexFunc(spec.Hooks.CreateContainer, func(h specs.Hook) bool { return own(h.Path) })
	if first < 0 {
		return nil, nil
	}
	var before []*cdispecs.Hook
	e := &cdispecs.ContainerEdits{}
	for i, h := range spec.Hooks.CreateContainer {
		c := &cdispecs.Hook{HookName: "createContainer", Path: h.Path, Args: h.Args, Env: h.Env, Timeout: h.Timeout}
		if i < first {
			before = append(before, c)
		} else {
			e.Hooks = append(e.Hooks, c)
		}
	}
	for _, m := range spec.Mounts {
		if isHostBind(m) && filepath.IsAbs(m.Destination) {
			e.Mounts = append(e.Mounts, &cdispecs.Mount{HostPath: m.Source, ContainerPath: m.Destination, Type: m.Type, Options: m.Options})
		}
	}
	// Something to lift at all (the options injectPlan uses lift no more
	// than these).
	if _, w := cdispec.LiftOwnHooks(e, own, cdispec.LiftOptions{KeepInContainer: true, AfterCreate: true, DevicesKnown: true}); w.Hooks == 0 {
		return nil, nil
	}
	return &plan.Plan{CDI: e}, before
}
