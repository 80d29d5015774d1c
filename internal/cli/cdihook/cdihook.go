// Package cdihook is nctk's nvidia-cdi-hook: the createContainer hooks that
// CDI specs and nvidia-container-runtime's spec edits run inside a new
// container, before it starts. Also reachable as `nvidia-ctk hook NAME`.
//
//	nvidia-cdi-hook [--debug] [--quiet] create-symlinks --link TARGET::LINK...
//	nvidia-cdi-hook update-ldcache [--ldconfig-path PATH] --folder DIR... [--lib PATH...]
//	nvidia-cdi-hook disable-device-node-modification
//	nvidia-cdi-hook mount-proc-driver [--host-dir DIR] [--file NAME]... [--gpu BUSID]... [--expose REL]...
//
// Every hook reads the container's OCI state on stdin and finds the
// container root from it (the "root" field some runtimes add, else root.path
// of the bundle's config.json, relative to the bundle). A runtime runs these
// hooks in the container's mount namespace before pivot_root, so the root
// is reachable by that path and the host's files are still visible.
//
// All work inside the root goes through internal/rootfs: paths are resolved
// inside the root (never following the image's symlinks out of it), ldconfig
// is the host's, sealed and confined. Hook names this version does not know
// (from specs written by other toolkit versions) print a warning and exit 0,
// so that they do not break container starts.
package cdihook

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/procfs"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/rootfs"
	"github.com/nctk/nctk/internal/version"
)

// maxState bounds the OCI state read from stdin.
const maxState = 1 << 20

// DefaultHostProcDir is where the driver's proc files are on the host.
const DefaultHostProcDir = "/proc/driver/nvidia"

// hookFunc runs one hook.
type hookFunc func(h *hookEnv, args []string) error

// hookEnv is what a hook runs with.
type hookEnv struct {
	*app.Env
	name string
	log  *slog.Logger
}

// hooks is the table of hook subcommands.
func hooks() map[string]hookFunc {
	return map[string]hookFunc{
		"create-symlinks":                  createSymlinks,
		"update-ldcache":                   updateLdcache,
		"disable-device-node-modification": disableDeviceNodeModification,
		"mount-proc-driver":                mountProcDriver,
		"noop":                             func(*hookEnv, []string) error { return nil },
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

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
	fs.BoolVar(&quiet, "quiet", quiet, "log errors only ($NVIDIA_CTK_QUIET)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() { usage(e.Stderr, prog, fs) }
	var args []string
	if len(e.Args) > 1 {
		args = e.Args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 1
	}
	if *showVersion {
		fmt.Fprintf(e.Stdout, "%s version %s\n", prog, version.String())
		return 0
	}
	level := slog.LevelWarn
	switch {
	case debug:
		level = slog.LevelDebug
	case quiet:
		level = slog.LevelError
	}
	log := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: level}))
	rest := fs.Args()
	if len(rest) == 0 {
		usage(e.Stderr, prog, fs)
		return 1
	}
	if rest[0] == "help" {
		usage(e.Stdout, prog, fs)
		return 0
	}
	// Several hooks may be chained in one call, separated by ";" (the
	// runtime does this to start one process per container instead of
	// one per hook). They run in order on the one OCI state read from
	// stdin; the first failure stops the chain.
	chain := splitChain(rest)
	if len(chain) > 1 {
		data, err := e.ReadStdin(maxState)
		if err != nil {
			fmt.Fprintf(e.Stderr, "%s: OCI state: %v\n", prog, err)
			return 1
		}
		shared := *e
		e = &shared
		for _, seg := range chain {
			e.Stdin = bytes.NewReader(data)
			if rc := runHook(e, prog, log, seg); rc != 0 {
				return rc
			}
		}
		return 0
	}
	if len(chain) == 0 {
		usage(e.Stderr, prog, fs)
		return 1
	}
	return runHook(e, prog, log, chain[0])
}

