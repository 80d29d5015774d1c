package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// Containerd is containerd's engine name.
const Containerd Engine = "containerd"

// containerd's configuration files.
const (
	DefaultContainerdConfig = "/etc/containerd/config.toml"
	DefaultContainerdDropIn = "/etc/containerd/conf.d/99-nvidia.toml"
)

// runcShimV2 is the containerd shim that honours options.BinaryName.
const runcShimV2 = "io.containerd.runc.v2"

// containerdEngine is containerd: config.toml, optionally with a drop-in
// file it imports.
type containerdEngine struct{}

func (containerdEngine) Name() Engine              { return Containerd }
func (containerdEngine) Aliases() []string         { return nil }
func (containerdEngine) DefaultConfigPath() string { return DefaultContainerdConfig }
func (containerdEngine) DefaultDropInPath() string { return DefaultContainerdDropIn }
func (containerdEngine) RuntimeByName() bool       { return false }
func (containerdEngine) Daemon() string            { return "containerd" }

// ConfigCommands is `containerd config dump`, given `--config configPath`
// when that file exists.
func (containerdEngine) ConfigCommands(configPath string) [][]string {
	argv := []string{"containerd"}
	if _, err := os.Stat(configPath); err == nil {
		argv = append(argv, "--config", configPath)
	}
	return [][]string{append(argv, "config", "dump")}
}

// Edit registers the runtime (see EditContainerd). In drop-in mode the
// drop-in comes first, followed by the main file when its imports change.
func (containerdEngine) Edit(c Config, o Options) (*Result, error) {
	in := ContainerdInput{Main: c.Main.Data, MainPath: c.Main.Path, DropIn: c.DropIn.Data, DropInPath: c.DropIn.Path, Source: c.Source}
	out, err := EditContainerd(in, o)
	if err != nil {
		return nil, err
	}
	res := &Result{Notes: out.Notes}
	if out.DropIn == nil {
		res.Files = []File{c.Main.update(out.Main)}
		return res, nil
	}
	res.Files = []File{c.DropIn.update(out.DropIn)}
	// The main file only matters when it changes.
	if main := c.Main.update(out.Main); main.Changed {
		res.Files = append(res.Files, main)
	}
	return res, nil
}

// ContainerdInput is what EditContainerd works on.
type ContainerdInput struct {
	// Main is the content of the main config.toml (empty: none).
	Main []byte
	// MainPath names the main file in messages and resolves relative
	// imports.
	MainPath string
	// DropIn is the current content of the drop-in file (empty: none). It
	// is replaced, not merged; when it already says what the edit writes,
	// its bytes are kept.
	DropIn []byte
	// DropInPath, an absolute path, selects drop-in mode; "" edits Main.
	DropInPath string
	// Source, when non-nil, is the effective configuration (`containerd
	// config dump`) to take the CRI plugin settings from instead of Main.
	Source []byte
}

// ContainerdOutput is the result of EditContainerd.
type ContainerdOutput struct {
	// Main is the new main file (the input bytes when nothing changed).
	Main []byte
	// DropIn is the new drop-in file, nil unless in drop-in mode.
	DropIn []byte
	// Version is the config version the edit followed (1, 2 or 3).
	Version int
	Notes   []string
}

// CRIPluginPath returns the key path of the CRI runtime plugin's table in a
// config of the given version.
func CRIPluginPath(version int) []string {
	switch version {
	case 1:
		return []string{"plugins", "cri"}
	case 2:
		return []string{"plugins", "io.containerd.grpc.v1.cri"}
	default:
		return []string{"plugins", "io.containerd.cri.v1.runtime"}
	}
}

// ContainerdVersion returns the config version of t: 2 for an empty file
// (containerd 1.x's default), 1 when the key is missing, else its value.
func ContainerdVersion(t tomlTable) (int, error) {
	if len(t) == 0 {
		return 2, nil
	}
	v, ok := t["version"]
	if !ok {
		return 1, nil
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("version is a %s, not an integer", tomlKind(v))
	}
	if n < 1 || n > 3 {
		return 0, fmt.Errorf("unsupported config version %d (want 1, 2 or 3)", n)
	}
	return int(n), nil
}

