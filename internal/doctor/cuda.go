package doctor

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/ldcache"
)

// imageFile is a file of the container image: its path inside the image
// and its host path.
type imageFile struct {
	path, host string
}

// resolve returns the host path of the image path p, resolved inside the
// rootfs.
func (b *bundleState) resolve(p string) (string, bool) {
	h, err := securejoin.SecureJoin(b.rootfs, p)
	if err != nil {
		return "", false
	}
	return h, true
}

// realName follows the image path p's symlinks inside the rootfs and
// returns the final file's image path.
func (b *bundleState) realName(p string) (string, bool) {
	h, ok := b.resolve(p)
	if !ok {
		return "", false
	}
	if fi, err := os.Stat(h); err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	rel, err := filepath.Rel(b.rootfs, h)
	if err != nil {
		return "", false
	}
	return "/" + filepath.ToSlash(rel), true
}

// cudaRuntimes returns the image's libcudart files (image paths of the
// real files): those its ld.so.cache lists, and those in the CUDA
// toolkit's directories.
func (b *bundleState) cudaRuntimes() []string {
	var cands []string
	if h, ok := b.resolve("/etc/ld.so.cache"); ok {
		if c, err := ldcache.Load(h); err == nil {
			for _, e := range c.Lookup(ldcache.Class64, "libcudart.so") {
				cands = append(cands, e.Value)
			}
		}
	}
	for _, g := range []string{"/usr/local/cuda*/lib64/libcudart.so*", "/usr/local/cuda*/targets/*/lib/libcudart.so*"} {
		if m, err := filepath.Glob(filepath.Join(b.rootfs, g)); err == nil {
			for _, p := range m {
				cands = append(cands, "/"+filepath.ToSlash(strings.TrimPrefix(p, b.rootfs+"/")))
			}
		}
	}
	var out []string
	for _, c := range cands {
		if r, ok := b.realName(c); ok && !slices.Contains(out, r) && cudartVersion(r) != "" {
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
func (b *bundleState) compatLibcuda() string {
	m, _ := filepath.Glob(filepath.Join(b.rootfs, "/usr/local/cuda*/compat/libcuda.so.*.*"))
	for _, p := range m {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return "/" + filepath.ToSlash(strings.TrimPrefix(p, b.rootfs+"/"))
		}
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

// cudaBinaries returns the image's files that carry GPU code: the
// container's program (args[0] on its PATH) and the ELF files directly in
// /usr/local/bin, /usr/local/lib, /app and the working directory.
func (b *bundleState) cudaBinaries() []imageFile {
	var cands []string
	s := b.doc.Spec()
	if s.Process != nil && len(s.Process.Args) > 0 {
		prog := s.Process.Args[0]
		if path.IsAbs(prog) {
			cands = append(cands, prog)
		} else if !strings.Contains(prog, "/") {
			pathVar, _ := b.env("PATH")
			for _, d := range filepath.SplitList(pathVar) {
				cands = append(cands, path.Join(d, prog))
			}
		}
	}
	dirs := []string{"/usr/local/bin", "/usr/local/lib", "/app"}
	if s.Process != nil && s.Process.Cwd != "" && s.Process.Cwd != "/" {
		dirs = append(dirs, s.Process.Cwd)
	}
	for _, d := range dirs {
		h, ok := b.resolve(d)
		if !ok {
			continue
		}
		entries, _ := os.ReadDir(h)
		for _, e := range entries {
			cands = append(cands, path.Join(d, e.Name()))
		}
	}
	var out []imageFile
	seen := map[string]bool{}
	for _, c := range cands {
		r, ok := b.realName(c)
		if !ok || seen[r] {
			continue
		}
		seen[r] = true
		h, _ := b.resolve(r)
		out = append(out, imageFile{path: r, host: h})
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
		f       imageFile
		entries []FatbinEntry
	}
	var bins []bin
	var out []Finding
	for _, f := range b.cudaBinaries() {
		entries, err := elfFatbin(f.host)
		switch {
		case errors.Is(err, errNoFatbin):
			continue
		case err != nil:
			out = append(out, Finding{Severity: Warning, Problem: fmt.Sprintf("cannot read the GPU code of %s: %v", f.path, err),
				Breaks: "whether it runs on these GPUs is unknown", Fix: "check the binary: cuobjdump --list-elf --list-ptx " + f.path,
				Values: map[string]string{"file": f.path}})
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
			names = append(names, b.f.path+" ("+archList(b.entries)+")")
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
				out = append(out, Finding{Severity: OK, Problem: fmt.Sprintf("%s has code for compute capability %s (%s)", bn.f.path, cc, archList(bn.entries))})
				continue
			}
			sm := strings.ReplaceAll(cc, ".", "")
			out = append(out, Finding{Severity: Error,
				Problem: fmt.Sprintf("%s has no GPU code for compute capability %s: it carries %s", bn.f.path, cc, archList(bn.entries)),
				Breaks:  `CUDA error 209 "no kernel image is available for execution on the device"`,
				Fix:     fmt.Sprintf("rebuild with -gencode arch=compute_%s,code=sm_%s (or add PTX: code=compute_%s), or use an image built for this GPU", sm, sm, sm),
				Values:  map[string]string{"file": bn.f.path, "gpu_arch": cc, "image_archs": archList(bn.entries)}})
		}
	}
	return out
}
