package engine

import (
	"fmt"
)

// crioRuntimesPath is where CRI-O keeps its runtime handlers.
func crioRuntimesPath() []string { return []string{"crio", "runtime", "runtimes"} }

// EditCRIO registers the runtime in the CRI-O TOML content data (crio.conf
// itself, or a drop-in from crio.conf.d, which CRI-O merges key by key over
// the main file) and returns the new content:
// [crio.runtime.runtimes.<name>] with runtime_path = RuntimePath and
// runtime_type = "oci", and with SetAsDefault crio.runtime.default_runtime.
// A new runtime table starts as a copy of an existing table of that name
// in base, or else of the default runtime's (crio.runtime.default_runtime,
// else runc, else crun) in data or base, so that monitor_path,
// runtime_root and the like carry over. base (may be nil) is the main
// configuration in drop-in mode. Unchanged content is returned as is.
func EditCRIO(data, base []byte, o Options) ([]byte, error) {
	b, err := parseTOML(base)
	if err != nil {
		return nil, fmt.Errorf("base configuration: %w", err)
	}
	return editCRIO(data, b, o)
}

// editCRIO is EditCRIO with the base configuration decoded (an empty table
// for none).
func editCRIO(data []byte, b tomlTable, o Options) ([]byte, error) {
	o = o.withDefaults()
	if err := o.validate(CRIO); err != nil {
		return nil, err
	}
	t, err := parseTOML(data)
	if err != nil {
		return nil, err
	}
	before := deepCopy(t)
	runtimes, err := subTable(t, crioRuntimesPath(), true)
	if err != nil {
		return nil, err
	}
	rtPath := append(crioRuntimesPath(), o.RuntimeName)
	rt, err := subTable(t, rtPath, false)
	if err != nil {
		return nil, err
	}
	if rt == nil {
		rt = crioBaseRuntime(t, b, o.RuntimeName)
		runtimes[o.RuntimeName] = rt
	}
	rt["runtime_path"] = o.RuntimePath
	rt["runtime_type"] = "oci"
	if o.SetAsDefault {
		rtTable, err := subTable(t, []string{"crio", "runtime"}, true)
		if err != nil {
			return nil, err
		}
		rtTable["default_runtime"] = o.RuntimeName
	}
	return encodeChanged(data, before, t)
}

// crioBaseRuntime picks the table a new CRI-O runtime is copied from.
func crioBaseRuntime(t, base tomlTable, name string) tomlTable {
	lookup := func(rt string) tomlTable {
		for _, cfg := range []tomlTable{t, base} {
			if r, err := subTable(cfg, append(crioRuntimesPath(), rt), false); err == nil && r != nil {
				return r
			}
		}
		return nil
	}
	if r, err := subTable(base, append(crioRuntimesPath(), name), false); err == nil && r != nil {
		return deepCopy(r).(map[string]any)
	}
	var candidates []string
	for _, cfg := range []tomlTable{t, base} {
		if rtTable, err := subTable(cfg, []string{"crio", "runtime"}, false); err == nil && rtTable != nil {
			if def, ok := rtTable["default_runtime"].(string); ok && def != name {
				candidates = append(candidates, def)
			}
		}
	}
	candidates = append(candidates, "runc", "crun")
	for _, c := range candidates {
		if r := lookup(c); r != nil {
			return deepCopy(r).(map[string]any)
		}
	}
	return tomlTable{}
}
