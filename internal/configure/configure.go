// Package configure applies an injection plan to a container that a runtime
// has created but not started: what `nvidia-container-cli configure` does
// when the prestart hook, dockerd's --gpus path or containerd's oci-hook
// call it.
//
// # Where the work happens
//
// The container's root filesystem is mounted in the container's own mount
// namespace, not yet pivoted into (the documented precondition of
// configure: "the container has been created but not yet started"). Mounts
// must be made in that namespace. Go programs are multi-threaded and
// setns(CLONE_NEWNS) refuses a thread that shares its filesystem
// information with others (EINVAL), so Apply runs the in-container work on
// one dedicated OS thread that first unshares CLONE_FS and then joins the
// namespace (see internal/mountns). That thread is locked to its goroutine and is
// destroyed, never reused, when the work is done; no other thread of the
// process ever enters the container's namespace. This needs no cgo and no
// re-exec, and keeps host-side descriptors usable: sources are opened and
// cloned (open_tree) on the host before the thread switches namespaces, and
// attached (move_mount) inside the container's namespace afterwards, so
// every mounted object is the one checked on the host.
//
// # Order and atomicity
//
//  1. input and container lookups (mount namespace, device cgroup);
//  2. host-side preparation: driver files and device nodes opened and
//     checked (types, device numbers), the /proc/driver/nvidia view read,
//     and, when the image may have CUDA compat libraries, the host ldconfig
//     copied into a sealed memfd;
//  3. in the container: a check that nothing below lies under a mount of a
//     host directory (a user volume: plan.UserMountError), then proc view, bind mounts (ro, nosuid, nodev; devices
//     ro, nosuid, noexec), symlinks, device nodes — all through
//     internal/rootfs, resolved inside the container root;
//  4. device cgroup rules for exactly the plan's devices (v1 devices.allow
//     or v2 BPF program replacement), unless --no-cgroups;
//  5. the driver's libraries added to the image's ld.so.cache, in process
//     and inside the root (rootfs.Root.UpdateLdCache; the runtime does the
//     same from the host files before the low-level runtime runs); when
//     the image holds a newer CUDA compat libcuda, the cache is rebuilt as
//     the host ldconfig would rebuild it over the plan's library
//     directories and the compat directory (rootfs.Root.RebuildLdCache, in
//     process; that ldconfig runs, confined to the container root, only
//     where the rebuild does not reproduce the image), after which the
//     compat libraries are put first in the cache in process
//     (cudacompat.Enable).
//
// A failure in any step undoes the earlier ones (mounts lazily unmounted,
// created files removed, cgroup rules reverted) and is reported as a
// *phase.Error naming its phase (phase.Input, phase.Container, phase.Mount
// or phase.Ldcache), as NVIDIA's CLI does ("mount error: …").
package configure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/cudacompat"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/mountns"
	"github.com/nctk/nctk/internal/mountsrc"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// Container identifies the container to configure.
type Container struct {
	// PID is the container's init process (the OCI state's pid).
	PID int
	// Rootfs is the container's root directory as seen in its mount
	// namespace (absolute, not "/").
	Rootfs string
	// ProcRoot is where the /proc holding PID is visible: "" for the
	// host's /proc (supervised mode, --pid given), the rootfs in
	// standalone mode, where ProcRoot/proc must be a procfs mount (opened
	// inside ProcRoot, no symlink followed; see ErrNotProcfs).
	ProcRoot string
}

// CUDA forward-compatibility modes (--cuda-compat-mode).
const (
	CompatLdconfig = "ldconfig"
	CompatMount    = "mount"
	CompatDisabled = "disabled"
)

// CompatDir is where CUDA images keep forward-compatibility libraries.
const CompatDir = hookargs.DefaultCudaCompatDir

