package cdihook

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"

	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/rootfs"
	"golang.org/x/sys/unix"
)

// Container paths of update-application-profile.
const (
	appProfileDir  = "/etc/nvidia/nvidia-application-profiles-rc.d"
	appProfileFile = appProfileDir + "/10-container.conf"
)

// gpuNode matches the names of the GPUs' device nodes (nvidia0, nvidia12).
var gpuNode = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^nvidia[0-9]+$`) })

// appProfile returns the driver application profile that makes EGL (and
// Vulkan, through it) see only the GPUs whose minors are set in mask: one
// profile applied to every process, setting EGLVisibleDGPUDevices.
func appProfile(mask uint64) []byte {
	return fmt.Appendf(nil, `{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x%x]}],"rules":[{"pattern":[],"profile":"_container_"}]}`, mask)
}

// updateApplicationProfile writes appProfileFile (mode 0444, its directory
// 0555, as NVIDIA's hook) with the minors of the container's GPU device
// nodes (/dev/nvidiaN character devices; minors from 64 on cannot be
// expressed and are left out with a warning). A container without GPU
// nodes gets no file.
func updateApplicationProfile(h *hookEnv, u hookargs.UpdateApplicationProfile) error {
	return h.withRoot(u.ContainerSpec, func(r *rootfs.Root) error {
		h.removeStale(r, appProfileDir)
		names, err := r.ReadDir("/dev")
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		slices.Sort(names)
		var mask uint64
		for _, n := range names {
			if !gpuNode().MatchString(n) {
				continue
			}
			st, err := r.Lstat("/dev/" + n)
			if err != nil {
				return err
			}
			if st.Mode&unix.S_IFMT != unix.S_IFCHR {
				continue
			}
			minor := unix.Minor(st.Rdev)
			if minor >= 64 {
				h.log.Warn("GPU device minor out of the profile's range; left out", "node", "/dev/"+n, "minor", minor)
				continue
			}
			mask |= 1 << minor
		}
		if mask == 0 {
			h.log.Debug("no GPU device nodes in the container; no application profile")
			return nil
		}
		if err := r.MkdirAll(appProfileDir, 0o555); err != nil {
			return err
		}
		h.log.Debug("application profile", "path", appProfileFile, "mask", fmt.Sprintf("%#x", mask))
		return r.WriteFile(appProfileFile, appProfile(mask), 0o444)
	})
}
