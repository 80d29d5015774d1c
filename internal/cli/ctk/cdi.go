package ctk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/cdispec"
	"github.com/nctk/nctk/internal/cli/lookpath"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/planner"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/selector"
)

// cdiCommands are `nvidia-ctk cdi …`.
func cdiCommands() []command {
	return []command{
		{name: "generate", summary: "write a CDI spec for the GPUs and driver of this host", run: cdiGenerate},
		{name: "list", summary: "list the CDI devices the spec directories define", run: cdiList},
		{name: "validate", summary: "check that the CDI specs still match the driver and GPUs of this host", run: cdiValidate},
		{name: "transform", summary: "rewrite a CDI spec", subs: []command{
			{name: "root", summary: "move a spec's host or container paths from one root to another", run: cdiTransformRoot},
		}},
	}
}

// hookBinaryName is the helper CDI hooks run.
const hookBinaryName = "nvidia-cdi-hook"

// listFlag is a repeatable flag whose values may also be comma-separated.
func listFlag(dst *[]string) func(string) error {
	return func(v string) error {
		*dst = append(*dst, selector.Split(v)...)
		return nil
	}
}

func cdiGenerate(e *env, args []string) error {
	var (
		output, format, driverRoot, devRoot, hookPath, ldconfigPath string
		vendor, class, capsList, mode                               string
		strategies, deviceIDs, featureFlags, disabledHooks          []string
		enabledHooks, librarySearchPaths, configSearchPaths         []string
		csvOptions                                                  []string
		noAll, separateHooks                                        bool
	)
	format = string(cdispec.FormatYAML)
	capsList, mode = "all", "auto"
	fs := newFlagSet("generate")
	fs.String(&output, []string{"output"}, []string{"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"}, "FILE",
		"write the spec to FILE (atomically, mode 0644; .yaml or .json is appended when missing) instead of stdout")
	fs.String(&format, []string{"format"}, []string{"NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT", "NVIDIA_CTK_CDI_GENERATE_FORMAT"}, "yaml|json",
		"the spec's encoding; without it the output file's extension decides")
	fs.String(&driverRoot, []string{"driver-root"}, []string{"NVIDIA_CTK_DRIVER_ROOT"}, "DIR",
		"the root the driver is installed under (default: config.toml nvidia-container-cli.root, else /)")
	fs.String(&devRoot, []string{"dev-root"}, []string{"NVIDIA_CTK_DEV_ROOT"}, "DIR",
		"the root whose /dev holds the device nodes (default: the driver root)")
	fs.Func([]string{"device-name-strategy"}, "index|uuid|type-index",
		"how devices are named (repeatable; default index and uuid) [$NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES]", listFlag(&strategies))
	fs.String(&vendor, []string{"vendor", "cdi-vendor"}, []string{"NVIDIA_CTK_CDI_GENERATE_VENDOR"}, "VENDOR",
		"the vendor of the spec's kind (default nvidia.com; management.nvidia.com in management mode)")
	fs.String(&class, []string{"class", "cdi-class"}, []string{"NVIDIA_CTK_CDI_GENERATE_CLASS"}, "CLASS",
		"the class of the spec's kind (default gpu; imex-channel in imex mode, the feature's name in gds, mofed, gdrcopy, nvswitch mode)")
	fs.Bool(&noAll, []string{"no-all-device"}, []string{"NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE"}, "leave out the \"all\" device")
	fs.Bool(&separateHooks, []string{"separate-hooks"}, []string{"NVIDIA_CTK_CDI_GENERATE_SEPARATE_HOOKS"},
		"write one hook per step, as NVIDIA's tools do, runnable by any nvidia-cdi-hook (default: one nctk hook call that writes ld.so.cache in-process)")
	fs.Func([]string{"device-id", "device-ids", "device", "devices"}, "ID",
		"a device to include: index, UUID, bus id, MIG index or UUID; in imex mode a channel number (repeatable; default all) [$NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS]",
		listFlag(&deviceIDs))
	fs.Func([]string{"feature-flag", "feature-flags"}, "FLAG",
		"a spec generation feature flag of NVIDIA's (repeatable; see docs/cdi-generate.md) [$NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS]",
		listFlag(&featureFlags))
	fs.Func([]string{"disable-hook", "disable-hooks"}, "HOOK",
		"leave a hook out of the spec, or all of them with \"all\" (repeatable) [$NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS]",
		listFlag(&disabledHooks))
	fs.Func([]string{"enable-hook", "enable-hooks"}, "HOOK",
		"keep a hook that --disable-hook names (repeatable; \"all\" is refused) [$NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS]",
		listFlag(&enabledHooks))
	fs.Func([]string{"library-search-path"}, "DIR",
		"where csv mode looks for libraries (repeatable; as NVIDIA's, no other mode uses it) [$NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS]",
		listFlag(&librarySearchPaths))
	fs.Func([]string{"config-search-path"}, "DIR",
		"where graphics configuration files are looked for (repeatable; nctk's specs mount none yet) [$NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS]",
		listFlag(&configSearchPaths))
	fs.Func([]string{"csv.file"}, "FILE", "a CSV mount-spec file for csv mode (repeatable; csv mode is not supported yet) [$NVIDIA_CTK_CDI_GENERATE_CSV_FILES]",
		listFlag(&csvOptions))
	fs.Func([]string{"csv.ignore-pattern"}, "PATTERN", "a pattern of CSV entries csv mode skips (repeatable; csv mode is not supported yet) [$NVIDIA_CTK_CDI_GENERATE_CSV_IGNORE_PATTERNS]",
		listFlag(&csvOptions))
	fs.Func([]string{"csv.compat-container-root"}, "DIR", "csv mode's CUDA compat library directory in the container (csv mode is not supported yet) [$NVIDIA_CTK_CDI_GENERATE_CSV_CONTAINER_COMPAT_ROOT]",
		listFlag(&csvOptions))
	fs.String(&capsList, []string{"driver-capabilities", "capabilities"}, []string{"NVIDIA_CTK_CDI_GENERATE_DRIVER_CAPABILITIES"}, "LIST",
		"the driver capabilities whose files the spec mounts (compute,utility,…)")
	fs.String(&hookPath, []string{"nvidia-cdi-hook-path", "nvidia-ctk-path"}, []string{"NVIDIA_CTK_CDI_HOOK_PATH"}, "FILE",
		"the host path of nvidia-cdi-hook the spec's hooks run (default: next to this program, else on PATH, else /usr/bin/nvidia-cdi-hook)")
	fs.String(&ldconfigPath, []string{"ldconfig-path"}, []string{"NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH"}, "FILE",
		"the host ldconfig update-ldcache runs (default: config.toml nvidia-container-cli.ldconfig)")
	fs.String(&mode, []string{"mode", "discovery-mode"}, []string{"NVIDIA_CTK_CDI_GENERATE_MODE"},
		"auto|nvml|management|imex|gds|mofed|gdrcopy|nvswitch",
		"what the spec describes: the GPUs (auto, nvml: nctk discovers from /proc, /sys and /dev), every device node as "+
			"management.nvidia.com/gpu=all (management), the IMEX channels (imex) or a feature's device nodes; wsl and csv are not supported yet")
	err := parseLeaf(e, fs, args, "[flags]",
		"Generate a CDI spec for the driver's GPUs and MIG devices: one device per GPU and MIG device (named by\n"+
			"index and UUID by default) and \"all\", with the driver's control nodes, libraries, binaries, IPC sockets,\n"+
			"firmware and the nvidia-cdi-hook hooks as spec-wide edits. Other modes (--mode) describe every device\n"+
			"node at once (management), the IMEX channels (imex) or a feature's devices (gds, mofed, gdrcopy, nvswitch).")
	if err != nil {
		return err
	}

	listEnv(e, fs, &strategies, "device-name-strategy", "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES")
	listEnv(e, fs, &deviceIDs, "device-id", "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS")
	listEnv(e, fs, &featureFlags, "feature-flag", "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS")
	listEnv(e, fs, &disabledHooks, "disable-hook", "NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS")
	listEnv(e, fs, &enabledHooks, "enable-hook", "NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS")
	listEnv(e, fs, &librarySearchPaths, "library-search-path", "NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS")
	listEnv(e, fs, &configSearchPaths, "config-search-path", "NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS")
	m, err := cdispec.ParseMode(mode)
	if err != nil {
		return fmt.Errorf("%s: --mode: %w", e.path, err)
	}
	f, output, err := outputFormat(output, format, fs.IsSet("format"))
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	o := cdispec.Options{Vendor: vendor, Class: class, NoAllDevice: noAll, SeparateHooks: separateHooks, Mode: m}
	if o.DisabledHooks, err = hookSelection(disabledHooks, enabledHooks); err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	// chmod is off unless enabled, as NVIDIA's default disabled list has it.
	o.Chmod = slices.Contains(enabledHooks, hookargs.NameChmod)
	o.NoIPC = featureFlagEffects(e, featureFlags)
	if len(librarySearchPaths) > 0 {
		e.log.Warn("--library-search-path applies to csv mode only, which nctk does not support yet; ignored", "paths", librarySearchPaths)
	}
	if len(csvOptions) > 0 {
		e.log.Warn("the --csv.* flags apply to csv mode only, which nctk does not support yet; ignored")
	}
	for _, p := range configSearchPaths {
		if !path.IsAbs(p) {
			return fmt.Errorf("%s: --config-search-path %q: want an absolute host directory", e.path, p)
		}
	}
	for _, s := range strategies {
		ns, err := cdispec.ParseNameStrategy(s)
		if err != nil {
			return fmt.Errorf("%s: --device-name-strategy: %w", e.path, err)
		}
		o.NameStrategies = append(o.NameStrategies, ns)
	}
	if o.Caps, err = caps.Parse(capsList); err != nil {
		return fmt.Errorf("%s: --driver-capabilities: %w", e.path, err)
	}
	if len(o.Caps) == 0 {
		return fmt.Errorf("%s: --driver-capabilities %q selects nothing", e.path, capsList)
	}
	for _, id := range deviceIDs {
		if strings.EqualFold(id, "none") {
			return fmt.Errorf("%s: --device-id none: a CDI spec needs at least one device", e.path)
		}
	}

	cfg, err := e.loadConfig()
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if driverRoot == "" {
		driverRoot = cfg.CLI.Root
	}
	if driverRoot == "" {
		driverRoot = "/"
	}
	// The spec's update-ldcache hook gets the host ldconfig: --ldconfig-path,
	// else config.toml's as the runtime reads it (none, the hook's default,
	// for an empty setting or a container path the config accepts).
	var ldconfig config.Ldconfig
	if fs.IsSet("ldconfig-path") {
		if ldconfig, err = config.ParseHostLdconfig(ldconfigPath); err != nil {
			return fmt.Errorf("%s: --ldconfig-path: %w: want an absolute host path", e.path, err)
		}
	} else if ldconfig, err = cfg.HostLdconfig(); err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if hookPath == "" {
		hookPath = findHook(e)
	}
	if hookPath, err = filepath.Abs(hookPath); err != nil {
		return fmt.Errorf("%s: --nvidia-cdi-hook-path: %w", e.path, err)
	}
	o.Hook = ocispec.HookConfig{Path: hookPath, LdconfigPath: ldconfig.Path}

	// Discovery's own records (every library of every capability looked
	// for) are not passed on: what was not found is logged at debug level
	// by the planner, and a spec for the files that exist is what is asked for.
	job := planner.Job{Driver: discover.Options{Root: driverRoot, DevRoot: devRoot, ConfigSearchPaths: configSearchPaths},
		Request: request.Request{Devices: deviceIDs}, Logger: e.log}
	spec, err := cdispec.Generate(context.Background(), job, o)
	if err != nil {
		return err
	}
	if spec.Version != cdispec.MaxCompatVersion && versionAbove(spec.Version, cdispec.MaxCompatVersion) {
		e.log.Warn("the spec needs a CDI version older engines reject", "cdiVersion", spec.Version, "podman-4.3-max", cdispec.MaxCompatVersion)
	}
	data, err := cdispec.Encode(spec, f)
	if err != nil {
		return err
	}
	if output == "" {
		_, err := e.Stdout.Write(data)
		return err
	}
	if err := cdispec.WriteFile(output, data); err != nil {
		return err
	}
	e.log.Info("wrote CDI spec", "file", output, "devices", len(spec.Devices), "cdiVersion", spec.Version)
	return nil
}

