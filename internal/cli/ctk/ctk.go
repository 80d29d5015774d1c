// Package ctk is nvidia-ctk, the NVIDIA Container Toolkit's command-line
// utility:
//
//	nvidia-ctk [--debug|-d] [--quiet] [--config FILE] COMMAND ...
//	  runtime configure         register the NVIDIA runtime with docker, containerd or CRI-O
//	  config [default]          print or edit config.toml
//	  system create-device-nodes
//	  system create-dev-char-symlinks
//	  cdi generate|list|validate CDI specs (internal/cdispec)
//	  cdi transform root        move a CDI spec's paths to another root
//	  doctor                    check the host for what breaks GPU containers (internal/doctor)
//	  hook ...                  the nvidia-cdi-hook commands (delegated)
//	  info                      NVIDIA's placeholder: does nothing
//	  help|h [COMMAND...]       help for nvidia-ctk or a command
//
// Every flag also works with a single dash, and the global ones have
// environment twins (NVIDIA_CTK_DEBUG, NVIDIA_CTK_QUIET, NVIDIA_CTK_CONFIG).
// Errors are printed as "nvidia-ctk: <message>" with exit status 1.
package ctk

import (
	"errors"
	"flag"
	"fmt"
	"github.com/nctk/nctk/internal/cli/cdihook"
	"github.com/nctk/nctk/internal/version"
	"io"
	"log/slog"
	"sort"
	"strings"

	"github.com/nctk/nctk/internal/app"
)

const prog = "nvidia-ctk"

// env is what a command runs with.
type env struct {
	*app.Env
	log *slog.Logger
	// config is the global --config (the nvidia-ctk config.toml), "" if
	// not given.
	config string
	quiet  bool
	// path is the command's name path ("nvidia-ctk runtime configure").
	path string
	// globals are the global flags as given so far (before the command
	// and after any command name on the way to this one).
	globals globalFlags
}

// command is one node of the command tree. A node has sub-commands, a run
// function, or a tool: a whole command tree owned by another package,
// which gets the remaining arguments as its argv (Args[0] = "nvidia-ctk
// <name>").
type command struct {
	name    string
	aliases []string
	summary string
	subs    []command
	run     func(e *env, args []string) error
	tool    app.Tool
}

// commands is the command table. The hook entry is the registration point
// for the package that owns that tree: set its tool to cdihook.Main once
// internal/cli/cdihook exists. The cdi commands are in cdi.go.
func commands() []command {
	return []command{
		{name: "runtime", summary: "configure container engines to use the NVIDIA runtime", subs: []command{
			{name: "configure", summary: "add the NVIDIA runtime to docker, containerd or CRI-O", run: runtimeConfigure},
		}},
		{name: "config", summary: "print or edit the NVIDIA Container Toolkit config.toml", run: configCommand},
		{name: "system", summary: "host setup: device nodes and /dev/char links", subs: []command{
			{name: "create-device-nodes", summary: "create missing NVIDIA device nodes", run: createDeviceNodes},
			{name: "create-dev-char-symlinks", summary: "create /dev/char/MAJOR:MINOR links to the NVIDIA device nodes", run: createDevCharSymlinks},
		}},
		{name: "cdi", summary: "generate and list CDI specs", subs: cdiCommands()},
		{name: "doctor", summary: "say why a GPU container does not work, and how to fix it", run: doctorCommand},
		{name: "hook", summary: "OCI hooks used by CDI specs (nvidia-cdi-hook)", tool: cdihook.Main},
		{name: "info", summary: "accepted for NVIDIA's placeholder command; prints nothing", run: infoCommand},
	}
}

// infoCommand is NVIDIA's `nvidia-ctk info`, a command that does nothing
// there either: it takes no flags and succeeds (nvidia-ctk doctor is
// what reports on the host).
func infoCommand(e *env, args []string) error {
	return parseLeaf(e, newFlagSet("info"), args, "", "Does nothing, as NVIDIA's nvidia-ctk info; see nvidia-ctk doctor for what the host provides.")
}

