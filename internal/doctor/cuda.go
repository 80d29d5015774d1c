package doctor

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/ldcache"
)

// cudaRuntimes returns the image's libcudart files (image paths of the
// real files): those its ld.so.cache lists, and those in the CUDA
// toolkit's directories.
func (c *containerState) cudaRuntimes() []string {
	var cands []string
	if data, err := readAll(c.files, "/etc/ld.so.cache", ldcache.MaxSize); err == nil {
		if lc, err := ldcache.Parse(data); err == nil {
			for _, e := range lc.Lookup(ldcache.Class64, "libcudart.so") {
				cands = append(cands, e.Value)
			}
		}
	}
	for _, g := range []string{"/usr/local/cuda*/lib64/libcudart.so*", "/usr/local/cuda*/targets/*/lib/libcudart.so*"} {
		cands = append(cands, glob(c.files, g, false)...)
	}
	var out []string
	for _, cand := range cands {
		if r, regular, ok := c.files.stat(cand); ok && regular && !slices.Contains(out, r) && cudartVersion(r) != "" {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// cudartVersion returns "12.4" for .../libcudart.so.12.4.127, "" when the
// name carries no major.minor.
func cudartVersion(p string) string {
	v, ok := strings.CutPrefix(path.Base(p), "libcudart.so.")
	if !ok {
		return ""
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return ""
	}
	for _, s := range parts[:2] {
		if _, err := strconv.Atoi(s); err != nil {
			return ""
		}
	}
	return parts[0] + "." + parts[1]
}

// versionParts splits "12.4" into numbers.
func versionParts(v string) (major, minor int, ok bool) {
	a, b, found := strings.Cut(v, ".")
	M, err1 := strconv.Atoi(a)
	m, err2 := strconv.Atoi(b)
	return M, m, found && err1 == nil && err2 == nil
}

// compatLibcuda returns the image's CUDA forward-compatibility libcuda
// (/usr/local/cuda*/compat/libcuda.so.<driver>), image path, or "".
func (c *containerState) compatLibcuda() string {
	if m := glob(c.files, "/usr/local/cuda*/compat/libcuda.so.*.*", true); len(m) > 0 {
		return m[0]
	}
	return ""
}

// checkCUDARuntime: the image's CUDA runtime (libcudart) is no newer than
// the CUDA version the host driver supports, unless forward-compatibility
// libraries make up for it.
func checkCUDARuntime(h *hostState) []Finding {
	b := h.container()
	if b == nil || b.err != nil || b.reqErr != nil || b.req.Void {
		return nil
	}
	rts := b.cudaRuntimes()
	if len(rts) == 0 {
		return nil
	}
	d, err := h.cudaVersion()
	if err != nil || d.CUDAVersion == "" {
		return []Finding{{Severity: OK, Problem: fmt.Sprintf("image CUDA runtime %s; the host driver's CUDA version is unknown", cudartVersion(rts[0]))}}
	}
	hM, hm, ok := versionParts(d.CUDAVersion)
	if !ok {
		return nil
	}
	var out []Finding
	compat := b.compatLibcuda()
	for _, rt := range rts {
		v := cudartVersion(rt)
		M, m, _ := versionParts(v)
		vals := map[string]string{"cudart": rt, "image_cuda": v, "host_cuda": d.CUDAVersion, "host_driver": d.Version}
		switch {
		case M < hM || (M == hM && m <= hm):
			out = append(out, Finding{Severity: OK, Problem: fmt.Sprintf("image CUDA runtime %s runs on the host driver (CUDA %s)", v, d.CUDAVersion)})
		case compat != "":
			vals["compat"] = compat
			out = append(out, Finding{Severity: Warning,
				Problem: fmt.Sprintf("image CUDA runtime %s is newer than the host driver's CUDA %s; it relies on the forward-compatibility libcuda %s", v, d.CUDAVersion, compat),
				Breaks:  `forward compatibility works on data-center GPUs only: elsewhere CUDA error 804 "forward compatibility was attempted on non supported HW"`,
				Fix:     "update the host driver to one supporting CUDA " + v + ", or use an image built for CUDA " + d.CUDAVersion,
				Values:  vals})
		case M > hM:
			out = append(out, Finding{Severity: Error,
				Problem: fmt.Sprintf("image CUDA runtime %s (%s) needs a newer driver than %s (CUDA %s)", v, rt, d.Version, d.CUDAVersion),
				Breaks:  `CUDA error 35 "CUDA driver version is insufficient for CUDA runtime version"`,
				Fix:     "update the host driver to one supporting CUDA " + v + ", or use an image built for CUDA " + d.CUDAVersion + " or older",
				Values:  vals})
		default:
			out = append(out, Finding{Severity: Warning,
				Problem: fmt.Sprintf("image CUDA runtime %s is newer than the host driver's CUDA %s (minor version compatibility)", v, d.CUDAVersion),
				Breaks:  `most programs run, but PTX JIT fails: CUDA error 222 "the provided PTX was compiled with an unsupported toolchain"; new APIs return CUDA error 35/801`,
				Fix:     "update the host driver to one supporting CUDA " + v + ", or use an image built for CUDA " + d.CUDAVersion,
				Values:  vals})
		}
	}
	return out
}

// cudaBinaries returns the image paths of the image's files that may
// carry GPU code: the container's program (args[0] on its PATH) and the
// regular files directly in /usr/local/bin, /usr/local/lib, /app and the
// working directory (links followed).
func (c *containerState) cudaBinaries() []string {
	var cands []string
	if len(c.args) > 0 {
		prog := c.args[0]
		if path.IsAbs(prog) {
			cands = append(cands, prog)
		} else if !strings.Contains(prog, "/") {
			pathVar, _ := c.getenv("PATH")
			for _, d := range filepath.SplitList(pathVar) {
				if path.IsAbs(d) {
					cands = append(cands, path.Join(d, prog))
				}
			}
		}
	}
	dirs := []string{"/usr/local/bin", "/usr/local/lib", "/app"}
	if c.cwd != "" && c.cwd != "/" && path.IsAbs(c.cwd) {
		dirs = append(dirs, c.cwd)
	}
	for _, d := range dirs {
		for _, e := range c.files.list(d) {
			cands = append(cands, path.Join(d, e.name))
		}
	}
	var out []string
	for _, cand := range cands {
		r, regular, ok := c.files.stat(cand)
		if !ok || !regular || slices.Contains(out, r) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// gpuArchs returns the compute capabilities to check code for: the
// --gpu-arch values, else the host GPUs' (from the driver probe); empty
// when unknown.
func (h *hostState) gpuArchs() []string {
	if len(h.o.GPUArchs) > 0 {
		return h.o.GPUArchs
	}
	d, err := h.driver()
	if err != nil || len(d.GPUs) == 0 {
		return nil
	}
	o := h.discoverOptions()
	o.ProbeCUDAOnly = false
	discover.Probe(d, o)
	var out []string
	for _, g := range d.GPUs {
		if g.Arch != "" && !slices.Contains(out, g.Arch) {
			out = append(out, g.Arch)
		}
	}
	return out
}

// checkKernelImages: the image's CUDA binaries carry code for the GPUs'
// compute capability: SASS for it, or PTX the driver can JIT compile.
func checkKernelImages(h *hostState) []Finding {
	b := h.container()
	if b == nil || b.err != nil || b.reqErr != nil || b.req.Void {
		return nil
	}
	type bin struct {
		path    string
		entries []FatbinEntry
	}
	var bins []bin
	var out []Finding
	for _, f := range b.cudaBinaries() {
		entries, err := fileFatbin(b.files, f)
		switch {
		case errors.Is(err, errNoFatbin):
			continue
		case err != nil:
			out = append(out, Finding{Severity: Warning, Problem: fmt.Sprintf("cannot read the GPU code of %s: %s", f, echo.Error(err)),
				Breaks: "whether it runs on these GPUs is unknown", Fix: "check the binary: cuobjdump --list-elf --list-ptx " + f,
				Values: map[string]string{"file": f}})
			continue
		}
		if len(entries) > 0 {
			bins = append(bins, bin{f, entries})
		}
	}
	if len(bins) == 0 {
		return out
	}
	archs := h.gpuArchs()
	if len(archs) == 0 {
		var names []string
		for _, b := range bins {
			names = append(names, b.path+" ("+archList(b.entries)+")")
		}
		return append(out, Finding{Severity: OK, Problem: "GPU code found in " + abbreviate(names, 4) +
			"; the GPUs' compute capability is unknown (no GPU reachable: pass --gpu-arch to check against one)"})
	}
	for _, bn := range bins {
		for _, cc := range archs {
			ok, err := runsOn(bn.entries, cc)
			if err != nil {
				return append(out, Finding{Severity: Warning, Problem: err.Error()})
			}
			if ok {
				out = append(out, Finding{Severity: OK, Problem: fmt.Sprintf("%s has code for compute capability %s (%s)", bn.path, cc, archList(bn.entries))})
				continue
			}
			sm := strings.ReplaceAll(cc, ".", "")
			out = append(out, Finding{Severity: Error,
				Problem: fmt.Sprintf("%s has no GPU code for compute capability %s: it carries %s", bn.path, cc, archList(bn.entries)),
				Breaks:  `CUDA error 209 "no kernel image is available for execution on the device"`,
				Fix:     fmt.Sprintf("rebuild with -gencode arch=compute_%s,code=sm_%s (or add PTX: code=compute_%s), or use an image built for this GPU", sm, sm, sm),
				Values:  map[string]string{"file": bn.path, "gpu_arch": cc, "image_archs": archList(bn.entries)}})
		}
	}
	return out
}
