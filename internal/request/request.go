// Package request works out what a container asks of the NVIDIA driver from
// its OCI spec (environment, mounts, annotations, capabilities) and the
// toolkit configuration, with NVIDIA's semantics and precedence:
//
//  1. CDI device annotations (cdi.k8s.io/… by default; not in legacy or csv
//     mode);
//  2. device lists given as /dev/null bind mounts under
//     /var/run/nvidia-container-devices (only when
//     accept-nvidia-visible-devices-as-volume-mounts is on);
//  3. the environment: the swarm-resource variables if any is set, else
//     NVIDIA_VISIBLE_DEVICES; honoured only in privileged containers unless
//     accept-nvidia-visible-devices-envvar-when-unprivileged is on (the
//     default).
//
// NVIDIA_VISIBLE_DEVICES unset, empty or holding void means "not a GPU
// container", except for legacy CUDA images (CUDA_VERSION set,
// NVIDIA_REQUIRE_CUDA not), which get all GPUs, all supported capabilities
// and a cuda>=MAJOR.MINOR requirement.
//
// In cdi mode a plain device id (0, GPU-…, all, none) is a device of
// modes.cdi.default-kind; a name of the runtime's own kind
// (runtime.nvidia.com/gpu=<id>, NVIDIA's just-in-time devices) is the plain
// id, which the runtime's planner builds on the fly. NVIDIA_GDS,
// NVIDIA_MOFED, NVIDIA_GDRCOPY and NVIDIA_NVSWITCH set to "enabled" add
// those device families to a device request (Request.Features).
//
// A Request holds validated, typed values (parsed requirements, IMEX channel
// numbers, MIG flags), so that nothing downstream parses them again. FromSpec
// builds one from an OCI spec; nvidia-container-cli builds one from its
// options with the same validators (IMEXChannels, MIGDevices,
// requirements.Parse), so that both report the same errors.
package request

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/mod/semver"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/requirements"
	"github.com/nctk/nctk/internal/selector"
)

// Environment variables a container's request is read from.
const (
	EnvVisibleDevices     = "NVIDIA_VISIBLE_DEVICES"
	EnvDriverCapabilities = "NVIDIA_DRIVER_CAPABILITIES"
	EnvRequirePrefix      = "NVIDIA_REQUIRE_"
	EnvRequireCUDA        = "NVIDIA_REQUIRE_CUDA"
	EnvRequireJetpack     = "NVIDIA_REQUIRE_JETPACK"
	EnvDisableRequire     = "NVIDIA_DISABLE_REQUIRE"
	EnvCUDAVersion        = "CUDA_VERSION"
	EnvMIGConfigDevices   = "NVIDIA_MIG_CONFIG_DEVICES"
	EnvMIGMonitorDevices  = "NVIDIA_MIG_MONITOR_DEVICES"
	EnvIMEXChannels       = "NVIDIA_IMEX_CHANNELS"
)

// FeatureEnabled is the value of a feature variable (NVIDIA_GDS, …,
// discover.Feature.EnvVar) that asks for the feature; any other value,
// other spellings included, does not (as in NVIDIA's runtime).
const FeatureEnabled = "enabled"

// JITKind is the CDI kind of the devices nvidia-container-runtime builds
// on the fly (NVIDIA's jit-cdi devices): runtime.nvidia.com/gpu=<id> asks
// the runtime's own planner for device <id>, as the plain id does; no spec
// file is read for it.
const JITKind = "runtime.nvidia.com/gpu"

// ErrJITMixed: a device list names devices of the runtime's own kind
// (JITKind) together with other CDI devices, which NVIDIA refuses too.
var ErrJITMixed = errors.New("devices of kind " + JITKind + " cannot be requested together with other CDI devices")

// DeviceListMountRoot is where device lists given as volume mounts live.
const DeviceListMountRoot = "/var/run/nvidia-container-devices"

// MaxIMEXChannel is the largest IMEX channel id (ids are below 2^20).
const MaxIMEXChannel = 1<<20 - 1

// Device sources (Request.DeviceSource).
const (
	SourceAnnotations  = "annotations"
	SourceVolumeMounts = "volume-mounts"
	SourceLegacy       = "CUDA_VERSION"
)

