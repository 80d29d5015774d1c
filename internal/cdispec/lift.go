package cdispec

import (
	"path"
	"slices"
	"strings"

	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/appprofile"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// OwnHooks is the work of nctk's own createContainer hooks that
// LiftOwnHooks took out of CDI edits, for the caller to do in the container
// root before the container starts: the symlinks of create-symlinks and the
// in-process ld.so.cache update of update-ldcache --lib.
type OwnHooks struct {
	// Links are the symlinks to create, in the hooks' order.
	Links []hookargs.Link
	// LdconfigDirs are the update-ldcache --folder directories (the
	// ld.so.conf.d drop-in).
	LdconfigDirs []string
	// Rebuild: an update-ldcache part without --lib (NVIDIA's layout:
	// the host's ldconfig over whole folders) was taken out; the caller
	// rebuilds the container's ld.so.cache as that ldconfig would
	// (rootfs.RebuildLdCache over LdconfigDirs) after the links and the
	// CUDA compat drop-ins, before the compat libraries are put first, or
	// leaves the hook in place when the rebuild cannot reproduce the image
	// (lifting again with LiftOptions.NoRebuild).
	Rebuild bool
	// LdconfigPath is that part's --ldconfig-path ("" for the hook's
	// default): the host ldconfig whose own directories the rebuild
	// searches.
	LdconfigPath string
	// Libs are the update-ldcache --lib container paths (the libraries
	// and links whose ld.so.cache entries are written).
	Libs []string
	// Compat are the enable-cuda-compat parts, in the hooks' order: the
	// caller puts the image's CUDA compat libraries first
	// (internal/cudacompat) after the ld.so.cache update, which gives what
	// the hooks give (update-ldcache puts them first again after its own
	// entries).
	Compat []hookargs.EnableCudaCompat
	// AppProfile: an update-application-profile part was taken out; the
	// caller writes the profile for the device nodes config.json gives the
	// container (internal/appprofile), which are then all its /dev holds
	// (LiftOptions.DevicesKnown).
	AppProfile bool
	// DevLinks are create-symlinks links below /dev taken out
	// (LiftOptions.AfterCreate): the caller makes them in the created
	// container's /dev.
	DevLinks []hookargs.Link
	// MaskParams: a disable-device-node-modification part was taken out
	// (LiftOptions.AfterCreate); the caller masks the container's
	// /proc/driver/nvidia/params with ParamsHostDir's ("" for the hook's
	// default, /proc/driver/nvidia) once the container is created.
	MaskParams    bool
	ParamsHostDir string
	// Hooks is how many hook parts were taken out (a chain counts each
	// part).
	Hooks int
}

// LiftOptions say what LiftOwnHooks may take out of the container.
type LiftOptions struct {
	// KeepInContainer keeps disable-device-node-modification as a hook (the
	// host's procfs has the driver's params file for it to mask); without
	// it, the part is dropped.
	KeepInContainer bool
	// AfterCreate: the caller masks the params file itself in the created
	// container (internal/aftercreate), so with KeepInContainer the part
	// is lifted (OwnHooks.MaskParams) instead of kept.
	AfterCreate bool
	// Masked are the container paths runc masks or makes read-only after
	// the hooks ran (the spec's maskedPaths and readonlyPaths): work that
	// overlaps them is not taken out for after the create.
	Masked []string
	// Mounts are the container paths the caller's spec mounts.
	Mounts []string
	// DevicesKnown: the container's /dev will hold exactly the device nodes
	// of its config.json (nothing is bind-mounted at or below /dev), so
	// update-application-profile can be done from them before the
	// container exists. Without it, that part stays a hook.
	DevicesKnown bool
	// NoRebuild keeps update-ldcache without --lib (ldconfig over whole
	// folders) as a hook: it stops the lifting.
	NoRebuild bool
}

// LiftOwnHooks takes the work of nctk's own hooks out of the CDI edits e
// and returns the edits without it, and that work. own says whether a hook
// path is this installation's nvidia-cdi-hook (the caller decides, by file
// identity; see the runtime). A createContainer hook is nctk's own when
// own(path) holds and its args call nvidia-cdi-hook (args[0] with that base
// name, or nvidia-ctk followed by "hook") with no global flags; its ";"
// chain is then read part by part with hookargs.Parse:
//
//   - create-symlinks, enable-cuda-compat and update-ldcache with --lib
//     (what Render writes by default), without --container-spec, are
//     lifted: their links, compat directories, folders and libraries go to
//     OwnHooks;
//   - noop is dropped;
//   - update-application-profile is lifted (OwnHooks.AppProfile) when
//     o.DevicesKnown and no mount hides the profile's directory;
//   - disable-device-node-modification must run in the container (it
//     masks a file of the container's procfs): with o.KeepInContainer it
//     stays as a hook, or, with o.AfterCreate too, is lifted for the
//     caller to do in the created container (OwnHooks.MaskParams); it is
//     dropped without (no driver in the host's procfs, so the hook would
//     have nothing to mask);
//   - update-ldcache without --lib (ldconfig over whole folders) is lifted
//     as OwnHooks.Rebuild, once, and not with --lib parts, unless
//     o.NoRebuild;
//   - anything else (mount-proc-driver; hooks this version does not know;
//     arguments that do not parse; a hook that is not nctk's own) stops
//     the lifting: it and every createContainer hook after it stay as they
//     are, so that the lifted work is exactly the work that would have run
//     first.
//
// A part whose files would lie at or below a mount point (mounts, the
// container paths the caller's spec mounts, and the edits' own mounts) is
// not lifted: made before the mounts, they would be hidden. Hooks of other
// stages are left alone. The remaining parts of a
// partly lifted chain stay as one hook with the same path, env and timeout.
// e is not modified; when nothing is lifted, e itself is returned.
func LiftOwnHooks(e *cdispecs.ContainerEdits, own func(hookPath string) bool, o LiftOptions) (*cdispecs.ContainerEdits, OwnHooks) {
	var w OwnHooks
	if e == nil || len(e.Hooks) == 0 {
		return e, w
	}
	mountPoints := newMountSet(o.Mounts)
	for _, m := range e.Mounts {
		if m != nil {
			cp := path.Clean("/" + m.ContainerPath)
			mountPoints[cp] = true
			if strings.HasPrefix(cp+"/", "/dev/") {
				o.DevicesKnown = false // the spec mounts something in /dev
			}
		}
	}
	var kept []*cdispecs.Hook
	changed, stopped := false, false
	for _, h := range e.Hooks {
		if stopped || h == nil || h.HookName != "createContainer" {
			kept = append(kept, h)
			continue
		}
		prefix, parts, ok := ownChain(h, own)
		if !ok {
			stopped = true
			kept = append(kept, h)
			continue
		}
		var rest [][]string
		for i, part := range parts {
			keep, ok := liftPart(part, &w, o, mountPoints)
			if !ok {
				stopped = true
				rest = append(rest, parts[i:]...)
				break
			}
			if keep {
				rest = append(rest, part)
				stopped = true // keep the order of what runs after it
				rest = append(rest, parts[i+1:]...)
				break
			}
		}
		if len(rest) == len(parts) {
			kept = append(kept, h)
			continue
		}
		changed = true
		if len(rest) == 0 {
			continue
		}
		args := slices.Clone(prefix)
		for i, part := range rest {
			if i > 0 {
				args = append(args, hookargs.ChainSeparator)
			}
			args = append(args, part...)
		}
		c := *h
		c.Args = args
		c.Env = slices.Clone(h.Env)
		kept = append(kept, &c)
	}
	kept, merged := mergeOwnChains(kept, own)
	if !changed && !merged {
		return e, OwnHooks{}
	}
	out := *e
	out.Hooks = kept
	return &out, w
}

// mergeOwnChains joins consecutive createContainer hooks that call own's
// nvidia-cdi-hook the same way (same path, program part, env, no timeout)
// into one chained call: one process instead of one per hook. A chain runs
// its parts in order on the one OCI state and stops at the first failure,
// as the runtime does with separate hooks, so the container gets the same
// work in the same order. This is what is left of a spec in NVIDIA's
// layout (one hook per step) once the lifting stopped at a step that must
// run in the container (update-ldcache over whole folders, when the image
// needs the host's ldconfig itself: LiftOptions.NoRebuild).
func mergeOwnChains(hooks []*cdispecs.Hook, own func(string) bool) ([]*cdispecs.Hook, bool) {
	var out []*cdispecs.Hook
	merged := false
	var lastPrefix []string
	for _, h := range hooks {
		prefix, _, ok := ownChain(h, own)
		ok = ok && h.HookName == "createContainer" && h.Timeout == nil
		if n := len(out); ok && n > 0 && lastPrefix != nil {
			prev := out[n-1]
			if prev.Path == h.Path && slices.Equal(prev.Env, h.Env) && slices.Equal(lastPrefix, prefix) {
				c := *prev
				c.Args = append(append(slices.Clone(prev.Args), hookargs.ChainSeparator), h.Args[len(prefix):]...)
				out[n-1] = &c
				merged = true
				continue
			}
		}
		out = append(out, h)
		lastPrefix = nil
		if ok {
			lastPrefix = prefix
		}
	}
	return out, merged
}

// ownChain returns the program part of h's args (the nvidia-cdi-hook name,
// or nvidia-ctk hook) and the hook parts of its chain, when h calls own's
// nvidia-cdi-hook with no global flags.
func ownChain(h *cdispecs.Hook, own func(string) bool) (prefix []string, parts [][]string, ok bool) {
	if len(h.Args) < 2 || !own(h.Path) {
		return nil, nil, false
	}
	n := 1
	switch path.Base(h.Args[0]) {
	case hookargs.Binary:
	case hookargs.CtkBinary:
		if h.Args[1] != "hook" {
			return nil, nil, false
		}
		n = 2
	default:
		return nil, nil, false
	}
	parts = hookargs.SplitChain(h.Args[n:])
	if len(parts) == 0 || len(parts[0][0]) > 0 && parts[0][0][0] == '-' {
		return nil, nil, false // global flags: not a plain call
	}
	return h.Args[:n], parts, true
}

// liftPart lifts one hook part into w: ok false when it cannot be lifted,
// keep when it stays a hook (disable-device-node-modification with
// o.KeepInContainer); otherwise the part is done by the caller or dropped.
// A part that writes at or below one of mountPoints is not lifted: made
// before the mounts, its files would be hidden by the mount.
func liftPart(part []string, w *OwnHooks, o LiftOptions, mountPoints mountSet) (keep, ok bool) {
	hook, err := hookargs.Parse(part)
	if err != nil {
		return false, false
	}
	switch h := hook.(type) {
	case hookargs.CreateSymlinks:
		if h.ContainerSpec == "" && o.AfterCreate && o.DevicesKnown && devLinks(h.Links) &&
			!plan.Overlaps(linkPaths(h.Links), o.Masked) {
			// Links in the container's own /dev (the GPUs' by-path
			// links), which only the created container has.
			w.DevLinks = append(w.DevLinks, h.Links...)
			break
		}
		if h.ContainerSpec != "" || slices.ContainsFunc(h.Links, func(l hookargs.Link) bool { return mountPoints.under(l.Path, true) }) {
			return false, false
		}
		w.Links = append(w.Links, h.Links...)
	case hookargs.UpdateLdcache:
		if len(h.Libs) == 0 {
			// ldconfig over whole folders: rebuilt by the caller, once,
			// and not after an in-process update (whose entries a
			// rebuild would replace, the other way round).
			if h.ContainerSpec != "" || o.NoRebuild || w.Rebuild || len(w.Libs) > 0 || mountPoints.hidesLdcache() {
				return false, false
			}
			w.Rebuild, w.LdconfigPath = true, h.LdconfigPath
			for _, d := range h.Folders {
				if !slices.Contains(w.LdconfigDirs, d) {
					w.LdconfigDirs = append(w.LdconfigDirs, d)
				}
			}
			break
		}
		// The libraries are read before the mounts exist: from the host
		// file of a mount at their exact path, else inside the root; one
		// below a mount point (a directory mount) is not there yet.
		if w.Rebuild || h.ContainerSpec != "" || mountPoints.hidesLdcache() ||
			slices.ContainsFunc(h.Libs, func(l string) bool { return mountPoints.under(l, false) }) {
			return false, false
		}
		for _, d := range h.Folders {
			if !slices.Contains(w.LdconfigDirs, d) {
				w.LdconfigDirs = append(w.LdconfigDirs, d)
			}
		}
		for _, l := range h.Libs {
			if !slices.Contains(w.Libs, l) {
				w.Libs = append(w.Libs, l)
			}
		}
	case hookargs.EnableCudaCompat:
		// It reads the image's compat directory and writes ld.so.conf.d
		// and ld.so.cache: none may be hidden by a mount.
		if dir := h.Dir(); h.ContainerSpec != "" || !path.IsAbs(dir) || mountPoints.hides(dir) || mountPoints.hidesLdcache() {
			return false, false
		}
		w.Compat = append(w.Compat, h)
	case hookargs.DisableDeviceNodeModification:
		if h.ContainerSpec != "" {
			return false, false
		}
		if o.KeepInContainer {
			if !o.AfterCreate || plan.Overlaps([]string{rootfs.ContainerProcDriver + "/params"}, o.Masked) {
				return true, true
			}
			if w.MaskParams && w.ParamsHostDir != h.HostDir {
				return false, false // two masks from different hosts' dirs: left to the hooks
			}
			w.MaskParams, w.ParamsHostDir = true, h.HostDir
		}
	case hookargs.UpdateApplicationProfile:
		// Written from config.json's device nodes: only when they are the
		// container's /dev, and the profile's directory is the image's.
		if h.ContainerSpec != "" || !o.DevicesKnown || mountPoints.hides(appprofile.Dir) {
			return false, false
		}
		w.AppProfile = true
	case hookargs.Noop:
	default:
		return false, false
	}
	w.Hooks++
	return false, true
}

// devLinks reports whether every link lies below /dev.
func devLinks(links []hookargs.Link) bool {
	return len(links) > 0 && !slices.ContainsFunc(links, func(l hookargs.Link) bool {
		return !strings.HasPrefix(path.Clean("/"+l.Path), "/dev/")
	})
}

func linkPaths(links []hookargs.Link) []string {
	paths := make([]string, len(links))
	for i, l := range links {
		paths[i] = l.Path
	}
	return paths
}

// mountSet is a set of container mount points, cleaned.
type mountSet map[string]bool

func newMountSet(mountPoints []string) mountSet {
	s := make(mountSet, len(mountPoints))
	for _, m := range mountPoints {
		s[path.Clean("/"+m)] = true
	}
	return s
}

// under reports whether the container path p is below one of the mount
// points, or (with orAt) one of them: p and each of its parent directories
// are looked up.
func (s mountSet) under(p string, orAt bool) bool {
	p = path.Clean("/" + p)
	if orAt && s[p] {
		return true
	}
	for p != "/" {
		p = path.Dir(p)
		if s[p] {
			return true
		}
	}
	return false
}

// MountsHide reports whether one of the container mount points mounts
// lies at or above the container directory dir, or below it: what the
// image has in dir is then not what the container sees (the CUDA compat
// directory, for one).
func MountsHide(mounts []string, dir string) bool { return newMountSet(mounts).hides(dir) }

// hidesLdcache reports whether a mount covers what an ld.so.cache update
// writes: /etc/ld.so.cache, /etc/ld.so.conf and the ld.so.conf.d drop-ins.
func (s mountSet) hidesLdcache() bool {
	return s.under("/etc/ld.so.cache", true) || s.under("/etc/ld.so.conf.d/x", true) || s.under("/etc/ld.so.conf", true)
}

// hides is MountsHide for the set.
func (s mountSet) hides(dir string) bool { return s.under(dir, true) || s.below(dir) }

// below reports whether one of the mount points lies below the container
// directory dir.
func (s mountSet) below(dir string) bool {
	prefix := strings.TrimSuffix(path.Clean("/"+dir), "/") + "/"
	for m := range s {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}