// Options tune Apply.
type Options struct {
	// NoCgroups leaves the device cgroup alone (--no-cgroups).
	NoCgroups bool
	// NoDevBind does not mount device nodes (--no-devbind); their cgroup
	// rules are still added.
	NoDevBind bool
	// Ldconfig is the host ldconfig run for CUDA compat libraries (the
	// zero Ldconfig: the default; see config.Ldconfig.HostPath). A
	// container path is refused.
	Ldconfig config.Ldconfig
	// NoPivot makes the ldconfig sandbox use MS_MOVE+chroot (--no-pivot).
	NoPivot bool
	// CUDACompatMode is ldconfig, mount or disabled ("" = disabled). Both
	// ldconfig and mount make a newer /usr/local/cuda/compat visible
	// through the container's ld.so.cache; nothing from the image is ever
	// mounted (the CVE-2024-0132 path).
	CUDACompatMode string
	// DriverVersion is the host driver version (580.126.09), needed to
	// decide whether the image's compat libraries are newer.
	DriverVersion string
	// Log receives debug messages (nil: discarded).
	Log *slog.Logger
	// LdconfigExe overrides the binary re-executed as the ldconfig sandbox
	// (tests); "" is this binary.
	LdconfigExe string
	// LdconfigDirs, when set, knows the built-in directories of the host
	// ldconfig (hostfacts.LdconfigSystemDirs): with them the CUDA compat
	// step rebuilds ld.so.cache in process (rootfs.RebuildLdCache)
	// instead of running that ldconfig. Asked on the host, only when
	// compat libraries may be used.
	LdconfigDirs LdconfigDirs
	// LibFacts, when set, answer for the driver's library files before
	// their ELF headers are read for the ld.so.cache, and learn what was
	// read (hostfacts.LibFacts). Apply only asks and tells, in memory; the
	// caller reads and writes them, in the host's mount namespace.
	LibFacts rootfs.LibFacts

	// hooks are test seams (nil outside this package's tests; a pointer
	// keeps Options comparable).
	hooks *applyHooks
}

// LdconfigDirs knows the built-in directories of host ldconfig binaries.
type LdconfigDirs interface {
	// SystemDirs returns those of the ldconfig at hostPath.
	SystemDirs(hostPath string) ([]string, error)
}

// applyHooks are points inside Apply where a test can act.
type applyHooks struct {
	// afterCgroupOpen runs right after the device cgroup directory is
	// opened (and, in standalone mode, checked), before anything is
	// written.
	afterCgroupOpen func()
}

// cgroupMountRoot is where hosts mount the cgroup hierarchies.
const cgroupMountRoot = "/sys/fs/cgroup"