// Request is what a container asks for.
type Request struct {
	// Void means "not a GPU container": nothing is to be done. When set,
	// only Privileged, Legacy, DeviceSource and Warnings are filled in.
	Void bool
	// All: every GPU (Devices is ["all"]).
	All bool
	// None: no GPU, but the driver libraries and control nodes.
	None bool
	// Devices are the device tokens in the order given (selector
	// language), CDI names excluded.
	Devices []string
	// CDIDevices are fully-qualified CDI device names (vendor/class=name),
	// from the device list or from annotations.
	CDIDevices []string
	// Caps are the driver capabilities to inject.
	Caps caps.Set
	// Requirements are the parsed NVIDIA_REQUIRE_* expressions (and the
	// legacy cuda>= one) to check; nil when DisableRequire.
	Requirements []requirements.Expr
	// DisableRequire is set by NVIDIA_DISABLE_REQUIRE or disable-require.
	DisableRequire bool
	// MIGConfig and MIGMonitor ask for the global MIG configuration and
	// monitoring capabilities (NVIDIA_MIG_CONFIG_DEVICES=all,
	// NVIDIA_MIG_MONITOR_DEVICES=all; privileged containers only).
	MIGConfig, MIGMonitor bool
	// IMEXChannels are the requested IMEX channel numbers, without
	// duplicates.
	IMEXChannels []int
	// Features are the feature-gated device families asked for
	// (NVIDIA_GDS=enabled, …), in discover.Features order; only with a
	// device request (not Void).
	Features []discover.Feature
	// NoPersistenced, NoFabricManager and NoGSPFirmware leave the
	// persistence daemon socket, the fabric manager socket and the GSP
	// firmware out (nvidia-container-cli's --no-persistenced, … options;
	// FromSpec never sets them).
	NoPersistenced, NoFabricManager, NoGSPFirmware bool
	// Privileged: CAP_SYS_ADMIN is in the bounding set.
	Privileged bool
	// PerContainer: the devices are the runtime's own, built per container
	// (NVIDIA's jit-cdi: mode jit-cdi, or names of JITKind), whose
	// environment carries NVIDIA_CTK_LIBCUDA_DIR as NVIDIA's does.
	PerContainer bool
	// Legacy: a legacy CUDA image (CUDA_VERSION set, NVIDIA_REQUIRE_CUDA
	// not).
	Legacy bool
	// DeviceSource names where the device list came from: annotations,
	// volume-mounts, the environment variable(s), or CUDA_VERSION.
	DeviceSource string
	// Warnings lists requests that were ignored and why.
	Warnings []string
}

// Error reports a request the container cannot have. FromSpec returns it
// wrapped in a *phase.Error (input, requirement, mig-config or
// mig-monitor).
type Error struct {
	// Var names the variable, mount or annotation at fault.
	Var string
	// Value is its value.
	Value string
	Err   error
}

// Error echoes Value with echo.Quote: control characters escaped, a long
// value cut (a value over MaxValueLen is refused with ErrValueTooLong
// before it is parsed).
func (e *Error) Error() string {
	return fmt.Sprintf("container request: %s=%s: %v", e.Var, echo.Quote(e.Value), e.Err)
}

// MaxValueLen bounds the value of a variable or annotation a request is
// read from (real NVIDIA_REQUIRE_CUDA values are about 1 KiB). A longer
// value is an *Error wrapping ErrValueTooLong, before it is parsed.
const MaxValueLen = 32 << 10

// ErrValueTooLong: a request value is longer than MaxValueLen.
var ErrValueTooLong = errors.New("value too long")

// ErrNoDevices: a device list that is nothing but separators (","): a
// mistake, not a request for a non-GPU container.
var ErrNoDevices = errors.New("the device list has only separators; name devices, or all, none or void")

// checkLen refuses a value over MaxValueLen, naming name.
func checkLen(name, v string) error {
	if len(v) > MaxValueLen {
		return &Error{Var: name, Value: v, Err: fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLong, len(v), MaxValueLen)}
	}
	return nil
}

func (e *Error) Unwrap() error { return e.Err }

// env is a container's environment: the last definition of a name wins,
// names keep the order of their first appearance.
type env struct {
	vals  map[string]string
	order []string
}

