// Package runtime is nvidia-container-runtime: a runc-compatible wrapper.
//
// It takes a runc command line verbatim. On create and run it computes the
// container's plan (internal/planner, with the CDI edits of CDI device
// names) and edits the bundle's config.json atomically, keeping every field
// it does not know: device nodes with their device cgroup rules, read-only
// bind mounts of driver files, environment variables, CDI edits. The
// /proc/driver/nvidia view (only where the container's procfs will show
// that directory: the host kernel has the driver loaded, or the spec mounts
// no procfs at /proc) and the GPUs' links below /dev need the created
// container: on a create that names a --pid-file (every engine's does) the
// runtime makes them itself once the low-level runtime has created the
// container (internal/aftercreate; createThen), otherwise (run, a create
// without --pid-file) a createContainer hook with an explicit minimal
// environment does. It creates the driver symlinks and adds the
// driver libraries to ld.so.cache in the bundle's rootfs itself (inside the
// root, from the host files to be mounted), and, with CUDA compat handling
// on (config.Config.CUDACompatOn) and libcuda injected, puts the image's
// /usr/local/cuda/compat libcuda first when it is of a newer branch than
// the host driver (internal/cudacompat; never mounted). In CDI mode it does the same
// for the createContainer hooks of the spec that run this installation's
// nvidia-cdi-hook (the same file as this program; see ownHook and
// cdispec.LiftOwnHooks): their links, ld.so.cache entries and CUDA compat
// step (enable-cuda-compat) are made here
// and the hook entries are dropped, the disable-device-node-modification
// part kept as a hook only where the container's procfs will show the
// driver (or, on a create with --pid-file, done after the create as above).
// Then it execs the low-level runtime (runc, crun) with the same arguments
// and environment — on a create with after-create work it runs it as a
// child with the same standard streams and inherited descriptors, forwards
// signals, and exits with its status. Every other subcommand and flag goes
// straight to the low-level runtime: the process is replaced (exec, no
// fork), so exit status, stdio, pid files and console sockets are the
// runtime's own. A container that requests no GPU is not touched.
//
// Errors stop before the low-level runtime runs, with nothing modified
// (changes in the rootfs are rolled back; config.json is written last), or,
// after the create, undo the after-create work and delete the container;
// they go to stderr and to the engine's --log file in its --log-format
// (containerd reports the last "error" line of that file).
package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/aftercreate"
	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/appprofile"
	"github.com/nctk/nctk/internal/buildid"
	"github.com/nctk/nctk/internal/cdiedit"
	"github.com/nctk/nctk/internal/cdispec"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/cudacompat"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/hostfacts"
	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
	"github.com/nctk/nctk/internal/specfeed"
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
	// Start runs the low-level runtime as a child (a create with work
	// after it, or one started before config.json was final; see
	// createThen and earlyCreate).
	Start func(path string, argv, env []string) (rtChild, error)
	// signals is the relay behind Start (New's; nil for another Start):
	// armed as soon as a child is likely, waited for (relay.ready) before
	// a child may create the container.
	signals *relay
	// Early tells whether the low-level runtime rt may be started before
	// config.json is final (earlyCreate); nil leaves it to startsEarly
	// (runc, by name: it reads config.json once, whole).
	Early func(rt string) bool
	// Self is this program's executable, never chosen as the low-level
	// runtime ("" for none).
	Self string
	// Nctk is the multi-call nctk installed beside this program ("" for
	// none): the file a spec's `nvidia-ctk hook …` runs where nvidia-ctk is
	// nctk's link, built with this program, so a hook running it is this
	// installation's own (ownHook).
	Nctk string
	// HookBuildID is the Go build ID of the nvidia-cdi-hook binary built
	// with this program (version.HookBuildID; "" for none): a hook binary
	// with this ID is nctk's own too (ownHook).
	HookBuildID string
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
	// CDICacheDir is where CDI mode caches the resolved spec files
	// (cdispec.ResolveCached), so that a create reads one small file
	// instead of loading every spec; "" for no cache. New sets it to
	// hostfacts.DefaultDir.
	CDICacheDir string
	// ModeOverride, when set, replaces config.toml's
	// nvidia-container-runtime.mode (nvidia-container-runtime.cdi and
	// .legacy, as NVIDIA installs them).
	ModeOverride string
}

// defaultProcDriverDir is where a loaded NVIDIA kernel driver shows in the
// host's procfs (which every container's procfs mirrors).
const defaultProcDriverDir = "/proc/driver/nvidia"