// Apply applies p to the container c. On error nothing it did remains; the
// error is a *phase.Error naming the step that failed.
func Apply(ctx context.Context, p *plan.Plan, c Container, opts Options) error {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := validate(p, c, opts); err != nil {
		return &phase.Error{Phase: phase.Input, Err: err}
	}
	// In standalone mode /proc lies in the image's rootfs: it is opened
	// inside the root, must be a procfs, and every file below is opened
	// relative to it (procDir), never by a path through the rootfs.
	proc, err := openProcDir(c.ProcRoot)
	if err != nil {
		return &phase.Error{Phase: phase.Container, Err: err}
	}
	defer proc.Close()
	nsRel := path.Join(strconv.Itoa(c.PID), "ns/mnt")
	nsPath := proc.name(nsRel)
	nsfd, err := proc.open(nsRel, unix.O_RDONLY)
	if err != nil {
		return &phase.Error{Phase: phase.Container, Err: fmt.Errorf("mount namespace: %w", err)}
	}
	defer unix.Close(nsfd)
	// The mount tables, read when needed: what lies below a mount of a
	// host directory in the container (the engine made its mounts before
	// this hook) is never created or changed (checkUserMounts).
	mounts := newMountSource(proc, c)
	var cg *deviceCgroup
	useCgroup := !opts.NoCgroups && len(p.Devices) > 0
	if useCgroup {
		// The directory is opened (and in standalone mode checked) once;
		// the rules are written through that descriptor.
		if cg, err = lookupDeviceCgroup(proc, c.ProcRoot, c.PID, mounts.selfMounts, cgroupMountRoot); err != nil {
			return &phase.Error{Phase: phase.Container, Err: err}
		}
		defer cg.Close()
		log.Debug("device cgroup", "version", cg.Version, "dir", cg.Dir)
		if opts.hooks != nil && opts.hooks.afterCgroupOpen != nil {
			opts.hooks.afterCgroupOpen()
		}
	}

	prep, err := prepare(p, opts)
	if err != nil {
		return err
	}
	defer prep.Close()

	t, err := mountns.Enter(nsfd)
	if err != nil {
		return &phase.Error{Phase: phase.Container, Err: fmt.Errorf("%s: %w", nsPath, err)}
	}
	defer t.Close()

	var r *rootfs.Root
	var compat string
	err = t.DoHost(func(host func(func() error) error) error {
		var err error
		if r, err = rootfs.Open(c.Rootfs); err != nil {
			return err
		}
		if compat, err = compatDir(r, p, opts, log); err != nil {
			return err
		}
		onHost, err := checkUserMounts(r, mounts.mountTables, plannedPaths(p, opts, compat))
		if err != nil {
			return err
		}
		if len(onHost) > 0 {
			// The GPUs' /dev links on a host /dev: the host's own are there.
			log.Debug("links below /dev on a host mount left to the host's", "links", onHost)
			q := *p
			q.DevSymlinks = slices.DeleteFunc(slices.Clone(p.DevSymlinks), func(s plan.Symlink) bool { return slices.Contains(onHost, s.Link) })
			p = &q
		}
		// A configure killed mid-way (the engine then tears the container
		// down; a restart reuses the rootfs) leaves its temporary files:
		// rootfs removes them where this run writes (every step below is
		// idempotent), so that it gives the rootfs of a run that was
		// never interrupted.
		if err := prep.apply(r, p, log, host); err != nil {
			return err
		}
		removed, err := r.RemovedStale()
		if len(removed) > 0 {
			log.Info("removed temporary files an interrupted configure left", "root", c.Rootfs, "files", removed)
		}
		if err != nil {
			log.Warn("cannot remove temporary files an interrupted configure left", "root", c.Rootfs, "error", err)
		}
		return nil
	})
	rollback := func() {
		if r == nil {
			return
		}
		t.Do(func() error {
			if err := r.Rollback(); err != nil {
				log.Warn("rollback incomplete", "root", c.Rootfs, "error", err)
			}
			return r.Close()
		})
	}
	if err != nil {
		rollback()
		ph := phase.Mount
		if _, ok := errors.AsType[*mountTableError](err); ok {
			ph = phase.Container
		}
		return &phase.Error{Phase: ph, Err: err}
	}

	var change cgroupChange
	if useCgroup {
		rules := deviceRules(p)
		if cg.Version == 1 {
			change, err = allowDevicesV1(cg.fd, cg.Dir, rules)
		} else {
			change, err = allowDevicesV2(cg.fd, cg.Dir, rules)
		}
		if err != nil {
			rollback()
			return &phase.Error{Phase: phase.Mount, Err: fmt.Errorf("failed to add device rules: %w", err)}
		}
		log.Debug("device cgroup rules added", "dir", cg.Dir, "rules", len(rules))
	}

	dirs := p.LdconfigDirs
	if compat != "" {
		dirs = append(append([]string(nil), dirs...), compat)
	}
	if len(dirs) > 0 {
		err = t.Do(func() error {
			if compat == "" {
				// The driver's libraries go into the image's ld.so.cache
				// in process, inside the root, as the runtime does: no
				// ldconfig process, no sandbox (~10 ms less per start).
				r.UseLibFacts(opts.LibFacts)
				return r.UpdateLdCache(p.LdcacheLibs(), p.LdconfigDirs, log)
			}
			// A newer CUDA compat libcuda in the image: ld.so.cache is
			// rebuilt as the host ldconfig would rebuild it over the
			// driver's and the compat directory (in process; that
			// ldconfig runs, confined to the container, only when the
			// rebuild does not reproduce the image); its ordering puts
			// the driver's libcuda.so.1 first, so the compat directory is
			// then listed in ld.so.conf.d and its libraries put first in
			// the cache, in process (what nvidia-cdi-hook's
			// enable-cuda-compat and update-ldcache give).
			if err := prep.rebuildLdCache(ctx, r, c.Rootfs, dirs, opts, log); err != nil {
				return err
			}
			return cudacompat.Enable(r, compat, log)
		})
		if err != nil {
			if change != nil {
				if rerr := change.Revert(); rerr != nil {
					log.Warn("device cgroup rules not reverted", "error", rerr)
				}
			}
			rollback()
			return &phase.Error{Phase: phase.Ldcache, Err: err}
		}
	}
	if change != nil {
		change.Release()
	}
	t.Do(r.Close) // keeps the journaled changes (Close commits)
	log.Debug("container configured", "rootfs", c.Rootfs, "pid", c.PID, "devices", len(p.Devices),
		"mounts", len(p.Mounts), "symlinks", len(p.Symlinks), "ldconfig", dirs)
	return nil
}

