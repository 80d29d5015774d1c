// Package config reads and writes /etc/nvidia-container-runtime/config.toml,
// the configuration NVIDIA's runtime, hook and nvidia-ctk share.
//
// The file is found as NVIDIA's tools find it (see Path), parsed over the
// defaults (a key the file does not set keeps its default), and validated.
// Keys nctk does not know are kept, reported as warnings and written back
// by Render, never fatal. A malformed file or a value of the wrong type is
// an error naming the file, the line and the key.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/hostfile"
)

// File locations and environment variables of the lookup.
const (
	// EnvFilePath names a config file that must exist.
	EnvFilePath = "NVIDIA_CTK_CONFIG_FILE_PATH"
	// EnvXDGConfigHome replaces /etc as the config directory when set.
	EnvXDGConfigHome = "XDG_CONFIG_HOME"
	// RelativePath is the file's path below the config directory.
	RelativePath = "nvidia-container-runtime/config.toml"
	// DefaultPath is where the file is when neither variable is set.
	DefaultPath = "/etc/" + RelativePath
)

// Runtime modes (nvidia-container-runtime.mode).
const (
	ModeAuto   = "auto"
	ModeLegacy = "legacy"
	ModeCDI    = "cdi"
	ModeJitCDI = "jit-cdi"
	ModeCSV    = "csv"
)

// Config is the whole file. Field tags give the TOML keys.
type Config struct {
	AcceptEnvvarUnprivileged       bool   `toml:"accept-nvidia-visible-devices-envvar-when-unprivileged"`
	AcceptDeviceListAsVolumeMounts bool   `toml:"accept-nvidia-visible-devices-as-volume-mounts"`
	DisableRequire                 bool   `toml:"disable-require"`
	SupportedDriverCapabilities    string `toml:"supported-driver-capabilities"`
	SwarmResource                  string `toml:"swarm-resource"`

	CLI      CLIConfig     `toml:"nvidia-container-cli"`
	Runtime  RuntimeConfig `toml:"nvidia-container-runtime"`
	Hook     HookConfig    `toml:"nvidia-container-runtime-hook"`
	CTK      CTKConfig     `toml:"nvidia-ctk"`
	Features Features      `toml:"features"`

	// Path is the file the configuration was loaded from ("" for
	// defaults only).
	Path string `toml:"-"`
	// Unknown holds the keys of the file that nctk does not know, as a
	// tree of tables (map[string]any); Render writes them back.
	Unknown map[string]any `toml:"-"`
	// Warnings lists non-fatal problems: unknown keys, values taken as
	// defaults.
	Warnings []string `toml:"-"`
}

// CLIConfig is [nvidia-container-cli].
type CLIConfig struct {
	Root        string   `toml:"root"`
	Path        string   `toml:"path"`
	Environment []string `toml:"environment"`
	Debug       string   `toml:"debug"`
	LdCache     string   `toml:"ldcache"`
	LoadKmods   bool     `toml:"load-kmods"`
	NoCgroups   bool     `toml:"no-cgroups"`
	User        string   `toml:"user"`
	Ldconfig    string   `toml:"ldconfig"`
	NoPivot     bool     `toml:"no-pivot,omitempty"`
}

// RuntimeConfig is [nvidia-container-runtime].
type RuntimeConfig struct {
	Debug    string   `toml:"debug"`
	LogLevel string   `toml:"log-level"`
	Runtimes []string `toml:"runtimes"`
	Mode     string   `toml:"mode"`
	Modes    Modes    `toml:"modes"`
}

// Modes is [nvidia-container-runtime.modes].
type Modes struct {
	CDI    CDIMode    `toml:"cdi"`
	CSV    CSVMode    `toml:"csv"`
	JitCDI JitCDIMode `toml:"jit-cdi"`
	Legacy LegacyMode `toml:"legacy"`
}

// CDIMode is [nvidia-container-runtime.modes.cdi].
type CDIMode struct {
	SpecDirs           []string `toml:"spec-dirs"`
	DefaultKind        string   `toml:"default-kind"`
	AnnotationPrefixes []string `toml:"annotation-prefixes"`
}

