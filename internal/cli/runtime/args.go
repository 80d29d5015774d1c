package runtime

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// invocation is a runc command line as the wrapper understands it. The
// wrapper reads only what it needs; the command line itself is handed to
// the low-level runtime unchanged.
type invocation struct {
	// Global flags (before the subcommand).
	Root      string
	Log       string
	LogFormat string
	Debug     bool
	// Version is set by --version / -v before any subcommand.
	Version bool
	// Help is set by --help / -h before any subcommand.
	Help bool

	// Command is the subcommand ("" when there is none) and CommandIndex
	// its index in argv (-1 when there is none).
	Command      string
	CommandIndex int
	// Bundle is the --bundle/-b value of create, run and restore ("" when
	// absent: the bundle is the current directory).
	Bundle string
	// PidFile is the --pid-file value of create, run and restore ("" when
	// absent).
	PidFile string
	// ID is the container ID of create, run and restore (their first
	// argument that is not a flag; "" when there is none).
	ID string
}

// injects reports whether the subcommand creates a container from the
// bundle's config.json, so the wrapper edits it first: create and run.
func (inv *invocation) injects() bool {
	return inv.Command == "create" || inv.Command == "run"
}

// globalValueFlags are runc's (and crun's) global flags that take a value.
func globalValueFlags() []string {
	return []string{"root", "log", "log-format", "criu", "rootless", "cgroup-manager", "log-level"}
}

// globalBoolFlags are the global flags without a value.
func globalBoolFlags() []string {
	return []string{"debug", "systemd-cgroup", "help", "h", "version", "v"}
}

// commandValueFlags are the create/run/restore flags that take a value,
// besides --bundle.
func commandValueFlags() []string {
	return []string{"console-socket", "pid-file", "pidfd-socket", "preserve-fds", "image-path", "work-path",
		"parent-path", "page-server", "manage-cgroups-mode", "empty-ns", "status-fd", "lsm-profile", "lsm-mount-context"}
}

// commands are the subcommands of runc and crun.
func commands() []string {
	return []string{"checkpoint", "create", "delete", "events", "exec", "features", "help", "h", "kill", "list",
		"pause", "ps", "restore", "resume", "run", "spec", "start", "state", "update", "mounts"}
}

// parseArgs parses argv (argv[0] being the program) the way runc does:
// global flags, then the subcommand, then its flags and arguments, flags
// and arguments in any order (runc reorders them). Flags are accepted with
// one or two dashes and with the value as the next argument or after "=".
// A global flag the wrapper does not know is taken to have a value when the
// next argument is neither a flag nor a subcommand name.
//
// The only error is a --bundle/-b without a value on a subcommand that
// takes a bundle.
func parseArgs(argv []string) (*invocation, error) {
	inv := &invocation{CommandIndex: -1}
	i := 1
	for ; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			i++
			break
		}
		name, val, hasVal, ok := splitFlag(a)
		if !ok {
			break
		}
		switch {
		case slices.Contains(globalValueFlags(), name):
			if !hasVal {
				if i+1 >= len(argv) {
					continue
				}
				i++
				val = argv[i]
			}
			switch name {
			case "root":
				inv.Root = val
			case "log":
				inv.Log = val
			case "log-format":
				inv.LogFormat = val
			}
		case slices.Contains(globalBoolFlags(), name):
			on := true
			if hasVal {
				on, _ = strconv.ParseBool(val)
			}
			switch name {
			case "debug":
				inv.Debug = on
			case "help", "h":
				inv.Help = on
			case "version", "v":
				inv.Version = on
			}
		default:
			if !hasVal && i+1 < len(argv) {
				next := argv[i+1]
				if _, _, _, isFlag := splitFlag(next); !isFlag && next != "--" && !slices.Contains(commands(), next) {
					i++
				}
			}
		}
	}
	if i >= len(argv) {
		return inv, nil
	}
	inv.Command, inv.CommandIndex = argv[i], i
	if inv.Command != "create" && inv.Command != "run" && inv.Command != "restore" {
		return inv, nil
	}
	for j := i + 1; j < len(argv); j++ {
		a := argv[j]
		if a == "--" {
			if inv.ID == "" && j+1 < len(argv) {
				inv.ID = argv[j+1]
			}
			break
		}
		name, val, hasVal, ok := splitFlag(a)
		if !ok {
			if inv.ID == "" {
				inv.ID = a
			}
			continue
		}
		switch {
		case name == "b" || name == "bundle":
			if !hasVal {
				if j+1 >= len(argv) {
					return inv, fmt.Errorf("%s %s: flag %s needs a value (the bundle directory)", argv[0], inv.Command, a)
				}
				j++
				val = argv[j]
			}
			inv.Bundle = val
		case slices.Contains(commandValueFlags(), name):
			if !hasVal {
				j++
				if j < len(argv) {
					val = argv[j]
				}
			}
			if name == "pid-file" {
				inv.PidFile = val
			}
		}
	}
	return inv, nil
}

// splitFlag splits "-name", "--name" or "--name=value"; ok is false for an
// argument that is not a flag ("x", "-", "--").
func splitFlag(a string) (name, val string, hasVal, ok bool) {
	if len(a) < 2 || a[0] != '-' || a == "--" {
		return "", "", false, false
	}
	s := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if s == "" {
		return "", "", false, false
	}
	name, val, hasVal = strings.Cut(s, "=")
	return name, val, hasVal, true
}
