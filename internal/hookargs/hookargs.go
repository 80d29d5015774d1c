// Package hookargs is the nvidia-cdi-hook command line: the hook names, the
// flags of each hook with their spellings, the chain that runs several hooks
// in one call, and the environment the hooks run with. The writers of hook
// command lines (internal/ocispec for nvidia-container-runtime's spec edits,
// internal/cdispec for CDI specs) build them from the typed hooks here
// (Command); nvidia-cdi-hook (internal/cli/cdihook) reads them back with
// SplitChain and Parse. No other package spells a hook flag.
//
//	nvidia-cdi-hook create-symlinks --link TARGET::LINK...
//	nvidia-cdi-hook update-ldcache [--ldconfig-path PATH] --folder DIR... [--lib PATH...]
//	nvidia-cdi-hook disable-device-node-modification [--host-dir DIR]
//	nvidia-cdi-hook mount-proc-driver [--host-dir DIR] [--file NAME]... [--gpu BUSID]... [--expose REL]...
//	nvidia-cdi-hook enable-cuda-compat [--host-driver-version V] [--host-cuda-version V] [--cuda-compat-container-root DIR]
//	nvidia-cdi-hook update-application-profile
//	nvidia-cdi-hook chmod --mode OCTAL --path PATH...
//	nvidia-cdi-hook noop
//	nvidia-cdi-hook HOOK [FLAGS] ";" HOOK [FLAGS]...
//
// Every hook also takes --container-spec FILE, and the global --debug, -d
// and --quiet after its name (as NVIDIA's, whose global flags apply to the
// hooks too). The names and the flags
// NVIDIA's hook has are spelled as NVIDIA spells them, so that a CDI spec
// written by NVIDIA's tools (or by `nvidia-ctk cdi generate
// --separate-hooks`) runs with either nvidia-cdi-hook; --lib, --host-dir,
// mount-proc-driver and the ";" chain are nctk's own: they appear in the
// spec edits of nctk's runtime and in the CDI specs nctk writes by default
// (one chained hook, update-ldcache with --lib), which need nctk's hook.
package hookargs

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Binary is the name of the hook program: args[0] of every command line
// Command returns.
const Binary = "nvidia-cdi-hook"

// The hook names (the subcommands of Binary).
const (
	NameCreateSymlinks                = "create-symlinks"
	NameUpdateLdcache                 = "update-ldcache"
	NameDisableDeviceNodeModification = "disable-device-node-modification"
	NameMountProcDriver               = "mount-proc-driver"
	NameEnableCudaCompat              = "enable-cuda-compat"
	NameUpdateApplicationProfile      = "update-application-profile"
	NameChmod                         = "chmod"
	NameNoop                          = "noop"
)

// ChainSeparator is the argument that separates hooks chained in one call.
const ChainSeparator = ";"

// EnvPath is the PATH every hook runs with.
const EnvPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env returns the complete environment of a hook call. The OCI runtime
// passes a hook exactly its env, so nothing from the image (such as
// LD_PRELOAD in process.env) reaches the hook. GOMAXPROCS=1: a hook does
// its work on one goroutine, and a Go program sets up one P (scheduler
// context, allocation cache) per CPU before main; on a many-CPU host that
// is a measurable part of every hook process's start (docs/benchmarks.md).
func Env() []string {
	return []string{"PATH=" + EnvPath, "NVIDIA_CTK_DEBUG=false", "GOMAXPROCS=1"}
}

// Hook is one hook invocation: a typed value per hook name.
type Hook interface {
	// Name is the hook name.
	Name() string
	// Args is the invocation's command line after the program name: Name,
	// then the flags that Parse reads back into an equal value.
	Args() []string
}

// Common holds the flags every hook takes.
type Common struct {
	// ContainerSpec (--container-spec) is an OCI spec file the hook reads
	// the container root from instead of the OCI state on stdin; "" reads
	// stdin.
	ContainerSpec string
	// Debug (--debug, -d) and Quiet (--quiet) are the program's global
	// logging flags given after the hook name, where NVIDIA's hook
	// accepts them too.
	Debug, Quiet bool
}

