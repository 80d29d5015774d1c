package doctor

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/procfs"
)

// checkModule: the kernel module is loaded (/proc/driver/nvidia/version
// reads).
func checkModule(h *hostState) []Finding {
	p := h.host(procfs.VersionPath)
	v, err := h.kernelVersion()
	if err != nil {
		return []Finding{{Severity: Error,
			Problem: "the NVIDIA kernel module is not loaded (" + p + " cannot be read)",
			Breaks:  `nvidia-smi: "couldn't communicate with the NVIDIA driver"; CUDA error 100 "no CUDA-capable device is detected"; the runtime fails with "driver error: failed to process request"`,
			Fix:     "sudo modprobe nvidia && sudo modprobe nvidia-uvm (if that fails, rebuild the module for the running kernel: sudo dkms autoinstall, or reinstall the driver)",
			Values:  map[string]string{"path": p, "error": err.Error()},
		}}
	}
	kind := "proprietary"
	if v.Open {
		kind = "open"
	}
	return []Finding{{Severity: OK, Problem: fmt.Sprintf("kernel module %s loaded (%s)", v.NVRM, kind),
		Values: map[string]string{"module_version": v.NVRM}}}
}

// checkUserSpace: discovery of the user-space driver under the driver
// root succeeds: the libraries match the module, the ld.so.cache reads,
// the device nodes have the driver's numbers.
func checkUserSpace(h *hostState) []Finding {
	if !h.moduleLoaded() {
		return nil
	}
	d, err := h.driver()
	var mm *discover.VersionMismatchError
	var lc *discover.LdCacheError
	var dn *discover.DeviceNodeError
	switch {
	case errors.As(err, &mm):
		return []Finding{{Severity: Error,
			Problem: fmt.Sprintf("driver/library version mismatch: the kernel module is %s but the user-space libraries are %s", mm.Module, mm.Library),
			Breaks:  `"Failed to initialize NVML: Driver/library version mismatch"; CUDA error 803 "system has unsupported display driver / cuda driver combination"`,
			Fix:     "reboot (the driver was upgraded without one), or reload the module: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia nvidia-uvm",
			Values: map[string]string{"module_version": mm.Module, "library_version": mm.Library,
				"module_file": mm.ModulePath, "library": mm.LibraryPath},
		}}
	case errors.As(err, &lc):
		fix := "sudo ldconfig"
		if h.driverRoot != "/" {
			fix = "sudo ldconfig -r " + h.driverRoot
		}
		return []Finding{{Severity: Error,
			Problem: "the dynamic linker cache of the driver root cannot be used: " + lc.Error(),
			Breaks:  `"load library failed: libnvidia-ml.so.1: cannot open shared object file"; nvidia-container-cli: "driver error: failed to process request"`,
			Fix:     fix,
			Values:  map[string]string{"ldcache": lc.Path, "driver_root": h.driverRoot},
		}}
	case errors.As(err, &dn):
		return []Finding{{Severity: Error,
			Problem: dn.Error(),
			Breaks:  `the runtime refuses the container ("invalid device node"); the GPU is unusable inside it`,
			Fix:     fmt.Sprintf("sudo rm %s && sudo nvidia-ctk system create-device-nodes", dn.HostPath),
			Values: map[string]string{"node": dn.HostPath, "want": fmt.Sprintf("%d:%d", dn.Major, dn.Minor),
				"found": fmt.Sprintf("%d:%d", dn.GotMajor, dn.GotMinor)},
		}}
	case err != nil:
		return []Finding{{Severity: Error, Problem: "driver discovery failed: " + err.Error(),
			Breaks: "every GPU container fails at the same step", Fix: "see the error; check --driver-root"}}
	}
	return []Finding{{Severity: OK,
		Problem: fmt.Sprintf("user-space driver %s matches the module, %d GPU(s)", d.LibraryVersion, len(d.GPUs)),
		Values:  map[string]string{"library_version": d.LibraryVersion, "gpus": fmt.Sprint(len(d.GPUs))}}}
}

