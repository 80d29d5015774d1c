package runtime

// This file is the seam to packages written beside this one: the config
// file reader (internal/config) and the injection orchestrator
// (internal/inject). Until they are in the tree it holds small stand-ins;
// switching to them changes only this file.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/pelletier/go-toml/v2"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/plan"
)

// Config is what the runtime reads from config.toml.
type Config struct {
	// Runtimes are the low-level runtime candidates
	// (nvidia-container-runtime.runtimes).
	Runtimes []string
	// DebugLog is the runtime's log file (nvidia-container-runtime.debug);
	// "" or /dev/null for none.
	DebugLog string
	// LogLevel is nvidia-container-runtime.log-level.
	LogLevel string
	// HookPath is the nvidia-cdi-hook binary; "" finds it next to this
	// program, in $PATH or in the standard directories.
	HookPath string
	// LdconfigPath is the host ldconfig the update-ldcache hook runs
	// (nvidia-container-cli.ldconfig without its "@").
	LdconfigPath string
	// Path is the config file read ("" when none was found).
	Path string
}

// DefaultConfig is the configuration without a config file.
func DefaultConfig() *Config {
	return &Config{Runtimes: []string{"runc", "crun"}, DebugLog: os.DevNull, LogLevel: "info"}
}

// configPath finds config.toml as NVIDIA's tools do:
// $NVIDIA_CTK_CONFIG_FILE_PATH, $XDG_CONFIG_HOME/nvidia-container-runtime,
// /etc/nvidia-container-runtime. The bool says whether the file must exist.
func configPath(e *app.Env) (string, bool) {
	if p := e.Getenv("NVIDIA_CTK_CONFIG_FILE_PATH"); p != "" {
		return p, true
	}
	if x := e.Getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "nvidia-container-runtime", "config.toml"), false
	}
	return "/etc/nvidia-container-runtime/config.toml", false
}

// LoadConfig reads the runtime's part of config.toml (stand-in for
// internal/config).
func LoadConfig(e *app.Env) (*Config, error) {
	cfg := DefaultConfig()
	path, mustExist := configPath(e)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !mustExist:
		return cfg, nil
	case err != nil:
		return nil, fmt.Errorf("read config: %w", err)
	}
	var f struct {
		Runtime struct {
			Debug    *string  `toml:"debug"`
			LogLevel *string  `toml:"log-level"`
			Runtimes []string `toml:"runtimes"`
		} `toml:"nvidia-container-runtime"`
		CLI struct {
			Ldconfig string `toml:"ldconfig"`
		} `toml:"nvidia-container-cli"`
	}
	if err := toml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg.Path = path
	if f.Runtime.Debug != nil {
		cfg.DebugLog = *f.Runtime.Debug
	}
	if f.Runtime.LogLevel != nil {
		cfg.LogLevel = *f.Runtime.LogLevel
	}
	if f.Runtime.Runtimes != nil {
		cfg.Runtimes = f.Runtime.Runtimes
	}
	if l, ok := strings.CutPrefix(f.CLI.Ldconfig, "@"); ok {
		cfg.LdconfigPath = l
	}
	return cfg, nil
}

// Input is what the planner gets for one container.
type Input struct {
	// Spec is the container's OCI spec (read only).
	Spec *specs.Spec
	// Rootfs is the container root: root.path made absolute against the
	// bundle.
	Rootfs string
	// Bundle is the absolute bundle directory.
	Bundle string
	Config *Config
}

// Planner computes a container's injection plan; a nil plan means the
// container is not a GPU container and is left alone.
type Planner interface {
	Prepare(ctx context.Context, in Input) (*plan.Plan, error)
}

// PlannerFunc adapts a function to Planner.
type PlannerFunc func(ctx context.Context, in Input) (*plan.Plan, error)

// Prepare calls f.
func (f PlannerFunc) Prepare(ctx context.Context, in Input) (*plan.Plan, error) { return f(ctx, in) }

// defaultPlanner is the production planner (stand-in for internal/inject
// until it is in the tree): containers that request no GPU are left alone,
// and a GPU request fails clearly instead of starting without GPUs.
func defaultPlanner() Planner {
	return PlannerFunc(func(_ context.Context, in Input) (*plan.Plan, error) {
		if !requestsGPUs(in.Spec) {
			return nil, nil
		}
		return nil, errors.New("GPU injection is not available in this build (internal/inject is not wired)")
	})
}

// requestsGPUs reports whether NVIDIA_VISIBLE_DEVICES asks for anything.
func requestsGPUs(s *specs.Spec) bool {
	if s == nil || s.Process == nil {
		return false
	}
	v, set := "", false
	for _, kv := range s.Process.Env {
		if val, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok {
			v, set = val, true
		}
	}
	return set && strings.TrimSpace(v) != "" && !strings.Contains(v, "void")
}