// listEnv sets *dst from the variable env (a comma-separated list) when the
// flag name was not given.
func listEnv(e *env, fs *flagSet, dst *[]string, name, env string) {
	if fs.IsSet(name) {
		return
	}
	if v, ok := e.LookupEnv(env); ok && v != "" {
		*dst = selector.Split(v)
	}
}

// hookSelection returns the hooks a spec leaves out: those disabled names
// (cdispec.AllHooks for every one) less those enabled names, as NVIDIA's
// --disable-hook and --enable-hook combine. Names must be hooks nctk or
// NVIDIA has; enabling "all" is refused, as by NVIDIA. With "all" disabled
// and some enabled, every other hook is named.
func hookSelection(disabled, enabled []string) ([]string, error) {
	for _, h := range enabled {
		if h == cdispec.AllHooks {
			return nil, errors.New("--enable-hook all: enabling all hooks is not supported")
		}
		if err := cdispec.CheckHookName(h); err != nil {
			return nil, fmt.Errorf("--enable-hook: %w", err)
		}
	}
	var out []string
	for _, h := range disabled {
		if h == cdispec.AllHooks {
			if len(enabled) == 0 {
				return []string{cdispec.AllHooks}, nil
			}
			out = append(out, cdispec.HookNames()...)
			continue
		}
		if err := cdispec.CheckHookName(h); err != nil {
			return nil, fmt.Errorf("--disable-hook: %w", err)
		}
		out = append(out, h)
	}
	out = slices.DeleteFunc(out, func(h string) bool { return slices.Contains(enabled, h) })
	slices.Sort(out)
	return slices.Compact(out), nil
}

