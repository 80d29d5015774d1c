package cdispec

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/discover"
)

// StaleError says how a CDI spec file no longer matches the live system:
// what `nvidia-ctk cdi validate`, the doctor's cdi.stale check and a failed
// CDI resolution in the runtime report.
type StaleError struct {
	// Spec is the spec file.
	Spec string
	// Problems say what differs, one line each (the first names up to
	// five of the missing paths).
	Problems []string
	// Missing are all the paths the spec names that do not exist.
	Missing []string
	// NotExecutable are hook paths that exist but cannot be run.
	NotExecutable []string
	// Fix is the command that writes a fresh spec in its place.
	Fix string
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("CDI spec %s is stale: %s; run: %s", e.Spec, strings.Join(e.Problems, "; "), e.Fix)
}

// Live is the system a spec is compared with.
type Live struct {
	// Root is the host root the spec's paths are read below ("" or "/":
	// as the spec names them). A path already below Root is kept.
	Root string
	// Driver is the discovered driver (nil when discovery failed, with
	// DriverErr saying why); the driver checks are skipped when both are
	// nil.
	Driver    *discover.Driver
	DriverErr error
	// DriverRoot, when not "" or "/", is added to the fix command as
	// --driver-root.
	DriverRoot string
}

// hostPath maps a path the spec names to the file to look at.
func (l Live) hostPath(p string) string {
	if l.Root == "" || l.Root == "/" || strings.HasPrefix(p, l.Root+"/") {
		return p
	}
	return filepath.Join(l.Root, p)
}

