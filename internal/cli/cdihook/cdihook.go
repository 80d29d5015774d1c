// Package cdihook is nctk's nvidia-cdi-hook: the createContainer hooks that
// CDI specs and nvidia-container-runtime's spec edits run inside a new
// container, before it starts. Also reachable as `nvidia-ctk hook NAME`.
//
//	nvidia-cdi-hook [--debug] [--quiet] HOOK [FLAGS] [";" HOOK [FLAGS]]...
//
// The hooks and their flags are internal/hookargs's: the one definition of
// the command line that the writers of hooks use too.
//
// Every hook reads the container's OCI state on stdin and finds the
// container root from it (the "root" field some runtimes add, else root.path
// of the bundle's config.json, relative to the bundle); under runc, which
// delivers the state late, the root is found and checked without it
// (ocistate.RuncHookRoot) and stdin is not read. A runtime runs these
// hooks in the container's mount namespace before pivot_root, so the root
// is reachable by that path and the host's files are still visible.
//
// Under runc and crun, a hook of a spec in NVIDIA's layout (one entry per
// hook) runs the entries after it in its own process and masks their
// program in the container's mount namespace, so that the runtime starts
// a program that only exits for each (internal/hookbatch says when it
// may).
//
// All work inside the root goes through internal/rootfs: paths are resolved
// inside the root (never following the image's symlinks out of it), ldconfig
// is the host's, sealed and confined. Hook names this version does not know
// (from specs written by other toolkit versions) print a warning and exit 0,
// so that they do not break container starts; so do a call without a hook
// and an unknown global flag that is not followed by a known hook, as with
// NVIDIA's hook. docs/cdi-hooks.md compares each hook with NVIDIA's.
package cdihook

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/cudacompat"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/hookbatch"
	"github.com/nctk/nctk/internal/hostfacts"
	"github.com/nctk/nctk/internal/ocistate"
	"github.com/nctk/nctk/internal/rootfs"
	"github.com/nctk/nctk/internal/version"
)

// maxState bounds the OCI state read from stdin.
const maxState = 1 << 20

// DefaultHostProcDir is where the driver's proc files are on the host.
const DefaultHostProcDir = "/proc/driver/nvidia"

// hookEnv is what a hook runs with.
type hookEnv struct {
	*app.Env
	name  string
	log   *slog.Logger
	chain *chainMemo // nil: not in a chain
}

// chainMemo is what the hooks of one chain share: they get one OCI state
// and work on one container.
type chainMemo struct {
	// roots keeps the container root each spec file (or, for "", the OCI
	// state) gave: each hook would otherwise read it and config.json
	// again.
	roots map[string]rootFound
	// cleaned holds, per container root, the directories whose stale
	// temporary files a hook of the chain removed already
	// (rootfs.Root.ShareStaleReads): create-symlinks and update-ldcache
	// can clean the same library directory, and reading a large one (an
	// image's /usr/lib/x86_64-linux-gnu, merged by overlayfs) twice is a
	// cost, not a gain.
	cleaned map[string]map[string]bool
}

// stateReader reads a chain's one OCI state, which state reads from stdin
// once, when a hook of the chain first reads it.
type stateReader struct {
	state func() ([]byte, error)
	r     *bytes.Reader
}

func (s *stateReader) Read(p []byte) (int, error) {
	if s.r == nil {
		data, err := s.state()
		if err != nil {
			return 0, err
		}
		s.r = bytes.NewReader(data)
	}
	return s.r.Read(p)
}

func newChainMemo() *chainMemo {
	return &chainMemo{roots: map[string]rootFound{}, cleaned: map[string]map[string]bool{}}
}

type rootFound struct {
	path string
	err  error
}

// envBool reads the first set variable of names as a boolean.
func envBool(e *app.Env, names ...string) bool {
	for _, n := range names {
		if v, ok := e.LookupEnv(n); ok {
			b, err := strconv.ParseBool(v)
			return err == nil && b
		}
	}
	return false
}