// NVIDIA's spec generation feature flags.
const (
	flagDisableIPCDiscoverer    = "disable-ipc-discoverer"
	flagNoAdditionalGIDs        = "no-additional-gids-for-device-nodes"
	flagDisableNvsandboxutils   = "disable-nvsandboxutils"
	flagDisableNvsandboxUtils   = "disable-nvsandbox-utils"
	flagDisableMultipleCSV      = "disable-multiple-csv-devices"
	flagExplicitDriverLibraries = "enable-explicit-driver-libraries"
	flagCoherentAnnotations     = "enable-coherent-annotations"
)

// featureFlagEffects checks NVIDIA's feature flags and returns whether the
// spec leaves out the IPC sockets and the MPS directory
// (disable-ipc-discoverer). The flags that describe what nctk's specs
// already are (no additionalGids, no nvsandboxutils, no csv mode) change
// nothing; those asking for what nctk does not render yet, and unknown
// ones (which NVIDIA ignores too), are logged.
func featureFlagEffects(e *env, flags []string) (noIPC bool) {
	for _, ff := range flags {
		switch ff {
		case flagDisableIPCDiscoverer:
			noIPC = true
		case flagNoAdditionalGIDs, flagDisableNvsandboxutils, flagDisableNvsandboxUtils, flagDisableMultipleCSV:
			e.log.Debug("feature flag describes nctk's specs already", "flag", ff)
		case flagExplicitDriverLibraries, flagCoherentAnnotations:
			e.log.Warn("feature flag not supported yet; ignored", "flag", ff)
		default:
			e.log.Warn("unknown feature flag; ignored", "flag", ff)
		}
	}
	return noIPC
}

