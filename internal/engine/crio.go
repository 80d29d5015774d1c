package engine

import (
	"errors"
	"fmt"
	"reflect"
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

// Edit registers the runtime (see EditCRIO). In drop-in mode the drop-in is
// written afresh, as NVIDIA's nvidia-ctk does: it holds only the runtime
// (and the default), copied from the main file's base runtime; a drop-in
// that already says the same keeps its bytes. Without a drop-in the main
// file is edited in place, keeping the rest of it. A configuration source
// replaces the main file as the base. CDI needs no setting: CRI-O always
// has it on.
func (crioEngine) Edit(c Config, o Options) (*Result, error) {
	res := &Result{}
	if o.EnableCDI {
		res.Notes = append(res.Notes, "CDI is always enabled in CRI-O; --cdi.enabled has no effect")
	}
	target, data, base, baseName := c.Main, c.Main.Data, []byte(nil), c.Main.Path
	if c.DropIn.Path != "" {
		target, data, base = c.DropIn, nil, c.Main.Data
	}
	if c.Source != nil {
		base, baseName = c.Source, "configuration source"
	}
	out, err := EditCRIO(data, base, o)
	var be *baseConfigError
	if errors.As(err, &be) {
		return nil, fmt.Errorf("%s: %w", baseName, be.err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", target.Path, err)
	}
	if c.DropIn.Path != "" {
		out = keepEquivalent(target.Data, out)
	}
	res.Files = []File{target.update(out)}
	return res, nil
}

// keepEquivalent returns old when it is TOML that decodes to the same as
// data, else data.
func keepEquivalent(old, data []byte) []byte {
	if len(old) == 0 {
		return data
	}
	a, err := parseTOML(old)
	if err != nil {
		return data
	}
	b, err := parseTOML(data)
	if err != nil || !reflect.DeepEqual(a, b) {
		return data
	}
	return old
}

// baseConfigError is EditCRIO's error for a base configuration that does
// not parse.
type baseConfigError struct{ err error }

func (e *baseConfigError) Error() string { return "base configuration: " + e.err.Error() }
func (e *baseConfigError) Unwrap() error { return e.err }

// crioRuntimesPath is where CRI-O keeps its runtime handlers.
func crioRuntimesPath() []string { return []string{"crio", "runtime", "runtimes"} }

// EditCRIO registers the runtime in the CRI-O TOML content data (crio.conf
// itself, or empty for a new drop-in for crio.conf.d, which CRI-O merges
// key by key over the main file) and returns the new content, as NVIDIA's
// nvidia-ctk 1.20 writes it: [crio.runtime.runtimes.<name>] is replaced by
// a copy of the base runtime's table, then runtime_path = RuntimePath and
// runtime_type = "oci" are set. The base runtime is, in base (or in data
// when base is nil), the default runtime (crio.runtime.default_runtime,
// unless it is one of NVIDIA's), else runc, else crun, so that
// monitor_path, runtime_root and the like carry over; when there is none,
// an existing entry is kept and updated. SetAsDefault sets
// crio.runtime.default_runtime; without it a default_runtime naming the
// runtime is removed. Unchanged content is returned as is.
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
	if base == nil {
		b = t
	}
	before := deepCopy(t)
	runtimes, err := subTable(t, crioRuntimesPath(), true)
	if err != nil {
		return nil, err
	}
	self := ""
	if base == nil {
		self = o.RuntimeName
	}
	if r := crioBaseRuntime(b, self); r != nil {
		runtimes[o.RuntimeName] = r
	}
	rt, err := subTable(t, append(crioRuntimesPath(), o.RuntimeName), true)
	if err != nil {
		return nil, err
	}
	rt["runtime_path"] = o.RuntimePath
	rt["runtime_type"] = "oci"
	rtTable, err := subTable(t, []string{"crio", "runtime"}, true)
	if err != nil {
		return nil, err
	}
	if o.SetAsDefault {
		rtTable["default_runtime"] = o.RuntimeName
	} else if def, _ := rtTable["default_runtime"].(string); def == o.RuntimeName {
		delete(rtTable, "default_runtime")
	}
	return encodeChanged(data, before, t)
}

// crioBaseRuntime returns a copy of the table a new CRI-O runtime starts
// from (see EditCRIO), or nil. self is as for containerd's baseRuntime:
// the runtime configured in a file edited in place, its own base when the
// default runtime is one of NVIDIA's.
func crioBaseRuntime(base tomlTable, self string) tomlTable {
	var candidates []string
	switch def, _ := lookupTable(base, []string{"crio", "runtime"})["default_runtime"].(string); {
	case def != "" && !isNVIDIARuntime(def):
		candidates = append(candidates, def)
	case def != "" && self != "":
		candidates = append(candidates, self)
	}
	runtimes := lookupTable(base, crioRuntimesPath())
	for _, c := range append(candidates, "runc", "crun") {
		if r, ok := runtimes[c].(map[string]any); ok {
			return deepCopy(r).(map[string]any)
		}
	}
	return nil
}
