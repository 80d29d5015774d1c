package ocistate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hostfile"
)

// runcInitComm is the name runc's container init gives itself (the last
// stage of its nsexec): the process that runs a runc container's
// createContainer hooks.
const runcInitComm = "runc:[2:INIT]"

// ErrNotRuncHook is RuncHookRoot's answer when the caller is not a
// createContainer hook of a runc container whose root it can prove.
var ErrNotRuncHook = errors.New("not a createContainer hook of runc with a provable root")

// RuncHookRoot finds the container root of a createContainer hook that
// runc runs without the OCI state on stdin (RuncHook).
func RuncHookRoot(proc, cwd string, keep bool) (string, error) {
	h, err := RuncHook(proc, cwd, keep)
	return h.Root, err
}

// RuntimeHook is what RuncHook and FindHook find about a createContainer
// hook that the runtime runs in the container's mount namespace before
// pivot_root.
type RuntimeHook struct {
	Root   string // the container root
	Bundle string // the bundle, where config.json is
	// Runtime is the pid of the runtime's own process outside the
	// container (runc or crun, create or run): the parent of the process
	// that runs the hook.
	Runtime int
}

// RuncHook finds the container root of a createContainer hook that runc
// runs, without the OCI state on stdin. runc's init writes that state
// from a goroutine of a Go process it limits to one P (GOMAXPROCS(1)),
// while another of its goroutines waits for the hook in a blocking system
// call, so the state reaches the hook only when the Go runtime's monitor
// takes the P back: 0 to 10 ms later, about 2 ms typically, for the first
// hook of a container (docs/benchmarks.md). What runc has set up already
// tells the root instead, and is checked:
//
//   - the caller's parent is runc's init (named runc:[2:INIT] in its
//     proc stat line, which also gives its parent),
//   - the init's parent is runc itself (create or run), whose working
//     directory is the bundle (runc changes to --bundle first),
//   - root.path of that bundle's config.json (LoadRootPathMemo, with
//     keep, reading config.json only as far as its root: runc has decoded
//     all of it) is the directory the caller works in (runc changes to the
//     container root before its createContainer hooks): the same device
//     and inode.
//
// proc is the procfs to read the processes in ("/proc": before
// pivot_root a hook sees the runtime's), cwd the caller's working
// directory ("."). Whatever does not hold (another runtime, another kind of
// hook, a root that differs) is an error wrapping ErrNotRuncHook, and the
// caller reads the state as usual. Nothing here is the image's: the
// processes are runc's, the bundle and config.json the engine's, and the
// container root is only compared, not followed.
func RuncHook(proc, cwd string, keep bool) (RuntimeHook, error) {
	comm, runc, err := parentOf(proc)
	if err != nil {
		return RuntimeHook{}, fmt.Errorf("%w: %w", ErrNotRuncHook, err)
	}
	if comm != runcInitComm {
		return RuntimeHook{}, fmt.Errorf("%w: the parent is %q", ErrNotRuncHook, comm)
	}
	return runcHook(proc, cwd, keep, runc)
}

// runcHook is RuncHook once the caller's parent is known to be runc's
// init, whose parent runc is.
func runcHook(proc, cwd string, keep bool, runc int) (RuntimeHook, error) {
	bundle, err := os.Readlink(filepath.Join(proc, strconv.Itoa(runc), "cwd"))
	if err != nil || !filepath.IsAbs(bundle) {
		return RuntimeHook{}, fmt.Errorf("%w: runc's working directory %q: %v", ErrNotRuncHook, bundle, err)
	}
	root, err := loadRootPathMemo(filepath.Join(bundle, "config.json"), bundle, keep, peekRootPath)
	if err != nil {
		return RuntimeHook{}, fmt.Errorf("%w: %w", ErrNotRuncHook, err)
	}
	var r, w unix.Stat_t
	if err := unix.Stat(root, &r); err != nil {
		return RuntimeHook{}, fmt.Errorf("%w: root %s: %w", ErrNotRuncHook, root, err)
	}
	if err := unix.Stat(cwd, &w); err != nil {
		return RuntimeHook{}, fmt.Errorf("%w: working directory: %w", ErrNotRuncHook, err)
	}
	if r.Dev != w.Dev || r.Ino != w.Ino {
		return RuntimeHook{}, fmt.Errorf("%w: the working directory is not %s, the root of %s", ErrNotRuncHook, root, bundle)
	}
	return RuntimeHook{Root: root, Bundle: bundle, Runtime: runc}, nil
}

