package nvc

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/runcache"
)

// Prog is the program name used in messages.
const Prog = "nvidia-container-cli"

// Identity is a user and group id.
type Identity struct{ UID, GID uint32 }

// Globals are the options given before the command.
type Globals struct {
	// Root is the driver root (--root, default "/").
	Root string
	// LdCache is the ld.so.cache path inside Root (--ldcache, default
	// /etc/ld.so.cache).
	LdCache string
	// DebugFile is the debug log (--debug, else $NVC_DEBUG_FILE).
	DebugFile string
	// LoadKmods asks to load the kernel modules and create device nodes.
	LoadKmods bool
	// NoPivot: configure's ldconfig uses MS_MOVE+chroot instead of pivot_root.
	NoPivot bool
	// NoCreateIMEXChannels: --load-kmods does not create IMEX channel nodes.
	NoCreateIMEXChannels bool
	// User is the --user identity (nil when not given).
	User *Identity
}

// GlobalOptions are NVIDIA's global options, in its --help order.
func GlobalOptions() []Option {
	return []Option{
		{Long: "debug", Short: 'd', Arg: RequiredArg, ArgName: "FILE", Doc: "Log debug information"},
		{Long: "load-kmods", Short: 'k', Doc: "Load kernel modules"},
		{Long: "no-pivot", Short: 'n', Doc: "Do not use pivot_root"},
		{Long: "user", Short: 'u', Arg: OptionalArg, ArgName: "UID[:GID]", Doc: "User and group to use for privilege separation"},
		{Long: "root", Short: 'r', Arg: RequiredArg, ArgName: "PATH", Doc: "Path to the driver root directory"},
		{Long: "ldcache", Short: 'l', Arg: RequiredArg, ArgName: "FILE", Doc: "Path to the system's DSO cache"},
		{Long: "no-create-imex-channels", Doc: "Don't automatically create IMEX channel device nodes"},
		{Long: "help", Short: '?', Doc: "Give this help list"},
		{Long: "usage", Doc: "Give a short usage message"},
		{Long: "version", Short: 'V', Doc: "Print program version"},
	}
}

// Action is what the global options ask for besides a command.
type Action int

// Actions.
const (
	RunCommand Action = iota
	ShowHelp
	ShowUsage
	ShowVersion
)

// ParseGlobals parses the global options of argv (args[0] is the program)
// and returns them, what to do, and the command with its arguments.
func ParseGlobals(e *app.Env, args []string) (*Globals, Action, []string, error) {
	g := &Globals{Root: "/", LdCache: discover.DefaultLdCache, DebugFile: e.Getenv("NVC_DEBUG_FILE")}
	if len(args) > 0 {
		args = args[1:]
	}
	parsed, rest, err := Parse(GlobalOptions(), args, true)
	if err != nil {
		return nil, RunCommand, nil, err
	}
	for _, p := range parsed {
		switch p.Name() {
		case "help":
			return g, ShowHelp, rest, nil
		case "usage":
			return g, ShowUsage, rest, nil
		case "version":
			return g, ShowVersion, rest, nil
		case "debug":
			g.DebugFile = p.Value
		case "load-kmods":
			g.LoadKmods = true
		case "no-pivot":
			g.NoPivot = true
		case "no-create-imex-channels":
			g.NoCreateIMEXChannels = true
		case "root":
			g.Root = p.Value
		case "ldcache":
			g.LdCache = p.Value
		case "user":
			id, err := parseUser(p.Value, p.HasValue)
			if err != nil {
				return nil, RunCommand, nil, &UsageError{err.Error()}
			}
			g.User = &id
		}
	}
	if g.Root == "" {
		return nil, RunCommand, nil, &UsageError{"invalid root directory: empty path"}
	}
	return g, RunCommand, rest, nil
}

