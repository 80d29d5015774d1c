package runtime

import (
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/cdispec"
	"github.com/nctk/nctk/internal/plan"
)

// checkUserMounts returns a *plan.UserMountError when one of the paths p and
// own create in the container (p's mounts, p's CDI mounts, p's and own's
// symlinks) is strictly below the destination of one of mounts that binds
// a host path. mounts are the spec's own mounts, before p is applied.
func checkUserMounts(mounts []specs.Mount, p *plan.Plan, own cdispec.OwnHooks) error {
	var binds []specs.Mount
	for _, m := range mounts {
		if isHostBind(m) {
			binds = append(binds, m)
		}
	}
	if len(binds) == 0 {
		return nil
	}
	var paths []string
	for _, m := range p.Mounts {
		paths = append(paths, m.Destination)
	}
	if p.CDI != nil {
		for _, m := range p.CDI.Mounts {
			if m != nil {
				paths = append(paths, m.ContainerPath)
			}
		}
	}
	for _, s := range p.Symlinks {
		paths = append(paths, s.Link)
	}
	for _, l := range own.Links {
		paths = append(paths, l.Path)
	}
	for _, cp := range paths {
		cp = path.Clean("/" + cp)
		for _, m := range binds {
			dst := path.Clean("/" + m.Destination)
			if dst == "/" || strings.HasPrefix(cp, dst+"/") {
				return &plan.UserMountError{Path: cp, Destination: dst, Source: m.Source}
			}
		}
	}
	return nil
}

// isHostBind reports whether m binds a host path (isBind, with an
// absolute source).
func isHostBind(m specs.Mount) bool { return path.IsAbs(m.Source) && isBind(m) }

// isBind reports whether m is a bind mount: type bind, or a bind or rbind
// option.
func isBind(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// bindsInDev reports whether spec bind-mounts something at or below /dev:
// the container's /dev then holds more than the device nodes of
// linux.devices (a host /dev, a node mounted from the host).
func bindsInDev(spec *specs.Spec) bool {
	return slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool {
		d := path.Clean("/" + m.Destination)
		return (d == "/dev" || strings.HasPrefix(d, "/dev/")) && isBind(m)
	})
}

// devLinksOutsideBinds returns the links of links that no host bind mount of
// mounts covers, and how many it left out: below a bind of the host's /dev
// (or a directory of it) a link would be made in the host's directory, where
// the host's own links already are for the container to see.
func devLinksOutsideBinds(mounts []specs.Mount, links []plan.Symlink) ([]plan.Symlink, int) {
	var binds []string
	for _, m := range mounts {
		if isHostBind(m) {
			binds = append(binds, path.Clean("/"+m.Destination))
		}
	}
	if len(binds) == 0 {
		return links, 0
	}
	kept := make([]plan.Symlink, 0, len(links))
	for _, l := range links {
		p := path.Clean("/" + l.Link)
		if !slices.ContainsFunc(binds, func(d string) bool { return d == "/" || d == p || strings.HasPrefix(p, d+"/") }) {
			kept = append(kept, l)
		}
	}
	return kept, len(links) - len(kept)
}

// masksOverlap reports whether one of the spec's masked or read-only paths
// is at, above or below one of paths. runc applies those after pivot_root,
// before the runtime's after-create work would run: that work would then
// mount over the mask (or into a path made read-only). A createContainer
// hook runs before them, and so the work stays a hook there, as it was.
func masksOverlap(spec *specs.Spec, paths []string) bool {
	return plan.Overlaps(maskedPaths(spec), paths)
}

// maskedPaths are the spec's masked and read-only paths.
func maskedPaths(spec *specs.Spec) []string {
	if spec == nil || spec.Linux == nil {
		return nil
	}
	return slices.Concat(spec.Linux.MaskedPaths, spec.Linux.ReadonlyPaths)
}
