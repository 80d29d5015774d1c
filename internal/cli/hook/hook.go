// Package hook is nctk's nvidia-container-runtime-hook (also installed as
// nvidia-container-toolkit): the OCI prestart hook that dockerd's --gpus
// path and NVIDIA's legacy runtime mode add to a container.
//
//	nvidia-container-runtime-hook [-config FILE] [-debug] [-version] prestart|poststart|poststop
//
// prestart reads the container's OCI state on stdin, the bundle's
// config.json, works out the container's request (internal/request) and,
// for a GPU container, runs nvidia-container-cli with NVIDIA's command line
// (in this process when the CLI is this nctk binary, else by exec, same
// PID):
//
//	nvidia-container-cli [--root=R] [--load-kmods] [--no-create-imex-channels] [--no-pivot]
//	  [--debug=F] [--ldcache=F] [--user=U] configure --cuda-compat-mode=M [--ldconfig=@P]
//	  [--no-cgroups] [--device=LIST] [--mig-config=V] [--mig-monitor=V] [--imex-channel=LIST]
//	  [--compute] [--compat32] [--graphics] [--utility] [--video] [--display] [--ngx]
//	  [--require=EXPR]... --pid=PID ROOTFS
//
// The CLI gets an explicit minimal environment: PATH, a few variables the
// CLI itself reads when the hook has them, and
// nvidia-container-cli.environment from config.toml. Nothing of the
// image's environment reaches it (the lesson of CVE-2025-23266). Not a GPU
// container (NVIDIA_VISIBLE_DEVICES unset, empty or void): exit 0 quietly.
// poststart and poststop do nothing.
package hook

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/cli/containercli"
	"github.com/nctk/nctk/internal/cli/lookpath"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/ocistate"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/version"
)

// CLIName is the program the hook executes.
const CLIName = "nvidia-container-cli"

// maxState bounds the OCI state read from stdin.
const maxState = 1 << 20

// passEnv are variables of the hook's own environment (set by the engine,
// never by the image) that nvidia-container-cli reads.
func passEnv() []string {
	return []string{"CUDA_MPS_PIPE_DIRECTORY", "NCTK_PROBE_CACHE", "NCTK_PROBE_CACHE_DIR"}
}

// capOrder is the order NVIDIA's hook emits capability flags in: sorted by
// name, whatever order NVIDIA_DRIVER_CAPABILITIES lists them in.
func capOrder() []caps.Capability {
	return []caps.Capability{caps.Compat32, caps.Compute, caps.Display, caps.Graphics, caps.NGX, caps.Utility, caps.Video}
}

// execFunc replaces the process (syscall.Exec in production).
type execFunc func(path string, argv, env []string) error

// Main runs the hook.
func Main(e *app.Env) int { return mainWith(e, runCLI(e, syscall.Exec, containercli.Main)) }

// runCLI is how the hook runs nvidia-container-cli. When the CLI found is
// this very binary (nctk's nvidia-container-cli link, the default), its
// Main runs in this process — one process start less on every `docker run
// --gpus` — with exactly the arguments and the explicit environment an exec
// would give it (the CLI reads its environment only through app.Env); any
// other binary (a configured nvidia-container-cli.path) replaces the
// process through exec. A non-zero status of the in-process CLI, which has
// printed its error already, comes back as a cliExit.
func runCLI(e *app.Env, exec execFunc, cliMain app.Tool) execFunc {
	return func(path string, argv, env []string) error {
		if !isSelf(path) {
			return exec(path, argv, env)
		}
		code := cliMain(&app.Env{Args: argv, Stdin: strings.NewReader(""), Stdout: e.Stdout, Stderr: e.Stderr, Environ: env})
		if code != 0 {
			return cliExit(code)
		}
		return nil
	}
}

// isSelf reports whether path is the running executable.
func isSelf(path string) bool {
	self, err := os.Executable()
	if err != nil {
		return false
	}
	a, err := os.Stat(path)
	if err != nil {
		return false
	}
	b, err := os.Stat(self)
	return err == nil && os.SameFile(a, b)
}

// cliExit is the exit status of nvidia-container-cli run in process.
type cliExit int

func (c cliExit) Error() string { return fmt.Sprintf("%s exited with status %d", CLIName, int(c)) }