// splitChain splits "a --x ; b --y" into hook invocations, dropping empty ones.
func splitChain(args []string) [][]string {
	var out [][]string
	start := 0
	for i := 0; i <= len(args); i++ {
		if i == len(args) || args[i] == ocispec.ChainSeparator {
			if i > start {
				out = append(out, args[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// runHook runs one hook invocation: its name and its flags.
func runHook(e *app.Env, prog string, log *slog.Logger, args []string) int {
	name := args[0]
	run, ok := hooks()[name]
	if !ok {
		// A spec from another toolkit version must not break the start.
		log.Warn("unknown hook; ignored", "hook", name, "args", args[1:])
		return 0
	}
	h := &hookEnv{Env: e, name: prog + " " + name, log: log.With("hook", name)}
	if err := run(h, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(e.Stderr, "%s: %v\n", h.name, err)
		return 1
	}
	return 0
}

func usage(w io.Writer, prog string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s [--debug] [--quiet] HOOK [OPTIONS] [\\; HOOK [OPTIONS]]...\n\nHooks (they read the container's OCI state on stdin):\n"+
		"  create-symlinks --link TARGET::LINK...            create symlinks in the container\n"+
		"  update-ldcache [--ldconfig-path P] --folder DIR... [--lib PATH...] update ld.so.cache (in-process with --lib, else the host's ldconfig confined to the container)\n"+
		"  disable-device-node-modification                  mask /proc/driver/nvidia/params with ModifyDeviceFiles: 0\n"+
		"  mount-proc-driver [--host-dir D] [--file F]... [--gpu BUSID]... [--expose REL]...\n"+
		"                                                    the container's filtered /proc/driver/nvidia\n\nGlobal options:\n", prog)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// flags returns a flag set for a hook with the hidden --container-spec.
func (h *hookEnv) flags() (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(h.name, flag.ContinueOnError)
	fs.SetOutput(h.Stderr)
	spec := fs.String("container-spec", "", "read the OCI spec from this file instead of the state on stdin (tests)")
	return fs, spec
}

// parse parses a hook's flags; positional arguments are an error.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// checkState checks that an OCI state tells the hooks where the container
// root is: a "root" (crun adds it; absolute, or relative to the bundle) or
// a bundle, which must be absolute. Unlike the runtime hook, these hooks
// need no pid.
func checkState(s request.State) error {
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
	var bundle, specPath string
	if specFile != "" {
		specPath = specFile
		bundle = filepath.Dir(specFile)
	} else {
		data, err := h.ReadStdin(maxState)
		if err != nil {
			return "", fmt.Errorf("OCI state: %w", err)
		}
		st, err := request.DecodeState(data)
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
	doc, err := ocispec.Load(specPath)
	if err != nil {
		return "", err
	}
	return doc.RootPath(bundle)
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
	if err := f(r); err != nil {
		if rerr := r.Rollback(); rerr != nil {
			h.log.Warn("rollback incomplete", "error", rerr)
		}
		return err
	}
	r.Commit()
	return nil
}

// createSymlinks: --link TARGET::LINK (repeatable) creates LINK -> TARGET
// inside the container root.
func createSymlinks(h *hookEnv, args []string) error {
	fs, spec := h.flags()
	var links stringList
	fs.Var(&links, "link", "TARGET::LINK: create LINK pointing to TARGET (repeatable)")
	if err := parse(fs, args); err != nil {
		return err
	}
	type pair struct{ target, link string }
	var pairs []pair
	for _, l := range links {
		target, link, ok := strings.Cut(l, "::")
		if !ok || target == "" || link == "" || strings.Contains(link, "::") {
			return fmt.Errorf("invalid --link %q: want TARGET::LINK", l)
		}
		if !filepath.IsAbs(link) {
			return fmt.Errorf("invalid --link %q: the link must be an absolute container path", l)
		}
		pairs = append(pairs, pair{target, link})
	}
	if len(pairs) == 0 {
		return nil
	}
	return h.withRoot(*spec, func(r *rootfs.Root) error {
		for _, p := range pairs {
			if err := r.Symlink(p.target, p.link); err != nil {
				return err
			}
			h.log.Debug("symlink", "link", p.link, "target", p.target)
		}
		return nil
	})
}

// updateLdcache updates the container's ld.so.cache for the injected
// libraries and records the --folder directories in /etc/ld.so.conf.d so
// that the container's own later ldconfig runs keep them.
//
// With --lib (container paths of the injected library files and of the
// links to them, which nvidia-container-runtime's spec edits pass) the
// cache is updated in-process (rootfs.UpdateLdCache: the entries ldconfig
// would record, no second process, no namespaces); if that fails the hook
// falls back to ldconfig. With only --folder (CDI specs from NVIDIA's
// tools) it runs the host's ldconfig (--ldconfig-path, default
// /sbin/ldconfig, .real preferred) confined to the container root over
// the directories.
func updateLdcache(h *hookEnv, args []string) error {
	fs, spec := h.flags()
	var folders, libs stringList
	fs.Var(&folders, "folder", "a container directory holding injected libraries (repeatable)")
	fs.Var(&libs, "lib", "an injected library file or link to one, as a container path: update ld.so.cache in-process (repeatable)")
	ldconfig := fs.String("ldconfig-path", rootfs.DefaultLdconfig, "the host ldconfig to run (host path)")
	if err := parse(fs, args); err != nil {
		return err
	}
	for _, f := range folders {
		if !filepath.IsAbs(f) {
			return fmt.Errorf("invalid --folder %q: not an absolute container path", f)
		}
	}
	for _, l := range libs {
		if !filepath.IsAbs(l) {
			return fmt.Errorf("invalid --lib %q: not an absolute container path", l)
		}
	}
	if !filepath.IsAbs(*ldconfig) {
		return fmt.Errorf("invalid --ldconfig-path %q: not an absolute host path", *ldconfig)
	}
	// The root is resolved once: the OCI state on stdin can be read only
	// once, and the fall back to ldconfig needs it too.
	root, err := h.containerRoot(*spec)
	if err != nil {
		return err
	}
	if len(libs) > 0 {
		err := h.withRootAt(root, func(r *rootfs.Root) error { return r.UpdateLdCache(libs, folders, h.log) })
		if err == nil {
			return nil
		}
		h.log.Warn("in-process ld.so.cache update failed; running ldconfig", "error", err)
	}
	if root == "/" {
		return errors.New("container root is \"/\": refusing to run ldconfig on the host root")
	}
	return rootfs.RunLdconfig(context.Background(), root, folders, rootfs.LdconfigOptions{
		Ldconfig: "@" + *ldconfig, ConfDropIn: true, Log: h.log,
	})
}

// disableDeviceNodeModification masks the container's
// /proc/driver/nvidia/params with a read-only copy of the host's in which
// ModifyDeviceFiles is 0, so that driver code in the container never
// creates device nodes.
func disableDeviceNodeModification(h *hookEnv, args []string) error {
	fs, spec := h.flags()
	hostDir := fs.String("host-dir", DefaultHostProcDir, "the driver's proc directory on the host")
	if err := parse(fs, args); err != nil {
		return err
	}
	hostParams := filepath.Join(*hostDir, "params")
	data, err := procfs.ReadFile(hostParams)
	if errors.Is(err, os.ErrNotExist) {
		h.log.Warn("no driver params on the host; nothing to do", "path", hostParams)
		return nil
	}
	if err != nil {
		return err
	}
	masked := procfs.DisableDeviceFileModification(data)
	if string(masked) == string(data) {
		h.log.Debug("ModifyDeviceFiles is already 0")
		return nil
	}
	return h.withRoot(*spec, func(r *rootfs.Root) error {
		target := rootfs.ContainerProcDriver + "/params"
		if !r.Exists(target) {
			h.log.Warn("container has no "+target+"; nothing to mask", "root", r.Path())
			return nil
		}
		s, err := rootfs.DataSource("params", masked, []string{plan.OptRO, plan.OptNoSuid, plan.OptNoDev, plan.OptNoExec})
		if err != nil {
			return err
		}
		defer s.Close()
		return r.Attach(s, target)
	})
}

// mountProcDriver builds the container's filtered /proc/driver/nvidia
// (plan.ProcView): copies of --file (default params, version, registry;
// params with ModifyDeviceFiles 0), the directories of the --gpu bus ids
// and the --expose entries, read-only; other GPUs stay invisible.
func mountProcDriver(h *hookEnv, args []string) error {
	fs, spec := h.flags()
	hostDir := fs.String("host-dir", DefaultHostProcDir, "the driver's proc directory on the host")
	var files, gpus, expose stringList
	fs.Var(&files, "file", "a file of the host directory to copy (repeatable; default params, version, registry)")
	fs.Var(&gpus, "gpu", "the bus id of a GPU whose gpus/ directory to expose (repeatable)")
	fs.Var(&expose, "expose", "a further path below the host directory to bind read-only (repeatable)")
	if err := parse(fs, args); err != nil {
		return err
	}
	view := &rootfs.ProcView{HostDir: *hostDir, Files: files, GPUDirs: gpus, Expose: expose}
	if len(view.Files) == 0 {
		view.Files = []string{"params", "version", "registry"}
	}
	pd, err := rootfs.PrepareProcDriver(view)
	if err != nil {
		return err
	}
	defer pd.Close()
	return h.withRoot(*spec, func(r *rootfs.Root) error { return r.MountProcDriver(pd, h.log) })
}
