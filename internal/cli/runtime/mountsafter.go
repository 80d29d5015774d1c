package runtime

import (
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/aftercreate"
	"github.com/nctk/nctk/internal/mountsrc"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// mountsAfterCreate picks the bind mounts of p (its mounts, then its CDI
// edits' mounts) that the runtime makes itself in the created container
// (aftercreate) instead of leaving them to the low-level runtime, which
// spends several times more on a mount (runc resolves each destination's
// components again and again: about 0.2 ms a mount against 0.03 here,
// docs/benchmarks.md). It returns them in the order the low-level runtime
// would have made them (the plan's in its order, then the CDI edits' as
// the CDI library sorts them), and their destinations (for
// ocispec.HookConfig.MountsAfterCreate) with what each mount point must be;
// none unless every condition below holds, so that the container sees what
// the low-level runtime would have given it:
//
//   - the create is one whose container is set up afterwards (the engine
//     asked for its pid) and the container has no user namespace (mounts
//     are made in the namespace the low-level runtime makes them in), and
//     no mount point turned out to be a symlink in the image (MountsStay);
//   - no hook runs during the create (createHooks, less Docker's network
//     setup hook, which reads no file of the image): a hook, the host's
//     ldconfig among them, may read the mounted files;
//   - per mount: a bind mount of an absolute host path (that exists) with
//     options rootfs knows, outside /dev, /proc and /sys, at no path that one of
//     the spec's mounts (not the applied edits' own, mode.EditsMounts), masked
//     or read-only paths, or a mount left to the low-level runtime is at,
//     above or below.
func mountsAfterCreate(spec *specs.Spec, p *plan.Plan, masked []string, createHooks []specs.Hook, mode injectMode) ([]aftercreate.Mount, []mountPoint) {
	if !mode.AfterCreate || mode.MountsStay || hasUserNS(spec) ||
		slices.ContainsFunc(createHooks, func(h specs.Hook) bool { return !networkHook(h) }) {
		return nil, nil
	}
	var cands []aftercreate.Mount
	var staying []string
	for _, m := range p.Mounts {
		cands = append(cands, aftercreate.Mount{Source: m.Source, Destination: path.Clean("/" + m.Destination), Kind: mountsrc.KindOf(m.Kind), Options: m.Options})
	}
	if p.CDI != nil {
		var edits []aftercreate.Mount
		for _, m := range p.CDI.Mounts {
			if m == nil {
				continue
			}
			bind := m.Type == "bind" || m.Type == "" && slices.ContainsFunc(m.Options, func(o string) bool { return o == "bind" || o == "rbind" })
			if !bind {
				staying = append(staying, path.Clean("/"+m.ContainerPath))
				continue
			}
			edits = append(edits, aftercreate.Mount{Source: m.HostPath, Destination: path.Clean("/" + m.ContainerPath), Kind: rootfs.KindAny, Options: m.Options})
		}
		// The CDI library sorts the mounts it adds by depth, parents first.
		slices.SortStableFunc(edits, func(a, b aftercreate.Mount) int {
			return strings.Count(a.Destination, "/") - strings.Count(b.Destination, "/")
		})
		cands = append(cands, edits...)
	}
	for _, m := range spec.Mounts {
		if d := path.Clean("/" + m.Destination); !slices.Contains(mode.EditsMounts, d) {
			staying = append(staying, d)
		}
	}
	for _, m := range masked {
		staying = append(staying, path.Clean("/"+m))
	}
	ok := make([]bool, len(cands))
	dir := make([]bool, len(cands))
	for i, m := range cands {
		_, err := rootfs.ParseMountOptions(m.Options)
		ok[i] = err == nil && m.Kind != 0 && path.IsAbs(m.Source) && m.Destination != "/" &&
			!plan.OverlapsClean(m.Destination, []string{"/dev", "/proc", "/sys"})
		dir[i] = m.Kind == rootfs.KindDir
		if ok[i] && m.Kind == rootfs.KindAny {
			// What the mount point must be: a CDI spec does not say.
			// A source that cannot be stat'ed is the low-level
			// runtime's to report.
			var st unix.Stat_t
			ok[i] = unix.Stat(m.Source, &st) == nil
			dir[i] = st.Mode&unix.S_IFMT == unix.S_IFDIR
		}
		if !ok[i] {
			staying = append(staying, m.Destination)
		}
	}
	// A mount that stays pins every candidate it overlaps, which then stays
	// too: until nothing changes.
	for changed := true; changed; {
		changed = false
		for i, m := range cands {
			if ok[i] && plan.OverlapsClean(m.Destination, staying) {
				ok[i], changed = false, true
				staying = append(staying, m.Destination)
			}
		}
	}
	var after []aftercreate.Mount
	var points []mountPoint
	for i, m := range cands {
		if ok[i] {
			after = append(after, m)
			points = append(points, mountPoint{Path: m.Destination, Dir: dir[i]})
		}
	}
	return after, points
}

// mountPoint is where a mount made after the create goes: made in the
// image before the create (rootfs.Root.MountPoint), so that the root may be
// read-only by then and a symlink there, which the low-level runtime would
// follow, is found before anything is decided.
type mountPoint struct {
	Path string
	Dir  bool
}

// mountPaths are the points' paths.
func mountPaths(points []mountPoint) []string {
	out := make([]string, len(points))
	for i, m := range points {
		out[i] = m.Path
	}
	return out
}

// hasUserNS reports whether the container gets a user namespace.
func hasUserNS(spec *specs.Spec) bool {
	return spec.Linux != nil && slices.ContainsFunc(spec.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace })
}

// networkHook reports whether h is Docker's network setup hook (dockerd
// run as libnetwork-setkey, with -exec-root, the container's ID and the
// network controller's), which Docker before 28 adds to every container it
// creates; it configures the container's network namespace and reads no
// file of the image.
func networkHook(h specs.Hook) bool {
	return len(h.Args) > 0 && h.Args[0] == "libnetwork-setkey"
}
