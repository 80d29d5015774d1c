package cdihook

import (
	"errors"
	"io/fs"

	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/rootfs"
	"golang.org/x/sys/unix"
)

// chmod sets the permission bits of c.Paths inside the container root
// (rootfs.Root.Chmod: resolved inside the root, changed through an O_PATH
// descriptor). As NVIDIA's hook: a missing path is skipped, and a
// permission error (a /dev the runtime mounted from the host) is not a
// failure; only c.Mode's permission bits (0777) are applied.
func chmod(h *hookEnv, c hookargs.Chmod) error {
	if len(c.Paths) == 0 {
		return nil
	}
	return h.withRoot(c.ContainerSpec, func(r *rootfs.Root) error {
		for _, p := range c.Paths {
			changed, err := r.Chmod(p, fs.FileMode(c.Mode).Perm())
			switch {
			case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
				h.log.Debug("chmod: path missing; skipped", "path", p)
			case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
				h.log.Debug("chmod: not permitted; ignored", "path", p, "error", err)
			case err != nil:
				return err
			default:
				h.log.Debug("chmod", "path", p, "mode", fs.FileMode(c.Mode).Perm(), "changed", changed)
			}
		}
		return nil
	})
}
