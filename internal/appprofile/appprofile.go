// Package appprofile is the driver application profile that makes EGL (and
// Vulkan, through it) see only a container's GPUs: what
// update-application-profile writes, from the container's /dev (the hook)
// or from the device nodes config.json gives it (the runtime, before the
// container exists).
package appprofile

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/nctk/nctk/internal/rootfs"
)

// Container paths of the profile.
const (
	Dir  = "/etc/nvidia/nvidia-application-profiles-rc.d"
	File = Dir + "/10-container.conf"
)

// MaxMinor is the first GPU minor the profile cannot express (its mask is
// 64 bits).
const MaxMinor = 64

// Mask is the profile's set of GPUs, by device minor.
type Mask uint64

// Add adds the character device node name (a /dev entry's base name) with
// the given minor when it is a GPU's (IsGPUNode). A GPU whose minor the
// profile cannot express (MaxMinor and above) is left out with a warning,
// as NVIDIA's hook leaves it out.
func (m *Mask) Add(name string, minor int64, log *slog.Logger) {
	if !IsGPUNode(name) {
		return
	}
	if minor < 0 || minor >= MaxMinor {
		log.Warn("GPU device minor out of the application profile's range; left out", "node", "/dev/"+name, "minor", minor)
		return
	}
	*m |= 1 << minor
}

// IsGPUNode tells whether name (a /dev entry's base name) is a GPU's node:
// nvidia followed by digits only (nvidia0, nvidia12; not nvidiactl).
func IsGPUNode(name string) bool {
	n, ok := strings.CutPrefix(name, "nvidia")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 32)
	return err == nil && n[0] != '+'
}

// Content returns the profile for the GPUs whose minors are set in mask:
// one profile applied to every process, setting EGLVisibleDGPUDevices.
func Content(mask Mask) []byte {
	return fmt.Appendf(nil, `{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x%x]}],"rules":[{"pattern":[],"profile":"_container_"}]}`, mask)
}

// Write writes File (mode 0444, its directory 0555, as NVIDIA's hook) for
// mask inside the root, journaled with the root's other changes. A zero
// mask (no GPU) writes nothing.
func Write(r *rootfs.Root, mask Mask) error {
	if mask == 0 {
		return nil
	}
	if err := r.MkdirAll(Dir, 0o555); err != nil {
		return err
	}
	return r.WriteFile(File, Content(mask), 0o444)
}