// CommonFlags returns the common flags of a hook (every hook type but Noop
// embeds Common).
func (c Common) CommonFlags() Common { return c }

func (c Common) args() []string {
	var out []string
	if c.ContainerSpec != "" {
		out = append(out, "--"+flagContainerSpec, c.ContainerSpec)
	}
	if c.Debug {
		out = append(out, "--"+flagDebug)
	}
	if c.Quiet {
		out = append(out, "--"+flagQuiet)
	}
	return out
}

// Flag names.
const (
	flagContainerSpec = "container-spec"
	flagDebug         = "debug"
	flagQuiet         = "quiet"
	flagLink          = "link"
	flagLdconfigPath  = "ldconfig-path"
	flagFolder        = "folder"
	flagLib           = "lib"
	flagHostDir       = "host-dir"
	flagFile          = "file"
	flagGPU           = "gpu"
	flagExpose        = "expose"
	flagHostDriver    = "host-driver-version"
	flagHostCuda      = "host-cuda-version"
	flagCompatRoot    = "cuda-compat-container-root"
	flagMode          = "mode"
	flagPath          = "path"
)

// DefaultCudaCompatDir is the container directory enable-cuda-compat looks
// in for the image's CUDA forward-compatibility libraries when
// --cuda-compat-container-root is not given.
const DefaultCudaCompatDir = "/usr/local/cuda/compat"

// linkSeparator separates a --link value's target from its link.
const linkSeparator = "::"

// Link is one symlink of create-symlinks: Path, an absolute container
// path, points to Target (the link's content: relative to Path's directory,
// or absolute in the container).
type Link struct {
	Target string
	Path   string
}

// String returns l as a --link value: TARGET::LINK.
func (l Link) String() string { return l.Target + linkSeparator + l.Path }

// Check reports why l cannot be passed as a --link value that reads back
// as l: an empty target, "::" or ListSeparator in either part, a target
// ending in ":" (the separator would be found one character early) or a
// link that is not an absolute path.
func (l Link) Check() error {
	switch {
	case l.Target == "":
		return errors.New("empty link target")
	case strings.Contains(l.Target, ListSeparator) || strings.Contains(l.Path, ListSeparator):
		return fmt.Errorf("link target or path containing %q", ListSeparator)
	case strings.Contains(l.Target, linkSeparator) || strings.Contains(l.Path, linkSeparator) || strings.HasSuffix(l.Target, ":"):
		return fmt.Errorf("link target or path containing %q", linkSeparator)
	case !path.IsAbs(l.Path):
		return fmt.Errorf("link %q is not an absolute container path", l.Path)
	}
	return nil
}

// ParseLink reads a --link value, TARGET::LINK.
func ParseLink(v string) (Link, error) {
	target, link, ok := strings.Cut(v, linkSeparator)
	if !ok || target == "" || link == "" || strings.Contains(link, linkSeparator) {
		return Link{}, fmt.Errorf("invalid --%s %q: want TARGET%sLINK", flagLink, v, linkSeparator)
	}
	if !path.IsAbs(link) {
		return Link{}, fmt.Errorf("invalid --%s %q: the link must be an absolute container path", flagLink, v)
	}
	return Link{Target: target, Path: link}, nil
}

// CreateSymlinks creates symlinks in the container.
type CreateSymlinks struct {
	Common
	// Links (--link, repeated) are the symlinks to create, in order.
	Links []Link
}

// Name implements Hook.
func (CreateSymlinks) Name() string { return NameCreateSymlinks }

// Args implements Hook.
func (h CreateSymlinks) Args() []string {
	out := []string{h.Name()}
	for _, l := range h.Links {
		out = append(out, "--"+flagLink, l.String())
	}
	return append(out, h.Common.args()...)
}