// Main runs nvidia-cdi-hook. e.Args[0] is the program name ("nvidia-cdi-hook"
// or "nvidia-ctk hook"); then global flags, the hook name and its flags.
func Main(e *app.Env) int {
	prog := "nvidia-cdi-hook"
	if len(e.Args) > 0 {
		prog = e.Args[0]
	}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	debug := envBool(e, "NVIDIA_CTK_DEBUG", "NVIDIA_CDI_DEBUG")
	quiet := envBool(e, "NVIDIA_CTK_QUIET", "NVIDIA_CDI_QUIET")
	fs.BoolVar(&debug, "debug", debug, "enable debug-level logging ($NVIDIA_CTK_DEBUG)")
	fs.BoolVar(&debug, "d", debug, "enable debug-level logging")
	fs.BoolVar(&quiet, "quiet", quiet, "log errors only; overrides --debug ($NVIDIA_CTK_QUIET)")
	var showVersion bool
	// As `nvidia-ctk hook`, the global flags are nvidia-ctk's: --config,
	// and -v and --version, which NVIDIA's accepts there and ignores.
	ctk := strings.HasPrefix(prog, "nvidia-ctk ")
	if ctk {
		fs.String("config", "", "nvidia-ctk's global --config (ignored by the hooks)")
		fs.Bool("v", false, "accepted and ignored, as NVIDIA's nvidia-ctk")
		fs.Bool("version", false, "accepted and ignored, as NVIDIA's nvidia-ctk")
	} else {
		fs.BoolVar(&showVersion, "version", false, "print the version and exit")
		fs.BoolVar(&showVersion, "v", false, "print the version and exit")
	}
	fs.Usage = func() { usage(e.Stderr, prog, fs) }
	var args []string
	if len(e.Args) > 1 {
		args = e.Args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		// As NVIDIA's hook: an unknown global flag is an error only
		// before a hook this version knows; with no hook, or an unknown
		// one (a spec from another toolkit version), it is a warning.
		if name := firstArg(args); name == "" || !slices.Contains(hookargs.Names(), name) {
			fmt.Fprintf(e.Stderr, "%s: warning: unsupported CDI hook %q; ignored\n", prog, name)
			return 0
		}
		return 1
	}
	if showVersion {
		fmt.Fprintf(e.Stdout, "%s version %s\n", prog, version.String())
		return 0
	}
	log := logFlags{debug: debug, quiet: quiet}
	rest := fs.Args()
	if len(rest) == 0 {
		// NVIDIA's hook warns and succeeds: a hook entry without a hook
		// name must not fail a container start.
		usage(e.Stderr, prog, fs)
		fmt.Fprintf(e.Stderr, "%s: warning: no CDI hook specified\n", prog)
		return 0
	}
	if rest[0] == "help" || rest[0] == "h" {
		// As NVIDIA's: help (or h) alone, or for one hook.
		if len(rest) > 1 && slices.Contains(hookargs.Names(), rest[1]) {
			hookargs.HookUsage(e.Stdout, prog, rest[1])
			return 0
		}
		usage(e.Stdout, prog, fs)
		return 0
	}
	// Several hooks may be chained in one call, separated by ";" (the
	// runtime does this to start one process per container instead of
	// one per hook). They run in order on the one OCI state read from
	// stdin; the first failure stops the chain.
	chain := hookargs.SplitChain(rest)
	if len(chain) == 0 {
		fmt.Fprintf(e.Stderr, "%s: warning: no CDI hook specified\n", prog)
		return 0
	}
	var memo *chainMemo
	if len(chain) == 1 {
		// One hook of a spec in NVIDIA's layout: under runc or crun it may
		// take on the entries after it (hookbatch).
		chain, memo = batch(e, log, chain)
	}
	if len(chain) == 1 {
		return runHook(e, prog, log, chain[0], ctk, memo)
	}
	if memo == nil {
		memo = newChainMemo()
	}
	// The state is read when a hook first needs it: never, when the
	// container root is found without it (findContainerRoot).
	orig := e
	state := sync.OnceValues(func() ([]byte, error) { return orig.ReadStdin(maxState) })
	shared := *e
	e = &shared
	for _, seg := range chain {
		e.Stdin = &stateReader{state: state}
		if rc := runHook(e, prog, log, seg, ctk, memo); rc != 0 {
			return rc
		}
	}
	return 0
}