// New returns the wrapper as installed.
func New() *Runtime {
	self, _ := os.Executable()
	var nctk string
	if self != "" {
		nctk = filepath.Join(filepath.Dir(self), "nctk")
	}
	rel := newRelay()
	return &Runtime{
		planner:     defaultPlanner(),
		LoadConfig:  loadConfig,
		Exec:        syscall.Exec,
		Start:       rel.start,
		signals:     rel,
		Self:        self,
		Nctk:        nctk,
		HookBuildID: version.HookBuildID(),
		Version:     version.String(),
		CDICacheDir: hostfacts.DefaultDir(os.Getenv),
	}
}

// Main is nvidia-container-runtime's entry point.
func Main(e *app.Env) int {
	return New().Run(e)
}

// MainMode returns the entry point of the runtime installed under a name
// that fixes its mode (nvidia-container-runtime.cdi: config.ModeCDI,
// nvidia-container-runtime.legacy: config.ModeLegacy), whatever
// config.toml says.
func MainMode(mode string) app.Tool {
	return func(e *app.Env) int {
		r := New()
		r.ModeOverride = mode
		return r.Run(e)
	}
}

// MainByName is the entry point of the runtime's own binary
// (cmd/nvidia-container-runtime): the name it was invoked as fixes the mode
// as MainMode does (nvidia-container-runtime.cdi, .legacy; links to that
// binary), any other name leaves it to config.toml.
func MainByName(e *app.Env) int {
	r := New()
	if len(e.Args) > 0 {
		r.ModeOverride = nameMode(filepath.Base(e.Args[0]))
	}
	return r.Run(e)
}

// nameMode is the mode the runtime's installed name fixes: ".cdi" and
// ".legacy" after nvidia-container-runtime; "" for none.
func nameMode(name string) string {
	switch name {
	case "nvidia-container-runtime." + config.ModeCDI:
		return config.ModeCDI
	case "nvidia-container-runtime." + config.ModeLegacy:
		return config.ModeLegacy
	}
	return ""
}