func mainWith(e *app.Env, exec execFunc) int {
	name := filepath.Base(e.Args[0])
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	debug := fs.Bool("debug", false, "enable debug output")
	showVersion := fs.Bool("version", false, "print the version and exit")
	configPath := fs.String("config", "", "the path to the configuration file to use")
	fs.Usage = func() {
		fmt.Fprintf(e.Stderr, "Usage of %s:\n", name)
		fs.PrintDefaults()
		fmt.Fprintf(e.Stderr, "\nCommands:\n  prestart\n        run the prestart hook\n  poststart\n        no-op\n  poststop\n        no-op\n")
	}
	if err := fs.Parse(e.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintf(e.Stdout, "NVIDIA Container Runtime Hook version %s\n%s\n", version.NVIDIACompat, version.String())
		return 0
	}
	level := slog.LevelWarn
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: level}))
	args := fs.Args()
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	switch args[0] {
	case "prestart":
		if err := prestart(e, *configPath, *debug, log, exec); err != nil {
			var status cliExit
			if errors.As(err, &status) {
				return int(status) // the CLI printed why, as an exec'd one would
			}
			fmt.Fprintf(e.Stderr, "%s: prestart: %s\n", name, echo.Error(err))
			return 1
		}
		return 0
	case "poststart", "poststop":
		return 0
	}
	fs.Usage()
	return 2
}

// prestart does the work; on success for a GPU container it does not
// return (exec).
func prestart(e *app.Env, configPath string, debug bool, log *slog.Logger, exec execFunc) error {
	cfg, err := loadConfig(e, configPath)
	if err != nil {
		return err
	}
	data, err := e.ReadStdin(maxState)
	if err != nil {
		return fmt.Errorf("OCI state: %w", err)
	}
	state, err := ocistate.ParseState(data)
	if err != nil {
		return err
	}
	specPath := filepath.Join(state.Bundle, "config.json")
	doc, err := ocispec.Load(specPath)
	if err != nil {
		return err
	}
	spec := doc.Spec()
	if spec.Process == nil {
		return fmt.Errorf("OCI spec %s: no process", specPath)
	}
	rootfs, err := doc.RootPath(state.Bundle)
	if err != nil {
		return err
	}
	if mode := cfg.Runtime.Mode; !cfg.Hook.SkipModeDetection && (mode == config.ModeCDI || mode == config.ModeJitCDI || mode == config.ModeCSV) {
		return fmt.Errorf("invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) is not supported in nvidia-container-runtime mode %q; "+
			"use the NVIDIA Container Runtime (e.g. specify the --runtime=nvidia flag) instead, or set nvidia-container-runtime-hook.skip-mode-detection", mode)
	}
	// NVIDIA's hook reads the device list as legacy mode does, also in cdi
	// mode with skip-mode-detection: plain ids, no default-kind.
	if cfg.Runtime.Mode == config.ModeCDI {
		legacy := *cfg
		legacy.Runtime.Mode = config.ModeLegacy
		cfg = &legacy
	}
	req, err := request.FromSpec(spec, cfg)
	if err != nil {
		return err
	}
	for _, w := range req.Warnings {
		log.Warn(w)
	}
	if req.Void {
		log.Debug("not a GPU container; nothing to do", "source", req.DeviceSource)
		return nil
	}
	if !req.All && !req.None && len(req.Devices) == 0 && len(req.CDIDevices) > 0 {
		log.Warn("only CDI devices requested; they are injected by the runtime, not by this hook", "devices", req.CDIDevices)
		return nil
	}
	cfgPath := configPath
	if cfgPath == "" {
		cfgPath, _ = config.Path(e.Environ)
	}
	cli, searchPath, err := findCLI(cfg, e.Getenv("PATH"), cfgPath)
	if err != nil {
		return err
	}
	argv, err := cliArgs(cfg, req, debug, state.Pid, rootfs)
	if err != nil {
		return err
	}
	env := cliEnv(e, cfg, searchPath)
	log.Debug("exec", "path", cli, "argv", argv, "env", env)
	if err := exec(cli, argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", cli, err)
	}
	return nil
}

func loadConfig(e *app.Env, configPath string) (*config.Config, error) {
	if configPath != "" {
		return config.LoadFile(configPath, true)
	}
	return config.Load(e.Environ)
}