// driverVersionRE matches an NVIDIA driver version as library file names
// carry it (535.261.03, 390.157).
var driverVersionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`) })

// CheckStale compares spec (read from file) with the live system and
// returns nil when it matches, else what differs:
//   - files: every device node, mount source and hook it names exists, and
//     hooks are executable;
//   - device numbers: a host node that the spec gives a major/minor for is a
//     character device with those numbers;
//   - driver version: the version in its libcuda/libnvidia-ml file names
//     is the live driver's;
//   - GPUs: each device named by index, type-index or GPU UUID is a live GPU
//     (not in MIG mode) with the node the spec gives it, each MIG device
//     named by index exists, and every live GPU not in MIG mode has a device
//     in the spec.
//
// The driver and GPU checks apply to NVIDIA kinds (vendor *nvidia.com) only.
func CheckStale(spec *cdi.Spec, file string, live Live) *StaleError {
	e := &StaleError{Spec: file, Fix: fixCommand(spec, file, live.DriverRoot)}
	problem := func(format string, args ...any) {
		if p := fmt.Sprintf(format, args...); !slices.Contains(e.Problems, p) {
			e.Problems = append(e.Problems, p)
		}
	}
	missing := func(p string) {
		if !slices.Contains(e.Missing, p) {
			e.Missing = append(e.Missing, p)
		}
	}
	checkEdits := func(ed *cdi.ContainerEdits) {
		for _, n := range ed.DeviceNodes {
			p := n.HostPath
			if p == "" {
				p = n.Path
			}
			fi, err := os.Stat(live.hostPath(p))
			if err != nil {
				missing(p)
				continue
			}
			if n.Major == 0 && n.Minor == 0 {
				continue // numbers left to the engine
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if fi.Mode()&os.ModeCharDevice == 0 || !ok {
				problem("%s is not a character device (the spec gives %d:%d)", p, n.Major, n.Minor)
				continue
			}
			if maj, mnr := int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev)); maj != n.Major || mnr != n.Minor {
				problem("%s is device %d:%d, the spec gives %d:%d", p, maj, mnr, n.Major, n.Minor)
			}
		}
		for _, m := range ed.Mounts {
			if _, err := os.Stat(live.hostPath(m.HostPath)); err != nil {
				missing(m.HostPath)
			}
		}
		for _, h := range ed.Hooks {
			fi, err := os.Stat(live.hostPath(h.Path))
			switch {
			case err != nil:
				missing(h.Path)
			case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
				if !slices.Contains(e.NotExecutable, h.Path) {
					e.NotExecutable = append(e.NotExecutable, h.Path)
					problem("hook %s is not executable", h.Path)
				}
			}
		}
	}
	checkEdits(&spec.ContainerEdits)
	for i := range spec.Devices {
		checkEdits(&spec.Devices[i].ContainerEdits)
	}
	vendor, _, _ := strings.Cut(spec.Kind, "/")
	if vendor == "nvidia.com" || strings.HasSuffix(vendor, ".nvidia.com") {
		checkDriver(spec, live, problem)
	}
	if len(e.Missing) > 0 {
		e.Problems = slices.Insert(e.Problems, 0, missingLine(e.Missing))
	}
	if len(e.Problems) == 0 {
		return nil
	}
	return e
}

// maxNamed is how many missing paths a problem line names.
const maxNamed = 5

// missingLine says which paths do not exist, naming the first maxNamed.
func missingLine(paths []string) string {
	if len(paths) == 1 {
		return paths[0] + " does not exist"
	}
	named := strings.Join(paths[:min(len(paths), maxNamed)], ", ")
	if len(paths) > maxNamed {
		named += fmt.Sprintf(" and %d more", len(paths)-maxNamed)
	}
	return fmt.Sprintf("%d paths it names do not exist: %s", len(paths), named)
}

// checkDriver compares the driver version and the GPUs of an NVIDIA spec
// with the discovered driver.
func checkDriver(spec *cdi.Spec, live Live, problem func(string, ...any)) {
	d := live.Driver
	if d == nil {
		if live.DriverErr != nil {
			problem("no live driver to compare it with: %v", live.DriverErr)
		}
		return
	}
	if v := specDriverVersion(spec); v != "" {
		cur := d.LibraryVersion
		if cur == "" {
			cur = d.Version
		}
		if cur != "" && cur != v {
			problem("it mounts driver %s libraries, the live driver is %s", v, cur)
		}
	}

	byUUID := map[string]*discover.GPU{}
	byIndex := map[int]*discover.GPU{}
	for i := range d.GPUs {
		g := &d.GPUs[i]
		byUUID[g.UUID] = g
		byIndex[g.Index] = g
	}
	covered := map[int]bool{} // live GPU minors the spec's devices give
	hasGPUs := false
	for i := range spec.Devices {
		dev := &spec.Devices[i]
		minors := gpuMinors(&dev.ContainerEdits)
		for _, m := range minors {
			covered[m] = true
		}
		if len(minors) > 0 {
			hasGPUs = true
		}
		if dev.Name == AllDevice {
			continue
		}
		name := dev.Name
		var g *discover.GPU
		switch {
		case strings.HasPrefix(name, "GPU-"):
			if g = byUUID[name]; g == nil {
				problem("GPU %s is gone", name)
				continue
			}
		case isIndex(strings.TrimPrefix(name, "gpu")):
			idx, _ := strconv.Atoi(strings.TrimPrefix(name, "gpu"))
			if g = byIndex[idx]; g == nil {
				problem("GPU %d is gone (device %q)", idx, name)
				continue
			}
		case strings.Contains(name, ":"):
			gi, mi, _ := strings.Cut(strings.TrimPrefix(name, "mig"), ":")
			if !isIndex(gi) || !isIndex(mi) {
				continue
			}
			pi, _ := strconv.Atoi(gi)
			mIdx, _ := strconv.Atoi(mi)
			p := byIndex[pi]
			if p == nil || !p.MIGEnabled || !slices.ContainsFunc(p.MIGDevices, func(m discover.MIGDevice) bool { return m.Index == mIdx }) {
				problem("MIG device %s is gone", name)
			}
			continue
		default:
			continue
		}
		if g.MIGEnabled {
			problem("GPU %d (%s) is in MIG mode now (device %q)", g.Index, g.UUID, name)
		} else if len(minors) > 0 && !slices.Contains(minors, g.Minor) {
			problem("GPU %d (%s) is /dev/nvidia%d now, device %q gives /dev/nvidia%d", g.Index, g.UUID, g.Minor, name, minors[0])
		}
	}
	if !hasGPUs {
		return
	}
	for _, g := range d.GPUs {
		if !g.MIGEnabled && !covered[g.Minor] {
			problem("GPU %d (%s, /dev/nvidia%d) was added: no device of the spec gives it", g.Index, g.UUID, g.Minor)
		}
	}
}

// gpuMinors are the minors of the GPU nodes (/dev/nvidia<N>) edits give.
func gpuMinors(ed *cdi.ContainerEdits) []int {
	var out []int
	for _, n := range ed.DeviceNodes {
		if rest, ok := strings.CutPrefix(path.Base(n.Path), "nvidia"); ok && isIndex(rest) {
			m, _ := strconv.Atoi(rest)
			out = append(out, m)
		}
	}
	return out
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// specDriverVersion is the driver version in the file names of the
// libcuda or libnvidia-ml the spec mounts, "" if none carries one.
func specDriverVersion(spec *cdi.Spec) string {
	var found string
	visit := func(ed *cdi.ContainerEdits) {
		for _, m := range ed.Mounts {
			b := path.Base(m.HostPath)
			for _, prefix := range []string{"libcuda.so.", "libnvidia-ml.so."} {
				if v, ok := strings.CutPrefix(b, prefix); ok && found == "" && driverVersionRE().MatchString(v) {
					found = v
				}
			}
		}
	}
	visit(&spec.ContainerEdits)
	for i := range spec.Devices {
		visit(&spec.Devices[i].ContainerEdits)
	}
	return found
}

// fixCommand is the nvidia-ctk cdi generate command line that rewrites
// file for the spec's kind.
func fixCommand(spec *cdi.Spec, file, driverRoot string) string {
	cmd := "sudo nvidia-ctk cdi generate --output=" + file
	if vendor, class, _ := strings.Cut(spec.Kind, "/"); spec.Kind != DefaultVendor+"/"+DefaultClass {
		cmd += " --vendor=" + vendor + " --class=" + class
	}
	if driverRoot != "" && driverRoot != "/" {
		cmd += " --driver-root=" + driverRoot
	}
	return cmd
}

// SpecRoots infers the driver root and dev root a spec was generated for
// from its host paths: a mount whose host path ends in its container path
// gives the driver root (the prefix), a device node whose host path ends in
// its path the dev root. "/" when the paths are the same or nothing tells.
func SpecRoots(spec *cdi.Spec) (driverRoot, devRoot string) {
	driverRoot, devRoot = "/", ""
	visit := func(ed *cdi.ContainerEdits) {
		for _, m := range ed.Mounts {
			if r, ok := strings.CutSuffix(m.HostPath, m.ContainerPath); ok && strings.HasPrefix(m.ContainerPath, "/usr/") && r != "" && driverRoot == "/" {
				driverRoot = r
			}
		}
		for _, n := range ed.DeviceNodes {
			if r, ok := strings.CutSuffix(n.HostPath, n.Path); ok && r != "" && devRoot == "" {
				devRoot = r
			}
		}
	}
	visit(&spec.ContainerEdits)
	for i := range spec.Devices {
		visit(&spec.Devices[i].ContainerEdits)
	}
	if devRoot == "" {
		devRoot = driverRoot
	}
	return driverRoot, devRoot
}

// StaleOptions configure StaleSpecs.
type StaleOptions struct {
	// DriverRoot and DevRoot, when set, are where the driver is
	// discovered; else each spec's own (SpecRoots).
	DriverRoot, DevRoot string
}

// StaleReport is what StaleSpecs found.
type StaleReport struct {
	// Specs are the spec files checked, in load order.
	Specs []string
	// Stale are those that differ from the live system.
	Stale []*StaleError
	// Errors are spec files that do not load, one line each.
	Errors []string
}

// StaleSpecs loads the specs of specDirs (nil means DefaultSpecDirs) and
// checks each with CheckStale against the driver discovered at its root
// (discovery runs once per root).
func StaleSpecs(specDirs []string, o StaleOptions) (StaleReport, error) {
	if len(specDirs) == 0 {
		specDirs = DefaultSpecDirs()
	}
	c, err := newCache(specDirs)
	if err != nil {
		return StaleReport{}, err
	}
	return staleIn(c, nil, o), nil
}

// staleIn checks the specs of c (only those of the given kinds when kinds
// is not nil).
func staleIn(c *pkgcdi.Cache, kinds []string, o StaleOptions) StaleReport {
	r := StaleReport{Errors: specErrors(c)}
	type found struct {
		d   *discover.Driver
		err error
	}
	drivers := map[[2]string]found{}
	vendors := c.ListVendors()
	slices.Sort(vendors)
	for _, v := range vendors {
		for _, s := range c.GetVendorSpecs(v) {
			if kinds != nil && !slices.Contains(kinds, s.Kind) {
				continue
			}
			root, dev := SpecRoots(s.Spec)
			if o.DriverRoot != "" {
				root, dev = o.DriverRoot, o.DevRoot
			}
			key := [2]string{root, dev}
			f, ok := drivers[key]
			if !ok {
				f.d, f.err = discover.Discover(discover.Options{Root: root, DevRoot: dev})
				drivers[key] = f
			}
			r.Specs = append(r.Specs, s.GetPath())
			if e := CheckStale(s.Spec, s.GetPath(), Live{Driver: f.d, DriverErr: f.err, DriverRoot: root}); e != nil {
				r.Stale = append(r.Stale, e)
			}
		}
	}
	return r
}
