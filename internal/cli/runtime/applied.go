package runtime

import (
	"path"
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
// nvidia-cdi-hook (own, Runtime.ownHook): CDI edits holding config.json's createContainer hooks
// from the first of its own on (the CDI library appends a spec's hooks
// after the engine's) and the bind mounts of config.json that one of the
// CDI specs in specDirs has (host and container path alike: the spec's,
// not the engine's; cdispec.MountsCached), which injectPlan lifts as it
// lifts a spec's, writing back the hooks before them and those that stay
// (ocispec.HookConfig.Applied), and whose mounts it may make after the
// create. It also returns the hooks before them and the destinations of
// those mounts. When no mount is found in the specs (another spec
// directory than the engine's), every bind mount of a host path is in the
// edits, for the hooks' libraries, and none is returned: they stay the
// low-level runtime's. nil when there is nothing of its own to lift.
func appliedEdits(spec *specs.Spec, own func(string) bool, specDirs []string, cacheDir string) (*plan.Plan, []*cdispecs.Hook, []string) {
	if spec.Hooks == nil || len(spec.Hooks.CreateContainer) == 0 {
		return nil, nil, nil // every container but a GPU one: nothing looked at
	}
	first := slices.IndexFunc(spec.Hooks.CreateContainer, func(h specs.Hook) bool { return own(h.Path) })
	if first < 0 {
		return nil, nil, nil
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
	inSpecs := map[[2]string]bool{}
	if ms, err := cdispec.MountsCached(specDirs, cacheDir); err == nil {
		for _, m := range ms {
			if m != nil {
				inSpecs[[2]string{m.HostPath, path.Clean("/" + m.ContainerPath)}] = true
			}
		}
	}
	var binds []*cdispecs.Mount
	var dsts []string
	for _, m := range spec.Mounts {
		if !isHostBind(m) || !filepath.IsAbs(m.Destination) {
			continue
		}
		c := &cdispecs.Mount{HostPath: m.Source, ContainerPath: m.Destination, Type: m.Type, Options: m.Options}
		binds = append(binds, c)
		if d := path.Clean(m.Destination); inSpecs[[2]string{m.Source, d}] {
			e.Mounts = append(e.Mounts, c)
			dsts = append(dsts, d)
		}
	}
	if len(e.Mounts) == 0 {
		e.Mounts = binds
	}
	// Something to lift at all (the options injectPlan uses lift no more
	// than these).
	if _, w := cdispec.LiftOwnHooks(e, own, cdispec.LiftOptions{KeepInContainer: true, AfterCreate: true, DevicesKnown: true}); w.Hooks == 0 {
		return nil, nil, nil
	}
	return &plan.Plan{CDI: e}, before, dsts
}