// UpdateLdcache updates the container's ld.so.cache for the injected
// libraries and records their directories in /etc/ld.so.conf.d.
type UpdateLdcache struct {
	Common
	// LdconfigPath (--ldconfig-path) is the host ldconfig the hook runs;
	// "" leaves the hook's default.
	LdconfigPath string
	// Folders (--folder, repeated) are the container directories holding
	// the injected libraries.
	Folders []string
	// Libs (--lib, repeated; nctk's) are the container paths of the
	// injected library files and of the links to them: with any, the hook
	// updates ld.so.cache in-process instead of running ldconfig.
	Libs []string
}

// Name implements Hook.
func (UpdateLdcache) Name() string { return NameUpdateLdcache }

// Args implements Hook.
func (h UpdateLdcache) Args() []string {
	out := []string{h.Name()}
	if h.LdconfigPath != "" {
		out = append(out, "--"+flagLdconfigPath, h.LdconfigPath)
	}
	out = appendEach(out, flagFolder, h.Folders)
	out = appendEach(out, flagLib, h.Libs)
	return append(out, h.Common.args()...)
}

// DisableDeviceNodeModification masks the container's
// /proc/driver/nvidia/params with a copy in which ModifyDeviceFiles is 0.
type DisableDeviceNodeModification struct {
	Common
	// HostDir (--host-dir; nctk's) is the driver's proc directory on the
	// host; "" leaves the hook's default.
	HostDir string
}

// Name implements Hook.
func (DisableDeviceNodeModification) Name() string { return NameDisableDeviceNodeModification }

// Args implements Hook.
func (h DisableDeviceNodeModification) Args() []string {
	out := []string{h.Name()}
	if h.HostDir != "" {
		out = append(out, "--"+flagHostDir, h.HostDir)
	}
	return append(out, h.Common.args()...)
}

// MountProcDriver (nctk's) builds the container's filtered
// /proc/driver/nvidia.
type MountProcDriver struct {
	Common
	// HostDir (--host-dir) is the driver's proc directory on the host; ""
	// leaves the hook's default.
	HostDir string
	// Files (--file, repeated) are the names of HostDir's files to copy;
	// none leaves the hook's default.
	Files []string
	// GPUs (--gpu, repeated) are the bus ids whose gpus/ directory is
	// exposed.
	GPUs []string
	// Expose (--expose, repeated) are further paths below HostDir bound
	// read-only.
	Expose []string
}

// Name implements Hook.
func (MountProcDriver) Name() string { return NameMountProcDriver }

// Args implements Hook.
func (h MountProcDriver) Args() []string {
	out := []string{h.Name()}
	if h.HostDir != "" {
		out = append(out, "--"+flagHostDir, h.HostDir)
	}
	out = appendEach(out, flagFile, h.Files)
	out = appendEach(out, flagGPU, h.GPUs)
	out = appendEach(out, flagExpose, h.Expose)
	return append(out, h.Common.args()...)
}

// EnableCudaCompat puts the image's CUDA forward-compatibility libraries
// first in the loader's search when they are newer than the host driver.
type EnableCudaCompat struct {
	Common
	// HostDriverVersion (--host-driver-version) is the host driver's
	// version ("580.159.04").
	HostDriverVersion string
	// HostCudaVersion (--host-cuda-version) is the CUDA version the host
	// driver supports ("13.0").
	HostCudaVersion string
	// CompatDir (--cuda-compat-container-root) is the container directory
	// of the compat libraries; "" means DefaultCudaCompatDir.
	CompatDir string
}

// Name implements Hook.
func (EnableCudaCompat) Name() string { return NameEnableCudaCompat }

// Dir is the container directory of the compat libraries: CompatDir, or
// DefaultCudaCompatDir when it is "", cleaned.
func (h EnableCudaCompat) Dir() string {
	if h.CompatDir == "" {
		return DefaultCudaCompatDir
	}
	return path.Clean(h.CompatDir)
}

