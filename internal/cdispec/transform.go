package cdispec

import (
	"fmt"
	"path"
	"strings"

	cdi "tags.cncf.io/container-device-interface/specs-go"
)

// RelativeTo says which side of a spec's paths a root transform rewrites.
type RelativeTo string

// The sides of TransformRoot.
const (
	// RelativeToHost rewrites host paths: device nodes' hostPath (their
	// path when they have none), mounts' hostPath, hook programs (not
	// startContainer's, which runs in the container) and the arguments of
	// hooks that run on the host's side and are not createContainer hooks
	// (whose arguments are container paths).
	RelativeToHost RelativeTo = "host"
	// RelativeToContainer rewrites container paths: device nodes' path,
	// mounts' containerPath, startContainer hook programs and the
	// arguments of createContainer and startContainer hooks (each side of
	// a target::link pair).
	RelativeToContainer RelativeTo = "container"
)

// ParseRelativeTo reads a --relative-to value.
func ParseRelativeTo(s string) (RelativeTo, error) {
	switch r := RelativeTo(s); r {
	case RelativeToHost, RelativeToContainer:
		return r, nil
	}
	return "", fmt.Errorf("--relative-to %q: want host or container", s)
}

// TransformRoot moves the paths of one side of spec (see RelativeTo) that
// lie under from to the same place under to, in place: with from
// /run/nvidia/driver and to /, /run/nvidia/driver/usr/lib/libcuda.so.1
// becomes /usr/lib/libcuda.so.1. The match is by whole path components
// (/run/nvidia/driver2 is not under /run/nvidia/driver); an empty from or
// to means /. from equal to to changes nothing. These are the rules of
// NVIDIA's `nvidia-ctk cdi transform root`.
func TransformRoot(spec *cdi.Spec, from, to string, rel RelativeTo) error {
	if _, err := ParseRelativeTo(string(rel)); err != nil {
		return err
	}
	if spec == nil || from == to {
		return nil
	}
	t := rootTransform{from: from, to: to}
	t.edits(&spec.ContainerEdits, rel)
	for i := range spec.Devices {
		t.edits(&spec.Devices[i].ContainerEdits, rel)
	}
	return nil
}

type rootTransform struct{ from, to string }

// path returns p moved from t.from to t.to, or p when it is not under
// t.from.
func (t rootTransform) path(p string) string {
	from := t.from
	if !strings.HasSuffix(from, "/") {
		from += "/"
	}
	rest, ok := strings.CutPrefix(p+"/", from)
	if !ok {
		return p
	}
	to := t.to
	if to == "" {
		to = "/"
	}
	return path.Join(to, rest)
}

// arg moves a hook argument, each side of a target::link pair separately.
func (t rootTransform) arg(a string) string {
	if target, link, ok := strings.Cut(a, "::"); ok {
		return t.path(target) + "::" + t.path(link)
	}
	return t.path(a)
}

func (t rootTransform) edits(e *cdi.ContainerEdits, rel RelativeTo) {
	for _, n := range e.DeviceNodes {
		if rel == RelativeToContainer {
			n.Path = t.path(n.Path)
			continue
		}
		if n.HostPath == "" {
			n.HostPath = n.Path
		}
		n.HostPath = t.path(n.HostPath)
	}
	for _, m := range e.Mounts {
		if rel == RelativeToContainer {
			m.ContainerPath = t.path(m.ContainerPath)
		} else {
			m.HostPath = t.path(m.HostPath)
		}
	}
	for _, h := range e.Hooks {
		inContainer := h.HookName == "createContainer" || h.HookName == "startContainer"
		if (rel == RelativeToContainer) == (h.HookName == "startContainer") {
			h.Path = t.path(h.Path)
		}
		if (rel == RelativeToContainer) != inContainer {
			continue
		}
		for i, a := range h.Args {
			h.Args[i] = t.arg(a)
		}
	}
}