// EditContainerd registers the runtime in containerd's configuration, as
// NVIDIA's nvidia-ctk 1.20 does.
//
// The runtime goes to <cri plugin>.containerd.runtimes.<name> (the plugin
// path depends on the config version, see CRIPluginPath). The entry is
// rebuilt on every run as a copy of the base runtime's table, whatever its
// type (see baseRuntime), so that SystemdCgroup, runtime_root,
// privileged_without_host_devices and the like carry over; runtime_type is
// set to "io.containerd.runc.v2" only when the copy has none, and
// options.BinaryName (in version 1 also options.Runtime) to RuntimePath.
// SetAsDefault sets containerd.default_runtime_name; without it a
// default_runtime_name naming the runtime is removed. EnableCDI sets
// enable_cdi = true in the CRI plugin table.
//
// In drop-in mode (DropInPath set, config version 2 or 3) the drop-in is
// written afresh on every run: the version, a copy of the source's whole
// CRI plugin table (containerd before 2.1 replaces a plugin's table with an
// imported file's, so a partial table would drop the main file's settings)
// and the change; an existing drop-in is replaced, not merged. The main
// file gets "<drop-in dir>/*.toml" appended to its top-level imports unless
// an entry already names that glob or is a glob covering the drop-in.
// Version 1 configs cannot import files; they are edited in place, with a
// note. With a Source, the drop-in follows the source's config version.
func EditContainerd(in ContainerdInput, o Options) (*ContainerdOutput, error) {
	o = o.withDefaults()
	if err := o.validate(containerdEngine{}); err != nil {
		return nil, err
	}
	mainName := in.MainPath
	if mainName == "" {
		mainName = "config.toml"
	}
	mainT, err := parseTOML(in.Main)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mainName, err)
	}
	version, err := ContainerdVersion(mainT)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mainName, err)
	}
	srcT, srcVersion := mainT, version
	if in.Source != nil {
		if srcT, err = parseTOML(in.Source); err != nil {
			return nil, fmt.Errorf("configuration source: %w", err)
		}
		if srcVersion, err = ContainerdVersion(srcT); err != nil {
			return nil, fmt.Errorf("configuration source: %w", err)
		}
		if len(mainT) == 0 {
			version = srcVersion
		}
	}
	srcCRI, err := subTable(srcT, CRIPluginPath(srcVersion), false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sourceName(in, mainName), err)
	}
	out := &ContainerdOutput{Version: version, Main: in.Main}

	if in.DropInPath == "" || version == 1 {
		if in.DropInPath != "" {
			out.Notes = append(out.Notes, fmt.Sprintf("%s: config version 1 cannot import drop-in files; editing it in place instead of writing %s", mainName, in.DropInPath))
		}
		before := deepCopy(mainT)
		// The version is written even where it is implied (version 1 has
		// no key), as NVIDIA's nvidia-ctk does.
		mainT["version"] = int64(version)
		if err := registerContainerdRuntime(mainT, CRIPluginPath(version), version, srcCRI, in.Source == nil, o); err != nil {
			return nil, fmt.Errorf("%s: %w", mainName, err)
		}
		if out.Main, err = encodeChanged(in.Main, before, mainT); err != nil {
			return nil, err
		}
		return out, nil
	}

	if !filepath.IsAbs(in.DropInPath) {
		return nil, fmt.Errorf("drop-in path %q must be absolute", in.DropInPath)
	}
	dropVersion := version
	if in.Source != nil && srcVersion > 1 {
		dropVersion = srcVersion
	}
	out.Version = dropVersion
	path := CRIPluginPath(dropVersion)
	cri := tomlTable{}
	if srcCRI != nil && srcVersion == dropVersion {
		cri = deepCopy(srcCRI).(map[string]any)
	}
	dropT := tomlTable{"version": int64(dropVersion), path[0]: tomlTable{path[1]: cri}}
	if err := registerContainerdRuntime(dropT, path, dropVersion, srcCRI, false, o); err != nil {
		return nil, fmt.Errorf("%s: %w", sourceName(in, mainName), err)
	}
	// The drop-in is ours and rewritten whole; one that already says the
	// same keeps its bytes, one that does not parse is replaced.
	var before any
	if old, err := parseTOML(in.DropIn); err == nil {
		before = old
	}
	if out.DropIn, err = encodeChanged(in.DropIn, before, dropT); err != nil {
		return nil, err
	}
	if out.Main, err = addContainerdImport(in.Main, mainT, version, mainName, in.DropInPath); err != nil {
		return nil, err
	}
	return out, nil
}

func sourceName(in ContainerdInput, mainName string) string {
	if in.Source != nil {
		return "configuration source"
	}
	return mainName
}