// batch returns the hooks this process runs: under runc or crun, for a
// hook of a spec in NVIDIA's layout, its own and those of the entries
// after it that hookbatch takes on, their program masked in the
// container's mount namespace; else chain. Under either, it also returns
// a memo holding the container root found (else nil). A refusal is logged
// at debug level: those entries then run as before.
func batch(e *app.Env, lf logFlags, chain [][]string) ([][]string, *chainMemo) {
	// Under crun, which writes the state at once, the state read stays
	// for the hooks.
	h, err := ocistate.FindHook("/proc", ".", true, func() ([]byte, error) {
		data, err := e.ReadStdin(maxState)
		if err == nil {
			e.Stdin = bytes.NewReader(data)
		}
		return data, err
	})
	if err != nil {
		return chain, nil
	}
	memo := newChainMemo()
	memo.roots[""] = rootFound{path: h.Root}
	log := lf.logger(e.Stderr)
	// The words of the process's argv before this hook's arguments name
	// the program: "nvidia-cdi-hook", or "nvidia-ctk hook" (NVIDIA's specs
	// before 1.17), global flags included.
	argv := e.ProcessArgs()
	lead := len(argv) - (len(e.Args) - 1)
	if lead < 1 || !slices.Equal(argv[lead:], e.Args[1:]) {
		return chain, memo
	}
	b, err := hookbatch.Find(h, argv, lead, "/proc/self/exe")
	if err == nil {
		err = hookbatch.Mask(b.Program, "/proc/"+strconv.Itoa(h.Runtime)+"/ns/mnt")
	}
	if err != nil {
		log.Debug("the hooks after this one run on their own", "reason", err)
		return chain, memo
	}
	log.Debug("running the createContainer hooks after this one in this process", "hooks", len(b.Args), "masked", b.Program)
	var out [][]string
	for _, a := range b.Args {
		out = append(out, hookargs.SplitChain(a)...)
	}
	return out, memo
}

// logFlags are the logging flags given: --debug (-d) and --quiet.
type logFlags struct{ debug, quiet bool }