// Run runs the wrapper. It returns only when it fails (status 1), or after
// a create whose container it set up afterwards (createThen: the low-level
// runtime's status); otherwise the process has become the low-level
// runtime.
func (r *Runtime) Run(e *app.Env) int {
	inv, perr := parseArgs(e.Args) // inv is usable even with perr (for --log)
	cfg, cerr := r.LoadConfig(e)
	if cerr == nil && r.ModeOverride != "" {
		cfg.Runtime.Mode = r.ModeOverride
	}
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
	argv := append([]string{rt}, e.Args[1:]...)
	var after *aftercreate.Prepared
	var early rtChild
	if inv.injects() {
		for _, w := range cfg.Warnings {
			log.Warn("config " + cfg.Path + ": " + w)
		}
		start := time.Now()
		if after, early, err = r.inject(e, inv, cfg, log, rt, argv); err != nil {
			return fail(err)
		}
		defer after.Close()
		log.Debug("prepared container", "command", inv.Command, "elapsed", time.Since(start), "runtime-started-early", early != nil)
	}
	if after != nil || early != nil {
		status, err := r.createThen(e, rt, argv, inv, after, early, log)
		if err != nil {
			return fail(err)
		}
		return status
	}
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
// written unless every step succeeds. A create that may inject has the
// low-level runtime rt (argv) started at once, before config.json is
// final, where that runtime allows (earlyCreate): the child returned, for
// the caller to wait for; on an error it is stopped and config.json is as
// it was.
func (r *Runtime) inject(e *app.Env, inv *invocation, cfg *config.Config, log *logger, rt string, argv []string) (after *aftercreate.Prepared, early rtChild, err error) {
	bundle := inv.Bundle
	if bundle == "" {
		bundle = "."
	}
	bundle, err = filepath.Abs(bundle)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s: %w", inv.Bundle, err)
	}
	specPath := filepath.Join(bundle, "config.json")
	doc, err := ocispec.Load(specPath)
	if err != nil {
		// An earlier wrapper killed while config.json was its pipe
		// (earlyCreate) left the original beside it: put it back.
		ok, rerr := specfeed.Recover(specPath)
		if !ok {
			return nil, nil, errors.Join(err, rerr)
		}
		log.Warn("config.json was left a pipe by a killed runtime; its original is back", "spec", specPath)
		if doc, err = ocispec.Load(specPath); err != nil {
			return nil, nil, err
		}
	}
	spec := doc.Spec()
	rootPath, err := doc.RootPath(bundle)
	if err != nil {
		return nil, nil, err
	}
	// A create whose container's pid the engine asks for (every engine
	// does) can have the work that needs the created container done here
	// afterwards (aftercreate) instead of by a hook process; a run starts
	// the container at once, so that work stays a hook there.
	mode := injectMode{AfterCreate: inv.Command == "create" && inv.PidFile != "" && inv.ID != "", ownHook: r.ownHook()}
	save := func(d *ocispec.Doc) error { return ocispec.Save(specPath, d) }
	child := mode.AfterCreate && mayInject(spec, cfg)
	if child {
		// The low-level runtime will run as a child: the signals it is
		// relayed are caught meanwhile (relay.arm; a container that asks
		// for nothing is exec'ed and never pays for it).
		r.signals.arm()
	}
	if child && r.startsEarly(rt) {
		del := func() error { return r.deleteContainer(e, rt, inv) }
		if x, xerr := startEarly(specPath, func() (rtChild, error) { return r.Start(rt, argv, e.Environ) }, del, r.signals.ready); xerr != nil {
			log.Debug("low-level runtime not started early", "reason", xerr)
		} else {
			early, save = x.child, x.commit
			defer func() {
				if err = x.end(err, doc.Original()); err != nil {
					after.Close()
					after, early = nil, nil
				}
			}()
		}
	}
	planStart := time.Now()
	p, err := r.planner.Prepare(context.Background(), input{Spec: spec, Rootfs: rootPath, Bundle: bundle, Config: cfg, CDICacheDir: r.CDICacheDir})
	log.Debug("planned", "elapsed", time.Since(planStart))
	if err != nil {
		return nil, early, err
	}
	if p == nil {
		if p, mode.HooksBefore, mode.EditsMounts = appliedEdits(spec, mode.ownHook, cfg.Runtime.Modes.CDI.SpecDirs, r.CDICacheDir); p == nil {
			log.Debug("not a GPU container; spec left as it is", "spec", specPath)
			return nil, early, nil
		}
		log.Debug("the engine applied a CDI spec whose hooks are this installation's: doing their work here")
		mode.Applied = true
	}
	for {
		after, err := r.injectPlan(e, doc, p, specPath, rootPath, cfg, log, mode, save)
		// Nothing was written on these errors: once more without what
		// the image does not allow.
		switch {
		case errors.Is(err, rootfs.ErrRebuildUnsupported) && !mode.NoRebuild:
			// The spec's update-ldcache stays a hook, to run the host's
			// ldconfig in the container.
			log.Debug("the image needs ldconfig itself; update-ldcache stays a hook", "reason", err)
			mode.NoRebuild = true
		case errors.Is(err, errMountOnSymlink) && !mode.MountsStay:
			log.Debug("a mount point is a symlink in the image; the mounts stay the low-level runtime's", "reason", err)
			mode.MountsStay = true
		default:
			return after, early, err
		}
		// Anew from what was read: config.json may be a pipe now.
		if doc, err = ocispec.Parse(specPath, doc.Original()); err != nil {
			return nil, early, err
		}
	}
}

// errMountOnSymlink: a mount point of a mount made after the create is a
// symlink in the image.
var errMountOnSymlink = errors.New("mount point")

// injectMode says how injectPlan leaves work to the container.
type injectMode struct {
	// NoRebuild: a CDI spec's update-ldcache over whole folders stays a
	// hook.
	NoRebuild bool
	// AfterCreate: the work that needs the created container (links below
	// /dev, the /proc/driver/nvidia view, the params mask) is returned for
	// the caller to do once the low-level runtime has created it, instead
	// of being left to hooks; so are the bind mounts mountsAfterCreate
	// picks.
	AfterCreate bool
	// MountsStay: every mount is the low-level runtime's (a mount point is
	// a symlink in the image, which it follows).
	MountsStay bool
	// Applied: the plan is appliedEdits', edits the engine has applied to
	// config.json already; only the work of their own hooks is done, and
	// HooksBefore, the createContainer hooks before them, are kept first.
	Applied     bool
	HooksBefore []*cdispecs.Hook
	// EditsMounts are the destinations of config.json's mounts that are
	// the applied edits' (Applied): they may be made after the create.
	EditsMounts []string
	// ownHook tells this installation's nvidia-cdi-hook (Runtime.ownHook:
	// one per create, each hook path looked at once).
	ownHook func(string) bool
}