// cliArgs is NVIDIA's nvidia-container-cli command line for the request.
// nvidia-container-cli.ldconfig is passed as --ldconfig when set: a host
// path with its ".real" variant chosen (config.Ldconfig.Normalize), a
// container path as it is (accepted only with
// features.allow-ldconfig-from-container; a container path otherwise is
// the error).
func cliArgs(cfg *config.Config, req request.Request, debug bool, pid int, rootfs string) ([]string, error) {
	ldconfig, err := cfg.LdconfigSetting()
	if err != nil {
		return nil, err
	}
	a := []string{CLIName}
	if cfg.CLI.Root != "" {
		a = append(a, "--root="+cfg.CLI.Root)
	}
	if cfg.CLI.LoadKmods {
		a = append(a, "--load-kmods")
	}
	if cfg.Features.DisableIMEXChannelCreation {
		a = append(a, "--no-create-imex-channels")
	}
	if cfg.CLI.NoPivot {
		a = append(a, "--no-pivot")
	}
	switch {
	case debug:
		a = append(a, "--debug=/dev/stderr")
	case cfg.CLI.Debug != "":
		a = append(a, "--debug="+cfg.CLI.Debug)
	}
	if cfg.CLI.LdCache != "" {
		a = append(a, "--ldcache="+cfg.CLI.LdCache)
	}
	if cfg.CLI.User != "" {
		a = append(a, "--user="+cfg.CLI.User)
	}
	a = append(a, "configure", "--cuda-compat-mode="+cfg.CUDACompatMode())
	if l := ldconfig.Normalize().String(); l != "" {
		a = append(a, "--ldconfig="+l)
	}
	if cfg.CLI.NoCgroups {
		a = append(a, "--no-cgroups")
	}
	devices := req.Devices
	if req.All {
		devices = []string{"all"}
	}
	if d := strings.Join(devices, ","); d != "" && !req.None {
		a = append(a, "--device="+d)
	}
	if req.MIGConfig {
		a = append(a, "--mig-config=all")
	}
	if req.MIGMonitor {
		a = append(a, "--mig-monitor=all")
	}
	if len(req.IMEXChannels) > 0 {
		ids := make([]string, len(req.IMEXChannels))
		for i, id := range req.IMEXChannels {
			ids[i] = strconv.Itoa(id)
		}
		a = append(a, "--imex-channel="+strings.Join(ids, ","))
	}
	for _, c := range capOrder() {
		if req.Caps.Has(c) {
			a = append(a, "--"+string(c))
		}
	}
	for _, r := range req.Requirements {
		a = append(a, "--require="+r.Source)
	}
	return append(a, "--pid="+strconv.Itoa(pid), rootfs), nil
}

// findCLI returns nvidia-container-cli's path: nvidia-container-cli.path,
// or the first match in the driver root's standard directories, the
// standard directories and the hook's PATH. It also returns that search
// path, which becomes the CLI's PATH. cfgPath is the config file the hook
// read, which the error names.
func findCLI(cfg *config.Config, hookPath, cfgPath string) (string, string, error) {
	var dirs []string
	add := func(d string) {
		if filepath.IsAbs(d) && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if root := cfg.CLI.Root; root != "" && root != "/" {
		for _, d := range lookpath.StandardDirs() {
			add(filepath.Join(root, d))
		}
	}
	for _, d := range lookpath.StandardDirs() {
		add(d)
	}
	for _, d := range filepath.SplitList(hookPath) {
		add(d)
	}
	searchPath := strings.Join(dirs, ":")
	if p := cfg.CLI.Path; p != "" {
		if !filepath.IsAbs(p) {
			return "", "", fmt.Errorf("nvidia-container-cli.path %q: not an absolute path", p)
		}
		return p, searchPath, nil
	}
	if p, ok := lookpath.Find(CLIName, dirs); ok {
		return p, searchPath, nil
	}
	return "", "", fmt.Errorf("%s not found in %s (set nvidia-container-cli.path in %s)", CLIName, searchPath, cfgPath)
}

// cliEnv is the CLI's explicit environment: PATH, the hook-environment
// variables of passEnv, and nvidia-container-cli.environment.
func cliEnv(e *app.Env, cfg *config.Config, searchPath string) []string {
	env := []string{"PATH=" + searchPath}
	for _, k := range passEnv() {
		if v, ok := e.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, cfg.CLI.Environment...)
}