// FindHook finds the container root and bundle of a createContainer hook
// that runc or crun runs: RuncHook when the caller's parent is runc's init,
// crunHook when it is crun (state is read only then), the caller's parent
// read once. Anything else is an error wrapping both ErrNotRuncHook and
// ErrNotCrunHook.
func FindHook(proc, cwd string, keep bool, state func() ([]byte, error)) (RuntimeHook, error) {
	comm, pid, err := parentOf(proc)
	if err != nil {
		return RuntimeHook{}, fmt.Errorf("%w, %w: %w", ErrNotRuncHook, ErrNotCrunHook, err)
	}
	switch comm {
	case runcInitComm:
		return runcHook(proc, cwd, keep, pid)
	case crunComm:
		return crunHook(proc, cwd, pid, state)
	}
	return RuntimeHook{}, fmt.Errorf("%w, %w: the parent is %q", ErrNotRuncHook, ErrNotCrunHook, comm)
}

// parentOf returns the command name of the caller's parent and that
// one's parent pid.
func parentOf(proc string) (comm string, ppid int, err error) {
	_, parent, err := statOf(proc, "self")
	if err != nil {
		return "", 0, err
	}
	return statOf(proc, strconv.Itoa(parent))
}

// statOf reads the command name and parent pid of the process pid ("self"
// or a number) from proc/pid/stat.
func statOf(proc, pid string) (comm string, ppid int, err error) {
	data, err := hostfile.ReadFile(filepath.Join(proc, pid, "stat"), 4096)
	if err != nil {
		return "", 0, err
	}
	comm, ppid, err = parseStat(data)
	if err != nil {
		return "", 0, fmt.Errorf("%s/%s/stat: %w", proc, pid, err)
	}
	return comm, ppid, nil
}

// parseStat returns the command name and parent pid of a /proc/PID/stat
// line: the name between the first "(" and the last ")" (it may hold
// spaces and parentheses itself), the parent pid the second field after
// it. A pid below 1 is an error.
func parseStat(data []byte) (comm string, ppid int, err error) {
	i := bytes.LastIndexByte(data, ')')
	j := bytes.IndexByte(data, '(')
	if i < 0 || j < 0 || j > i {
		return "", 0, errors.New("no command name in parentheses")
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 2 {
		return "", 0, errors.New("no parent pid after the command name")
	}
	ppid, err = strconv.Atoi(string(f[1]))
	if err != nil || ppid < 1 {
		return "", 0, fmt.Errorf("parent pid %q is not a positive number", f[1])
	}
	return string(data[j+1 : i]), ppid, nil
}

// peekRootPath is LoadRootPath reading the config.json at path only as far
// as its top-level root (a tenth of the time for an engine-applied one,
// whose mounts, hooks and linux sections follow it): for RuncHookRoot,
// which proves the answer against the root runc changed to. A document
// that is not an object up to its root, or has no root.path, is an error
// naming path.
func peekRootPath(path, bundle string) (string, error) {
	data, err := hostfile.ReadFile(path, MaxSpecSize)
	if err != nil {
		return "", fmt.Errorf("read OCI spec: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", fmt.Errorf("invalid OCI spec %s: not a JSON object", path)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("invalid OCI spec %s: %w", path, err)
		}
		if key == "root" {
			var r specs.Root
			if err := dec.Decode(&r); err != nil {
				return "", fmt.Errorf("invalid OCI spec %s: root: %w", path, err)
			}
			return RootPath(path, r.Path, bundle)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", fmt.Errorf("invalid OCI spec %s: %w", path, err)
		}
	}
	return RootPath(path, "", bundle)
}