// registerContainerdRuntime edits the CRI plugin table at path in root, a
// config of the given version; base is the CRI table the new runtime's
// settings are copied from (see baseRuntime), inPlace whether base is the
// table being edited.
func registerContainerdRuntime(root tomlTable, path []string, version int, base tomlTable, inPlace bool, o Options) error {
	cri, err := subTable(root, path, true)
	if err != nil {
		return err
	}
	ctrdPath := append(append([]string{}, path...), "containerd")
	runtimesPath := append(append([]string{}, ctrdPath...), "runtimes")
	ctrd, err := subTable(root, ctrdPath, true)
	if err != nil {
		return err
	}
	runtimes, err := subTable(root, runtimesPath, true)
	if err != nil {
		return err
	}
	self := ""
	if inPlace {
		self = o.RuntimeName
	}
	rt := baseRuntime(base, runtimesPath[len(path):], self)
	runtimes[o.RuntimeName] = rt
	if typ, _ := rt["runtime_type"].(string); typ == "" {
		rt["runtime_type"] = runcShimV2
	}
	opts, err := subTable(rt, []string{"options"}, true)
	if err != nil {
		return fmt.Errorf("%s: %w", dotted(append(runtimesPath, o.RuntimeName)), err)
	}
	opts["BinaryName"] = o.RuntimePath
	if version == 1 {
		// containerd 1.x's v1 configs name the runc binary "Runtime".
		opts["Runtime"] = o.RuntimePath
	}
	if o.SetAsDefault {
		ctrd["default_runtime_name"] = o.RuntimeName
	} else if def, _ := ctrd["default_runtime_name"].(string); def == o.RuntimeName {
		delete(ctrd, "default_runtime_name")
	}
	keepDefaultRunc(ctrd, runtimes)
	if o.EnableCDI {
		cri["enable_cdi"] = true
	}
	return nil
}

// keepDefaultRunc adds containerd's built-in runc runtime (builtinRunc,
// the base a new runtime gets without one, so that a second run copies the
// same) to the runtimes table of the CRI's containerd table
// ctrd when the default runtime is runc (default_runtime_name = "runc" or
// unset) and the table does not name it. containerd replaces its built-in
// runtimes with a runtimes table read from its config, so a file that
// named no runtime (Debian's packaged config.toml: the CRI plugin's cni
// table only) and now names the NVIDIA runtime would leave the default
// runtime undefined, and the CRI plugin refuses to load ("no corresponding
// runtime configured in `containerd.runtimes` for `containerd`
// `default_runtime_name`").
func keepDefaultRunc(ctrd, runtimes tomlTable) {
	def, _ := ctrd["default_runtime_name"].(string)
	if def != "" && def != "runc" {
		return
	}
	if _, ok := runtimes["runc"]; !ok {
		runtimes["runc"] = builtinRunc()
	}
}

// isNVIDIARuntime reports whether a default runtime's name is one of
// NVIDIA's (nvidia, nvidia-cdi, nvidia-legacy, ...), which are never the
// base a new runtime is copied from.
func isNVIDIARuntime(name string) bool { return strings.HasPrefix(name, "nvidia") }

// baseRuntime returns a copy of the runtime table a new runtime starts
// from: in the CRI table base, the default runtime (unless it is one of
// NVIDIA's, see isNVIDIARuntime), runc or crun, whichever has a table
// first, whatever its runtime_type. Without one it is builtinRunc.
// runtimesPath is the key path of
// the runtimes table inside base.
//
// self, when not "", names the runtime being configured in a file edited in
// place: when the default runtime is one of NVIDIA's, an existing table of
// self is its own base. The default was then set by an earlier run, which
// copied the table from the default of the time, and a second run writes
// the same again instead of switching to runc's settings.
func baseRuntime(base tomlTable, runtimesPath []string, self string) tomlTable {
	var candidates []string
	switch def, _ := lookupTable(base, runtimesPath[:1])["default_runtime_name"].(string); {
	case def != "" && !isNVIDIARuntime(def):
		candidates = append(candidates, def)
	case def != "" && self != "":
		candidates = append(candidates, self)
	}
	runtimes := lookupTable(base, runtimesPath)
	for _, c := range append(candidates, "runc", "crun") {
		if t, ok := runtimes[c].(map[string]any); ok {
			return deepCopy(t).(map[string]any)
		}
	}
	return builtinRunc()
}

// builtinRunc is the table of containerd's built-in runc runtime: the runc
// shim v2 with empty runtime_root and runtime_engine and
// privileged_without_host_devices = false.
func builtinRunc() tomlTable {
	return tomlTable{
		"runtime_type":                    runcShimV2,
		"runtime_root":                    "",
		"runtime_engine":                  "",
		"privileged_without_host_devices": false,
	}
}