// outputFormat decides the encoding and the final output file name: an
// explicit --format wins, else the extension decides; a file name without
// .yaml or .json gets the format's extension (the CDI library reads no
// other files).
func outputFormat(output, format string, formatSet bool) (cdispec.Format, string, error) {
	f := cdispec.FormatOf(output)
	if formatSet || output == "" {
		var err error
		if f, err = cdispec.ParseFormat(format); err != nil {
			return "", "", fmt.Errorf("--format: %w", err)
		}
	}
	if output != "" {
		if ext := strings.ToLower(filepath.Ext(output)); ext != ".yaml" && ext != ".json" {
			output += "." + string(f)
		}
	}
	return f, output, nil
}

// versionAbove compares two dotted versions numerically.
func versionAbove(a, b string) bool {
	pa, pb := strings.Split(strings.TrimPrefix(a, "v"), "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		var x, y int
		fmt.Sscan(pa[i], &x)
		fmt.Sscan(pb[i], &y)
		if x != y {
			return x > y
		}
	}
	return len(pa) > len(pb)
}

// findHook locates nvidia-cdi-hook: next to the running program (nctk's
// links live side by side), else on PATH, else the packaged location.
func findHook(e *env) string {
	if exe, err := os.Executable(); err == nil {
		if p, ok := lookpath.Find(hookBinaryName, []string{filepath.Dir(exe), filepath.Dir(evalOr(exe))}); ok {
			return p
		}
	}
	if p, err := exec.LookPath(hookBinaryName); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	e.log.Debug("nvidia-cdi-hook not found next to this program or on PATH", "using", cdispec.DefaultHookPath)
	return cdispec.DefaultHookPath
}

