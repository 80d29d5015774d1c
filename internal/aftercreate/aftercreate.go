// Package aftercreate does the part of a container's GPU setup that only the
// container's own mount namespace can hold — the /proc/driver/nvidia view and
// the params mask in its procfs, the GPUs' links below its /dev — from
// nvidia-container-runtime, once the low-level runtime's create has made the
// container and before the engine starts it.
//
// It is the work of nctk's createContainer hooks mount-proc-driver,
// disable-device-node-modification and create-symlinks below /dev, without
// the hook process, and the driver's bind mounts where the runtime takes them
// from the low-level runtime (which costs several times more a mount than a
// mount made here): the runtime prepares it on the host before the create
// (Prepare: the host's proc files read, the selected GPUs' directories opened
// and cloned, the first batch of mount sources opened and cloned), lets the
// low-level runtime create the container, then Apply
// joins the mount namespace of the container's init (which, after create,
// waits for start behind pivot_root: that namespace's root is the container's
// root, its /proc the container's procfs, its /dev the runtime's) on one
// dedicated thread (internal/mountns) and does the work there through
// internal/rootfs, everything resolved inside that root. A failure undoes
// what Apply did; the caller then deletes the container.
package aftercreate

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/mountns"
	"github.com/nctk/nctk/internal/mountsrc"
	"github.com/nctk/nctk/internal/rootfs"
)

// Work is what is done in a created container, in this order: the mounts,
// the links, the /proc/driver/nvidia view, the params mask.
type Work struct {
	// Mounts are bind mounts of host objects, made in this order (as the
	// low-level runtime would have made them, before everything else).
	Mounts []Mount
	// DevLinks are links in the container's /dev (create-symlinks: what is
	// at a link path is replaced).
	DevLinks []hookargs.Link
	// Proc is the /proc/driver/nvidia view (mount-proc-driver); nil for
	// none.
	Proc *rootfs.ProcView
	// ParamsHostDir, when set, is the host's driver proc directory whose
	// params file, with ModifyDeviceFiles 0, masks the container's
	// (disable-device-node-modification).
	ParamsHostDir string
}

// Mount is a bind mount of the host object at Source (Kind says what it
// must be) over Destination in the container, with OCI mount Options.
type Mount struct {
	Source, Destination string
	Kind                rootfs.Kind
	Options             []string
}

// Empty reports whether w has nothing to do.
func (w Work) Empty() bool {
	return len(w.Mounts) == 0 && len(w.DevLinks) == 0 && w.Proc == nil && w.ParamsHostDir == ""
}

// Prepared is Work with its host side done.
type Prepared struct {
	dsts   []string // the mounts' destinations; their sources:
	mounts *mountsrc.Batches
	links  []hookargs.Link
	proc   *rootfs.ProcDriver
	params *rootfs.ParamsMask
}

// Prepare does w's host side: reads the host's proc files, opens the
// selected GPUs' proc directories and the first batch of mount sources
// (each checked to be what its mount's Kind says). Close the result.
func Prepare(w Work, log *slog.Logger) (*Prepared, error) {
	p := &Prepared{links: w.DevLinks}
	var err error
	if w.Proc != nil {
		if p.proc, err = rootfs.PrepareProcDriver(w.Proc); err != nil {
			return nil, err
		}
	}
	if w.ParamsHostDir != "" {
		if p.params, err = rootfs.PrepareParamsMask(w.ParamsHostDir, log); err != nil {
			p.Close()
			return nil, fmt.Errorf("driver params: %w", err)
		}
	}
	// Last: the first batch of sources is sized to what the rest holds.
	open := make([]mountsrc.Opener, len(w.Mounts))
	for i, m := range w.Mounts {
		p.dsts = append(p.dsts, m.Destination)
		open[i] = func() (*rootfs.Source, error) { return rootfs.OpenSource(m.Source, m.Kind, m.Options) }
	}
	if p.mounts, err = mountsrc.Open(open); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close releases what Prepare opened.
func (p *Prepared) Close() {
	if p != nil {
		p.mounts.Close()
		p.proc.Close()
	}
}

// Apply does the work in the mount namespace of the created container whose
// init is pid. On error nothing it did remains.
func (p *Prepared) Apply(pid int, log *slog.Logger) error {
	if pid <= 0 {
		return fmt.Errorf("container process: invalid pid %d", pid)
	}
	nsPath := "/proc/" + strconv.Itoa(pid) + "/ns/mnt"
	nsfd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("container mount namespace %s: %w", nsPath, err)
	}
	defer unix.Close(nsfd)
	// A created container has a mount namespace of its own; the runtime's
	// would mean pid is not the container's init.
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(nsfd, &theirs); err != nil {
		return fmt.Errorf("container mount namespace %s: %w", nsPath, err)
	}
	if err := unix.Stat("/proc/self/ns/mnt", &ours); err != nil {
		return fmt.Errorf("own mount namespace: %w", err)
	}
	if theirs.Dev == ours.Dev && theirs.Ino == ours.Ino {
		return fmt.Errorf("process %d shares the runtime's mount namespace: not a created container's init", pid)
	}
	t, err := mountns.Enter(nsfd)
	if err != nil {
		return fmt.Errorf("%s: %w", nsPath, err)
	}
	defer t.Close()
	return t.DoHost(func(host func(func() error) error) error {
		r, err := rootfs.Open("/")
		if err != nil {
			return err
		}
		if err := p.apply(r, log, host); err != nil {
			return errors.Join(err, r.Rollback(), r.Close())
		}
		return r.Close()
	})
}

// apply does the work in the root r of the container's namespace; host
// runs a function in the runtime's (to open a batch of mount sources).
func (p *Prepared) apply(r *rootfs.Root, log *slog.Logger, host func(func() error) error) error {
	for i, dst := range p.dsts {
		src, err := p.mounts.Source(i, r, host)
		if err != nil {
			return err
		}
		if err := r.Attach(src, dst); err != nil {
			return err
		}
	}
	for _, l := range p.links {
		if err := r.ForceSymlink(l.Target, l.Path); err != nil {
			return err
		}
	}
	if err := r.MountProcDriver(p.proc, log); err != nil {
		return err
	}
	return r.MaskParams(p.params, log)
}
