package ctk

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/cli/lookpath"
	"github.com/nctk/nctk/internal/engine"
)

// runtimeBinary is the executable the engines are pointed at.
const runtimeBinary = "nvidia-container-runtime"

// commandSourceTimeout bounds `containerd config dump` and friends.
const commandSourceTimeout = 30 * time.Second

func runtimeConfigure(e *env, args []string) error {
	var (
		runtimeName = "docker"
		configPath  string
		dropIn      string
		source      = "file"
		execPath    string
		mode        string
		hookFile    string
		hookPath    = engine.DefaultRuntimeHookPath
		rtName      = engine.DefaultRuntimeName
		rtPath      string
		setDefault  bool
		enableCDI   bool
		dryRun      bool
	)
	fs := newFlagSet("configure")
	fs.String(&runtimeName, []string{"runtime"}, nil, "NAME", "the engine to configure: docker, containerd or crio")
	fs.String(&configPath, []string{"config"}, nil, "FILE", "the engine's config file (default: /etc/docker/daemon.json, /etc/containerd/config.toml, /etc/crio/crio.conf)")
	fs.String(&dropIn, []string{"drop-in-config"}, nil, "FILE", "write the runtime to this drop-in file (containerd, crio; default /etc/containerd/conf.d/99-nvidia.toml, /etc/crio/crio.conf.d/99-nvidia.toml, also with --config; \"\" edits the main file)")
	fs.String(&source, []string{"config-source"}, nil, "SOURCE", "where the current settings come from: file, or command (`containerd config dump`, `crio status config`)")
	fs.String(&execPath, []string{"executable-path"}, nil, "PATH", "the engine's executable for --config-source=command (containerd, crio)")
	fs.String(&mode, []string{"config-mode"}, nil, "MODE", "config-file (default), or oci-hook (deprecated: write an OCI hooks.d file instead of editing the engine's config)")
	fs.String(&hookFile, []string{"oci-hook-path"}, nil, "FILE", "with --config-mode=oci-hook, the hook file to write (default: stdout)")
	fs.String(&hookPath, []string{"nvidia-runtime-hook-path"}, nil, "PATH", "with --config-mode=oci-hook, the nvidia-container-runtime-hook executable (absolute)")
	fs.String(&rtName, []string{"nvidia-runtime-name"}, nil, "NAME", "the runtime's name in the engine")
	fs.String(&rtPath, []string{"nvidia-runtime-path", "runtime-path"}, nil, "PATH", "the nvidia-container-runtime executable (default: docker nvidia-container-runtime, looked up by dockerd; containerd, crio: found in PATH, else /usr/bin/nvidia-container-runtime)")
	fs.Bool(&setDefault, []string{"set-as-default", "nvidia-set-as-default"}, nil, "make the runtime the engine's default (without it, a default naming the runtime is removed: containerd, crio)")
	fs.Bool(&enableCDI, []string{"cdi.enabled", "cdi.enable", "enable-cdi"}, nil, "enable CDI in the engine (docker: features.cdi; containerd: enable_cdi; always on in CRI-O)")
	fs.Bool(&dryRun, []string{"dry-run"}, nil, "print the resulting file(s) instead of writing them")
	if err := parseLeaf(e, fs, args, "[flags]", "Register the NVIDIA runtime in a container engine's configuration, keeping every other setting."); err != nil {
		return err
	}

	switch mode {
	case "oci-hook", "hook":
		e.log.Warn(fmt.Sprintf("the %q config mode is deprecated", mode))
		return writeOCIHook(e, hookFile, hookPath)
	case "", "config-file", "config":
	default:
		e.log.Warn(fmt.Sprintf("ignoring the unsupported config mode %q; using config-file", mode))
	}
	eng, err := engine.Lookup(runtimeName)
	if err != nil {
		return fmt.Errorf("--runtime: %w", err)
	}
	if configPath == "" {
		configPath = eng.DefaultConfigPath()
	}
	switch {
	case eng.DefaultDropInPath() == "":
		if fs.IsSet("drop-in-config") && dropIn != "" {
			return fmt.Errorf("--drop-in-config: %s has no drop-in configuration files", eng.Name())
		}
		dropIn = ""
	case !fs.IsSet("drop-in-config"):
		dropIn = eng.DefaultDropInPath()
	}
	if rtPath, err = runtimePath(e, eng, rtPath); err != nil {
		return err
	}
	req := engine.Request{
		Engine:     eng.Name(),
		ConfigPath: configPath,
		DropInPath: dropIn,
		Options:    engine.Options{RuntimeName: rtName, RuntimePath: rtPath, SetAsDefault: setDefault, EnableCDI: enableCDI},
	}
	commands := eng.ConfigCommands(configPath)
	if execPath != "" {
		if commands == nil {
			e.log.Warn(fmt.Sprintf("ignoring --executable-path=%s for %s", execPath, eng.Name()))
		} else {
			commands[0] = append([]string{execPath}, commands[0][1:]...)
		}
	}
	switch source {
	case "file":
	case "command":
		if commands == nil {
			e.log.Warn(fmt.Sprintf("--config-source=command is not supported for %s; using the file", eng.Name()))
			break
		}
		if req.Source, err = engineConfigDump(e, commands); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--config-source=%q: want file or command", source)
	}

	res, err := engine.Plan(req)
	if err != nil {
		return err
	}
	for _, n := range res.Notes {
		e.log.Warn(n)
	}
	if dryRun {
		for _, f := range res.Files {
			if len(res.Files) > 1 {
				fmt.Fprintf(e.Stdout, "# %s\n", f.Path)
			}
			e.Stdout.Write(f.Data)
		}
		return nil
	}
	if !res.Changed() {
		e.log.Info("configuration already up to date", "file", res.Files[0].Path)
		return nil
	}
	if err := res.Apply(); err != nil {
		return err
	}
	for _, f := range res.Files {
		if f.Changed {
			e.log.Info("wrote updated config", "file", f.Path)
		}
	}
	e.log.Info(fmt.Sprintf("restart %s for the change to take effect", eng.Daemon()))
	return nil
}

