// Package runtime is nvidia-container-runtime: a runc-compatible wrapper.
//
// It takes a runc command line verbatim. On create and run it computes the
// container's plan (internal/planner, with the CDI edits of CDI device
// names) and edits the bundle's config.json atomically, keeping every field
// it does not know: device nodes with their device cgroup rules, read-only
// bind mounts of driver files, environment variables, CDI edits, and a
// createContainer hook with an explicit minimal environment for the
// /proc/driver/nvidia view only where the container's procfs will show
// that directory (the host kernel has the driver loaded, or the spec
// mounts no procfs at /proc). It creates the driver symlinks and adds the
// driver libraries to ld.so.cache in the bundle's rootfs itself (inside the
// root, from the host files to be mounted), and then execs the low-level
// runtime (runc, crun) with the same arguments and environment. Every other
// subcommand and flag goes straight to the low-level runtime: the process
// is replaced (exec, no fork), so exit status, stdio, pid files and console
// sockets are the runtime's own. A container that requests no GPU is not
// touched.
//
// Errors stop before the low-level runtime runs, with nothing modified
// (changes in the rootfs are rolled back; config.json is written last);
// they go to stderr and to the engine's --log file in its --log-format
// (containerd reports the last "error" line of that file).
package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
	"github.com/nctk/nctk/internal/version"
)

// Runtime is the wrapper with its dependencies.
type Runtime struct {
	// planner computes the container's plan (defaultPlanner; tests put
	// their own).
	planner preparer
	// LoadConfig reads config.toml.
	LoadConfig func(e *app.Env) (*config.Config, error)
	// Exec replaces the process with the low-level runtime; it returns
	// only on failure.
	Exec func(path string, argv, env []string) error
	// Self is this program's executable, never chosen as the low-level
	// runtime ("" for none).
	Self string
	// HookPath is the nvidia-cdi-hook binary the spec's hooks run; ""
	// finds it next to this program, in $PATH or in the standard
	// directories.
	HookPath string
	// Version is printed by --version before the low-level runtime's.
	Version string
	// ProcDriverDir is the host kernel's /proc/driver/nvidia ("" for that
	// path): when it is absent, the container's procfs has none either and
	// the plan's /proc/driver/nvidia view hook is not emitted (it would
	// skip the view).
	ProcDriverDir string
}

// defaultProcDriverDir is where a loaded NVIDIA kernel driver shows in the
// host's procfs (which every container's procfs mirrors).
const defaultProcDriverDir = "/proc/driver/nvidia"

// New returns the wrapper as installed.
func New() *Runtime {
	self, _ := os.Executable()
	return &Runtime{
		planner:    defaultPlanner(),
		LoadConfig: loadConfig,
		Exec:       syscall.Exec,
		Self:       self,
		Version:    version.String(),
	}
}

// Main is nvidia-container-runtime's entry point.
func Main(e *app.Env) int {
	return New().Run(e)
}

// Run runs the wrapper. It returns only when it fails (status 1); on
// success the process has become the low-level runtime.
func (r *Runtime) Run(e *app.Env) int {
	inv, perr := parseArgs(e.Args) // inv is usable even with perr (for --log)
	cfg, cerr := r.LoadConfig(e)
	log := newLogger(inv, cfg)
	defer log.close()
	fail := func(err error) int {
		msg := echo.Error(err) // one short line: a stderr pipe nobody drains cannot block it
		log.Error(msg)
		fmt.Fprintf(e.Stderr, "nvidia-container-runtime: error: %s\n", msg)
		return 1
	}
	if perr != nil {
		return fail(perr)
	}
	if cerr != nil {
		return fail(cerr)
	}
	if inv.Version {
		fmt.Fprintf(e.Stdout, "NVIDIA Container Runtime version %s\nspec: %s\n\n", r.Version, specs.Version)
	}
	path := e.Getenv("PATH")
	rt, err := findRuntime(cfg.Runtime.Runtimes, path, r.Self)
	if err != nil {
		return fail(err)
	}
	if inv.injects() {
		for _, w := range cfg.Warnings {
			log.Warn("config " + cfg.Path + ": " + w)
		}
		start := time.Now()
		if err := r.inject(e, inv, cfg, log); err != nil {
			return fail(err)
		}
		log.Debug("prepared container", "command", inv.Command, "elapsed", time.Since(start))
	}
	argv := append([]string{rt}, e.Args[1:]...)
	if log.enabled(slog.LevelDebug) {
		log.Debug("exec low-level runtime", "path", rt, "args", argv)
	}
	// The log files are close-on-exec.
	if err := r.Exec(rt, argv, e.Environ); err != nil {
		return fail(fmt.Errorf("exec low-level runtime %s: %w", rt, err))
	}
	return 0
}