// checkLibraries: libcuda and libnvidia-ml exist for the host's
// architecture, and 32-bit ones when the container asks for compat32.
func checkLibraries(h *hostState) []Finding {
	d, err := h.driver()
	if err != nil || !h.moduleLoaded() {
		return nil
	}
	var out []Finding
	// compat32 named explicitly: "all" also selects it, but a container
	// asking for all capabilities does not need the 32-bit libraries.
	want32 := false
	if b := h.container(); b != nil && b.err == nil && b.reqErr == nil && !b.req.Void && b.req.Caps.Has(caps.Compat32) {
		v, _ := b.getenv("NVIDIA_DRIVER_CAPABILITIES")
		want32 = strings.Contains(v, string(caps.Compat32))
	}
	for _, lib := range []struct {
		name, breaks string
	}{
		{"libnvidia-ml.so", `"load library failed: libnvidia-ml.so.1: cannot open shared object file"; nvidia-smi "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system"`},
		{"libcuda.so", `CUDA programs fail with "CUDA driver version is insufficient" or "libcuda.so.1: cannot open shared object file" (CUDA error 35)`},
	} {
		var have64, have32 bool
		for _, f := range d.Libraries {
			if f.Name != lib.name {
				continue
			}
			if f.Compat32 {
				have32 = true
			} else {
				have64 = true
			}
		}
		if !have64 {
			out = append(out, Finding{Severity: Error,
				Problem: fmt.Sprintf("%s (%s) is not in the driver root's ld.so.cache", lib.name, runtime.GOARCH),
				Breaks:  lib.breaks,
				Fix:     "install the driver's user-space libraries for this architecture (the package matching module " + d.Version + ") and run sudo ldconfig",
				Values:  map[string]string{"library": lib.name, "arch": runtime.GOARCH, "driver_root": h.driverRoot},
			})
		}
		if want32 && !have32 {
			out = append(out, Finding{Severity: Error,
				Problem: fmt.Sprintf("the container asks for compat32 but there is no 32-bit %s", lib.name),
				Breaks:  "32-bit CUDA/GL programs in the container fail to load the driver",
				Fix:     "install the driver's i386 libraries (e.g. libcuda1:i386, libnvidia-ml1:i386) and run sudo ldconfig",
				Values:  map[string]string{"library": lib.name, "arch": "i386"},
			})
		}
	}
	if len(out) == 0 {
		out = append(out, Finding{Severity: OK, Problem: "libcuda and libnvidia-ml found for " + runtime.GOARCH})
	}
	return out
}

// checkPersistence: without nvidia-persistenced the driver tears the GPUs
// down whenever the last client exits.
func checkPersistence(h *hostState) []Finding {
	if !h.moduleLoaded() {
		return nil
	}
	sock := h.host("/run/nvidia-persistenced/socket")
	if lexists(sock) {
		return []Finding{{Severity: OK, Problem: "nvidia-persistenced is running (persistence mode kept)"}}
	}
	return []Finding{{Severity: Warning,
		Problem: "nvidia-persistenced is not running (no " + sock + "): persistence mode is probably off",
		Breaks:  "every container start initialises the GPUs again: slow first CUDA call and nvidia-smi (seconds per GPU), timeouts in health checks",
		Fix:     "sudo systemctl enable --now nvidia-persistenced",
		Values:  map[string]string{"socket": sock},
	}}
}

// checkExcludedGPUs: GPUs the driver was told to exclude (NVreg_ExcludedGpus)
// are invisible to containers.
func checkExcludedGPUs(h *hostState) []Finding {
	if !h.moduleLoaded() {
		return nil
	}
	infos, _ := filepath.Glob(h.host("/proc/driver/nvidia/gpus/*/information"))
	var excluded []string
	for _, p := range infos {
		gi, err := procfs.ReadGPUInformation(p)
		if err == nil && gi.Excluded {
			excluded = append(excluded, gi.BusLocation)
		}
	}
	if len(excluded) == 0 {
		return nil
	}
	return []Finding{{Severity: Warning,
		Problem: fmt.Sprintf("the driver excludes %d GPU(s): %s", len(excluded), strings.Join(excluded, ", ")),
		Breaks:  "those GPUs are in lspci but not in nvidia-smi, and a container asking for them by index or UUID fails with \"unknown device\"",
		Fix:     "remove them from NVreg_ExcludedGpus (grep -r ExcludedGpus /etc/modprobe.d) and reload the driver or reboot",
		Values:  map[string]string{"excluded": strings.Join(excluded, ",")},
	}}
}