// writeOCIHook writes the OCI hooks.d file for --config-mode=oci-hook to
// file (its directory created), or to stdout when file is "".
func writeOCIHook(e *env, file, hookPath string) error {
	data, err := engine.OCIHook(hookPath)
	if err != nil {
		return fmt.Errorf("--nvidia-runtime-hook-path: %w", err)
	}
	if file == "" {
		_, err := e.Stdout.Write(data)
		return err
	}
	if err := atomicfile.WriteFile(file, data, atomicfile.Options{Mode: 0o644, DirMode: 0o755, Sync: true}); err != nil {
		return fmt.Errorf("--oci-hook-path: writing %s: %w", file, err)
	}
	e.log.Info("wrote OCI hook", "file", file)
	return nil
}

// runtimePath resolves --nvidia-runtime-path. An engine that looks the
// runtime up itself (Docker) gets it as given, by default the bare name
// nvidia-container-runtime, as NVIDIA writes it. The others (containerd,
// CRI-O) need an absolute path: the default is the runtime found in PATH,
// else /usr/bin/nvidia-container-runtime; a bare name is looked up in
// PATH, a relative path is made absolute.
func runtimePath(e *env, eng engine.Kind, p string) (string, error) {
	pathEnv := e.Getenv("PATH")
	if eng.RuntimeByName() {
		if p == "" {
			return runtimeBinary, nil
		}
		return p, nil
	}
	if p == "" {
		if found, err := lookPath(runtimeBinary, pathEnv); err == nil {
			return found, nil
		}
		e.log.Debug("nvidia-container-runtime not found in PATH; using the default path", "path", engine.DefaultRuntimePath)
		return engine.DefaultRuntimePath, nil
	}
	if filepath.IsAbs(p) {
		return p, nil
	}
	if !strings.Contains(p, "/") {
		found, err := lookPath(p, pathEnv)
		if err != nil {
			return "", fmt.Errorf("--nvidia-runtime-path=%s: %s needs an absolute path and %s is not in PATH", p, eng.Name(), p)
		}
		return found, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("--nvidia-runtime-path=%s: %w", p, err)
	}
	return abs, nil
}

// lookPath finds an executable in the PATH list pathEnv and returns its
// absolute path.
func lookPath(name, pathEnv string) (string, error) {
	if p, ok := lookpath.Find(name, filepath.SplitList(pathEnv)); ok {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("%s: not found in PATH", name)
}

// engineConfigDump runs the first of the engine's own "print the effective
// config" commands (Kind.ConfigCommands) that works, for
// --config-source=command. A command named by a bare name is looked up in
// PATH and the sbin directories; one given as a path (--executable-path)
// is run as it is.
func engineConfigDump(e *env, candidates [][]string) ([]byte, error) {
	var errs []string
	for _, argv := range candidates {
		path, err := argv[0], error(nil)
		if !strings.Contains(path, "/") {
			path, err = lookPath(argv[0], e.Getenv("PATH")+":/usr/local/sbin:/usr/sbin:/sbin")
		} else if !lookpath.IsExecutable(path) {
			err = fmt.Errorf("%s: not an executable file", path)
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), commandSourceTimeout)
		cmd := exec.CommandContext(ctx, path, argv[1:]...)
		cmd.Env = e.Environ
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		cancel()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String())))
			continue
		}
		e.log.Debug("read the effective configuration", "command", strings.Join(argv, " "))
		return stdout.Bytes(), nil
	}
	return nil, fmt.Errorf("--config-source=command: %s", strings.Join(errs, "; "))
}