// injectPlan applies the plan p to doc and to the container root at
// rootPath and saves doc to specPath, and returns the prepared after-create
// work (nil for none; the caller closes it). An error wrapping
// rootfs.ErrRebuildUnsupported leaves everything as it was.
func (r *Runtime) injectPlan(e *app.Env, doc *ocispec.Doc, p *plan.Plan, specPath, rootPath string, cfg *config.Config, log *logger, mode injectMode, save func(*ocispec.Doc) error) (*aftercreate.Prepared, error) {
	start := time.Now()
	spec := doc.Spec()
	// Symlinks and ld.so.cache are done here, in the container root, before
	// the low-level runtime runs; only the /proc/driver/nvidia view needs
	// a createContainer hook (it mounts inside the container), and only
	// when the container's procfs will have that directory, and so do the
	// links below /dev (the GPUs' /dev/dri/by-path links), which only the
	// container's own /dev can hold.
	inContainer := r.needsProcView(spec)
	procView := p.Proc != nil && inContainer
	// runc masks (and makes read-only) after its hooks, before the work
	// after the create: work a mask covers stays a hook (the CDI parts are
	// checked one by one as they are lifted).
	masked := maskedPaths(spec)
	if mode.AfterCreate && plan.Overlaps(masked, afterCreatePaths(p)) {
		mode.AfterCreate = false
		log.Debug("a masked or read-only path covers the created container's work; it stays a hook")
	}
	// The same for the hooks of CDI specs that run this installation's
	// nvidia-cdi-hook: their links and ld.so.cache entries are made here,
	// and the hook entries leave config.json.
	var own cdispec.OwnHooks
	mounts := mountPoints(spec)
	if p.CDI != nil {
		q := *p
		q.CDI, own = cdispec.LiftOwnHooks(p.CDI, mode.ownHook, cdispec.LiftOptions{
			KeepInContainer: inContainer, AfterCreate: mode.AfterCreate, Masked: masked, Mounts: mounts, DevicesKnown: !bindsInDev(spec),
			NoRebuild: mode.NoRebuild})
		if mode.Applied {
			c := *q.CDI
			c.Hooks = slices.Concat(mode.HooksBefore, c.Hooks)
			q.CDI = &c
		}
		p = &q
	}
	binds := hostBinds(spec.Mounts)
	if !mode.Applied { // the engine's config: its mounts are the edits'
		if err := checkUserMounts(binds, p, own); err != nil {
			return nil, err
		}
	}
	if kept, n := devLinksOutsideBinds(binds, p.DevSymlinks); n > 0 {
		q := *p
		q.DevSymlinks = kept
		p = &q
		log.Debug("links below /dev under a host bind mount left to the host's", "links", n)
	}
	// update-ldcache gets the configured host ldconfig, or none (its own
	// default) when the setting is empty or an accepted container path.
	ldconfig, err := cfg.HostLdconfig()
	if err != nil {
		return nil, err
	}
	hc := ocispec.HookConfig{Path: r.HookPath, LdconfigPath: ldconfig.Path,
		RootfsDone: true, NoProcView: !procView, AfterCreate: mode.AfterCreate, Applied: mode.Applied,
		EditCDI: cdiedit.Apply}
	if hc.Path == "" && !mode.AfterCreate && (procView || len(p.DevSymlinks) > 0) {
		if hc.Path, err = findHelper(hookargs.Binary, e.Args[0], r.Self, e.Getenv("PATH")); err != nil {
			return nil, fmt.Errorf("container hooks: %w", err)
		}
	}
	// The after-create work's host side (the driver's proc files read,
	// the selected GPUs' directories and the first mount sources opened)
	// before anything is written.
	w := afterCreateWork(p, procView, own, mode)
	var points []mountPoint
	w.Mounts, points = mountsAfterCreate(spec, p, masked, ocispec.CreateHooks(spec, p, hc), mode)
	hc.MountsAfterCreate = mountPaths(points)
	var after *aftercreate.Prepared
	if !w.Empty() {
		if after, err = aftercreate.Prepare(w, log.Logger); err != nil {
			return nil, fmt.Errorf("container setup after create: %w", err)
		}
	}
	fail := func(err error) (*aftercreate.Prepared, error) {
		after.Close()
		return nil, err
	}
	if err := ocispec.Apply(doc, p, hc); err != nil {
		return fail(err)
	}
	rw := rootWork(p, own)
	rw.Compat = append(legacyCompat(p, cfg, mounts), own.Compat...)
	rw.MountPoints = points
	if own.Rebuild {
		// Every mount the container will have: the spec's, the plan's and
		// the edits' (those that are pending files count as such).
		all := slices.Clone(mounts)
		for _, m := range p.Mounts {
			all = append(all, m.Destination)
		}
		for _, m := range p.CDI.Mounts {
			if m != nil {
				all = append(all, m.ContainerPath)
			}
		}
		if rw.Rebuild, err = r.rebuildOptions(own.LdconfigPath, rw.Pending, all); err != nil {
			return fail(err)
		}
	}
	if own.AppProfile {
		// The device nodes runc will make are all the container's /dev
		// will hold (LiftOptions.DevicesKnown): config.json's, now that
		// the edits are in.
		rw.AppProfile = gpuMask(doc.Devices(), log.Logger)
	}
	rootStart := time.Now()
	root, err := prepareRootfs(rootPath, rw, log.Logger)
	rootTime := time.Since(rootStart)
	if err != nil {
		return fail(err)
	}
	if err := save(doc); err != nil {
		return fail(errors.Join(err, closeRoot(root, true)))
	}
	if err := closeRoot(root, false); err != nil {
		return fail(err)
	}
	log.Info("injected GPU access into the OCI spec", "spec", specPath, "rootfs-time", rootTime, "total-time", time.Since(start),
		"devices", len(p.Devices), "mounts", len(p.Mounts), "symlinks", len(p.Symlinks), "proc-view-hook", procView && !mode.AfterCreate,
		"cdi-hooks-done", own.Hooks, "after-create", after != nil, "mounts-after-create", len(w.Mounts))
	return after, nil
}

