package doctor

import (
	"fmt"
	"os"
	"slices"
	"strings"

	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"

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

// checkCDIStale: every loaded spec matches the live system, by the check
// `nvidia-ctk cdi validate` makes (cdispec.CheckStale): the device nodes
// (and their numbers), mounted files and hooks it names exist, its
// libraries are the live driver's version, and its GPUs are the live ones.
// Paths are read below the host root; hooks that are not executable get a
// finding of their own.
func checkCDIStale(h *hostState) []Finding {
	c, err := h.cdiCache()
	if err != nil {
		return nil
	}
	drv, _ := h.driver() // a failed discovery has findings of its own
	var out []Finding
	for _, v := range c.ListVendors() {
		for _, s := range c.GetVendorSpecs(v) {
			st := cdispec.CheckStale(s.Spec, s.GetPath(), cdispec.Live{Root: h.root, Driver: drv})
			if st == nil {
				continue
			}
			var other []string
			for _, p := range st.Problems {
				if !strings.HasPrefix(p, "hook ") || !strings.HasSuffix(p, " is not executable") {
					other = append(other, p)
				}
			}
			if len(other) > 0 {
				out = append(out, Finding{Severity: Error,
					Problem: fmt.Sprintf("CDI spec %s is stale: %s", s.GetPath(), abbreviate(other, 4)),
					Breaks:  `containers given its devices fail to start: "unresolvable CDI devices" for GPUs it lacks, "error running createContainer hook" or "no such file or directory" for the missing mounts/nodes (typically after a driver upgrade or a GPU change)`,
					Fix:     st.Fix,
					Values:  map[string]string{"spec": s.GetPath(), "missing": strings.Join(st.Missing, ","), "problems": strings.Join(other, "; ")}})
			}
			if len(st.NotExecutable) > 0 {
				out = append(out, Finding{Severity: Error,
					Problem: fmt.Sprintf("CDI spec %s names hooks that are not executable: %s", s.GetPath(), strings.Join(st.NotExecutable, ", ")),
					Breaks:  `containers given its devices fail: "error running createContainer hook: permission denied"`,
					Fix:     fmt.Sprintf("sudo chmod 0755 %s (or regenerate: %s)", strings.Join(st.NotExecutable, " "), st.Fix),
					Values:  map[string]string{"spec": s.GetPath(), "hooks": strings.Join(st.NotExecutable, ",")}})
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