func validate(p *plan.Plan, c Container, opts Options) error {
	if p == nil {
		return errors.New("no injection plan")
	}
	if !path.IsAbs(c.Rootfs) || path.Clean(c.Rootfs) == "/" {
		return fmt.Errorf("invalid rootfs directory: %q", c.Rootfs)
	}
	if c.PID <= 0 {
		return fmt.Errorf("invalid container pid %d", c.PID)
	}
	switch opts.CUDACompatMode {
	case "", CompatLdconfig, CompatMount, CompatDisabled:
	default:
		return fmt.Errorf("invalid cuda-compat-mode %q (want ldconfig, mount or disabled)", opts.CUDACompatMode)
	}
	return nil
}

// prepared holds what was opened and checked on the host.
type prepared struct {
	// sources are the plan's mounts and then its devices (none with
	// NoDevBind), in the order apply attaches them.
	sources  *mountsrc.Batches
	specs    []sourceSpec
	proc     *rootfs.ProcDriver
	ldconfig *rootfs.Ldconfig
	// systemDirs are the host ldconfig's built-in directories (nil:
	// unknown, the ldconfig runs).
	systemDirs []string
}

// deviceOptions are NVIDIA's device mount flags (a read-only mount does not
// stop writes to a character device; nodev would make it unusable).
func deviceOptions() []string { return []string{plan.OptRO, plan.OptNoSuid, plan.OptNoExec} }

// sourceSpec is what opens one mount source: a plan mount or device.
type sourceSpec struct {
	mount  *plan.Mount
	device *plan.Device
}

// open opens and checks the source on the host.
func (sp sourceSpec) open() (*rootfs.Source, error) {
	if sp.device != nil {
		d := sp.device
		return rootfs.OpenDevice(d.HostPath, d.Major, d.Minor, deviceOptions())
	}
	return rootfs.OpenSource(sp.mount.Source, mountsrc.KindOf(sp.mount.Kind), sp.mount.Options)
}

func prepare(p *plan.Plan, opts Options) (*prepared, error) {
	pr := &prepared{}
	fail := func(ph phase.Phase, err error) (*prepared, error) {
		pr.Close()
		return nil, &phase.Error{Phase: ph, Err: err}
	}
	for i := range p.Mounts {
		pr.specs = append(pr.specs, sourceSpec{mount: &p.Mounts[i]})
	}
	if !opts.NoDevBind {
		for i := range p.Devices {
			pr.specs = append(pr.specs, sourceSpec{device: &p.Devices[i]})
		}
	}
	if p.Proc != nil {
		v := p.Proc
		pd, err := rootfs.PrepareProcDriver(&rootfs.ProcView{HostDir: v.HostDir, Files: v.Files, GPUDirs: v.GPUDirs, Expose: v.Expose})
		if err != nil {
			return fail(phase.Mount, err)
		}
		pr.proc = pd
	}
	// The host ldconfig runs only for CUDA compat libraries (see Apply);
	// it is copied now, before the container's mount namespace is entered.
	if compatEnabled(p, opts) {
		hp, err := opts.Ldconfig.HostPath()
		if err != nil {
			return fail(phase.Ldcache, fmt.Errorf("ldconfig: %w", err))
		}
		l, err := rootfs.PrepareLdconfig(hp)
		if err != nil {
			return fail(phase.Ldcache, err)
		}
		pr.ldconfig = l
		if opts.LdconfigDirs != nil {
			if pr.systemDirs, err = opts.LdconfigDirs.SystemDirs(hp); err != nil && opts.Log != nil {
				opts.Log.Debug("ldconfig's own directories unknown; it will run for CUDA compat libraries", "ldconfig", hp, "error", err)
			}
		}
	}
	// Last: the first batch is sized to what the rest holds open.
	open := make([]mountsrc.Opener, len(pr.specs))
	for i, sp := range pr.specs {
		open[i] = sp.open
	}
	var err error
	if pr.sources, err = mountsrc.Open(open); err != nil {
		return fail(phase.Mount, err)
	}
	return pr, nil
}

