package ocispec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/nctk/nctk/internal/jsonerr"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// cdiView is the part of config.json that the CDI library's editor reads or
// writes (cdi.ContainerEdits.Apply): process.env and process.user (device
// owner defaults, additionalGids), mounts, hooks, linux.devices,
// linux.resources.devices, linux.netDevices, linux.intelRdt and
// linux.namespaces (a user namespace adds idmap options to bind mounts).
type cdiView struct {
	Process *struct {
		Env  []string   `json:"env,omitempty"`
		User specs.User `json:"user"`
	} `json:"process,omitempty"`
	Mounts []specs.Mount `json:"mounts,omitempty"`
	Hooks  *specs.Hooks  `json:"hooks,omitempty"`
	Linux  *struct {
		Devices   []specs.LinuxDevice `json:"devices,omitempty"`
		Resources *struct {
			Devices []specs.LinuxDeviceCgroup `json:"devices,omitempty"`
		} `json:"resources,omitempty"`
		NetDevices map[string]specs.LinuxNetDevice `json:"netDevices,omitempty"`
		IntelRdt   *specs.LinuxIntelRdt            `json:"intelRdt,omitempty"`
		Namespaces []specs.LinuxNamespace          `json:"namespaces,omitempty"`
	} `json:"linux,omitempty"`
}

// spec returns the view as a specs.Spec holding only its fields.
func (v *cdiView) spec() *specs.Spec {
	s := &specs.Spec{Mounts: v.Mounts, Hooks: v.Hooks}
	if v.Process != nil {
		s.Process = &specs.Process{Env: v.Process.Env, User: v.Process.User}
	}
	if l := v.Linux; l != nil {
		s.Linux = &specs.Linux{Devices: l.Devices, NetDevices: l.NetDevices, IntelRdt: l.IntelRdt, Namespaces: l.Namespaces}
		if l.Resources != nil {
			s.Linux.Resources = &specs.LinuxResources{Devices: l.Resources.Devices}
		}
	}
	return s
}

// applyCDI applies CDI container edits to the generic tree with editCDI,
// the CDI library's own editor (cdiedit.Apply), so that config.json gets
// exactly what Podman, Docker and containerd give a CDI device
// (cdi.Cache.InjectDevices): environment replaced by key, device nodes
// replaced by path with their type, numbers, mode and owner (stat'ed from
// the host node where the spec leaves them out) and a cgroup rule with the
// spec's permissions, mounts replaced by destination with their type and
// options as given and sorted as the library sorts them, hooks appended to
// their stage with their own env and timeout, additionalGids, intelRdt and
// netDevices. The edited fields are written back into the tree; entries
// the edit left as they were keep their generic form (and so any field
// runtime-spec does not know), and every other field of the document is
// untouched. e is not changed.
//
// view is the typed view of tree's fields the editor reads (cdiView's),
// when the caller has it (Parse decoded it, and nothing changed them
// since); nil: tree is encoded and decoded here. It is not changed.
func applyCDI(tree object, e *cdispecs.ContainerEdits, view *specs.Spec, editCDI CDIEditor) error {
	if editCDI == nil {
		return errors.New("CDI container edits: no CDI editor given (HookConfig.EditCDI)")
	}
	if view == nil {
		data, err := encode(tree)
		if err != nil {
			return err
		}
		var v cdiView
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("CDI container edits: %w", jsonerr.Describe(data, err))
		}
		view = v.spec()
	}
	// The editor edits the lists in place: s is a copy, and before keeps
	// the entries as they were, the typed twins of the tree's generic
	// entries.
	s, before := cloneForEdit(view), cloneForEdit(view)
	if err := editCDI(s, e); err != nil {
		return err
	}
	return writeBackCDI(tree, s, before)
}

// cloneForEdit copies the CDI editor's view v deeply enough that the
// editor's changes to the copy (lists edited in place, entries appended or
// replaced, groups added) leave v as it was.
func cloneForEdit(v *specs.Spec) *specs.Spec {
	s := &specs.Spec{Mounts: slices.Clone(v.Mounts), Hooks: cloneHooks(v.Hooks)}
	if v.Process != nil {
		p := *v.Process
		p.Env = slices.Clone(p.Env)
		p.User.AdditionalGids = slices.Clone(p.User.AdditionalGids)
		s.Process = &p
	}
	if v.Linux != nil {
		l := *v.Linux
		l.Devices = slices.Clone(l.Devices)
		if l.Resources != nil {
			l.Resources = &specs.LinuxResources{Devices: slices.Clone(l.Resources.Devices)}
		}
		l.NetDevices = maps.Clone(l.NetDevices)
		if l.IntelRdt != nil {
			r := *l.IntelRdt
			l.IntelRdt = &r
		}
		l.Namespaces = slices.Clone(l.Namespaces)
		s.Linux = &l
	}
	return s
}

// cloneHooks copies h and its lists.
func cloneHooks(h *specs.Hooks) *specs.Hooks {
	if h == nil {
		return nil
	}
	c := *h
	//lint:ignore SA1019 CDI specs may still carry prestart hooks.
	c.Prestart = slices.Clone(h.Prestart)
	c.CreateRuntime = slices.Clone(h.CreateRuntime)
	c.CreateContainer = slices.Clone(h.CreateContainer)
	c.StartContainer = slices.Clone(h.StartContainer)
	c.Poststart = slices.Clone(h.Poststart)
	c.Poststop = slices.Clone(h.Poststop)
	return &c
}