func evalOr(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// loadConfig reads config.toml: the global --config, else NVIDIA's lookup.
func (e *env) loadConfig() (*config.Config, error) {
	path, mustExist := e.config, true
	if path == "" {
		path, mustExist = config.Path(e.Environ)
	}
	return config.LoadFile(path, mustExist)
}

func cdiList(e *env, args []string) error {
	var dirs []string
	fs := newFlagSet("list")
	fs.Func([]string{"spec-dir"}, "DIR", "a CDI spec directory (repeatable; default /etc/cdi and /var/run/cdi) [$NVIDIA_CTK_CDI_SPEC_DIRS]",
		listFlag(&dirs))
	if err := parseLeaf(e, fs, args, "[--spec-dir DIR]...",
		"Print the fully-qualified names of the CDI devices the spec directories define, one per line."); err != nil {
		return err
	}
	if len(dirs) == 0 {
		if v, ok := e.LookupEnv("NVIDIA_CTK_CDI_SPEC_DIRS"); ok && v != "" {
			dirs = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ':' })
		}
	}
	l, err := cdispec.List(dirs)
	if err != nil {
		return err
	}
	for _, msg := range l.Errors {
		e.log.Warn("broken CDI spec", "error", msg)
	}
	e.log.Debug("found CDI devices", "count", len(l.Devices))
	for _, d := range l.Devices {
		fmt.Fprintln(e.Stdout, d)
	}
	return nil
}

// cdiTransformRoot is `nvidia-ctk cdi transform root`: it reads a spec
// (--input, "-" for stdin), moves the paths of one side from --from to
// --to (cdispec.TransformRoot) and writes it to --output (stdout when
// empty, as YAML; a file in the encoding its extension names, .yaml
// appended when it names none). The spec's cdiVersion is raised when the
// rewritten content needs a newer one.
func cdiTransformRoot(e *env, args []string) error {
	var from, to, input, output, relativeTo string
	input, relativeTo = "-", string(cdispec.RelativeToHost)
	fs := newFlagSet("root")
	fs.String(&from, []string{"from"}, nil, "DIR", "the root the paths are under now (default /)")
	fs.String(&to, []string{"to"}, nil, "DIR", "the root to move them to (default /; equal to --from: no change)")
	fs.String(&input, []string{"input"}, nil, "FILE", "the spec to read, - for stdin")
	fs.String(&output, []string{"output"}, nil, "FILE", "the file to write the spec to (default stdout)")
	fs.String(&relativeTo, []string{"relative-to"}, nil, "host|container",
		"which paths move: the host's (hostPath of mounts and device nodes, hook programs) or the container's")
	if err := parseLeaf(e, fs, args, "[flags]",
		"Move the host (or container) paths of a CDI spec from one root to another: a spec written under a driver\n"+
			"container's root (--from /run/nvidia/driver --to /) or for one. Paths match by whole components."); err != nil {
		return err
	}
	rel, err := cdispec.ParseRelativeTo(relativeTo)
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	var data []byte
	if input == "-" {
		data, err = io.ReadAll(e.Stdin)
	} else {
		data, err = os.ReadFile(input)
	}
	if err != nil {
		return fmt.Errorf("%s: read the spec: %w", e.path, err)
	}
	spec, err := pkgcdi.ParseSpec(data)
	if err != nil {
		return fmt.Errorf("%s: parse the spec %s: %w", e.path, input, err)
	}
	if err := cdispec.Check(spec); err != nil {
		return fmt.Errorf("%s: the spec %s: %w", e.path, input, err)
	}
	if err := cdispec.TransformRoot(spec, from, to, rel); err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if v, err := cdispecs.MinimumRequiredVersion(spec); err == nil && versionAbove(v, spec.Version) {
		spec.Version = v
	}
	f, output, err := outputFormat(output, string(cdispec.FormatYAML), false)
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	out, err := cdispec.Encode(spec, f)
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if output == "" {
		_, err := e.Stdout.Write(out)
		return err
	}
	return cdispec.WriteFile(output, out)
}