func newEnv(list []string) env {
	e := env{vals: map[string]string{}}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, seen := e.vals[k]; !seen {
			e.order = append(e.order, k)
		}
		e.vals[k] = v
	}
	return e
}

func (e env) lookup(k string) (string, bool) { v, ok := e.vals[k]; return v, ok }
func (e env) get(k string) string            { return e.vals[k] }

// IsPrivileged reports whether CAP_SYS_ADMIN is in the spec's bounding set,
// NVIDIA's definition of a privileged container.
func IsPrivileged(spec *specs.Spec) bool {
	if spec == nil || spec.Process == nil || spec.Process.Capabilities == nil {
		return false
	}
	return slices.Contains(spec.Process.Capabilities.Bounding, "CAP_SYS_ADMIN")
}

// WantsGPUs tells whether the request asks for the driver's devices:
// not void, and a device list, all or none (a CDIDevices request is the CDI
// path's, apart from it).
func (r Request) WantsGPUs() bool {
	return !r.Void && (len(r.Devices) > 0 || r.All || r.None)
}

// FromSpec reads the request of the container described by spec. cfg nil
// means the defaults. Errors are *phase.Error, wrapping an *Error that names
// the variable and value where one is at fault.
func FromSpec(spec *specs.Spec, cfg *config.Config) (Request, error) {
	if cfg == nil {
		cfg = config.Default()
	}
	if spec == nil {
		return Request{}, &phase.Error{Phase: phase.Input, Err: errors.New("container request: no OCI spec")}
	}
	r, err := fromSpec(spec, cfg)
	if err != nil {
		var pe *phase.Error
		if !errors.As(err, &pe) {
			err = &phase.Error{Phase: phase.Input, Err: err}
		}
		return Request{}, err
	}
	return r, nil
}

// fromSpec is FromSpec; errors not wrapped in a *phase.Error are input
// errors.
func fromSpec(spec *specs.Spec, cfg *config.Config) (Request, error) {
	var environ []string
	if spec.Process != nil {
		environ = spec.Process.Env
	}
	e := newEnv(environ)
	r := Request{
		Privileged: IsPrivileged(spec),
		Legacy:     e.get(EnvCUDAVersion) != "" && e.get(EnvRequireCUDA) == "",
	}

	tokens, err := r.deviceTokens(spec, e, cfg)
	if err != nil {
		return Request{}, err
	}
	if tokens, err = r.kinds(tokens, cfg); err != nil {
		return Request{}, err
	}
	if err := r.classify(tokens); err != nil {
		return Request{}, err
	}
	if r.Void {
		return r, nil
	}
	if r.Caps, err = capabilities(e, cfg, r.Legacy); err != nil {
		return Request{}, err
	}
	if err := r.requirements(e, cfg); err != nil {
		return Request{}, err
	}
	if err := r.mig(e); err != nil {
		return Request{}, err
	}
	if r.IMEXChannels, err = r.imexChannels(spec, e, cfg); err != nil {
		return Request{}, err
	}
	for _, f := range discover.Features() {
		if e.get(f.EnvVar()) == FeatureEnabled {
			r.Features = append(r.Features, f)
		}
	}
	return r, nil
}

// kinds resolves the CDI kinds of a device list: in cdi mode an
// unqualified id (0, GPU-…, all, none) becomes a device of
// modes.cdi.default-kind (NVIDIA_VISIBLE_DEVICES=all with default-kind
// management.nvidia.com/gpu asks for management.nvidia.com/gpu=all); then
// names of the runtime's own kind (JITKind, also when it is the default
// kind) become the plain ids the planner resolves. JITKind devices with
// other CDI devices are an *Error wrapping ErrJITMixed. A list holding void
// is left as it is (not a GPU container, whatever the mode).
func (r *Request) kinds(tokens []string, cfg *config.Config) ([]string, error) {
	if len(tokens) == 0 || slices.Contains(tokens, "void") {
		return tokens, nil
	}
	out := make([]string, 0, len(tokens))
	var jit, other bool
	for _, t := range tokens {
		qualified := cfg.Runtime.Mode == config.ModeCDI && !looksLikeCDI(t)
		if qualified {
			t = cfg.Runtime.Modes.CDI.DefaultKind + "=" + t
		}
		id, isJIT := strings.CutPrefix(t, JITKind+"=")
		if qualified || isJIT {
			if _, _, _, err := parser.ParseQualifiedName(t); err != nil {
				return nil, &Error{Var: r.sourceVar(), Value: strings.Join(tokens, ","), Err: cdiNameError(t, err)}
			}
		}
		if isJIT {
			jit, t = true, id
		} else if looksLikeCDI(t) {
			other = true
		}
		out = append(out, t)
	}
	if jit && other {
		return nil, &Error{Var: r.sourceVar(), Value: strings.Join(tokens, ","), Err: ErrJITMixed}
	}
	r.PerContainer = jit || cfg.Runtime.Mode == config.ModeJitCDI
	return out, nil
}

