package cdihook

import (
	"github.com/nctk/nctk/internal/cudacompat"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/rootfs"
)

// enableCudaCompat puts the image's CUDA forward-compatibility libraries
// (the one libcuda.so.<version> regular file in c.Dir()) first in the
// loader's search when they are newer than the host driver
// (cudacompat.Select decides, from the library's file name and its ELF
// note, read as data: the library is never loaded): cudacompat.Enable
// lists the directory in /etc/ld.so.conf.d/00-compat-nctk.conf and puts
// its libraries ahead of the driver's in ld.so.cache. Nothing is mounted.
// Without --host-driver-version and --host-cuda-version the hook does
// nothing.
func enableCudaCompat(h *hookEnv, c hookargs.EnableCudaCompat) error {
	if c.HostDriverVersion == "" && c.HostCudaVersion == "" {
		h.log.Debug("neither a host driver nor a host CUDA version given; nothing to do")
		return nil
	}
	dir := c.Dir()
	return h.withRoot(c.ContainerSpec, func(r *rootfs.Root) error {
		lib, err := cudacompat.Select(r, dir, c.HostDriverVersion, c.HostCudaVersion, h.log)
		if err != nil || lib == "" {
			return err
		}
		return cudacompat.Enable(r, dir, h.log)
	})
}