// globalFlags are nvidia-ctk's global flags: debug, quiet and config
// (their flag names and environment twins).
type globalFlags struct {
	debug, quiet bool
	config       string
}

// define defines the global flags on fs, with their environment twins
// when env is set (at the top; below it the values start from the top's).
func (g *globalFlags) define(fs *flagSet, env bool) {
	twins := func(names ...string) []string {
		if env {
			return names
		}
		return nil
	}
	if !fs.Defined("debug") {
		fs.Bool(&g.debug, []string{"debug", "d"}, twins("NVIDIA_CTK_DEBUG"), "enable debug-level logging")
	}
	if !fs.Defined("quiet") {
		fs.Bool(&g.quiet, []string{"quiet", "q"}, twins("NVIDIA_CTK_QUIET"), "log errors only; overrides --debug")
	}
	if !fs.Defined("config") {
		fs.String(&g.config, []string{"config"}, twins("NVIDIA_CTK_CONFIG"), "FILE", "the NVIDIA Container Toolkit config.toml to use")
	}
}

// logger is the logger the global flags ask for, writing to w: as NVIDIA's,
// --quiet logs errors only and overrides --debug.
func (g *globalFlags) logger(w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	switch {
	case g.quiet:
		level = slog.LevelError
	case g.debug:
		level = slog.LevelDebug
	}
	return newLogger(w, level)
}

// persistent defines on a command's flag set the global flags it does not
// define itself, hidden, as NVIDIA's nvidia-ctk accepts them after any
// command (urfave/cli's persistent flags), with -v, which NVIDIA's accepts
// there and ignores; apply, called after parsing, makes them count.
func (e *env) persistent(fs *flagSet) (apply func()) {
	g := e.globals
	before := len(fs.specs)
	g.define(fs, false)
	if !fs.Defined("v") {
		var ignored bool
		fs.Bool(&ignored, []string{"v"}, nil, "accepted and ignored, as NVIDIA's")
	}
	for _, s := range fs.specs[before:] {
		s.hidden = true
	}
	return func() {
		if g != e.globals {
			e.globals = g
			e.quiet = g.quiet
			e.config = g.config
			e.log = g.logger(e.Stderr)
		}
	}
}

// Main is the nvidia-ctk entry point.
func Main(e *app.Env) int {
	var g globalFlags
	var showVersion bool
	fs := newFlagSet(prog)
	g.define(fs, true)
	fs.Bool(&showVersion, []string{"version", "v"}, nil, "print the version and exit")

	args := e.Args
	if len(args) == 0 {
		args = []string{prog}
	}
	rest, err := fs.Parse(e, args[1:])
	root := command{name: prog, subs: commands()}
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeHelp(e.Stdout, prog, root, fs)
		return 0
	case err != nil:
		return fail(e, err)
	case showVersion:
		fmt.Fprintf(e.Stdout, "%s version %s\n", prog, version.String())
		return 0
	}
	ce := &env{Env: e, log: g.logger(e.Stderr), config: g.config, quiet: g.quiet, path: prog, globals: g}
	if len(rest) == 0 {
		writeHelp(e.Stdout, prog, root, fs)
		return 0
	}
	return dispatch(ce, root, rest)
}

