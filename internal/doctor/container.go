package doctor

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/requirements"
)

// checkContainerRequest: the bundle's config.json loads and its NVIDIA_*
// request is valid and asks for GPUs at all.
func checkContainerRequest(h *hostState) []Finding {
	b := h.container()
	switch {
	case b == nil:
		return nil
	case b.err != nil && h.o.Bundle != "":
		return []Finding{{Severity: Error, Problem: "the bundle cannot be read: " + echo.Error(b.err),
			Breaks: "the runtime cannot start it either", Fix: "check --bundle: it must hold config.json and the root it names",
			Values: map[string]string{"bundle": h.o.Bundle}}}
	case b.err != nil:
		return []Finding{{Severity: Error, Problem: "the image cannot be read: " + echo.Error(b.err),
			Breaks: "the container cannot be judged (and if no engine has the image, it cannot be run either)",
			Fix:    "check --image and the engine holding it (--engine docker|podman|containerd, --docker-host, --containerd-namespace)",
			Values: map[string]string{"image": h.o.Image}}}
	case b.reqErr != nil:
		return []Finding{{Severity: Error, Problem: "the container's GPU request is invalid: " + echo.Error(b.reqErr),
			Breaks: "the runtime refuses to create it with this error", Fix: "correct the variable named in the image or the run command",
			Values: map[string]string{"container": b.name}}}
	case b.req.Void:
		v, set := b.getenv("NVIDIA_VISIBLE_DEVICES")
		if !set {
			v = "(unset)"
		}
		return []Finding{{Severity: Warning,
			Problem: "the container asks for no GPU: NVIDIA_VISIBLE_DEVICES=" + v,
			Breaks:  `nothing is injected: "nvidia-smi: command not found" or "no CUDA-capable device is detected" inside`,
			Fix:     "docker run --gpus all … (or --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all, or podman --device nvidia.com/gpu=all)",
			Values:  map[string]string{"NVIDIA_VISIBLE_DEVICES": v}}}
	}
	if len(b.req.Warnings) > 0 {
		return []Finding{{Severity: Warning, Problem: "part of the container's request is ignored: " + strings.Join(b.req.Warnings, "; "),
			Breaks: "the container gets less than it asks for", Fix: "see the setting named"}}
	}
	return []Finding{{Severity: OK, Problem: fmt.Sprintf("container asks for %s with capabilities %s", strings.Join(append(b.req.Devices, b.req.CDIDevices...), ","), b.req.Caps)}}
}

// checkRequirements: NVIDIA_REQUIRE_* and CUDA_VERSION hold for the host
// driver (the same evaluation the runtime makes).
func checkRequirements(h *hostState) []Finding {
	b := h.container()
	if b == nil || b.err != nil || b.reqErr != nil || b.req.Void || len(b.req.Requirements) == 0 {
		return nil
	}
	d, err := h.cudaVersion()
	if err != nil {
		return nil
	}
	facts := requirements.Facts{CUDA: d.CUDAVersion, CUDAUnknown: d.CUDAUnknown, Driver: d.Version}
	var exprs []string
	for _, r := range b.req.Requirements {
		exprs = append(exprs, r.String())
	}
	vals := map[string]string{"requirements": strings.Join(exprs, "; "), "host_cuda": d.CUDAVersion, "host_driver": d.Version}
	_, err = requirements.Evaluate(b.req.Requirements, facts)
	var ue *requirements.UnsatisfiedError
	if errors.As(err, &ue) {
		return []Finding{{Severity: Error,
			Problem: "the image's requirement does not hold on this host: " + ue.Error(),
			Breaks:  `the runtime refuses it ("requirement error: unsatisfied condition"); without the check CUDA fails with error 35 "CUDA driver version is insufficient for CUDA runtime version" or 804 "forward compatibility was attempted on non supported HW"`,
			Fix:     ue.Advice(),
			Values:  vals}}
	}
	if err != nil {
		return []Finding{{Severity: Error, Problem: "the requirements cannot be checked: " + err.Error(), Values: vals}}
	}
	return []Finding{{Severity: OK, Problem: fmt.Sprintf("requirements %s hold (host CUDA %s, driver %s)", strings.Join(exprs, "; "), d.CUDAVersion, d.Version)}}
}

// imageLibDirs are where images keep shared libraries.
func imageLibDirs() []string {
	return []string{"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
		"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/lib", "/usr/local/nvidia/lib64"}
}

// driverLibPrefixes are the driver libraries an image must not carry.
func driverLibPrefixes() []string {
	return []string{"libcuda.so.", "libnvidia-ml.so.", "libnvidia-ptxjitcompiler.so."}
}

// shippedLib is a driver library file found in the image.
type shippedLib struct {
	path, version string
	empty         bool // a zero-length placeholder, not a library
}

// driverLibsIn lists the regular driver library files of a directory of
// the container (its links followed) whose names carry a version.
func driverLibsIn(fsys containerFiles, dir string) []shippedLib {
	var out []shippedLib
	for _, e := range fsys.list(dir) {
		if !e.regular {
			continue
		}
		for _, pre := range driverLibPrefixes() {
			if v, ok := strings.CutPrefix(e.name, pre); ok && v != "1" && strings.Contains(v, ".") {
				out = append(out, shippedLib{path: path.Join(dir, e.name), version: v, empty: e.size == 0})
			}
		}
	}
	return out
}

// hostLibVersion is the driver's library version, "" when unknown.
func (h *hostState) hostLibVersion() string {
	if d, err := h.driver(); err == nil {
		return d.LibraryVersion
	}
	return ""
}