// afterCreatePaths are the container paths the plan's own after-create work
// may touch: the /proc/driver/nvidia view, the links below /dev. (The CDI
// edits' parts are checked one by one as they are lifted:
// cdispec.LiftOptions.Masked.)
func afterCreatePaths(p *plan.Plan) []string {
	var paths []string
	if p.Proc != nil {
		paths = append(paths, rootfs.ContainerProcDriver)
	}
	for _, s := range p.DevSymlinks {
		paths = append(paths, s.Link)
	}
	return paths
}

// afterCreateWork is what the runtime does in the created container with
// mode.AfterCreate: the links below /dev, the /proc/driver/nvidia view
// (when the container's procfs will show the driver) and the params mask
// lifted from the spec's own hooks.
func afterCreateWork(p *plan.Plan, procView bool, own cdispec.OwnHooks, mode injectMode) aftercreate.Work {
	var w aftercreate.Work
	if !mode.AfterCreate {
		return w
	}
	for _, s := range p.DevSymlinks {
		w.DevLinks = append(w.DevLinks, hookargs.Link{Target: s.Target, Path: s.Link})
	}
	w.DevLinks = append(w.DevLinks, own.DevLinks...)
	if procView {
		v := p.Proc
		w.Proc = &rootfs.ProcView{HostDir: v.HostDir, Files: v.Files, GPUDirs: v.GPUDirs, Expose: v.Expose}
	}
	if own.MaskParams {
		w.ParamsHostDir = cmp.Or(own.ParamsHostDir, defaultProcDriverDir)
	}
	return w
}

// work is what the runtime does in the container root before the
// low-level runtime runs: symlinks, then the ld.so.cache entries of Libs
// (read from the host files Pending mounts, or through Pending links) with
// LdconfigDirs in the ld.so.conf.d drop-in, then the image's CUDA compat
// libraries put first where Compat finds them newer than the host driver.
type work struct {
	Symlinks     []hookargs.Link
	LdconfigDirs []string
	Libs         []string
	Pending      rootfs.Pending
	Compat       []hookargs.EnableCudaCompat
	// AppProfile: the GPUs the driver application profile is written for
	// (update-application-profile done here; nothing written when zero,
	// as the hook writes nothing for a container without GPU nodes).
	AppProfile appprofile.Mask
	// Rebuild, when set, rebuilds ld.so.cache over LdconfigDirs as the
	// host's ldconfig would once the mounts exist (a CDI spec's
	// update-ldcache without --lib), instead of adding Libs to it.
	Rebuild *rootfs.RebuildOptions
	// MountPoints are made for the mounts made after the create; one that
	// is a symlink fails with an error wrapping errMountOnSymlink.
	MountPoints []mountPoint
}

