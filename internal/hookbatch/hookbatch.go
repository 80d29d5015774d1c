// Package hookbatch runs the createContainer hooks of a spec in NVIDIA's
// layout in one process when runc or crun runs them.
//
// NVIDIA's specs (and nctk's --separate-hooks specs) give every hook its own
// entry: six nvidia-cdi-hook processes per container for NVIDIA 1.20's
// spec of an H100 host, which runc's init (crun's container process)
// starts one after another. The process, not its work, is most of their
// cost: a Go program's start is ~2 ms where a static program that only
// exits takes ~0.2 ms (docs/benchmarks.md). So the first of those
// processes finds the entries that follow it (Find), does their work in
// order as one chain, and makes their program, in the container's mount
// namespace only, a program that exits 0 (Mask): the runtime then starts
// that for each of them.
//
// Both are refused, and every hook runs as before, unless all of this
// holds: runc's init or crun's container process is the parent
// (ocistate.FindHook finds the root and the bundle);
// config.json's createContainer hooks hold this process's arguments
// exactly once, at an entry whose program is this binary; the entries
// after it that run this binary follow it without another hook between
// and share its path and environment, none with a timeout; the program is
// not inside the container root; the mount namespace is not the
// runtime's own and the mounts the program and its directory are on do
// not propagate to any other; the hook runs under its runtime process's
// security label; and the masked program runs. The mask is
// gone with the old root at the runtime's pivot_root; it is a copy of a
// few bytes nctk writes, and nothing of the image's is read or mounted.
package hookbatch

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/ocistate"
)

// ErrNotBatched wraps each reason the entries after this one are left to
// run as processes of their own.
var ErrNotBatched = errors.New("hooks not batched")

// Batch is the work of the entries a hook process runs for the entries
// after its own.
type Batch struct {
	// Args holds each entry's arguments after the words that name the
	// program (lead of them), this process's first: the hooks to run in
	// order, as one chain.
	Args [][]string
	// Program is the path of the entries' program, to Mask once their
	// work is taken on.
	Program string
}

// Find reads the createContainer hooks of the container h describes
// and returns the batch the process started with self (its arguments, the
// lead words that name the program first: "nvidia-cdi-hook", or
// "nvidia-ctk hook") runs: its own entry and those after it that Group
// takes. exe is this binary ("/proc/self/exe").
func Find(h ocistate.RuntimeHook, self []string, lead int, exe string) (Batch, error) {
	hooks, err := ocistate.LoadCreateContainerHooks(filepath.Join(h.Bundle, "config.json"))
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrNotBatched, err)
	}
	var me unix.Stat_t
	if err := unix.Stat(exe, &me); err != nil {
		return Batch{}, fmt.Errorf("%w: %s: %w", ErrNotBatched, exe, err)
	}
	sameFile := func(p string) bool {
		var st unix.Stat_t
		return unix.Stat(p, &st) == nil && st.Dev == me.Dev && st.Ino == me.Ino
	}
	group, err := Group(hooks, self, lead, sameFile)
	if err != nil {
		return Batch{}, err
	}
	prog := group[0].Path
	if inside(prog, h.Root) {
		return Batch{}, fmt.Errorf("%w: the hook program %s is inside the container root %s", ErrNotBatched, prog, h.Root)
	}
	b := Batch{Program: prog}
	for _, e := range group {
		b.Args = append(b.Args, e.Args[lead:])
	}
	return b, nil
}

// inside reports whether p, its links followed, is root or under it (root
// with its links followed too); a path that does not resolve counts as
// inside.
func inside(p, root string) bool {
	rp, err := filepath.EvalSymlinks(p)
	if err != nil {
		return true
	}
	if rr, err := filepath.EvalSymlinks(root); err == nil {
		root = rr
	}
	rel, err := filepath.Rel(root, rp)
	return err != nil || (rel != ".." && !strings.HasPrefix(rel, "../"))
}

// Group returns the entries of hooks, the runtime's createContainer hooks
// in order, that the process started with self (its arguments, the lead
// words that name the program first) runs: its own entry, the one entry
// whose arguments are self and whose program is this binary (sameFile),
// and the entries right after it with the same program path, environment
// and lead words. Each must name a hook after those (no global flag
// before it) and have no timeout (one process runs longer than each did).
// No later entry may run this binary under another path or after another
// hook: the mask would reach it too. Fewer than two entries is no batch.
// Every refusal wraps ErrNotBatched.
func Group(hooks []specs.Hook, self []string, lead int, sameFile func(path string) bool) ([]specs.Hook, error) {
	at := -1
	for i, h := range hooks {
		if slices.Equal(h.Args, self) {
			if at >= 0 {
				return nil, fmt.Errorf("%w: two createContainer hooks have this process's arguments", ErrNotBatched)
			}
			at = i
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("%w: no createContainer hook has this process's arguments", ErrNotBatched)
	}
	first := hooks[at]
	if !filepath.IsAbs(first.Path) || !sameFile(first.Path) {
		return nil, fmt.Errorf("%w: the hook's program %q is not this binary", ErrNotBatched, first.Path)
	}
	if lead < 1 || !sameEntry(first, first, lead) {
		return nil, fmt.Errorf("%w: the hook has a timeout or a flag before its name", ErrNotBatched)
	}
	end := at + 1
	for end < len(hooks) && sameEntry(first, hooks[end], lead) {
		end++
	}
	if end-at < 2 {
		return nil, fmt.Errorf("%w: no hook of this program and environment follows", ErrNotBatched)
	}
	for _, h := range hooks[end:] {
		if h.Path == first.Path || sameFile(h.Path) {
			return nil, fmt.Errorf("%w: a later createContainer hook runs %s after another hook or differently", ErrNotBatched, h.Path)
		}
	}
	return hooks[at:end], nil
}

// sameEntry reports whether h can run in the process of first: the same
// program path, environment and lead words, a hook named after them, no
// timeout.
func sameEntry(first, h specs.Hook, lead int) bool {
	return h.Path == first.Path && slices.Equal(h.Env, first.Env) && h.Timeout == nil &&
		len(h.Args) > lead && len(first.Args) > lead && slices.Equal(h.Args[:lead], first.Args[:lead]) &&
		!strings.HasPrefix(h.Args[lead], "-")
}