// writeBackCDI writes the fields of s that the CDI editor may have changed
// into tree; before is the typed view of tree before the edit (its lists'
// entries are the typed twins of the tree's).
func writeBackCDI(tree object, s, before *specs.Spec) error {
	if s.Process != nil {
		proc, err := objectAt(tree, "process", "process")
		if err != nil {
			return err
		}
		var env []string
		var gidsWas []uint32
		if before.Process != nil {
			env, gidsWas = before.Process.Env, before.Process.User.AdditionalGids
		}
		if err := setArray(proc, "env", "process.env", s.Process.Env, env); err != nil {
			return err
		}
		if gids := s.Process.User.AdditionalGids; len(gids) > 0 {
			user, err := objectAt(proc, "user", "process.user")
			if err != nil {
				return err
			}
			if err := setArray(user, "additionalGids", "process.user.additionalGids", gids, gidsWas); err != nil {
				return err
			}
		}
	}
	if err := setArray(tree, "mounts", "mounts", s.Mounts, before.Mounts); err != nil {
		return err
	}
	if h := s.Hooks; h != nil {
		ho, err := objectAt(tree, "hooks", "hooks")
		if err != nil {
			return err
		}
		was := before.Hooks
		if was == nil {
			was = &specs.Hooks{}
		}
		for _, st := range []struct {
			name       string
			hooks, was []specs.Hook
		}{
			//lint:ignore SA1019 CDI specs may still carry prestart hooks.
			{"prestart", h.Prestart, was.Prestart},
			{"createRuntime", h.CreateRuntime, was.CreateRuntime}, {"createContainer", h.CreateContainer, was.CreateContainer},
			{"startContainer", h.StartContainer, was.StartContainer}, {"poststart", h.Poststart, was.Poststart},
			{"poststop", h.Poststop, was.Poststop},
		} {
			if err := setArray(ho, st.name, "hooks."+st.name, st.hooks, st.was); err != nil {
				return err
			}
		}
	}
	l := s.Linux
	if l == nil {
		return nil
	}
	linux, err := objectAt(tree, "linux", "linux")
	if err != nil {
		return err
	}
	var devs []specs.LinuxDevice
	var rules []specs.LinuxDeviceCgroup
	if before.Linux != nil {
		devs = before.Linux.Devices
		if before.Linux.Resources != nil {
			rules = before.Linux.Resources.Devices
		}
	}
	if err := setArray(linux, "devices", "linux.devices", l.Devices, devs); err != nil {
		return err
	}
	if l.Resources != nil && len(l.Resources.Devices) > 0 {
		res, err := objectAt(linux, "resources", "linux.resources")
		if err != nil {
			return err
		}
		if err := setArray(res, "devices", "linux.resources.devices", l.Resources.Devices, rules); err != nil {
			return err
		}
	}
	if len(l.NetDevices) > 0 {
		nd, err := objectAt(linux, "netDevices", "linux.netDevices")
		if err != nil {
			return err
		}
		for name, dev := range l.NetDevices {
			if err := setValue(nd, name, "linux.netDevices."+name, dev); err != nil {
				return err
			}
		}
	}
	if l.IntelRdt != nil {
		return setValue(linux, "intelRdt", "linux.intelRdt", *l.IntelRdt)
	}
	return nil
}

// setArray sets parent[key] to the array typed, reusing the generic form of
// each entry of the old array that decodes to an equal value (so that its
// unknown fields survive); an empty typed array leaves parent as it is.
// was, when it has as many entries as the old array, holds them decoded
// (nil: each is decoded here).
func setArray[T any](parent object, key, name string, typed, was []T) error {
	if len(typed) == 0 {
		return nil
	}
	old, err := arrayAt(parent, key, name)
	if err != nil {
		return err
	}
	oldTyped := make([]*T, len(old))
	for i, v := range old {
		if len(was) == len(old) {
			oldTyped[i] = &was[i]
			continue
		}
		var t T
		if err := roundTrip(v, &t); err == nil {
			oldTyped[i] = &t
		}
	}
	out, ok := genericOf(typed)
	if !ok {
		g, err := toGeneric(typed)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if out, ok = g.([]any); !ok {
			return fmt.Errorf("%s: does not encode as an array", name)
		}
	}
	if len(out) != len(typed) {
		return fmt.Errorf("%s: does not encode as an array of %d entries", name, len(typed))
	}
	for k, t := range typed {
		for i, o := range oldTyped {
			if o != nil && reflect.DeepEqual(*o, t) {
				out[k] = old[i]
				oldTyped[i] = nil
				break
			}
		}
	}
	parent[key] = out
	return nil
}

// setValue sets parent[key] to v unless it already holds an equal value.
func setValue[T any](parent object, key, name string, v T) error {
	if old, ok := parent[key]; ok {
		var t T
		if roundTrip(old, &t) == nil && reflect.DeepEqual(t, v) {
			return nil
		}
	}
	g, err := toGeneric(v)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	parent[key] = g
	return nil
}

// roundTrip decodes the generic value v into dst.
func roundTrip(v, dst any) error {
	data, err := encode(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, dst)
}

// toGeneric encodes v and decodes it into the generic tree's form (exact
// number literals).
func toGeneric(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return nil, err
	}
	return g, nil
}