// CSVMode is [nvidia-container-runtime.modes.csv].
type CSVMode struct {
	MountSpecPath       string `toml:"mount-spec-path"`
	CompatContainerRoot string `toml:"compat-container-root,omitempty"`
}

// JitCDIMode is [nvidia-container-runtime.modes.jit-cdi].
type JitCDIMode struct {
	NVCDIFeatureFlags []string `toml:"nvcdi-feature-flags,omitempty"`
	NVCDIDisableHooks []string `toml:"nvcdi-disable-hooks,omitempty"`
}

// LegacyMode is [nvidia-container-runtime.modes.legacy].
type LegacyMode struct {
	// CUDACompatMode is ldconfig, mount, hook or disabled.
	CUDACompatMode string `toml:"cuda-compat-mode"`
}

// HookConfig is [nvidia-container-runtime-hook].
type HookConfig struct {
	Path              string `toml:"path"`
	SkipModeDetection bool   `toml:"skip-mode-detection"`
}

// CTKConfig is [nvidia-ctk].
type CTKConfig struct {
	Path string `toml:"path"`
}

// Features is [features]: opt-ins that are off by default.
type Features struct {
	AllowCUDACompatLibsFromContainer bool `toml:"allow-cuda-compat-libs-from-container,omitempty"`
	AllowLdconfigFromContainer       bool `toml:"allow-ldconfig-from-container,omitempty"`
	AllowUnknownOCISpecFields        bool `toml:"allow-unknown-oci-spec-fields,omitempty"`
	DisableCUDACompatLibHook         bool `toml:"disable-cuda-compat-lib-hook,omitempty"`
	DisableIMEXChannelCreation       bool `toml:"disable-imex-channel-creation,omitempty"`
	IgnoreIMEXChannelRequests        bool `toml:"ignore-imex-channel-requests,omitempty"`
	NoAdditionalGIDsForDeviceNodes   bool `toml:"no-additional-gids-for-device-nodes,omitempty"`
}

// Default returns NVIDIA's defaults for this host: see DefaultFor("/").
func Default() *Config { return DefaultFor("/") }

// DefaultFor returns NVIDIA's defaults for the host whose root is root: the
// ldconfig is @/sbin/ldconfig.real when that file exists (Ubuntu),
// else @/sbin/ldconfig; the CLI user is root:video on SUSE-like systems
// (ID or ID_LIKE in /etc/os-release naming suse).
func DefaultFor(root string) *Config {
	c := &Config{
		AcceptEnvvarUnprivileged:    true,
		SupportedDriverCapabilities: "compat32,compute,display,graphics,ngx,utility,video",
		CLI: CLIConfig{
			Environment: []string{},
			LoadKmods:   true,
			Ldconfig:    "@" + DefaultLdconfig,
		},
		Runtime: RuntimeConfig{
			Debug:    "/dev/null",
			LogLevel: "info",
			Runtimes: []string{"runc", "crun"},
			Mode:     ModeAuto,
			Modes: Modes{
				CDI: CDIMode{
					SpecDirs:           []string{"/etc/cdi", "/var/run/cdi"},
					DefaultKind:        "nvidia.com/gpu",
					AnnotationPrefixes: []string{"cdi.k8s.io/"},
				},
				CSV:    CSVMode{MountSpecPath: "/etc/nvidia-container-runtime/host-files-for-container.d"},
				Legacy: LegacyMode{CUDACompatMode: "ldconfig"},
			},
		},
		Hook: HookConfig{Path: "nvidia-container-runtime-hook"},
		CTK:  CTKConfig{Path: "nvidia-ctk"},
	}
	if fi, err := os.Stat(filepath.Join(root, DefaultLdconfig+".real")); err == nil && !fi.IsDir() {
		c.CLI.Ldconfig = "@" + DefaultLdconfig + ".real"
	}
	if isSUSE(root) {
		c.CLI.User = "root:video"
	}
	return c
}