// parseUser reads --user's UID[:GID] (numbers or names). A bare --user
// means the caller's effective ids; the group defaults to the user's
// primary group.
func parseUser(v string, given bool) (Identity, error) {
	if !given {
		return Identity{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}, nil
	}
	us, gs, hasGroup := strings.Cut(v, ":")
	var id Identity
	var primary string
	if n, err := strconv.ParseUint(us, 10, 32); err == nil {
		id.UID = uint32(n)
		if u, err := user.LookupId(us); err == nil {
			primary = u.Gid
		}
	} else {
		u, err := user.Lookup(us)
		if err != nil {
			return Identity{}, fmt.Errorf("invalid user: %s", v)
		}
		n, _ := strconv.ParseUint(u.Uid, 10, 32)
		id.UID, primary = uint32(n), u.Gid
	}
	switch {
	case hasGroup:
		if n, err := strconv.ParseUint(gs, 10, 32); err == nil {
			id.GID = uint32(n)
		} else if g, err := user.LookupGroup(gs); err == nil {
			n, _ := strconv.ParseUint(g.Gid, 10, 32)
			id.GID = uint32(n)
		} else {
			return Identity{}, fmt.Errorf("invalid group: %s", gs)
		}
	case primary != "":
		n, _ := strconv.ParseUint(primary, 10, 32)
		id.GID = uint32(n)
	default:
		id.GID = id.UID
	}
	return id, nil
}

// DiscoverOptions returns the discovery options the global flags and the
// environment imply: the driver root and ld.so.cache, binaries searched in
// $PATH (as NVIDIA's CLI does) and then the driver directories of
// discover.DefaultSearchPath, the MPS pipe directory from
// $CUDA_MPS_PIPE_DIRECTORY, and the driver probe run as --user (when
// root) with its cache in $NCTK_PROBE_CACHE_DIR or the default
// (NCTK_PROBE_CACHE=off disables it).
func (g *Globals) DiscoverOptions(e *app.Env, log *slog.Logger) discover.Options {
	o := discover.Options{
		Root:       g.Root,
		LdCache:    g.LdCache,
		MPSPipeDir: e.Getenv("CUDA_MPS_PIPE_DIRECTORY"),
		Logger:     log,
	}
	var dirs []string
	for _, d := range append(filepath.SplitList(e.Getenv("PATH")), discover.DefaultSearchPath()...) {
		if filepath.IsAbs(d) && !slices.Contains(dirs, filepath.Clean(d)) {
			dirs = append(dirs, filepath.Clean(d))
		}
	}
	o.SearchPath = dirs
	o.ProbeConfig.CacheDir = e.Getenv("NCTK_PROBE_CACHE_DIR")
	if o.ProbeConfig.CacheDir == "" {
		o.ProbeConfig.CacheDir = runcache.DefaultDir(e.Getenv)
	}
	o.ProbeConfig.NoCache = e.Getenv("NCTK_PROBE_CACHE") == "off"
	if g.User != nil && os.Geteuid() == 0 && g.User.UID != 0 {
		o.ProbeConfig.Credential = &syscall.Credential{Uid: g.User.UID, Gid: g.User.GID}
	}
	return o
}

// Fail reports err as "nvidia-container-cli: <phase> error: <err>" and
// returns exit status 1.
func Fail(e *app.Env, phase string, err error) int {
	fmt.Fprintf(e.Stderr, "%s: %s error: %s\n", Prog, phase, echo.Error(err))
	return 1
}

// UsageFail reports a command-line error the way argp does and returns
// its exit status, 64. prog is "nvidia-container-cli" or
// "nvidia-container-cli info".
func UsageFail(e *app.Env, prog string, err error) int {
	fmt.Fprintf(e.Stderr, "%s: %v\nTry `%s --help' or `%s --usage' for more information.\n", Prog, err, prog, prog)
	return 64
}

// OpenLog returns the debug logger: glog-style lines appended to the debug
// file (NVIDIA's format), or a logger that discards when there is none.
// The returned function closes the file.
func (g *Globals) OpenLog() (*slog.Logger, func(), error) {
	if g.DebugFile == "" {
		return slog.New(slog.DiscardHandler), func() {}, nil
	}
	f, err := os.OpenFile(g.DebugFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open debug log: %w", err)
	}
	io.WriteString(f, "\n-- WARNING, the following logs are for debugging purposes only --\n\n")
	return slog.New(NewGlogHandler(f)), func() { f.Close() }, nil
}