// Args implements Hook.
func (h EnableCudaCompat) Args() []string {
	out := []string{h.Name()}
	if h.HostDriverVersion != "" {
		out = append(out, "--"+flagHostDriver+"="+h.HostDriverVersion)
	}
	if h.HostCudaVersion != "" {
		out = append(out, "--"+flagHostCuda+"="+h.HostCudaVersion)
	}
	if h.CompatDir != "" {
		out = append(out, "--"+flagCompatRoot, h.CompatDir)
	}
	return append(out, h.Common.args()...)
}

// UpdateApplicationProfile writes the driver application profile that
// makes EGL and Vulkan in the container see only its GPUs.
type UpdateApplicationProfile struct {
	Common
}

// Name implements Hook.
func (UpdateApplicationProfile) Name() string { return NameUpdateApplicationProfile }

// Args implements Hook.
func (h UpdateApplicationProfile) Args() []string {
	return append([]string{h.Name()}, h.Common.args()...)
}

// Chmod sets the permission bits of container paths.
type Chmod struct {
	Common
	// Mode (--mode, octal) is the mode to set; only its permission bits
	// (0777) are applied.
	Mode uint32
	// Paths (--path, repeated) are the container paths.
	Paths []string
}

// Name implements Hook.
func (Chmod) Name() string { return NameChmod }

// Args implements Hook.
func (h Chmod) Args() []string {
	out := []string{h.Name(), "--" + flagMode, fmt.Sprintf("%o", h.Mode)}
	out = appendEach(out, flagPath, h.Paths)
	return append(out, h.Common.args()...)
}

// Noop does nothing; it ignores positional arguments and takes only the
// logging flags, as NVIDIA's.
type Noop struct{}

// Name implements Hook.
func (Noop) Name() string { return NameNoop }

// Args implements Hook.
func (h Noop) Args() []string { return []string{h.Name()} }

func appendEach(out []string, flagName string, values []string) []string {
	for _, v := range values {
		out = append(out, "--"+flagName, v)
	}
	return out
}

// Command returns the argument vector (program name first) of one call of
// Binary that runs hooks in order: Binary, then each hook's Args, separated
// by ChainSeparator.
func Command(hooks ...Hook) []string {
	out := []string{Binary}
	for i, h := range hooks {
		if i > 0 {
			out = append(out, ChainSeparator)
		}
		out = append(out, h.Args()...)
	}
	return out
}

// Chain returns the argument vector cmd (a hook call, program name first)
// followed by the hooks of next (another call of the same program, whose
// program name is dropped): one call that runs both in order. cmd and next
// are not modified.
func Chain(cmd, next []string) []string {
	out := slices.Clone(cmd)
	if len(next) < 2 {
		return out
	}
	return append(append(out, ChainSeparator), next[1:]...)
}

// CtkBinary is NVIDIA's nvidia-ctk, which runs the same hooks as
// `nvidia-ctk hook HOOK…`.
const CtkBinary = "nvidia-ctk"

// CommandFor returns the argument vector cmd (a hook call, program name
// first, as Command returns it) as the hook program at binPath runs it:
// `nvidia-ctk hook HOOK…` when binPath's base name is CtkBinary, else cmd.
// cmd is not modified.
func CommandFor(binPath string, cmd []string) []string {
	if path.Base(binPath) != CtkBinary {
		return slices.Clone(cmd)
	}
	out := []string{CtkBinary, "hook"}
	if len(cmd) > 1 {
		out = append(out, cmd[1:]...)
	}
	return out
}