// isSUSE reports whether root's os-release names SUSE in ID or ID_LIKE.
func isSUSE(root string) bool {
	data, err := hostfile.ReadFile(filepath.Join(root, "etc/os-release"), hostfile.MaxConfig)
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || (k != "ID" && k != "ID_LIKE") {
			continue
		}
		for id := range strings.FieldsSeq(strings.Trim(v, `"'`)) {
			if strings.Contains(id, "suse") {
				return true
			}
		}
	}
	return false
}

// lookupEnv finds key in an environ list (the last entry wins).
func lookupEnv(environ []string, key string) (string, bool) {
	val, found := "", false
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			val, found = v, true
		}
	}
	return val, found
}

// Path returns the config file NVIDIA's tools use in the given environment:
// $NVIDIA_CTK_CONFIG_FILE_PATH if set (the file must then exist), else
// $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml if XDG_CONFIG_HOME
// is set (as in NVIDIA's tools, /etc is then not consulted), else
// /etc/nvidia-container-runtime/config.toml.
func Path(environ []string) (path string, mustExist bool) {
	if p, _ := lookupEnv(environ, EnvFilePath); p != "" {
		return p, true
	}
	if x, _ := lookupEnv(environ, EnvXDGConfigHome); x != "" {
		return filepath.Join(x, RelativePath), false
	}
	return DefaultPath, false
}

// Load finds the config file for the environment (see Path) and loads it;
// a missing file that was not named explicitly gives the defaults.
func Load(environ []string) (*Config, error) {
	p, must := Path(environ)
	c, err := LoadFile(p, must)
	if err != nil && must {
		return nil, fmt.Errorf("%s=%s: %w", EnvFilePath, p, err)
	}
	return c, err
}