// rebuildOptions are the options of the ld.so.cache rebuild that replaces
// a CDI spec's update-ldcache over whole folders: the system directories
// of the host ldconfig that hook would run (ldconfigPath, "" for its
// default; probed once per binary, hostfacts.LdconfigSystemDirs), pending's
// library files as what the rebuild reads from the host, and its other
// mounts with mounts as what it must not read under. An error wraps
// rootfs.ErrRebuildUnsupported: the hook then stays.
func (r *Runtime) rebuildOptions(ldconfigPath string, pending rootfs.Pending, mounts []string) (*rootfs.RebuildOptions, error) {
	unsupported := func(err error) error { return fmt.Errorf("update-ldcache: %w: %w", err, rootfs.ErrRebuildUnsupported) }
	l, err := config.ParseHostLdconfig(ldconfigPath) // "": the default
	if err != nil {
		return nil, unsupported(err)
	}
	hostPath, err := l.HostPath()
	if err != nil {
		return nil, unsupported(err)
	}
	sys, err := hostfacts.LdconfigSystemDirs(context.Background(), r.CDICacheDir, hostPath)
	if err != nil {
		return nil, unsupported(err)
	}
	o := &rootfs.RebuildOptions{SystemDirs: sys}
	// A mount at a pending file's path is that file's (the edits' own, or
	// config.json's from an injection before, by a create that was then
	// killed): the pending file describes it.
	own := map[string]bool{}
	for _, f := range pending.Files {
		own[path.Clean("/"+f.Path)] = true
	}
	for _, m := range mounts {
		if !own[path.Clean("/"+m)] {
			o.Mounts = append(o.Mounts, m)
		}
	}
	o.Pending.Links = pending.Links
	for _, f := range pending.Files {
		if ldcache.IsLibraryName(path.Base(f.Path)) {
			if f.Library != nil {
				o.Pending.Files = append(o.Pending.Files, f)
				continue
			}
			if st, err := os.Stat(f.Source); err == nil && st.Mode().IsRegular() {
				o.Pending.Files = append(o.Pending.Files, f)
				continue
			}
		}
		o.Mounts = append(o.Mounts, f.Path)
	}
	return o, nil
}

// legacyCompat is the CUDA forward-compatibility step of a plan's own
// (legacy) injection, what NVIDIA's legacy path gets from
// nvidia-container-cli --cuda-compat-mode=ldconfig: with compat handling on
// (cfg.CUDACompatOn) and p injecting libcuda, the image's
// hookargs.DefaultCudaCompatDir is compared with p's driver version. None
// when a mount of the spec (mounts) covers that directory, or lies below
// it: the image's directory would not be what the container sees.
func legacyCompat(p *plan.Plan, cfg *config.Config, mounts []string) []hookargs.EnableCudaCompat {
	if cfg == nil || !cfg.CUDACompatOn() || p.DriverVersion == "" || !p.InjectsLibcuda() ||
		cdispec.MountsHide(mounts, hookargs.DefaultCudaCompatDir) {
		return nil
	}
	return []hookargs.EnableCudaCompat{{HostDriverVersion: p.DriverVersion}}
}

// rootWork is the root work of the plan p (its symlinks and libraries)
// and of the CDI hooks lifted out of p.CDI (own), in that order.
func rootWork(p *plan.Plan, own cdispec.OwnHooks) work {
	var w work
	for _, s := range p.Symlinks {
		w.Symlinks = append(w.Symlinks, hookargs.Link{Target: s.Target, Path: s.Link})
	}
	w.Symlinks = append(w.Symlinks, own.Links...)
	w.LdconfigDirs = slices.Concat(p.LdconfigDirs, own.LdconfigDirs)
	if len(p.LdconfigDirs) > 0 {
		w.Libs = p.LdcacheLibs()
	}
	for _, l := range own.Libs {
		if !slices.Contains(w.Libs, l) {
			w.Libs = append(w.Libs, l)
		}
	}
	w.Pending = pending(p)
	for _, l := range own.Links {
		w.Pending.Links = append(w.Pending.Links, rootfs.PendingLink{Path: l.Path, Target: l.Target})
	}
	return w
}

