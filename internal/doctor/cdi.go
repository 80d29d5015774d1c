package doctor

import (
	"fmt"
	"os"
	"slices"
	"strings"

	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/cdispec"
)

// cdiFix is the command that writes a fresh spec.
const cdiFix = "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"

// cdiCache loads the spec directories with the CDI library, as engines
// do, once.
func (h *hostState) cdiCache() (*pkgcdi.Cache, error) {
	if !h.cdiRead {
		h.cdiRead = true
		h.cdi, h.cdiErr = pkgcdi.NewCache(pkgcdi.WithSpecDirs(h.specDirs()...), pkgcdi.WithAutoRefresh(false))
		if h.cdiErr != nil {
			h.cdiErr = fmt.Errorf("load CDI specs: %w", h.cdiErr)
		}
	}
	return h.cdi, h.cdiErr
}

// specPath returns the host path of a path a CDI spec names: paths already
// below the host root are kept, others are taken relative to it.
func (h *hostState) specPath(p string) string {
	if h.root == "/" || strings.HasPrefix(p, h.root+"/") {
		return p
	}
	return h.host(p)
}

// checkCDISpecs: the spec files load (as the CDI library loads them, which
// is what engines do), some spec defines NVIDIA GPUs, and rootless users
// can read them.
func checkCDISpecs(h *hostState) []Finding {
	dirs := h.specDirs()
	l, err := cdispec.List(dirs)
	if err != nil {
		return []Finding{{Severity: Error, Problem: err.Error(), Fix: cdiFix}}
	}
	var out []Finding
	for _, e := range l.Errors {
		out = append(out, Finding{Severity: Error,
			Problem: "a CDI spec does not load: " + e,
			Breaks:  `every CDI request for its devices fails: "unresolvable CDI devices nvidia.com/gpu=…"; podman: "setting up CDI devices: unresolvable CDI devices"`,
			Fix:     "remove or fix the file, or regenerate it: " + cdiFix,
			Values:  map[string]string{"error": e}})
	}
	gpus := 0
	for _, d := range l.Devices {
		if strings.HasPrefix(d, "nvidia.com/gpu=") {
			gpus++
		}
	}
	if gpus == 0 {
		out = append(out, Finding{Severity: Warning,
			Problem: "no CDI spec defines nvidia.com/gpu devices in " + strings.Join(dirs, ", "),
			Breaks:  `podman run --device nvidia.com/gpu=all, docker run --device nvidia.com/gpu=all and the runtime's CDI mode fail with "unresolvable CDI devices"`,
			Fix:     cdiFix,
			Values:  map[string]string{"spec_dirs": strings.Join(dirs, ",")}})
	} else {
		out = append(out, Finding{Severity: OK, Problem: fmt.Sprintf("%d nvidia.com/gpu CDI device(s) defined", gpus)})
	}
	c, err := h.cdiCache()
	if err != nil {
		return out
	}
	for _, v := range c.ListVendors() {
		for _, s := range c.GetVendorSpecs(v) {
			if fi, err := os.Stat(s.GetPath()); err == nil && fi.Mode().Perm()&0o004 == 0 {
				out = append(out, Finding{Severity: Warning,
					Problem: fmt.Sprintf("CDI spec %s is not world-readable (mode %04o)", s.GetPath(), fi.Mode().Perm()),
					Breaks:  "rootless podman does not see its devices: \"unresolvable CDI devices\"",
					Fix:     "sudo chmod 0644 " + s.GetPath(),
					Values:  map[string]string{"spec": s.GetPath(), "mode": fmt.Sprintf("%04o", fi.Mode().Perm())}})
			}
		}
	}
	return out
}