// SplitChain splits the hook arguments of one call (after the program name
// and its global flags) into the argument lists of its hooks, at each
// ChainSeparator, dropping empty ones.
func SplitChain(args []string) [][]string {
	var out [][]string
	start := 0
	for i := 0; i <= len(args); i++ {
		if i == len(args) || args[i] == ChainSeparator {
			if i > start {
				out = append(out, args[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// UnknownHookError is Parse's error for a hook name this version does not
// know (from a spec written by another toolkit version).
type UnknownHookError struct {
	Name string
}

func (e *UnknownHookError) Error() string { return fmt.Sprintf("unknown hook %q", e.Name) }

// hookDef is how one hook's flags are defined and read.
type hookDef struct {
	synopsis string // the flags, for Usage
	summary  string // what the hook does, for Usage
	hidden   bool   // left out of Usage (NVIDIA's hidden noop)
	// define defines the hook's own flags on fs and returns the function
	// that, after fs is parsed, builds the hook (with the common flags c)
	// and checks it.
	define func(fs *flag.FlagSet) func(c Common) (Hook, error)
}

// hookDefs are the hooks Parse knows, by name.
func hookDefs() map[string]hookDef {
	return map[string]hookDef{
		NameCreateSymlinks: {synopsis: "--link TARGET::LINK...", summary: "create symlinks in the container (replacing what is at LINK)",
			define: defineCreateSymlinks},
		NameUpdateLdcache: {synopsis: "[--ldconfig-path P] --folder DIR... [--lib PATH...]",
			summary: "update ld.so.cache (in-process with --lib, else the host's ldconfig confined to the container)", define: defineUpdateLdcache},
		NameDisableDeviceNodeModification: {synopsis: "[--host-dir D]",
			summary: "mask /proc/driver/nvidia/params with ModifyDeviceFiles: 0", define: defineDisableDeviceNodeModification},
		NameMountProcDriver: {synopsis: "[--host-dir D] [--file F]... [--gpu BUSID]... [--expose REL]...",
			summary: "the container's filtered /proc/driver/nvidia", define: defineMountProcDriver},
		NameEnableCudaCompat: {synopsis: "[--host-driver-version V] [--host-cuda-version V] [--cuda-compat-container-root DIR]",
			summary: "put the image's CUDA compat libraries first in the loader's search when newer than the host driver", define: defineEnableCudaCompat},
		NameUpdateApplicationProfile: {summary: "limit EGL/Vulkan to the container's GPUs (driver application profile)",
			define: defineUpdateApplicationProfile},
		NameChmod: {synopsis: "--mode OCTAL --path P...", summary: "set the permission bits of container paths", define: defineChmod},
		NameNoop:  {summary: "do nothing", hidden: true},
	}
}

// Names returns the hook names Parse knows, sorted.
func Names() []string {
	names := make([]string, 0, len(hookDefs()))
	for n := range hookDefs() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// splitList is a repeatable string flag whose values are also split at
// ListSeparator, as NVIDIA's hook reads its list flags (--link, --folder,
// --path): "--folder /a,/b" is two folders.
type splitList []string

func (l *splitList) String() string { return strings.Join(*l, ListSeparator) }
func (l *splitList) Set(v string) error {
	*l = append(*l, strings.Split(v, ListSeparator)...)
	return nil
}

// ListSeparator splits the values of NVIDIA's list flags; such a value
// cannot hold it (Link.Check refuses it in a link).
const ListSeparator = ","

// newFlagSet returns the flag set of hook name (def) with the common flags,
// and the function that reads the parsed flags into a hook.
func newFlagSet(name string, def hookDef) (*flag.FlagSet, func() (Hook, error)) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Common
	fs.StringVar(&c.ContainerSpec, flagContainerSpec, "", "read the OCI spec from this file instead of the OCI state on stdin")
	fs.BoolVar(&c.Debug, flagDebug, false, "enable debug-level logging (as the global flag)")
	fs.BoolVar(&c.Debug, "d", false, "enable debug-level logging (as the global flag)")
	fs.BoolVar(&c.Quiet, flagQuiet, false, "log errors only; overrides --debug (as the global flag)")
	build := def.define(fs)
	return fs, func() (Hook, error) { return build(c) }
}

// Parse reads one hook invocation: args[0] is the hook name, the rest its
// flags (as "--flag value", "--flag=value" or with one dash). An unknown
// name is an *UnknownHookError; -h or --help an error that wraps
// flag.ErrHelp; positional arguments and invalid values are errors. noop
// ignores positional arguments but refuses unknown flags, as NVIDIA's.
func Parse(args []string) (Hook, error) { return parse(args, false) }

// ParseCTK is Parse for `nvidia-ctk hook`, which also takes nvidia-ctk's
// global --config FILE and -v after the hook name and ignores them, as
// NVIDIA's nvidia-ctk does (its global flags are persistent).
func ParseCTK(args []string) (Hook, error) { return parse(args, true) }

// ctkGlobals defines on fs the nvidia-ctk global flags ParseCTK ignores.
func ctkGlobals(fs *flag.FlagSet) {
	fs.String("config", "", "nvidia-ctk's global --config (ignored by the hooks)")
	fs.Bool("v", false, "accepted and ignored, as NVIDIA's nvidia-ctk")
}

func parse(args []string, ctk bool) (Hook, error) {
	if len(args) == 0 {
		return nil, errors.New("no hook name")
	}
	name := args[0]
	def, ok := hookDefs()[name]
	if !ok {
		return nil, &UnknownHookError{Name: name}
	}
	if def.define == nil {
		// As NVIDIA's noop: positional arguments are ignored, flags other
		// than the logging ones (and -h) are an error.
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Bool(flagDebug, false, "")
		fs.Bool("d", false, "")
		fs.Bool(flagQuiet, false, "")
		if ctk {
			ctkGlobals(fs)
		}
		if err := fs.Parse(args[1:]); err != nil {
			return nil, err
		}
		return Noop{}, nil
	}
	fs, build := newFlagSet(name, def)
	if ctk {
		ctkGlobals(fs)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return build()
}

// Usage writes the hook names with their flags and what each does; hidden
// hooks (noop) are left out.
func Usage(w io.Writer) {
	defs := hookDefs()
	for _, n := range Names() {
		d := defs[n]
		if d.hidden {
			continue
		}
		fmt.Fprintf(w, "  %s\n        %s\n", strings.TrimSpace(n+" "+d.synopsis), d.summary)
	}
}

// HookUsage writes the usage of hook name run by the program prog
// ("nvidia-cdi-hook", "nvidia-ctk hook") with its flags; nothing for an
// unknown name.
func HookUsage(w io.Writer, prog, name string) {
	def, ok := hookDefs()[name]
	if !ok {
		return
	}
	fmt.Fprintf(w, "Usage: %s\n  %s\n", strings.TrimSpace(prog+" "+name+" "+def.synopsis), def.summary)
	if def.define == nil {
		return
	}
	fs, _ := newFlagSet(name, def)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// checkAbs checks that the values of a flag are absolute paths (what says
// whose: "container" or "host").
func checkAbs(flagName, what string, values ...string) error {
	for _, v := range values {
		if !path.IsAbs(v) {
			return fmt.Errorf("invalid --%s %q: not an absolute %s path", flagName, v, what)
		}
	}
	return nil
}

func defineCreateSymlinks(fs *flag.FlagSet) func(Common) (Hook, error) {
	var links splitList
	fs.Var(&links, flagLink, "TARGET::LINK: create LINK pointing to TARGET (repeatable)")
	return func(c Common) (Hook, error) {
		h := CreateSymlinks{Common: c}
		for _, v := range links {
			l, err := ParseLink(v)
			if err != nil {
				return nil, err
			}
			h.Links = append(h.Links, l)
		}
		return h, nil
	}
}

func defineUpdateLdcache(fs *flag.FlagSet) func(Common) (Hook, error) {
	var folders splitList
	var libs stringList
	fs.Var(&folders, flagFolder, "a container directory holding injected libraries (repeatable)")
	fs.Var(&libs, flagLib, "an injected library file or link to one, as a container path: update ld.so.cache in-process (repeatable)")
	ldconfig := fs.String(flagLdconfigPath, "", "the host ldconfig to run (host path; default /sbin/ldconfig, .real preferred)")
	return func(c Common) (Hook, error) {
		if err := checkAbs(flagFolder, "container", folders...); err != nil {
			return nil, err
		}
		if err := checkAbs(flagLib, "container", libs...); err != nil {
			return nil, err
		}
		if isSet(fs, flagLdconfigPath) {
			if err := checkAbs(flagLdconfigPath, "host", *ldconfig); err != nil {
				return nil, err
			}
		}
		return UpdateLdcache{Common: c, LdconfigPath: *ldconfig, Folders: folders, Libs: libs}, nil
	}
}

// defineHostDir defines --host-dir and returns the check of its value.
func defineHostDir(fs *flag.FlagSet) (*string, func() error) {
	dir := fs.String(flagHostDir, "", "the driver's proc directory on the host (default /proc/driver/nvidia)")
	return dir, func() error {
		if !isSet(fs, flagHostDir) {
			return nil
		}
		return checkAbs(flagHostDir, "host", *dir)
	}
}

func defineDisableDeviceNodeModification(fs *flag.FlagSet) func(Common) (Hook, error) {
	dir, check := defineHostDir(fs)
	return func(c Common) (Hook, error) {
		if err := check(); err != nil {
			return nil, err
		}
		return DisableDeviceNodeModification{Common: c, HostDir: *dir}, nil
	}
}

func defineMountProcDriver(fs *flag.FlagSet) func(Common) (Hook, error) {
	dir, check := defineHostDir(fs)
	var files, gpus, expose stringList
	fs.Var(&files, flagFile, "a file of the host directory to copy (repeatable; default params, version, registry)")
	fs.Var(&gpus, flagGPU, "the bus id of a GPU whose gpus/ directory to expose (repeatable)")
	fs.Var(&expose, flagExpose, "a further path below the host directory to bind read-only (repeatable)")
	return func(c Common) (Hook, error) {
		if err := check(); err != nil {
			return nil, err
		}
		return MountProcDriver{Common: c, HostDir: *dir, Files: files, GPUs: gpus, Expose: expose}, nil
	}
}

func defineEnableCudaCompat(fs *flag.FlagSet) func(Common) (Hook, error) {
	driver := fs.String(flagHostDriver, "", "the host driver's version; the compat libraries are used only when newer")
	cuda := fs.String(flagHostCuda, "", "the CUDA version the host driver supports")
	dir := fs.String(flagCompatRoot, "", "the container directory of the CUDA compat libraries (default "+DefaultCudaCompatDir+")")
	return func(c Common) (Hook, error) {
		if isSet(fs, flagCompatRoot) {
			if err := checkAbs(flagCompatRoot, "container", *dir); err != nil {
				return nil, err
			}
		}
		return EnableCudaCompat{Common: c, HostDriverVersion: *driver, HostCudaVersion: *cuda, CompatDir: *dir}, nil
	}
}

func defineUpdateApplicationProfile(*flag.FlagSet) func(Common) (Hook, error) {
	return func(c Common) (Hook, error) { return UpdateApplicationProfile{Common: c}, nil }
}

func defineChmod(fs *flag.FlagSet) func(Common) (Hook, error) {
	mode := fs.String(flagMode, "", "the mode to set, in octal (permission bits only)")
	var paths splitList
	fs.Var(&paths, flagPath, "a container path to set the mode of (repeatable)")
	return func(c Common) (Hook, error) {
		m := strings.TrimSpace(*mode)
		if m == "" {
			return nil, fmt.Errorf("--%s is required", flagMode)
		}
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			return nil, fmt.Errorf("invalid --%s %q: not an octal mode", flagMode, *mode)
		}
		if v > 0o7777 {
			return nil, fmt.Errorf("invalid --%s %q: more than 07777", flagMode, *mode)
		}
		for _, p := range paths {
			if strings.TrimSpace(p) == "" {
				return nil, fmt.Errorf("invalid --%s: empty path", flagPath)
			}
		}
		return Chmod{Common: c, Mode: uint32(v), Paths: paths}, nil
	}
}