// prepareRootfs creates the symlinks of w in the container root at path
// and adds w's libraries to its ld.so.cache (read from the host files that
// will be mounted: the mounts do not exist yet), all inside the root. It
// returns the open root with its changes journaled (nil when w has nothing
// for the root); on error everything is rolled back.
//
// Everything that can be checked without a change is checked first (the
// library entries are read from the pending mounts and links), so a plan
// that cannot be applied leaves the root untouched. Each step is
// idempotent (a link already pointing where w says is kept, the drop-in
// and ld.so.cache are rewritten from the image's content plus w's), and the
// temporary files a create killed mid-way left are removed where it can
// have left them (rootfs removes them as it writes): the next create after
// a kill finishes the work and gives the same root as a create that was
// never interrupted.
func prepareRootfs(path string, w work, log *slog.Logger) (*rootfs.Root, error) {
	if len(w.Symlinks) == 0 && len(w.LdconfigDirs) == 0 && len(w.Compat) == 0 && w.AppProfile == 0 && len(w.MountPoints) == 0 {
		return nil, nil
	}
	root, err := rootfs.Open(path)
	if err != nil {
		return nil, err
	}
	err = func() error {
		t0 := time.Now()
		var names []ldcache.DirEntry
		if len(w.LdconfigDirs) > 0 && w.Rebuild == nil {
			var err error
			if names, err = root.PendingLibraryEntries(w.Pending, w.Libs); err != nil {
				return fmt.Errorf("update ld.so.cache: %w", err)
			}
		}
		compat, err := compatDirs(root, w.Compat, log)
		if err != nil {
			return err
		}
		t1 := time.Now()
		for _, s := range w.Symlinks {
			if err := root.Symlink(s.Target, s.Path); err != nil {
				return fmt.Errorf("create symlink: %w", err)
			}
		}
		for _, m := range w.MountPoints {
			if err := root.MountPoint(m.Path, m.Dir); err != nil {
				if errors.Is(err, rootfs.ErrSymlink) {
					return fmt.Errorf("%w: %w", errMountOnSymlink, err)
				}
				return fmt.Errorf("mount point: %w", err)
			}
		}
		t3 := time.Now()
		if w.Rebuild != nil {
			// As the hooks do it: enable-cuda-compat's drop-ins, ldconfig
			// over the folders and the configuration, the compat
			// libraries first.
			for _, dir := range compat {
				if err := cudacompat.Configure(root, dir); err != nil {
					return fmt.Errorf("CUDA compat libraries in %s: %w", dir, err)
				}
			}
			if err := root.RebuildLdCache(w.LdconfigDirs, *w.Rebuild, log); err != nil {
				return fmt.Errorf("rebuild ld.so.cache: %w", err)
			}
			if err := cudacompat.Promote(root, log); err != nil {
				return fmt.Errorf("CUDA compat libraries: %w", err)
			}
			compat = nil
		} else if len(w.LdconfigDirs) > 0 {
			if err := root.UpdateLdCacheFor(names, w.LdconfigDirs, log); err != nil {
				return fmt.Errorf("update ld.so.cache: %w", err)
			}
		}
		for _, dir := range compat {
			if err := cudacompat.Enable(root, dir, log); err != nil {
				return fmt.Errorf("CUDA compat libraries in %s: %w", dir, err)
			}
		}
		t4 := time.Now()
		if err := appprofile.Write(root, w.AppProfile); err != nil {
			return fmt.Errorf("application profile: %w", err)
		}
		log.Debug("container root prepared", "libraries", len(names), "libraries-time", t1.Sub(t0),
			"links", len(w.Symlinks), "mount-points", len(w.MountPoints), "links-time", t3.Sub(t1), "ldcache-time", t4.Sub(t3), "profile-time", time.Since(t4))
		logStale(root, path, log)
		return nil
	}()
	if err != nil {
		return nil, errors.Join(err, closeRoot(root, true))
	}
	return root, nil
}

