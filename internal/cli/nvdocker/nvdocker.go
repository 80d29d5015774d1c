// Package nvdocker is the nvidia-docker wrapper: it runs docker with the
// nvidia runtime. On the first `run` or `create` command (also `container
// run|create`), after docker's own global options, it inserts
// `--runtime=nvidia` and, when NV_GPU is set, `-e
// NVIDIA_VISIBLE_DEVICES=<NV_GPU, blank- or comma-separated, as a comma
// list>`. Other commands pass through; `version` first prints the wrapper's
// version. The wrapper replaces itself with docker (exec, no fork).
//
// Environment: NV_GPU (GPU indices, UUIDs, MIG devices; validated),
// NV_DOCKER (the docker command, default "docker"; split on blanks like the
// original script did, so "sudo docker" works), NV_DEBUG (non-empty: print
// the final command line to stderr).
package nvdocker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/lookpath"
	"github.com/nctk/nctk/internal/version"
)

// Environment variables the wrapper reads.
const (
	EnvGPU    = "NV_GPU"
	EnvDocker = "NV_DOCKER"
	EnvDebug  = "NV_DEBUG"
)

// RuntimeFlag is what run and create get.
const RuntimeFlag = "--runtime=nvidia"

const prog = "nvidia-docker"

// Main is the nvidia-docker entry point. It only returns on error.
func Main(e *app.Env) int {
	inv, err := Rewrite(e.Args[1:], e.Getenv(EnvGPU))
	if err != nil {
		fmt.Fprintf(e.Stderr, "%s: %v\n", prog, err)
		return 1
	}
	docker := strings.Fields(e.Getenv(EnvDocker))
	if len(docker) == 0 {
		docker = []string{"docker"}
	}
	path, err := lookPath(docker[0], e.Getenv("PATH"))
	if err != nil {
		fmt.Fprintf(e.Stderr, "%s: %s=%q: %v\n", prog, EnvDocker, docker[0], err)
		return 1
	}
	argv := append(docker, inv.Args...)
	if inv.Command == "version" {
		fmt.Fprintf(e.Stdout, "NVIDIA Docker: %s\n", version.String())
	}
	if e.Getenv(EnvDebug) != "" {
		fmt.Fprintf(e.Stderr, "%s: exec %s %s\n", prog, path, quoteArgs(argv))
	}
	err = syscall.Exec(path, argv, e.Environ)
	fmt.Fprintf(e.Stderr, "%s: exec %s: %v\n", prog, path, err)
	return 1
}

// Invocation is docker's command line as the wrapper rewrote it.
type Invocation struct {
	// Args are docker's arguments (without argv[0]).
	Args []string
	// Command is the docker command found after the global options
	// ("run", "create", "version", ...; "" when there is none), and
	// Injected whether the nvidia arguments were inserted.
	Command  string
	Injected bool
}

// dockerValueFlags are docker's global options that take a value.
func dockerValueFlags() map[string]bool {
	return map[string]bool{
		"--config": true, "-c": true, "--context": true, "-H": true, "--host": true,
		"-l": true, "--log-level": true, "--tlscacert": true, "--tlscert": true, "--tlskey": true,
	}
}

// Rewrite returns docker's arguments for the wrapper's arguments args and
// the value of NV_GPU ("" = unset).
func Rewrite(args []string, nvGPU string) (Invocation, error) {
	var devices string
	if nvGPU != "" {
		d, err := ParseNVGPU(nvGPU)
		if err != nil {
			return Invocation{}, err
		}
		devices = d
	}
	i := skipGlobalOptions(args)
	inv := Invocation{Args: args}
	if i >= len(args) {
		return inv, nil
	}
	inv.Command = args[i]
	at := -1
	switch args[i] {
	case "run", "create":
		at = i + 1
	case "container":
		if i+1 < len(args) && (args[i+1] == "run" || args[i+1] == "create") {
			inv.Command = args[i+1]
			at = i + 2
		}
	}
	if at < 0 {
		return inv, nil
	}
	extra := []string{RuntimeFlag}
	if devices != "" {
		extra = append(extra, "-e", "NVIDIA_VISIBLE_DEVICES="+devices)
	}
	out := make([]string, 0, len(args)+len(extra))
	out = append(out, args[:at]...)
	out = append(out, extra...)
	out = append(out, args[at:]...)
	inv.Args, inv.Injected = out, true
	return inv, nil
}

// skipGlobalOptions returns the index of the docker command in args.
func skipGlobalOptions(args []string) int {
	valued := dockerValueFlags()
	i := 0
	for i < len(args) {
		a := args[i]
		switch {
		case a == "--":
			return i + 1
		case a == "-" || !strings.HasPrefix(a, "-"):
			return i
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a, "=")
			if valued[name] && !hasValue {
				i += 2
			} else {
				i++
			}
		default: // a cluster of short options: -D, -Dl debug, -Hunix:///x
			step := 1
			for j := 1; j < len(a); j++ {
				if valued["-"+a[j:j+1]] {
					if j == len(a)-1 {
						step = 2 // the value is the next argument
					}
					break // else the rest of the cluster is the value
				}
			}
			i += step
		}
	}
	return i
}

// deviceTokenPattern matches one NV_GPU entry: an index, a MIG index (gpu:mig), a
// GPU or MIG UUID (also the old MIG-GPU-<uuid>/<gi>/<ci> form), or a
// fully-qualified CDI device name. It is compiled where it is used, not at
// package init, which every nctk tool would pay.
const deviceTokenPattern = `^(?:[0-9]+|[0-9]+:[0-9]+|GPU-[0-9a-fA-F]+(?:-[0-9a-fA-F]+)*|MIG-[0-9a-fA-F]+(?:-[0-9a-fA-F]+)*|MIG-GPU-[0-9a-fA-F]+(?:-[0-9a-fA-F]+)*/[0-9]+/[0-9]+|[a-z0-9][a-z0-9.-]*/[a-zA-Z0-9][a-zA-Z0-9_.-]*=[a-zA-Z0-9_.:-]+)$`

// ParseNVGPU validates NV_GPU (entries separated by blanks or commas) and
// returns the NVIDIA_VISIBLE_DEVICES value: the entries joined by commas.
// "all", "none" and "void" stand alone.
func ParseNVGPU(v string) (string, error) {
	tokens := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	if len(tokens) == 0 {
		return "", fmt.Errorf("%s=%q names no GPU", EnvGPU, v)
	}
	deviceToken := regexp.MustCompile(deviceTokenPattern)
	for _, t := range tokens {
		switch t {
		case "all", "none", "void":
			if len(tokens) > 1 {
				return "", fmt.Errorf("%s=%q: %q cannot be combined with other devices", EnvGPU, v, t)
			}
			continue
		}
		if !deviceToken.MatchString(t) {
			return "", fmt.Errorf("%s=%q: %q is not a GPU index (0), GPU or MIG UUID (GPU-…, MIG-…), MIG index (0:1) or CDI device name", EnvGPU, v, t)
		}
	}
	return strings.Join(tokens, ","), nil
}

// lookPath finds the executable name in the PATH list pathEnv (names with a
// slash are used as they are).
func lookPath(name, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		if err := isExecutable(name); err != nil {
			return "", err
		}
		return name, nil
	}
	if pathEnv == "" {
		pathEnv = strings.Join(lookpath.StandardDirs(), ":")
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in PATH %s", pathEnv)
}

func isExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return &fs.PathError{Op: "exec", Path: p, Err: errors.New("not an executable file")}
	}
	return nil
}

func quoteArgs(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>(){}*?[]#~") {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
