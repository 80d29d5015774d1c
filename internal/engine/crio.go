package engine

import (
	"errors"
	"fmt"
)

// CRIO is CRI-O's engine name.
const CRIO Engine = "crio"

// CRI-O's configuration files.
const (
	DefaultCRIOConfig = "/etc/crio/crio.conf"
	DefaultCRIODropIn = "/etc/crio/crio.conf.d/99-nvidia.toml"
)

// crioEngine is CRI-O: crio.conf, or a drop-in file from crio.conf.d that
// CRI-O merges over it.
type crioEngine struct{}

func (crioEngine) Name() Engine              { return CRIO }
func (crioEngine) Aliases() []string         { return []string{"cri-o"} }
func (crioEngine) DefaultConfigPath() string { return DefaultCRIOConfig }
func (crioEngine) DefaultDropInPath() string { return DefaultCRIODropIn }
func (crioEngine) RuntimeByName() bool       { return false }
func (crioEngine) Daemon() string            { return "crio" }

// ConfigCommands is `crio status config`, or the older `crio-status
// config`.
func (crioEngine) ConfigCommands(string) [][]string {
	return [][]string{{"crio", "status", "config"}, {"crio-status", "config"}}
}

// Edit registers the runtime (see EditCRIO) in the drop-in file, with the
// main file as the base configuration, or else in the main file. A
// configuration source replaces the base. CDI needs no setting: CRI-O
// always has it on.
func (crioEngine) Edit(c Config, o Options) (*Result, error) {
	res := &Result{}
	if o.EnableCDI {
		res.Notes = append(res.Notes, "CDI is always enabled in CRI-O; --cdi.enabled has no effect")
	}
	target, base, baseName := c.Main, []byte(nil), c.Main.Path
	if c.DropIn.Path != "" {
		target, base = c.DropIn, c.Main.Data
	}
	if c.Source != nil {
		base, baseName = c.Source, "configuration source"
	}
	out, err := EditCRIO(target.Data, base, o)
	var be *baseConfigError
	if errors.As(err, &be) {
		return nil, fmt.Errorf("%s: %w", baseName, be.err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", target.Path, err)
	}
	res.Files = []File{target.update(out)}
	return res, nil
}

// baseConfigError is EditCRIO's error for a base configuration that does
// not parse.
type baseConfigError struct{ err error }

func (e *baseConfigError) Error() string { return "base configuration: " + e.err.Error() }
func (e *baseConfigError) Unwrap() error { return e.err }

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
// configuration in drop-in mode, or the effective configuration. Unchanged
// content is returned as is.
func EditCRIO(data, base []byte, o Options) ([]byte, error) {
	b, err := parseTOML(base)
	if err != nil {
		return nil, &baseConfigError{err}
	}
	o = o.withDefaults()
	if err := o.validate(crioEngine{}); err != nil {
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