// checkCDIStale: the device nodes, mounted files and hooks every loaded
// spec names exist on the host (the spec matches the live system).
func checkCDIStale(h *hostState) []Finding {
	c, err := h.cdiCache()
	if err != nil {
		return nil
	}
	var out []Finding
	for _, v := range c.ListVendors() {
		for _, s := range c.GetVendorSpecs(v) {
			var missing, noexec []string
			check := func(e *cdispecs.ContainerEdits) {
				for _, n := range e.DeviceNodes {
					p := n.HostPath
					if p == "" {
						p = n.Path
					}
					if hp := h.specPath(p); !exists(hp) && !slices.Contains(missing, p) {
						missing = append(missing, p)
					}
				}
				for _, m := range e.Mounts {
					if hp := h.specPath(m.HostPath); !exists(hp) && !slices.Contains(missing, m.HostPath) {
						missing = append(missing, m.HostPath)
					}
				}
				for _, hk := range e.Hooks {
					hp := h.specPath(hk.Path)
					fi, err := os.Stat(hp)
					switch {
					case err != nil:
						if !slices.Contains(missing, hk.Path) {
							missing = append(missing, hk.Path)
						}
					case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
						if !slices.Contains(noexec, hk.Path) {
							noexec = append(noexec, hk.Path)
						}
					}
				}
			}
			check(&s.ContainerEdits)
			for i := range s.Devices {
				check(&s.Devices[i].ContainerEdits)
			}
			if len(missing) > 0 {
				out = append(out, Finding{Severity: Error,
					Problem: fmt.Sprintf("CDI spec %s is stale: %d path(s) it names do not exist: %s", s.GetPath(), len(missing), abbreviate(missing, 4)),
					Breaks:  `containers given its devices fail to start: "error running createContainer hook" or "no such file or directory" for the missing mounts/nodes (typically after a driver upgrade)`,
					Fix:     fmt.Sprintf("sudo nvidia-ctk cdi generate --output=%s", s.GetPath()),
					Values:  map[string]string{"spec": s.GetPath(), "missing": strings.Join(missing, ",")}})
			}
			if len(noexec) > 0 {
				out = append(out, Finding{Severity: Error,
					Problem: fmt.Sprintf("CDI spec %s names hooks that are not executable: %s", s.GetPath(), strings.Join(noexec, ", ")),
					Breaks:  `containers given its devices fail: "error running createContainer hook: permission denied"`,
					Fix:     fmt.Sprintf("sudo chmod 0755 %s (or regenerate: sudo nvidia-ctk cdi generate --output=%s)", strings.Join(noexec, " "), s.GetPath()),
					Values:  map[string]string{"spec": s.GetPath(), "hooks": strings.Join(noexec, ",")}})
			}
		}
	}
	return out
}

// checkCDIDuplicates: a device defined by two spec files. In the same
// directory the CDI library drops it (its load error says so, see
// checkCDISpecs); across directories the later directory silently wins.
func checkCDIDuplicates(h *hostState) []Finding {
	c, err := h.cdiCache()
	if err != nil {
		return nil
	}
	files := map[string][]string{}
	for _, v := range c.ListVendors() {
		for _, s := range c.GetVendorSpecs(v) {
			for _, d := range s.Devices {
				name := s.Kind + "=" + d.Name
				files[name] = append(files[name], s.GetPath())
			}
		}
	}
	var names []string
	for n, fs := range files {
		if len(fs) > 1 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []Finding
	for _, n := range names {
		fs := files[n]
		winner := c.GetDevice(n)
		won := "none (conflict)"
		if winner != nil {
			won = winner.GetSpec().GetPath()
		}
		out = append(out, Finding{Severity: Warning,
			Problem: fmt.Sprintf("CDI device %s is defined %d times: %s", n, len(fs), strings.Join(fs, ", ")),
			Breaks:  "the container gets the definition of " + won + ", which may be the stale one (wrong driver files or GPU)",
			Fix:     "remove all but one spec, then regenerate it: " + cdiFix,
			Values:  map[string]string{"device": n, "specs": strings.Join(fs, ","), "used": won}})
	}
	return out
}
