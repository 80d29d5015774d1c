package ocistate

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// crunComm is the name of crun's processes: its create or run, and the
// container process it forks, which runs the createContainer hooks.
const crunComm = "crun"

// ErrNotCrunHook is crunHook's answer when the caller is not a
// createContainer hook of crun (FindHook).
var ErrNotCrunHook = errors.New("not a createContainer hook of crun")

// crunHook finds the container root and bundle of a createContainer hook
// that crun runs, its caller's parent found to be crun (FindHook): that
// one's parent, crun, is crun too (the container process, which runs the
// hooks before pivot_root, and crun's create or run), and the OCI state,
// which crun writes at once and state reads (called only once the
// processes are crun's), names an absolute bundle, the directory the
// caller works in (crun runs its hooks there: the same device and inode),
// and the root (crun adds it; absolute, or relative to the bundle).
// Anything else is an error wrapping ErrNotCrunHook. proc is the procfs to
// read the processes in ("/proc"), cwd the caller's working directory
// ("."), crun the caller's parent's parent.
func crunHook(proc, cwd string, crun int, state func() ([]byte, error)) (RuntimeHook, error) {
	if comm, _, err := statOf(proc, strconv.Itoa(crun)); err != nil || comm != crunComm {
		return RuntimeHook{}, fmt.Errorf("%w: the parent's parent is %q (%v)", ErrNotCrunHook, comm, err)
	}
	data, err := state()
	if err != nil {
		return RuntimeHook{}, fmt.Errorf("%w: OCI state: %w", ErrNotCrunHook, err)
	}
	st, err := DecodeState(data)
	if err != nil {
		return RuntimeHook{}, fmt.Errorf("%w: %w", ErrNotCrunHook, err)
	}
	if st.Root == "" || !filepath.IsAbs(st.Bundle) {
		return RuntimeHook{}, fmt.Errorf("%w: the OCI state names no root or no absolute bundle", ErrNotCrunHook)
	}
	var b, w unix.Stat_t
	if unix.Stat(st.Bundle, &b) != nil || unix.Stat(cwd, &w) != nil || b.Dev != w.Dev || b.Ino != w.Ino {
		return RuntimeHook{}, fmt.Errorf("%w: the working directory is not the bundle %s", ErrNotCrunHook, st.Bundle)
	}
	root := st.Root
	if !filepath.IsAbs(root) {
		root = filepath.Join(st.Bundle, root)
	}
	return RuntimeHook{Root: filepath.Clean(root), Bundle: st.Bundle, Runtime: crun}, nil
}