func (r *Request) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// deviceTokens returns the device list by precedence; nil means void.
// Annotation devices are CDI names (classify puts them in CDIDevices).
func (r *Request) deviceTokens(spec *specs.Spec, e env, cfg *config.Config) ([]string, error) {
	if cfg.Runtime.Mode != config.ModeLegacy && cfg.Runtime.Mode != config.ModeCSV {
		devs, err := annotationDevices(spec.Annotations, cfg.Runtime.Modes.CDI.AnnotationPrefixes)
		if err != nil {
			return nil, err
		}
		if len(devs) > 0 {
			r.DeviceSource = SourceAnnotations
			return devs, nil
		}
	}
	if cfg.AcceptDeviceListAsVolumeMounts {
		devs, _, err := mountDevices(spec.Mounts)
		if err != nil {
			return nil, err
		}
		if len(devs) > 0 {
			r.DeviceSource = SourceVolumeMounts
			return devs, nil
		}
	}
	vars := []string{EnvVisibleDevices}
	if swarm := cfg.SwarmResourceVars(); slices.ContainsFunc(swarm, func(v string) bool { _, ok := e.lookup(v); return ok }) {
		vars = swarm
	}
	var tokens, setVars []string
	for _, v := range vars {
		val, ok := e.lookup(v)
		if !ok {
			continue
		}
		if err := checkLen(v, val); err != nil {
			return nil, err
		}
		setVars = append(setVars, v)
		split := selector.Split(val)
		if len(split) == 0 && strings.Contains(val, ",") {
			return nil, &Error{Var: v, Value: val, Err: ErrNoDevices}
		}
		tokens = append(tokens, split...)
	}
	source := strings.Join(setVars, ",")
	if len(setVars) == 0 && r.Legacy {
		tokens, source = []string{"all"}, SourceLegacy
	}
	if len(tokens) == 0 {
		return nil, nil
	}
	if !r.Privileged && !cfg.AcceptEnvvarUnprivileged {
		r.warn("ignoring the devices requested by %s in an unprivileged container (accept-nvidia-visible-devices-envvar-when-unprivileged = false)", orVar(source))
		return nil, nil
	}
	r.DeviceSource = source
	return tokens, nil
}

func orVar(source string) string {
	if source == SourceLegacy {
		return "CUDA_VERSION (legacy image: all GPUs)"
	}
	return source
}

// classify sorts the device tokens: void anywhere → Void; otherwise the
// first of all/none decides; other tokens are devices or CDI names, each
// once.
func (r *Request) classify(tokens []string) error {
	if len(tokens) == 0 && len(r.CDIDevices) == 0 {
		r.Void = true
		return nil
	}
	if slices.Contains(tokens, "void") {
		r.Void = true
		return nil
	}
	for _, t := range tokens {
		switch t {
		case "all":
			r.All, r.Devices = true, []string{"all"}
			return nil
		case "none":
			r.None = true
			return nil
		}
	}
	for _, t := range tokens {
		if looksLikeCDI(t) {
			if _, _, _, err := parser.ParseQualifiedName(t); err != nil {
				return &Error{Var: r.sourceVar(), Value: strings.Join(tokens, ","), Err: cdiNameError(t, err)}
			}
			if !slices.Contains(r.CDIDevices, t) {
				r.CDIDevices = append(r.CDIDevices, t)
			}
			continue
		}
		// A device listed twice is one request (NVIDIA's lists drop the
		// repeats too).
		if !slices.Contains(r.Devices, t) {
			r.Devices = append(r.Devices, t)
		}
	}
	return nil
}