// LoadFile loads the config file at path over the defaults. A missing file
// is an error when mustExist, else it gives the defaults (with Path "").
// Nothing is logged: warnings (unknown keys, …) are in Config.Warnings.
// The file is read with hostfile.ReadFile: a FIFO or device in its place,
// or more than hostfile.MaxConfig bytes, is an error naming it.
func LoadFile(path string, mustExist bool) (*Config, error) {
	data, err := hostfile.ReadFile(path, hostfile.MaxConfig)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !mustExist {
			return Default(), nil
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse parses config file contents over the defaults and validates them.
// name is the file name errors and warnings carry.
func Parse(data []byte, name string) (*Config, error) {
	c := Default()
	if err := decode(data, name, c); err != nil {
		return nil, err
	}
	c.Path = name
	// An empty list under an omitempty key is the key's absence: Render
	// and Marshal leave it out, and a file read again must mean the same.
	jit := &c.Runtime.Modes.JitCDI
	if len(jit.NVCDIFeatureFlags) == 0 {
		jit.NVCDIFeatureFlags = nil
	}
	if len(jit.NVCDIDisableHooks) == 0 {
		jit.NVCDIDisableHooks = nil
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	return c, nil
}

// logLevels maps logrus level names (what NVIDIA's log-level takes) to
// slog levels.
func logLevels() map[string]slog.Level {
	return map[string]slog.Level{
		"panic": slog.LevelError + 4, "fatal": slog.LevelError + 4, "error": slog.LevelError,
		"warn": slog.LevelWarn, "warning": slog.LevelWarn, "info": slog.LevelInfo,
		"debug": slog.LevelDebug, "trace": slog.LevelDebug - 4,
	}
}

// SlogLevel returns the slog level of nvidia-container-runtime.log-level.
func (c *Config) SlogLevel() (slog.Level, error) {
	l, ok := logLevels()[strings.ToLower(c.Runtime.LogLevel)]
	if !ok {
		return slog.LevelInfo, fmt.Errorf("nvidia-container-runtime.log-level = %q: want one of trace, debug, info, warning, error, fatal, panic", c.Runtime.LogLevel)
	}
	return l, nil
}

// SupportedCapabilities returns the capability set of
// supported-driver-capabilities ("all" expands to every capability; an
// empty value means all).
func (c *Config) SupportedCapabilities() (caps.Set, error) {
	if strings.TrimSpace(c.SupportedDriverCapabilities) == "" {
		return caps.Full(), nil
	}
	s, err := caps.Parse(c.SupportedDriverCapabilities)
	if err != nil {
		return nil, fmt.Errorf("supported-driver-capabilities = %q: %w", c.SupportedDriverCapabilities, err)
	}
	return s, nil
}

// SwarmResourceVars returns the environment variable names of
// swarm-resource (a comma list), trimmed, empties dropped.
func (c *Config) SwarmResourceVars() []string {
	var out []string
	for v := range strings.SplitSeq(c.SwarmResource, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Validate checks values that must be one of a set or follow a rule. It
// returns every problem found, joined; values that NVIDIA's tools accept
// with a fallback only add warnings.
func (c *Config) Validate() error {
	var errs []error
	if l, err := c.LdconfigSetting(); err != nil {
		errs = append(errs, err)
	} else if l.InContainer() {
		c.warn(fmt.Sprintf("nvidia-container-cli.ldconfig = %q is a container path: nctk runs the host's %s instead (the hook still passes the container path to nvidia-container-cli)", l, DefaultLdconfig))
	}
	if strings.TrimSpace(c.SupportedDriverCapabilities) == "" {
		c.warn("supported-driver-capabilities is empty: every capability is supported")
	} else if _, err := c.SupportedCapabilities(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.SlogLevel(); err != nil {
		errs = append(errs, err)
	}
	switch c.Runtime.Mode {
	case ModeAuto, ModeLegacy, ModeCDI, ModeJitCDI, ModeCSV:
	default:
		errs = append(errs, fmt.Errorf("nvidia-container-runtime.mode = %q: want auto, legacy, cdi, jit-cdi or csv", c.Runtime.Mode))
	}
	switch m := c.Runtime.Modes.Legacy.CUDACompatMode; m {
	case "ldconfig", "mount", "hook", "disabled":
	default:
		c.warn(fmt.Sprintf("nvidia-container-runtime.modes.legacy.cuda-compat-mode = %q is not ldconfig, mount, hook or disabled: CUDA compat libraries are disabled", m))
	}
	if len(c.Runtime.Runtimes) == 0 {
		errs = append(errs, fmt.Errorf("nvidia-container-runtime.runtimes is empty: name at least one low-level runtime (runc)"))
	}
	for _, r := range c.Runtime.Runtimes {
		if strings.TrimSpace(r) == "" {
			errs = append(errs, fmt.Errorf("nvidia-container-runtime.runtimes has an empty entry"))
			break
		}
	}
	for _, e := range c.CLI.Environment {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("nvidia-container-cli.environment entry %q: want NAME=value", e))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) warn(w string) {
	for _, have := range c.Warnings {
		if have == w {
			return
		}
	}
	c.Warnings = append(c.Warnings, w)
}

// CUDACompatOn reports whether nvidia-container-runtime's legacy path
// makes an image's newer CUDA compat libraries the loader's first choice
// (nothing from the image is mounted either way): what NVIDIA's legacy path
// does through nvidia-container-cli (CUDACompatMode ldconfig or mount), or,
// with cuda-compat-mode = "hook", through the enable-cuda-compat hook its
// runtime adds unless features.disable-cuda-compat-lib-hook is on.
func (c *Config) CUDACompatOn() bool {
	switch c.CUDACompatMode() {
	case "ldconfig", "mount":
		return true
	}
	return c.Runtime.Modes.Legacy.CUDACompatMode == "hook" && !c.Features.DisableCUDACompatLibHook
}

// CUDACompatMode returns the --cuda-compat-mode value the hook passes to
// nvidia-container-cli: ldconfig or mount as configured, disabled for hook,
// disabled, and unknown values unless
// features.allow-cuda-compat-libs-from-container is on, in which case an
// unknown value means mount (NVIDIA's pre-1.17.4 behaviour).
func (c *Config) CUDACompatMode() string {
	switch m := c.Runtime.Modes.Legacy.CUDACompatMode; m {
	case "ldconfig", "mount":
		return m
	case "hook", "disabled":
		return "disabled"
	}
	if c.Features.AllowCUDACompatLibsFromContainer {
		return "mount"
	}
	return "disabled"
}
