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
// symlinks) is strictly below the destination of one of binds (hostBinds
// of the spec's own mounts, before p is applied).
func checkUserMounts(binds []specs.Mount, p *plan.Plan, own cdispec.OwnHooks) error {
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
		if m, ok := bindOver(binds, cp, false); ok {
			return &plan.UserMountError{Path: cp, Destination: m.Destination, Source: m.Source}
		}
	}
	return nil
}

// hostBinds are the mounts of mounts that bind a host path (isHostBind),
// their destinations cleaned.
func hostBinds(mounts []specs.Mount) []specs.Mount {
	var binds []specs.Mount
	for _, m := range mounts {
		if isHostBind(m) {
			m.Destination = path.Clean("/" + m.Destination)
			binds = append(binds, m)
		}
	}
	return binds
}

// bindOver returns the first of binds (hostBinds) whose destination is
// above the clean container path cp, or, with orAt, at it.
func bindOver(binds []specs.Mount, cp string, orAt bool) (specs.Mount, bool) {
	for _, m := range binds {
		if m.Destination == "/" || strings.HasPrefix(cp, m.Destination+"/") || orAt && m.Destination == cp {
			return m, true
		}
	}
	return specs.Mount{}, false
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

// devLinksOutsideBinds returns the links of links that none of binds
// (hostBinds) covers, and how many it left out: below a bind of the host's /dev
// (or a directory of it) a link would be made in the host's directory, where
// the host's own links already are for the container to see.
func devLinksOutsideBinds(binds []specs.Mount, links []plan.Symlink) ([]plan.Symlink, int) {
	if len(binds) == 0 {
		return links, 0
	}
	kept := make([]plan.Symlink, 0, len(links))
	for _, l := range links {
		if _, ok := bindOver(binds, path.Clean("/"+l.Link), true); !ok {
			kept = append(kept, l)
		}
	}
	return kept, len(links) - len(kept)
}

// maskedPaths are the spec's masked and read-only paths. runc applies them
// after pivot_root, so after its createContainer hooks and before the
// runtime's after-create work: work there would mount over a mask (or into
// a path made read-only), and so it stays a hook, as it was.
func maskedPaths(spec *specs.Spec) []string {
	if spec == nil || spec.Linux == nil {
		return nil
	}
	return slices.Concat(spec.Linux.MaskedPaths, spec.Linux.ReadonlyPaths)
}
