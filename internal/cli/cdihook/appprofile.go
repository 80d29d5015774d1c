package cdihook

import (
	"errors"
	"fmt"
	"slices"

	"github.com/nctk/nctk/internal/appprofile"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/rootfs"
	"golang.org/x/sys/unix"
)

// updateApplicationProfile writes appprofile.File with the minors of the
// container's GPU device nodes (/dev/nvidiaN character devices, added to
// an appprofile.Mask). A container without GPU nodes gets no file.
func updateApplicationProfile(h *hookEnv, u hookargs.UpdateApplicationProfile) error {
	return h.withRoot(u.ContainerSpec, func(r *rootfs.Root) error {
		names, err := r.ReadDir("/dev")
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		slices.Sort(names)
		var mask appprofile.Mask
		for _, n := range names {
			if !appprofile.IsGPUNode(n) {
				continue
			}
			st, err := r.Lstat("/dev/" + n)
			if err != nil {
				return err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFCHR {
				mask.Add(n, int64(unix.Minor(st.Rdev)), h.log)
			}
		}
		if mask == 0 {
			h.log.Debug("no GPU device nodes in the container; no application profile")
			return nil
		}
		h.log.Debug("application profile", "path", appprofile.File, "mask", fmt.Sprintf("%#x", mask))
		return appprofile.Write(r, mask)
	})
}