func (r *Request) sourceVar() string {
	switch r.DeviceSource {
	case "", SourceLegacy:
		return EnvVisibleDevices
	case SourceVolumeMounts:
		return DeviceListMountRoot
	}
	return r.DeviceSource
}

// looksLikeCDI reports whether a token is meant as a CDI name
// (vendor/class=name).
func looksLikeCDI(t string) bool {
	slash := strings.IndexByte(t, '/')
	return slash > 0 && strings.IndexByte(t[slash:], '=') > 0
}

// annotationDevices collects CDI device names from annotations whose key
// starts with one of prefixes, keys in sorted order.
func annotationDevices(ann map[string]string, prefixes []string) ([]string, error) {
	var keys []string
	for k := range ann {
		for _, p := range prefixes {
			if p != "" && strings.HasPrefix(k, p) {
				keys = append(keys, k)
				break
			}
		}
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		if err := checkLen("annotation "+echo.Text(k), ann[k]); err != nil {
			return nil, err
		}
		for _, item := range selector.Split(ann[k]) {
			if _, _, _, err := parser.ParseQualifiedName(item); err != nil {
				return nil, &Error{Var: "annotation " + echo.Text(k), Value: ann[k], Err: cdiNameError(item, err)}
			}
			out = append(out, item)
		}
	}
	return out, nil
}

// mountDevices reads device ids and IMEX channels from /dev/null bind
// mounts under DeviceListMountRoot: …/<id>, …/cdi/<vendor>/<class>/<name>
// or …/cdi/<vendor>/<class>=<name>, …/imex/<channel>. Mounts are
// deduplicated by destination.
func mountDevices(mounts []specs.Mount) (devices, imex []string, err error) {
	seen := map[string]bool{}
	for _, m := range mounts {
		if m.Source != "/dev/null" {
			continue
		}
		rest, ok := strings.CutPrefix(cleanPath(m.Destination), DeviceListMountRoot+"/")
		if !ok || rest == "" || seen[rest] {
			continue
		}
		seen[rest] = true
		switch {
		case strings.HasPrefix(rest, "cdi/"):
			name := strings.TrimPrefix(rest, "cdi/")
			if parts := strings.Split(name, "/"); len(parts) == 3 && !strings.Contains(name, "=") {
				name = parts[0] + "/" + parts[1] + "=" + parts[2]
			}
			if _, _, _, err := parser.ParseQualifiedName(name); err != nil {
				return nil, nil, &Error{Var: "mount", Value: m.Destination, Err: cdiNameError(name, err)}
			}
			devices = append(devices, name)
		case strings.HasPrefix(rest, "imex/"):
			imex = append(imex, strings.TrimPrefix(rest, "imex/"))
		default:
			devices = append(devices, rest)
		}
	}
	return devices, imex, nil
}

// cleanPath collapses repeated and trailing slashes (no .. handling: a
// destination with .. components is not a device list entry).
func cleanPath(p string) string {
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	return p
}

// capabilities reads NVIDIA_DRIVER_CAPABILITIES against the supported set.
func capabilities(e env, cfg *config.Config, legacy bool) (caps.Set, error) {
	supported, err := cfg.SupportedCapabilities()
	if err != nil {
		return nil, err
	}
	val, set := e.lookup(EnvDriverCapabilities)
	if strings.TrimSpace(val) == "" {
		// As NVIDIA's hook: a legacy image that does not set the variable
		// gets every supported capability; set but empty, the default.
		if legacy && !set {
			return supported, nil
		}
		return caps.Default().Intersect(supported), nil
	}
	if err := checkLen(EnvDriverCapabilities, val); err != nil {
		return nil, err
	}
	out := caps.Set{}
	for _, item := range selector.Split(val) {
		if item == "all" {
			for c := range supported {
				out[c] = true
			}
			continue
		}
		one, err := caps.Parse(item)
		if err != nil {
			return nil, &Error{Var: EnvDriverCapabilities, Value: val, Err: err}
		}
		for c := range one {
			if !supported.Has(c) {
				return nil, &Error{Var: EnvDriverCapabilities, Value: val, Err: fmt.Errorf("capability %s is not supported by this host (supported-driver-capabilities = %q in %s)", c, cfg.SupportedDriverCapabilities, configName(cfg))}
			}
			out[c] = true
		}
	}
	return out, nil
}