// rebuildLdCache rebuilds the container's ld.so.cache over dirs as the
// prepared host ldconfig would (without configuration drop-ins): in
// process when its directories are known and the rebuild reproduces the
// image (it writes nothing before it knows), else by running it.
func (pr *prepared) rebuildLdCache(ctx context.Context, r *rootfs.Root, rootPath string, dirs []string, opts Options, log *slog.Logger) error {
	if pr.systemDirs != nil {
		err := r.RebuildLdCache(dirs, rootfs.RebuildOptions{SystemDirs: pr.systemDirs, NoConf: true}, log)
		if !errors.Is(err, rootfs.ErrRebuildUnsupported) {
			return err
		}
		log.Debug("running ldconfig: the in-process rebuild does not reproduce this image", "reason", err)
	}
	return pr.ldconfig.Run(ctx, rootPath, dirs, rootfs.LdconfigOptions{NoPivot: opts.NoPivot, Exe: opts.LdconfigExe, Log: log})
}

func (pr *prepared) Close() {
	pr.sources.Close()
	pr.proc.Close()
	pr.ldconfig.Close()
}

// apply makes the plan's file-system changes in the container root r.
// Its debug record says how long each step took (where a slow create
// spends its time on a given host).
func (pr *prepared) apply(r *rootfs.Root, p *plan.Plan, log *slog.Logger, host func(func() error) error) error {
	t0 := time.Now()
	if pr.proc != nil {
		if err := r.MountProcDriver(pr.proc, log); err != nil {
			return err
		}
	}
	t1 := time.Now()
	for i, m := range p.Mounts {
		src, err := pr.sources.Source(i, r, host)
		if err != nil {
			return err
		}
		if err := r.Attach(src, m.Destination); err != nil {
			return err
		}
	}
	t2 := time.Now()
	for _, s := range p.Symlinks {
		if err := r.Symlink(s.Target, s.Link); err != nil {
			return err
		}
	}
	t3 := time.Now()
	for i := len(p.Mounts); i < pr.sources.Len(); i++ {
		src, err := pr.sources.Source(i, r, host)
		if err != nil {
			return err
		}
		if err := r.Attach(src, pr.specs[i].device.Path); err != nil {
			return err
		}
	}
	// The container's /dev is set up by now (configure runs as a
	// prestart hook): the /dev/dri/by-path links go after the nodes.
	for _, s := range p.DevSymlinks {
		if err := r.Symlink(s.Target, s.Link); err != nil {
			return err
		}
	}
	log.Debug("container root changed", "proc_view", t1.Sub(t0), "mounts", len(p.Mounts), "mounts_time", t2.Sub(t1),
		"symlinks", len(p.Symlinks), "symlinks_time", t3.Sub(t2), "devices", len(p.Devices)+len(p.DevSymlinks), "devices_time", time.Since(t3))
	return nil
}

// deviceRules are the cgroup rules for the plan's devices, deduplicated.
func deviceRules(p *plan.Plan) []deviceRule {
	var out []deviceRule
	seen := map[deviceRule]bool{}
	for _, d := range p.Devices {
		r := deviceRule{d.Major, d.Minor}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// compatEnabled reports whether CUDA compat handling is on and the plan
// mounts libcuda (compute): only then can compatDir find a directory, so
// only then does prepare copy the host ldconfig.
func compatEnabled(p *plan.Plan, opts Options) bool {
	return (opts.CUDACompatMode == CompatLdconfig || opts.CUDACompatMode == CompatMount) && p.InjectsLibcuda()
}

// compatDir returns CompatDir when CUDA compat handling is on, the plan
// injects libcuda and the image's compat directory holds a libcuda that is
// to be used over the host driver's (cudacompat.Select: the rule of
// nvidia-cdi-hook's enable-cuda-compat and of the runtime, read from the
// library's name and ELF note inside the root). The directory is then
// added to ldconfig's command line, which lists the compat libcuda.so.1 in
// the cache; nothing is mounted from the image. A compat library that is
// not a regular file, or is too large, is an error.
func compatDir(r *rootfs.Root, p *plan.Plan, opts Options, log *slog.Logger) (string, error) {
	if !compatEnabled(p, opts) {
		return "", nil
	}
	lib, err := cudacompat.Select(r, CompatDir, opts.DriverVersion, "", log)
	if err != nil || lib == "" {
		return "", err
	}
	log.Debug("CUDA forward compatibility libraries found", "dir", CompatDir, "libcuda", lib, "host driver", opts.DriverVersion)
	return CompatDir, nil
}