// dispatch walks the tree from cmd with args (args[0] names a child).
func dispatch(e *env, cmd command, args []string) int {
	if len(args) == 0 {
		writeHelp(e.Stderr, e.path, cmd, nil)
		return 1
	}
	if args[0] == "help" || args[0] == "h" || args[0] == "-h" || args[0] == "--help" {
		return help(e, cmd, args[1:])
	}
	if strings.HasPrefix(args[0], "-") && e.path != prog {
		// The global flags after a command name ("nvidia-ctk cdi
		// --debug generate").
		fs := newFlagSet(e.path)
		apply := e.persistent(fs)
		rest, err := fs.Parse(e.Env, args)
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(e.Stdout, e.path, cmd, nil)
			return 0
		}
		if err != nil {
			return fail(e.Env, fmt.Errorf("%s: %w", e.path, err))
		}
		apply()
		return dispatch(e, cmd, rest)
	}
	sub, ok := findCommand(cmd.subs, args[0])
	if !ok {
		return fail(e.Env, fmt.Errorf("%s: unknown command %q (commands: %s)", e.path, args[0], strings.Join(names(cmd.subs), ", ")))
	}
	e.path += " " + sub.name
	switch {
	case sub.tool != nil:
		child := *e.Env
		child.Args = append([]string{e.path}, args[1:]...)
		return sub.tool(&child)
	case sub.run != nil:
		err := sub.run(e, args[1:])
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			return fail(e.Env, err)
		}
		return 0
	default:
		return dispatch(e, sub, args[1:])
	}
}

// help prints the help of cmd, or of the command args names below it
// ("nvidia-ctk help cdi generate", "nvidia-ctk h runtime"), as the help
// command and its alias h do in NVIDIA's nvidia-ctk.
func help(e *env, cmd command, args []string) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		writeHelp(e.Stdout, e.path, cmd, nil)
		return 0
	}
	sub, ok := findCommand(cmd.subs, args[0])
	if !ok {
		return fail(e.Env, fmt.Errorf("%s: no help for unknown command %q (commands: %s)", e.path, args[0], strings.Join(names(cmd.subs), ", ")))
	}
	if sub.run == nil && sub.tool == nil {
		e.path += " " + sub.name
		return help(e, sub, args[1:])
	}
	return dispatch(e, cmd, []string{sub.name, "--help"})
}

func findCommand(cmds []command, name string) (command, bool) {
	for _, c := range cmds {
		if c.name == name {
			return c, true
		}
		for _, a := range c.aliases {
			if a == name {
				return c, true
			}
		}
	}
	return command{}, false
}

func names(cmds []command) []string {
	out := make([]string, 0, len(cmds))
	for _, c := range cmds {
		out = append(out, c.name)
	}
	sort.Strings(out)
	return out
}

func writeHelp(w io.Writer, path string, cmd command, fs *flagSet) {
	fmt.Fprintf(w, "Usage: %s", path)
	if fs != nil {
		fmt.Fprint(w, " [flags]")
	}
	fmt.Fprintln(w, " COMMAND [ARGS...]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range cmd.subs {
		fmt.Fprintf(w, "  %-28s %s\n", c.name, c.summary)
	}
	if fs != nil {
		fmt.Fprintln(w, "\nFlags:")
		fs.Usage(w)
	}
	fmt.Fprintf(w, "\nRun '%s COMMAND --help' for a command's flags.\n", path)
}

// commandHelp prints a leaf command's usage.
func commandHelp(e *env, synopsis, description string, fs *flagSet) {
	fmt.Fprintf(e.Stdout, "Usage: %s %s\n\n%s\n\nFlags:\n", e.path, synopsis, description)
	fs.Usage(e.Stdout)
}

// parseLeaf parses a leaf command's flags (and the global ones it does not
// define, which NVIDIA's accepts after any command), printing help for
// --help and rejecting positional arguments.
func parseLeaf(e *env, fs *flagSet, args []string, synopsis, description string) error {
	apply := e.persistent(fs)
	rest, err := fs.Parse(e.Env, args)
	if err == nil {
		apply()
	}
	if errors.Is(err, flag.ErrHelp) {
		commandHelp(e, synopsis, description, fs)
		return err
	}
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if len(rest) > 0 {
		return fmt.Errorf("%s: unexpected argument %q", e.path, rest[0])
	}
	return nil
}

func fail(e *app.Env, err error) int {
	fmt.Fprintf(e.Stderr, "%s: %v\n", prog, err)
	return 1
}

// newLogger logs "level=… msg=…" lines (no time stamps) to w.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}