// compatDirs are the CUDA compat directories of steps whose image library
// is to be used (cudacompat.Select: one readdir of each directory, and the
// library's ELF note when there is one), each once. Nothing is changed.
func compatDirs(root *rootfs.Root, steps []hookargs.EnableCudaCompat, log *slog.Logger) ([]string, error) {
	var dirs []string
	for _, c := range steps {
		dir := c.Dir()
		lib, err := cudacompat.Select(root, dir, c.HostDriverVersion, c.HostCudaVersion, log)
		if err != nil {
			return nil, fmt.Errorf("CUDA compat libraries in %s: %w", dir, err)
		}
		if lib != "" && !slices.Contains(dirs, dir) {
			log.Debug("the image's CUDA compat libraries go first", "lib", lib, "host driver", c.HostDriverVersion)
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// logStale logs the temporaries of interrupted creates root removed, and
// those it could not (inert files: not an error).
func logStale(root *rootfs.Root, path string, log *slog.Logger) {
	removed, err := root.RemovedStale()
	if len(removed) > 0 {
		log.Info("removed temporary files an interrupted create left", "root", path, "files", removed)
	}
	if err != nil {
		log.Warn("cannot remove temporary files an interrupted create left", "root", path, "error", err)
	}
}

// gpuMask is the application profile's mask of the GPUs among devices
// (config.json's linux.devices: the /dev/nvidiaN character devices), what
// update-application-profile reads from the container's /dev once runc
// has made them.
func gpuMask(devices []specs.LinuxDevice, log *slog.Logger) appprofile.Mask {
	var mask appprofile.Mask
	for _, d := range devices {
		if dir, name := path.Split(path.Clean("/" + d.Path)); dir == "/dev/" && (d.Type == "c" || d.Type == "u") {
			mask.Add(name, d.Minor, log)
		}
	}
	return mask
}

// pending is what p creates in the container root, as
// rootfs.Root.PendingLibraryEntries takes it: its file mounts and the bind
// mounts of its CDI edits (made later, by the low-level runtime), and its
// symlinks.
func pending(p *plan.Plan) rootfs.Pending {
	var out rootfs.Pending
	for _, m := range p.Mounts {
		if m.Kind == plan.KindFile {
			out.Files = append(out.Files, rootfs.PendingFile{Path: m.Destination, Source: m.Source, Library: m.Library})
		}
	}
	if p.CDI != nil {
		for _, m := range p.CDI.Mounts {
			if m != nil && (m.Type == "" || m.Type == "bind") && filepath.IsAbs(m.HostPath) {
				f := rootfs.PendingFile{Path: m.ContainerPath, Source: m.HostPath}
				if lib, ok := p.CDILibs[m.HostPath]; ok {
					f.Library = &lib
				}
				out.Files = append(out.Files, f)
			}
		}
	}
	for _, s := range p.Symlinks {
		out.Links = append(out.Links, rootfs.PendingLink{Path: s.Link, Target: s.Target})
	}
	return out
}

// ownHook returns the test LiftOwnHooks uses to recognise this
// installation's nvidia-cdi-hook: a hook path is nctk's own when it is a
// regular executable file that is either the very file this program runs
// from or the nctk installed beside it (r.Self, r.Nctk, resolved: same
// device and inode, a link to it included; a spec's `nvidia-ctk hook …`),
// or the nvidia-cdi-hook binary built with it (its Go build ID is
// r.HookBuildID). Such a hook would run this same code on the same
// container root, so doing its work here changes what runs, not what it
// does; a hook binary of another version or another toolkit is run as a
// hook. (Not running a binary never gives it more than running it would.)
// With neither Self, Nctk nor HookBuildID, nothing is recognised. Each path
// is looked at once (a spec in NVIDIA's layout names the same hook path in
// every entry).
func (r *Runtime) ownHook() func(string) bool {
	var ours []fileID
	looked := false
	seen := map[string]bool{}
	return func(p string) bool {
		if !looked { // on first use: most creates ask nothing
			looked = true
			for _, q := range []string{r.Self, r.Nctk} {
				if q == "" {
					continue
				}
				if id, _ := idOf(q); id.ino != 0 {
					ours = append(ours, id)
				}
			}
		}
		if (len(ours) == 0 && r.HookBuildID == "") || !filepath.IsAbs(p) {
			return false
		}
		own, ok := seen[p]
		if !ok {
			id, exe := executableID(p)
			own = exe && (slices.Contains(ours, id) || r.isHookBuild(p))
			seen[p] = own
		}
		return own
	}
}

// isHookBuild reports whether the executable at p is the nvidia-cdi-hook
// binary built with this program (its Go build ID is r.HookBuildID).
func (r *Runtime) isHookBuild(p string) bool {
	if r.HookBuildID == "" {
		return false
	}
	id, err := buildid.Read(p)
	return err == nil && id == r.HookBuildID
}

// mountPoints are the container paths of the spec's mounts.
func mountPoints(spec *specs.Spec) []string {
	out := make([]string, 0, len(spec.Mounts))
	for _, m := range spec.Mounts {
		out = append(out, m.Destination)
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