// checkImageDriverLibs: the image ships driver libraries of its own, which
// shadow or clash with the ones injected from the host.
func checkImageDriverLibs(h *hostState) []Finding {
	b := h.container()
	if b == nil || b.err != nil {
		return nil
	}
	host := h.hostLibVersion()
	var found []shippedLib
	seen := map[string]bool{}
	for _, d := range imageLibDirs() {
		real, _, ok := b.files.stat(d)
		if !ok || seen[real] {
			continue
		}
		seen[real] = true
		found = append(found, driverLibsIn(b.files, d)...)
	}
	var libs, empty []shippedLib
	for _, l := range found {
		if l.empty {
			empty = append(empty, l)
		} else {
			libs = append(libs, l)
		}
	}
	out := []Finding{shippedLibsFinding(libs, host)}
	if len(empty) > 0 {
		out = append(out, placeholdersFinding(empty, host))
	}
	return out
}

// shippedLibsFinding judges the image's own driver library files.
func shippedLibsFinding(found []shippedLib, host string) Finding {
	if len(found) == 0 {
		return Finding{Severity: OK, Problem: "the image ships no driver libraries"}
	}
	sev, other := Warning, []string{}
	var names []string
	for _, l := range found {
		names = append(names, l.path)
		if host != "" && l.version != host {
			sev = Error
			other = append(other, l.version)
		}
	}
	problem := fmt.Sprintf("the image ships driver libraries: %s", abbreviate(names, 4))
	if len(other) > 0 {
		problem += fmt.Sprintf(" (version %s, the host driver is %s)", other[0], host)
	}
	return Finding{Severity: sev, Problem: problem,
		Breaks: `the image's copies shadow or clash with the host's: "Failed to initialize NVML: Driver/library version mismatch", CUDA error 35 or 803`,
		Fix:    "rebuild the image without the driver packages (e.g. apt-get purge 'libnvidia-compute-*' libcuda1, or delete the files): the runtime injects the host's",
		Values: map[string]string{"files": strings.Join(names, ","), "host_driver": host}}
}

// placeholdersFinding judges empty driver library files: the mount points
// a GPU container leaves in its writable layer (kept by docker commit, or
// in a bundle's rootfs used again). The runtime mounts the host's file
// over one of the host's version; one of another version stays empty, and
// the image's links (libcuda.so.1) may lead to it.
func placeholdersFinding(empty []shippedLib, host string) Finding {
	var names, stale []string
	for _, l := range empty {
		names = append(names, l.path)
		if host != "" && l.version != host {
			stale = append(stale, l.path)
		}
	}
	values := map[string]string{"files": strings.Join(names, ","), "host_driver": host}
	if len(stale) == 0 {
		return Finding{Severity: OK,
			Problem: fmt.Sprintf("the image holds empty mount points of the host driver's libraries (%s): the runtime mounts the host's files over them", abbreviate(names, 2)),
			Values:  values}
	}
	return Finding{Severity: Warning,
		Problem: fmt.Sprintf("the image holds empty driver library files of another driver version: %s (the host driver is %s)", abbreviate(stale, 4), host),
		Breaks:  `they are mount points a GPU container left behind (docker commit of a running GPU container keeps them): nothing is mounted over them on this host, and a link such as libcuda.so.1 that still leads to one fails with "file too short"`,
		Fix:     "delete the empty files (and links to them) from the image, or rebuild it from its Dockerfile instead of committing a running GPU container",
		Values:  values}
}

// checkImageLibc: the driver's libraries need glibc.
func checkImageLibc(h *hostState) []Finding {
	b := h.container()
	if b == nil || b.err != nil {
		return nil
	}
	for _, d := range []string{"/lib", "/usr/lib"} {
		if m := glob(b.files, path.Join(d, "ld-musl-*.so.1"), false); len(m) > 0 {
			return []Finding{{Severity: Error,
				Problem: "the image is musl-based (" + m[0] + ")",
				Breaks:  `the injected driver libraries are built for glibc: "Error loading shared library libnvidia-ml.so.1", nvidia-smi and CUDA fail`,
				Fix:     "use a glibc-based image (debian, ubuntu, nvidia/cuda) for GPU work",
				Values:  map[string]string{"loader": m[0]}}}
		}
	}
	return nil
}

// checkLDLibraryPath: LD_LIBRARY_PATH directories holding driver library
// copies other than the host driver's.
func checkLDLibraryPath(h *hostState) []Finding {
	b := h.container()
	if b == nil || b.err != nil {
		return nil
	}
	v, ok := b.getenv("LD_LIBRARY_PATH")
	if !ok || v == "" {
		return nil
	}
	host := h.hostLibVersion()
	var stale []string
	for _, d := range filepath.SplitList(v) {
		if !path.IsAbs(d) {
			continue
		}
		for _, l := range driverLibsIn(b.files, d) {
			if l.version != host {
				stale = append(stale, l.path)
			}
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return []Finding{{Severity: Error,
		Problem: "LD_LIBRARY_PATH puts stale driver libraries first: " + abbreviate(stale, 4),
		Breaks:  `they are loaded instead of the host driver's: "CUDA driver version is insufficient" (error 35), 803 or "Driver/library version mismatch"`,
		Fix:     "drop those directories from LD_LIBRARY_PATH (or the files from the image); forward-compat libraries belong in /usr/local/cuda/compat, which the runtime handles",
		Values:  map[string]string{"LD_LIBRARY_PATH": v, "files": strings.Join(stale, ","), "host_driver": host}}}
}