// logger returns the hooks' logger writing to w: warnings by default,
// errors only with quiet, which overrides debug (as in NVIDIA's hook).
func (f logFlags) logger(w io.Writer) *slog.Logger {
	level := slog.LevelWarn
	switch {
	case f.quiet:
		level = slog.LevelError
	case f.debug:
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// firstArg returns the first argument that is not a flag, "" for none.
func firstArg(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// runHook runs one hook invocation: its name and its flags (with
// nvidia-ctk's global flags too when ctk: run as `nvidia-ctk hook`).
func runHook(e *app.Env, prog string, lf logFlags, args []string, ctk bool, chain *chainMemo) int {
	name := args[0]
	parse := hookargs.Parse
	if ctk {
		parse = hookargs.ParseCTK
	}
	hook, err := parse(args)
	var unknown *hookargs.UnknownHookError
	switch {
	case errors.As(err, &unknown):
		// A spec from another toolkit version must not break the start.
		lf.logger(e.Stderr).Warn("unknown hook; ignored", "hook", name, "args", args[1:])
		return 0
	case errors.Is(err, flag.ErrHelp):
		hookargs.HookUsage(e.Stderr, prog, name)
		return 0
	case err != nil:
		fmt.Fprintf(e.Stderr, "%s %s: %s\n", prog, name, echo.Error(err))
		return 1
	}
	if c, ok := hook.(interface{ CommonFlags() hookargs.Common }); ok {
		// The global logging flags given after the hook name.
		f := c.CommonFlags()
		lf.debug, lf.quiet = lf.debug || f.Debug, lf.quiet || f.Quiet
	}
	h := &hookEnv{Env: e, name: prog + " " + name, log: lf.logger(e.Stderr).With("hook", name), chain: chain}
	if err := h.run(hook); err != nil {
		fmt.Fprintf(e.Stderr, "%s: %s\n", h.name, echo.Error(err))
		return 1
	}
	return 0
}

// run runs the parsed hook.
func (h *hookEnv) run(hook hookargs.Hook) error {
	switch hook := hook.(type) {
	case hookargs.CreateSymlinks:
		return createSymlinks(h, hook)
	case hookargs.UpdateLdcache:
		return updateLdcache(h, hook)
	case hookargs.DisableDeviceNodeModification:
		return disableDeviceNodeModification(h, hook)
	case hookargs.MountProcDriver:
		return mountProcDriver(h, hook)
	case hookargs.EnableCudaCompat:
		return enableCudaCompat(h, hook)
	case hookargs.UpdateApplicationProfile:
		return updateApplicationProfile(h, hook)
	case hookargs.Chmod:
		return chmod(h, hook)
	case hookargs.Noop:
		return nil
	}
	return fmt.Errorf("hook %s: not implemented", hook.Name())
}

func usage(w io.Writer, prog string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s [--debug] [--quiet] HOOK [OPTIONS] [\\; HOOK [OPTIONS]]...\n\nHooks (they read the container's OCI state on stdin):\n", prog)
	hookargs.Usage(w)
	fmt.Fprintf(w, "\nGlobal options:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// checkState checks that an OCI state tells the hooks where the container
// root is: a "root" (crun adds it; absolute, or relative to the bundle) or
// a bundle, which must be absolute. Unlike the runtime hook, these hooks
// need no pid.
func checkState(s ocistate.State) error {
	if s.Root == "" && s.Bundle == "" {
		return errors.New("OCI state: neither bundle nor root is set")
	}
	if s.Bundle != "" && !filepath.IsAbs(s.Bundle) {
		return fmt.Errorf("OCI state: bundle %q is not an absolute path", s.Bundle)
	}
	return nil
}

// containerRoot finds the container's root directory: from the spec file
// given with --container-spec, else from the OCI state on stdin.
func (h *hookEnv) containerRoot(specFile string) (string, error) {
	if h.chain != nil {
		if f, ok := h.chain.roots[specFile]; ok {
			return f.path, f.err
		}
	}
	path, err := h.findContainerRoot(specFile)
	if h.chain != nil {
		h.chain.roots[specFile] = rootFound{path, err}
	}
	return path, err
}

func (h *hookEnv) findContainerRoot(specFile string) (string, error) {
	var bundle, specPath string
	if specFile != "" {
		specPath = specFile
		bundle = filepath.Dir(specFile)
	} else {
		// Under runc the root is known without the state, which runc
		// delivers late (ocistate.RuncHookRoot); elsewhere the state is
		// read.
		root, err := ocistate.RuncHookRoot("/proc", ".", h.chain == nil)
		if err == nil {
			h.log.Debug("container root found from runc without the OCI state", "root", root)
			return root, nil
		}
		h.log.Debug("container root from the OCI state", "reason", err)
		data, err := h.ReadStdin(maxState)
		if err != nil {
			return "", fmt.Errorf("OCI state: %w", err)
		}
		st, err := ocistate.DecodeState(data)
		if err != nil {
			return "", err
		}
		if err := checkState(st); err != nil {
			return "", err
		}
		if st.Root != "" {
			root := st.Root
			if !filepath.IsAbs(root) {
				if st.Bundle == "" {
					return "", fmt.Errorf("OCI state: relative root %q without a bundle", root)
				}
				root = filepath.Join(st.Bundle, root)
			}
			return filepath.Clean(root), nil
		}
		bundle, specPath = st.Bundle, filepath.Join(st.Bundle, "config.json")
	}
	// A hook on its own (a spec in NVIDIA's layout: one process per hook)
	// keeps the answer for the next hook process; a chain is nctk's one.
	return ocistate.LoadRootPathMemo(specPath, bundle, h.chain == nil)
}

// withRoot runs f on the container root (containerRoot); on error every
// change is undone.
func (h *hookEnv) withRoot(specFile string, f func(r *rootfs.Root) error) error {
	path, err := h.containerRoot(specFile)
	if err != nil {
		return err
	}
	return h.withRootAt(path, f)
}

// withRootAt runs f on the container root at path, resolved already; on
// error every change is undone.
func (h *hookEnv) withRootAt(path string, f func(r *rootfs.Root) error) error {
	if path == "/" {
		return errors.New("container root is \"/\": refusing to modify the host root")
	}
	h.log.Debug("container root", "path", path)
	r, err := rootfs.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	if h.chain != nil {
		if h.chain.cleaned[path] == nil {
			h.chain.cleaned[path] = map[string]bool{}
		}
		r.ShareStaleReads(h.chain.cleaned[path])
	}
	err = f(r)
	// The temporary files a hook killed mid-way left where this one
	// writes are removed as it writes (rootfs), so that this run finishes
	// the work cleanly; a failure is logged, not fatal (the files are
	// inert).
	removed, serr := r.RemovedStale()
	if len(removed) > 0 {
		h.log.Info("removed temporary files an interrupted hook left", "files", removed)
	}
	if serr != nil {
		h.log.Warn("cannot remove stale temporary files", "error", serr)
	}
	if err != nil {
		if rerr := r.Rollback(); rerr != nil {
			h.log.Warn("rollback incomplete", "error", rerr)
		}
		return err
	}
	r.Commit()
	return nil
}

// createSymlinks creates each link of c inside the container root. As
// NVIDIA documents (a link path that exists is removed), whatever is at the
// link path is replaced (rootfs.Root.ForceSymlink: atomically, the parent
// resolved inside the root), except a directory, which is an error; a link
// that already points to the target is left alone.
func createSymlinks(h *hookEnv, c hookargs.CreateSymlinks) error {
	if len(c.Links) == 0 {
		return nil
	}
	return h.withRoot(c.ContainerSpec, func(r *rootfs.Root) error {
		for _, l := range c.Links {
			if err := r.ForceSymlink(l.Target, l.Path); err != nil {
				return err
			}
			h.log.Debug("symlink", "link", l.Path, "target", l.Target)
		}
		return nil
	})
}

// updateLdcache updates the container's ld.so.cache for the injected
// libraries and records the u.Folders directories in /etc/ld.so.conf.d so
// that the container's own later ldconfig runs keep them.
//
// With u.Libs (container paths of the injected library files and of the
// links to them, which nvidia-container-runtime's spec edits pass) the
// cache is updated in-process (rootfs.UpdateLdCache: the entries ldconfig
// would record, no second process, no namespaces); if that fails the hook
// falls back to ldconfig. With only folders (CDI specs from NVIDIA's
// tools) it runs the host's ldconfig (u.LdconfigPath, default
// config.DefaultLdconfig, .real preferred) confined to the container root
// over the directories. Either way, the CUDA compat libraries that
// enable-cuda-compat listed in ld.so.conf.d are then put first in the cache
// again (cudacompat.Promote), whichever hook ran first.
func updateLdcache(h *hookEnv, u hookargs.UpdateLdcache) error {
	ldconfig, err := config.ParseHostLdconfig(u.LdconfigPath) // "": the default
	if err != nil {
		return fmt.Errorf("invalid --ldconfig-path: %w: want an absolute host path", err)
	}
	// The root is resolved once: the OCI state on stdin can be read only
	// once, and the fall back to ldconfig needs it too.
	root, err := h.containerRoot(u.ContainerSpec)
	if err != nil {
		return err
	}
	if len(u.Libs) > 0 {
		err := h.ldcacheInProcess(root, func(r *rootfs.Root) error { return r.UpdateLdCache(u.Libs, u.Folders, h.log) })
		if err == nil {
			return nil
		}
		h.log.Warn("in-process ld.so.cache update failed; running ldconfig", "error", err)
	}
	if root == "/" {
		return errors.New("container root is \"/\": refusing to run ldconfig on the host root")
	}
	hostPath, err := ldconfig.HostPath()
	if err != nil {
		return err
	}
	if len(u.Libs) == 0 {
		err := rebuildLdcache(h, root, hostPath, u.Folders)
		if err == nil {
			return nil
		}
		if errors.Is(err, rootfs.ErrRebuildUnsupported) {
			h.log.Debug("running ldconfig: the in-process rebuild does not reproduce this image", "reason", err)
		} else {
			h.log.Warn("in-process ld.so.cache rebuild failed; running ldconfig", "error", err)
		}
	}
	if err := rootfs.RunLdconfig(context.Background(), root, u.Folders, rootfs.LdconfigOptions{
		Ldconfig: hostPath, ConfDropIn: true, Log: h.log,
	}); err != nil {
		return err
	}
	// ldconfig puts the directories it is given ahead of those of
	// ld.so.conf: the compat libraries enable-cuda-compat chose go first
	// again.
	return h.withRootAt(root, func(r *rootfs.Root) error { return cudacompat.Promote(r, h.log) })
}

// rebuildLdcache does in the container root at root what the host's
// ldconfig at hostPath would do there over folders (rootfs.RebuildLdCache:
// the same links and cache entries, no process), with the ldconfig's own
// system directories probed once per binary and kept
// (hostfacts.LdconfigSystemDirs). An error leaves the root as it was.
func rebuildLdcache(h *hookEnv, root, hostPath string, folders []string) error {
	sys, err := hostfacts.LdconfigSystemDirs(context.Background(), hostfacts.DefaultDir(h.Getenv), hostPath)
	if err != nil {
		return err
	}
	return h.ldcacheInProcess(root, func(r *rootfs.Root) error {
		return r.RebuildLdCache(folders, rootfs.RebuildOptions{SystemDirs: sys}, h.log)
	})
}

// ldcacheInProcess runs update, an in-process ld.so.cache update, in the
// container root at root, and then puts the CUDA
// compat libraries first, as after ldconfig. The libraries' ELF headers
// come from the library facts where known: the spec's bind mounts of host
// files are the same files in every container (hostfacts.LibFacts, in the
// host's /run: createContainer hooks run before the container's
// pivot_root); what was learnt is kept. An error leaves the root as it
// was.
func (h *hookEnv) ldcacheInProcess(root string, update func(r *rootfs.Root) error) error {
	facts := hostfacts.OpenLibFacts(hostfacts.DefaultDir(h.Getenv))
	err := h.withRootAt(root, func(r *rootfs.Root) error {
		r.UseLibFacts(facts)
		if err := update(r); err != nil {
			return err
		}
		return cudacompat.Promote(r, h.log)
	})
	if err != nil {
		return err
	}
	if err := facts.Save(); err != nil {
		h.log.Debug("library facts not kept", "error", err)
	}
	return nil
}

// disableDeviceNodeModification masks the container's
// /proc/driver/nvidia/params with a read-only copy of the host's in which
// ModifyDeviceFiles is 0, so that driver code in the container never
// creates device nodes. d.HostDir is the host's proc directory, default
// DefaultHostProcDir.
func disableDeviceNodeModification(h *hookEnv, d hookargs.DisableDeviceNodeModification) error {
	hostDir := d.HostDir
	if hostDir == "" {
		hostDir = DefaultHostProcDir
	}
	pm, err := rootfs.PrepareParamsMask(hostDir, h.log)
	if err != nil || pm == nil {
		return err
	}
	return h.withRoot(d.ContainerSpec, func(r *rootfs.Root) error { return r.MaskParams(pm, h.log) })
}

// mountProcDriver builds the container's filtered /proc/driver/nvidia
// (the plan's ProcView): copies of m.Files (default params, version, registry;
// params with ModifyDeviceFiles 0) from m.HostDir (default
// DefaultHostProcDir), the directories of the m.GPUs bus ids and the
// m.Expose entries, read-only; other GPUs stay invisible.
func mountProcDriver(h *hookEnv, m hookargs.MountProcDriver) error {
	view := rootfs.ProcView{HostDir: m.HostDir, Files: m.Files, GPUDirs: m.GPUs, Expose: m.Expose}
	if view.HostDir == "" {
		view.HostDir = DefaultHostProcDir
	}
	if len(view.Files) == 0 {
		view.Files = []string{"params", "version", "registry"}
	}
	pd, err := rootfs.PrepareProcDriver(&view)
	if err != nil {
		return err
	}
	defer pd.Close()
	return h.withRoot(m.ContainerSpec, func(r *rootfs.Root) error { return r.MountProcDriver(pd, h.log) })
}
