// Package containercli is nctk's nvidia-container-cli: the global options
// and the info and list commands, in the formats of NVIDIA's CLI so that
// scripts parsing them keep working. MainWith lets callers and tests
// substitute commands (configure).
//
//	nvidia-container-cli [GLOBAL OPTION...] info [--csv]
//	nvidia-container-cli [GLOBAL OPTION...] list [OPTION...]
//	nvidia-container-cli [GLOBAL OPTION...] configure [OPTION...] ROOTFS
package containercli

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/containercli/nvc"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/planner"
	"github.com/nctk/nctk/internal/version"
)

// CompatVersion is the NVIDIA CLI version whose interface this one
// reproduces; --version reports it as cli-version/lib-version so that
// scripts checking for features keep working.
const CompatVersion = version.NVIDIACompat

// Commands are the commands implemented outside this package.
type Commands struct {
	// Configure runs `configure` with the parsed global options and the
	// arguments after the command word. nil reports that configure is not
	// available in this build.
	Configure func(e *app.Env, g *nvc.Globals, args []string) int
}

// Main runs nvidia-container-cli with every command (configure is
// Configure, in configure.go).
func Main(e *app.Env) int { return MainWith(e, Commands{Configure: Configure}) }

// MainWith runs nvidia-container-cli with the given external commands.
func MainWith(e *app.Env, c Commands) int {
	g, action, rest, err := nvc.ParseGlobals(e, e.Args)
	if err != nil {
		return nvc.UsageFail(e, nvc.Prog, err)
	}
	switch action {
	case nvc.ShowHelp:
		fmt.Fprint(e.Stdout, globalHelp())
		return 0
	case nvc.ShowUsage:
		fmt.Fprintf(e.Stdout, "Usage: %s [OPTION...] COMMAND [ARG...]\n", nvc.Prog)
		return 0
	case nvc.ShowVersion:
		fmt.Fprint(e.Stdout, versionText())
		return 0
	}
	if len(rest) == 0 {
		return nvc.UsageFail(e, nvc.Prog, errors.New("missing command"))
	}
	cmd, args := rest[0], rest[1:]
	switch cmd {
	case "info":
		return runInfo(e, g, args)
	case "list":
		return runList(e, g, args)
	case "configure":
		if c.Configure == nil {
			return nvc.Fail(e, "input", errors.New("configure: not built into this binary yet"))
		}
		return c.Configure(e, g, args)
	}
	return nvc.UsageFail(e, nvc.Prog, fmt.Errorf("unknown command: %s", cmd))
}

func globalHelp() string {
	return fmt.Sprintf("Usage: %s [OPTION...] COMMAND [ARG...]\n"+
		"Command line utility for manipulating NVIDIA GPU containers.\n\n%s\n"+
		"Commands:\n"+
		"  info                       Report information about the driver and devices\n"+
		"  list                       List driver components\n"+
		"  configure                  Configure a container with GPU support\n\n"+
		"Mandatory or optional arguments to long options are also mandatory or optional\n"+
		"for any corresponding short options.\n", nvc.Prog, nvc.Help(nvc.GlobalOptions()))
}

func versionText() string {
	rev, date, flags := "unknown", "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				date = s.Value
			case "-tags", "-ldflags", "CGO_ENABLED":
				flags += s.Key + "=" + s.Value + " "
			}
		}
	}
	platform := runtime.GOARCH
	switch platform {
	case "amd64":
		platform = "x86_64"
	case "arm64":
		platform = "aarch64"
	}
	return fmt.Sprintf("cli-version: %s\nlib-version: %s\nbuild date: %s\nbuild revision: %s\nbuild compiler: %s\n"+
		"build platform: %s\nbuild flags: %s\n",
		CompatVersion, CompatVersion, date, rev, runtime.Version()+" ("+version.String()+")", platform,
		strings.TrimSpace(flags))
}

// discoverDriver runs discovery for a command, with --load-kmods first.
// It returns the phase ("initialization" or "detection") with an error.
func discoverDriver(e *app.Env, g *nvc.Globals, log *slog.Logger, probe bool) (*discover.Driver, string, error) {
	if g.LoadKmods {
		nvc.LoadKmods(g, log)
	}
	o := g.DiscoverOptions(e, log)
	o.Probe = probe
	d, err := discover.Discover(o)
	if err != nil {
		return nil, string(planner.DiscoveryPhase(err)), err
	}
	return d, "", nil
}

// parseCommand parses a command's options (GNU order) and handles --help
// and --usage; done is true when the command should exit with code.
func parseCommand(e *app.Env, name string, opts []nvc.Option, args []string) (parsed []nvc.Parsed, operands []string, code int, done bool) {
	opts = append(opts,
		nvc.Option{Long: "help", Short: '?', Doc: "Give this help list"},
		nvc.Option{Long: "usage", Doc: "Give a short usage message"})
	prog := nvc.Prog + " " + name
	parsed, operands, err := nvc.Parse(opts, args, false)
	if err != nil {
		return nil, nil, nvc.UsageFail(e, prog, err), true
	}
	for _, p := range parsed {
		switch p.Name() {
		case "help":
			fmt.Fprintf(e.Stdout, "Usage: %s [OPTION...]\n\n%s", prog, nvc.Help(opts))
			return nil, nil, 0, true
		case "usage":
			fmt.Fprintf(e.Stdout, "Usage: %s [OPTION...]\n", prog)
			return nil, nil, 0, true
		}
	}
	return parsed, operands, 0, false
}