func configName(cfg *config.Config) string {
	if cfg.Path == "" {
		return "the defaults"
	}
	return cfg.Path
}

// requirements collects NVIDIA_REQUIRE_* (not JETPACK) in environment
// order, then the legacy cuda>= requirement.
func (r *Request) requirements(e env, cfg *config.Config) error {
	if cfg.DisableRequire {
		r.DisableRequire = true
	}
	if v, ok := e.lookup(EnvDisableRequire); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		switch {
		case err != nil:
			r.warn("%s=%s is not a boolean (true or false): requirements are checked", EnvDisableRequire, echo.Quote(v))
		case b:
			r.DisableRequire = true
		}
	}
	if r.DisableRequire {
		return nil
	}
	for _, k := range e.order {
		if !strings.HasPrefix(k, EnvRequirePrefix) || strings.HasPrefix(k, EnvRequireJetpack) {
			continue
		}
		if err := checkLen(k, e.get(k)); err != nil {
			return &phase.Error{Phase: phase.Requirement, Err: err}
		}
		v := strings.TrimSpace(e.get(k))
		if v == "" {
			continue
		}
		expr, err := requirements.Parse(v)
		if err != nil {
			return &phase.Error{Phase: phase.Requirement, Err: &Error{Var: k, Value: v, Err: err}}
		}
		r.Requirements = append(r.Requirements, expr)
	}
	if r.Legacy {
		v := e.get(EnvCUDAVersion)
		if err := checkLen(EnvCUDAVersion, v); err != nil {
			return err
		}
		expr, err := legacyRequirement(v)
		if err != nil {
			return &Error{Var: EnvCUDAVersion, Value: v, Err: err}
		}
		r.Requirements = append(r.Requirements, expr)
	}
	return nil
}

// legacyRequirement turns CUDA_VERSION into cuda>=MAJOR.MINOR. The value
// is read as NVIDIA's hook reads it: a semantic version, "v" optional
// (12.2.0, 11.8, 10, v11.2, 12.4.1-rc1+b2; not 11.2.1.4, 011.2, " 11.2"
// or 11.2-rc1), whose major and minor fit in 32 bits.
func legacyRequirement(v string) (requirements.Expr, error) {
	major, minor, ok := cudaMajorMinor(v)
	if !ok {
		return requirements.Expr{}, errors.New("not a CUDA version (want MAJOR[.MINOR[.PATCH[-PRERELEASE][+BUILD]]], e.g. 12.4.1)")
	}
	ver := fmt.Sprintf("%d.%d", major, minor)
	c := requirements.Condition{Key: requirements.KeyCUDA, Op: requirements.OpGreaterEqual, Value: ver}
	return requirements.Expr{Source: c.String(), Alternatives: []requirements.Alternative{{c}}}, nil
}

