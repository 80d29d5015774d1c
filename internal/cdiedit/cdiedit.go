// Package cdiedit applies and merges CDI container edits with the CDI
// library's own editor (tags.cncf.io/container-device-interface/pkg/cdi),
// exactly as Podman, Docker and containerd do.
//
// It is the one place nctk calls the library's editor, so that what only
// reads config.json or builds plans (the `--gpus` hook, nvidia-cdi-hook)
// does not link the library, its YAML parsers and their initialisers:
// ocispec.Apply takes Apply through ocispec.HookConfig.EditCDI, plan.Merge
// takes Merge.
package cdiedit

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// Apply validates e and applies it to s with the CDI library's editor
// (cdi.ContainerEdits.Apply: environment replaced by key, device nodes by
// path with the host node's type, numbers and mode where e leaves them
// out, mounts by destination and sorted, hooks appended, additionalGids,
// intelRdt and netDevices). e is not changed; s is edited in place.
func Apply(s *specs.Spec, e *cdispecs.ContainerEdits) error {
	edits := clone(e)
	if err := edits.Validate(); err != nil {
		return fmt.Errorf("CDI container edits: %w", err)
	}
	if err := edits.Apply(s); err != nil {
		return fmt.Errorf("CDI container edits: %w", err)
	}
	return nil
}

// Merge returns edits holding a's, then b's, with the CDI library's merge
// rules (lists appended, b's intelRdt wins); nil when both are nil. a and
// b are not changed.
func Merge(a, b *cdispecs.ContainerEdits) *cdispecs.ContainerEdits {
	if a == nil && b == nil {
		return nil
	}
	m := (&cdi.ContainerEdits{}).Append(&cdi.ContainerEdits{ContainerEdits: a})
	return m.Append(&cdi.ContainerEdits{ContainerEdits: b}).ContainerEdits
}

// clone copies e deeply enough that applying the copy (which fills in a
// device node's missing type, numbers and mode) leaves e as it was.
func clone(e *cdispecs.ContainerEdits) *cdi.ContainerEdits {
	c := *e
	c.DeviceNodes = make([]*cdispecs.DeviceNode, len(e.DeviceNodes))
	for i, d := range e.DeviceNodes {
		n := *d
		c.DeviceNodes[i] = &n
	}
	return &cdi.ContainerEdits{ContainerEdits: &c}
}