// inject edits the bundle's config.json for a create or run. Nothing is
// written unless every step succeeds.
func (r *Runtime) inject(e *app.Env, inv *invocation, cfg *config.Config, log *logger) error {
	bundle := inv.Bundle
	if bundle == "" {
		bundle = "."
	}
	bundle, err := filepath.Abs(bundle)
	if err != nil {
		return fmt.Errorf("bundle %s: %w", inv.Bundle, err)
	}
	specPath := filepath.Join(bundle, "config.json")
	doc, err := ocispec.Load(specPath)
	if err != nil {
		return err
	}
	spec := doc.Spec()
	rootPath, err := doc.RootPath(bundle)
	if err != nil {
		return err
	}
	p, err := r.planner.Prepare(context.Background(), input{Spec: spec, Rootfs: rootPath, Bundle: bundle, Config: cfg})
	if err != nil {
		return err
	}
	if p == nil {
		log.Debug("not a GPU container; spec left as it is", "spec", specPath)
		return nil
	}
	// Symlinks and ld.so.cache are done here, in the container root, before
	// the low-level runtime runs; only the /proc/driver/nvidia view needs
	// a createContainer hook (it mounts inside the container), and only
	// when the container's procfs will have that directory.
	procView := p.Proc != nil && r.needsProcView(spec)
	// update-ldcache gets the configured host ldconfig, or none (its own
	// default) when the setting is empty or an accepted container path.
	ldconfig, err := cfg.HostLdconfig()
	if err != nil {
		return err
	}
	hc := ocispec.HookConfig{Path: r.HookPath, LdconfigPath: ldconfig.Path,
		RootfsDone: true, NoProcView: !procView}
	if hc.Path == "" && procView {
		if hc.Path, err = findHelper(hookargs.Binary, e.Args[0], r.Self, e.Getenv("PATH")); err != nil {
			return fmt.Errorf("container hooks: %w", err)
		}
	}
	if err := ocispec.Apply(doc, p, hc); err != nil {
		return err
	}
	root, err := prepareRootfs(rootPath, p, log.Logger)
	if err != nil {
		return err
	}
	if err := ocispec.Save(specPath, doc); err != nil {
		return errors.Join(err, closeRoot(root, true))
	}
	if err := closeRoot(root, false); err != nil {
		return err
	}
	log.Info("injected GPU access into the OCI spec", "spec", specPath,
		"devices", len(p.Devices), "mounts", len(p.Mounts), "symlinks", len(p.Symlinks), "proc-view-hook", procView)
	return nil
}

// prepareRootfs creates the plan's symlinks in the container root at path
// and adds the plan's libraries to its ld.so.cache (read from the host files
// that will be mounted: the mounts do not exist yet), all inside the root.
// It returns the open root with its changes journaled (nil when the plan
// has nothing for the root); on error everything is rolled back.
func prepareRootfs(path string, p *plan.Plan, log *slog.Logger) (*rootfs.Root, error) {
	if len(p.Symlinks) == 0 && len(p.LdconfigDirs) == 0 {
		return nil, nil
	}
	root, err := rootfs.Open(path)
	if err != nil {
		return nil, err
	}
	err = func() error {
		for _, s := range p.Symlinks {
			if err := root.Symlink(s.Target, s.Link); err != nil {
				return fmt.Errorf("create symlink: %w", err)
			}
		}
		if len(p.LdconfigDirs) == 0 {
			return nil
		}
		names, err := root.PendingLibraryEntries(pending(p), p.LdcacheLibs())
		if err != nil {
			return fmt.Errorf("update ld.so.cache: %w", err)
		}
		if err := root.UpdateLdCacheFor(names, p.LdconfigDirs, log); err != nil {
			return fmt.Errorf("update ld.so.cache: %w", err)
		}
		return nil
	}()
	if err != nil {
		return nil, errors.Join(err, closeRoot(root, true))
	}
	return root, nil
}

// pending is what p creates in the container root, as
// rootfs.Root.PendingLibraryEntries takes it: its file mounts (made later,
// by the low-level runtime) and its symlinks.
func pending(p *plan.Plan) rootfs.Pending {
	var out rootfs.Pending
	for _, m := range p.Mounts {
		if m.Kind == plan.KindFile {
			out.Files = append(out.Files, rootfs.PendingFile{Path: m.Destination, Source: m.Source, Library: m.Library})
		}
	}
	for _, s := range p.Symlinks {
		out.Links = append(out.Links, rootfs.PendingLink{Path: s.Link, Target: s.Target})
	}
	return out
}

// closeRoot keeps (or, with rollback, undoes) the changes made in root and
// closes it; a nil root is nothing to do.
func closeRoot(root *rootfs.Root, rollback bool) error {
	if root == nil {
		return nil
	}
	var err error
	if rollback {
		if rerr := root.Rollback(); rerr != nil {
			err = fmt.Errorf("undo changes in container root %s: %w", root.Path(), rerr)
		}
	}
	return errors.Join(err, root.Close())
}

// needsProcView reports whether the container's /proc/driver/nvidia view
// must be built by a hook: the host kernel shows the driver in procfs (the
// container's procfs will too), or the spec mounts no procfs at /proc (the
// hook then decides on what the image has there).
func (r *Runtime) needsProcView(spec *specs.Spec) bool {
	dir := r.ProcDriverDir
	if dir == "" {
		dir = defaultProcDriverDir
	}
	if _, err := os.Stat(dir); err == nil {
		return true
	}
	return !slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool {
		return m.Type == "proc" && filepath.Clean(m.Destination) == "/proc"
	})
}