// containerdImportGlob is the imports entry that makes containerd read the
// drop-in: every .toml file of its directory, as NVIDIA writes it.
func containerdImportGlob(dropIn string) string { return filepath.Dir(dropIn) + "/*.toml" }

// addContainerdImport returns main with the drop-in directory's glob (see
// containerdImportGlob) in its top-level imports, unless an entry already
// is that glob or another glob covering the drop-in. An entry naming the
// drop-in file itself does not count: the glob is added, as NVIDIA does
// (containerd reads a file imported twice once).
func addContainerdImport(main []byte, mainT tomlTable, version int, mainName, dropIn string) ([]byte, error) {
	var imports []string
	if v, ok := mainT["imports"]; ok {
		s, ok := stringSlice(v)
		if !ok {
			return nil, fmt.Errorf("%s: imports is a %s, not an array of strings", mainName, tomlKind(v))
		}
		imports = s
	}
	mainDir := filepath.Dir(mainName)
	if abs, err := filepath.Abs(mainName); err == nil {
		mainDir = filepath.Dir(abs)
	}
	glob := containerdImportGlob(dropIn)
	for _, imp := range imports {
		p := imp
		if !filepath.IsAbs(p) {
			p = filepath.Join(mainDir, p)
		}
		if p == glob {
			return main, nil
		}
		if strings.ContainsAny(p, "*?[") {
			if ok, err := filepath.Match(p, dropIn); err == nil && ok {
				return main, nil
			}
		}
	}
	want := deepCopy(mainT).(map[string]any)
	if len(want) == 0 {
		want["version"] = int64(version)
	}
	want["imports"] = anySlice(append(imports, glob))

	// Edit the text so that the rest of the file keeps its comments and
	// layout; fall back to re-encoding when the result does not parse to
	// exactly what it should.
	line, err := toml.Marshal(map[string]any{"imports": append(imports, glob)})
	if err != nil {
		return nil, fmt.Errorf("encoding imports: %w", err)
	}
	var candidate []byte
	if _, had := mainT["imports"]; !had {
		var prefix []byte
		if len(mainT) == 0 {
			prefix = fmt.Appendf(nil, "version = %d\n", version)
		}
		prefix = append(prefix, line...)
		at := leadingCommentEnd(main)
		candidate = make([]byte, 0, len(main)+len(prefix))
		candidate = append(candidate, main[:at]...)
		candidate = append(candidate, prefix...)
		candidate = append(candidate, main[at:]...)
	} else {
		candidate = replaceImportsLine(main, line)
	}
	if candidate != nil {
		if got, err := parseTOML(candidate); err == nil && reflect.DeepEqual(any(got), any(want)) {
			return candidate, nil
		}
	}
	return marshalTOML(want)
}

// importsLinePattern matches a one-line top-level imports array. It is
// compiled where it is used, not at package init: every nctk tool (the
// container-create path included) links this package.
const importsLinePattern = `^[ \t]*imports[ \t]*=[ \t]*\[[^\]#]*\][ \t]*(#.*)?$`

// replaceImportsLine replaces the one-line top-level imports assignment of
// data with line, or returns nil when there is no such line.
func replaceImportsLine(data, line []byte) []byte {
	importsLine := regexp.MustCompile(importsLinePattern)
	off := 0
	for off < len(data) {
		end := len(data)
		if nl := bytes.IndexByte(data[off:], '\n'); nl >= 0 {
			end = off + nl + 1
		}
		text := strings.TrimRight(string(data[off:end]), "\r\n")
		if strings.HasPrefix(strings.TrimSpace(text), "[") {
			return nil // tables begin: imports would not be top-level
		}
		if importsLine.MatchString(text) {
			out := make([]byte, 0, len(data)+len(line))
			out = append(out, data[:off]...)
			out = append(out, line...)
			return append(out, data[end:]...)
		}
		off = end
	}
	return nil
}

// leadingCommentEnd returns the offset just past the file's leading block
// of blank and comment lines, where a top-level key can be inserted.
func leadingCommentEnd(data []byte) int {
	off := 0
	for off < len(data) {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			return off
		}
		line := strings.TrimSpace(string(data[off : off+nl]))
		if line != "" && !strings.HasPrefix(line, "#") {
			return off
		}
		off += nl + 1
	}
	return off
}