// cudaMajorMinor reads a CUDA_VERSION value as NVIDIA's hook does: "v"
// optional, then a semantic version (golang.org/x/mod/semver: minor and
// patch may be left out, a pre-release or build suffix only after a patch,
// no leading zeros) whose major and minor fit in 32 bits.
func cudaMajorMinor(v string) (major, minor uint64, ok bool) {
	sv := "v" + strings.TrimPrefix(v, "v")
	if !semver.IsValid(sv) {
		return 0, 0, false
	}
	maj, min, _ := strings.Cut(strings.TrimPrefix(semver.MajorMinor(sv), "v"), ".")
	major, err := strconv.ParseUint(maj, 10, 32)
	if err != nil {
		return 0, 0, false
	}
	if minor, err = strconv.ParseUint(min, 10, 32); err != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// mig reads the MIG config/monitor requests, which only privileged
// containers may make, and only for all devices (MIGDevices).
func (r *Request) mig(e env) error {
	for _, m := range []struct {
		name  string
		phase phase.Phase
		dst   *bool
	}{{EnvMIGConfigDevices, phase.MIGConfig, &r.MIGConfig}, {EnvMIGMonitorDevices, phase.MIGMonitor, &r.MIGMonitor}} {
		if err := checkLen(m.name, e.get(m.name)); err != nil {
			return err
		}
		v := strings.TrimSpace(e.get(m.name))
		if v == "" {
			continue
		}
		if !r.Privileged {
			return &Error{Var: m.name, Value: v, Err: errors.New("only a privileged container (CAP_SYS_ADMIN in its bounding set) may ask for MIG configuration or monitoring")}
		}
		if err := MIGDevices(v); err != nil {
			return &phase.Error{Phase: m.phase, Err: &Error{Var: m.name, Value: v, Err: err}}
		}
		*m.dst = true
	}
	return nil
}

// ErrMIGNotAll is MIGDevices' error: MIG configuration and monitoring are
// granted for all devices or not at all.
var ErrMIGNotAll = errors.New("only 'all' devices are currently supported")

// MIGDevices checks the devices of a MIG configuration or monitoring
// request (NVIDIA_MIG_CONFIG_DEVICES, nvidia-container-cli --mig-config):
// only "all" (any case) is supported; anything else is ErrMIGNotAll.
func MIGDevices(v string) error {
	if !strings.EqualFold(strings.TrimSpace(v), "all") {
		return ErrMIGNotAll
	}
	return nil
}

// IMEXChannels parses IMEX channel ids: decimal numbers from 0 to
// MaxIMEXChannel. Duplicates are dropped; the order is kept.
func IMEXChannels(ids []string) ([]int, error) {
	var out []int
	for _, id := range ids {
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil || n > MaxIMEXChannel {
			return nil, fmt.Errorf("invalid IMEX channel: %s (want a decimal number from 0 to %d)", echo.Text(id), MaxIMEXChannel)
		}
		if !slices.Contains(out, int(n)) {
			out = append(out, int(n))
		}
	}
	return out, nil
}

// imexChannels reads IMEX channel requests: from volume mounts when
// accepted, else from NVIDIA_IMEX_CHANNELS under the same privilege rule
// as device requests; "all" is ignored, as NVIDIA does.
func (r *Request) imexChannels(spec *specs.Spec, e env, cfg *config.Config) ([]int, error) {
	if cfg.Features.IgnoreIMEXChannelRequests {
		return nil, nil
	}
	var ids []string
	source := EnvIMEXChannels
	if cfg.AcceptDeviceListAsVolumeMounts {
		_, imex, err := mountDevices(spec.Mounts)
		if err != nil {
			return nil, err
		}
		ids, source = imex, DeviceListMountRoot+"/imex"
	}
	if len(ids) == 0 {
		v, ok := e.lookup(EnvIMEXChannels)
		if !ok {
			return nil, nil
		}
		source = EnvIMEXChannels
		if err := checkLen(EnvIMEXChannels, v); err != nil {
			return nil, err
		}
		ids = selector.Split(v)
		switch {
		case len(ids) == 0:
			return nil, nil
		case slices.Contains(ids, "void") || slices.Contains(ids, "none"):
			return nil, nil
		case slices.Contains(ids, "all"):
			r.warn("%s=%s: \"all\" is not honoured for IMEX channels; name the channels", EnvIMEXChannels, echo.Quote(v))
			return nil, nil
		}
		if !r.Privileged && !cfg.AcceptEnvvarUnprivileged {
			r.warn("ignoring the IMEX channels requested by %s in an unprivileged container (accept-nvidia-visible-devices-envvar-when-unprivileged = false)", EnvIMEXChannels)
			return nil, nil
		}
	}
	out, err := IMEXChannels(ids)
	if err != nil {
		return nil, &Error{Var: source, Value: strings.Join(ids, ","), Err: err}
	}
	return out, nil
}

// cdiNameError is the error for a CDI device name the CDI library refused:
// the library's message repeats the name unescaped, so it is made one line.
func cdiNameError(name string, err error) error {
	return fmt.Errorf("invalid CDI device name %s: %w", echo.Quote(name), echo.Wrap(err))
}
