package rootfs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/procfs"
)

// ContainerProcDriver is where the driver's proc directory appears in a
// container.
const ContainerProcDriver = "/proc/driver/nvidia"

// ProcDriver is a prepared /proc/driver/nvidia view: copies of the host's
// files (params rewritten so that ModifyDeviceFiles is 0) and the sources of
// the selected GPUs' directories. Prepare it on the host with
// PrepareProcDriver and mount it with Root.MountProcDriver, possibly in the
// container's mount namespace.
type ProcDriver struct {
	files []TmpfsFile
	binds []procBind
}

// procBind is a host proc entry bound read-only into the view.
type procBind struct {
	rel string // path below the view (gpus/<bus id>, capabilities/…)
	src *Source
}

// Close releases the prepared sources.
func (pd *ProcDriver) Close() error {
	if pd == nil {
		return nil
	}
	for _, b := range pd.binds {
		b.src.Close()
	}
	return nil
}

// ProcView describes a /proc/driver/nvidia view: the host's driver proc
// directory and which of its entries the container sees.
type ProcView struct {
	// HostDir is the driver's proc directory on the host.
	HostDir string
	// Files are the names of HostDir's files copied into the view.
	Files []string
	// GPUDirs are the bus ids whose gpus/<bus id> directory is bound.
	GPUDirs []string
	// Expose are further paths relative to HostDir bound read-only.
	Expose []string
}

// PrepareProcDriver reads view.HostDir's files, opens the gpus/<bus id>
// directory of each selected GPU (trying the 4-hex-digit PCI domain form
// when the 8-digit one is absent, as drivers on some VMs name them) and the
// view.Expose entries (files or directories, such as MIG access files).
// Missing files are skipped; a missing GPU directory or exposed entry is an
// error.
func PrepareProcDriver(view *ProcView) (*ProcDriver, error) {
	if view == nil {
		return nil, errors.New("proc view: nil")
	}
	if !path.IsAbs(view.HostDir) {
		return nil, fmt.Errorf("proc view: host directory %q is not absolute", view.HostDir)
	}
	pd := &ProcDriver{}
	for _, name := range view.Files {
		if !validRel(name) || strings.Contains(name, "/") {
			return nil, fmt.Errorf("proc view: invalid file name %q", name)
		}
		p := path.Join(view.HostDir, name)
		data, err := procfs.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("proc view: %w", err)
		}
		if name == "params" {
			data = procfs.DisableDeviceFileModification(data)
		}
		pd.files = append(pd.files, TmpfsFile{Name: name, Data: data, Mode: 0o444})
	}
	ro := DataOptions()
	for _, bus := range view.GPUDirs {
		if !validRel(bus) || strings.Contains(bus, "/") {
			pd.Close()
			return nil, fmt.Errorf("proc view: invalid GPU bus id %q", bus)
		}
		name := bus
		src, err := OpenSource(path.Join(view.HostDir, "gpus", name), KindDir, ro)
		if err != nil && errors.Is(err, unix.ENOENT) && len(bus) > 4 && strings.HasPrefix(bus, "0000") {
			name = bus[4:]
			src, err = OpenSource(path.Join(view.HostDir, "gpus", name), KindDir, ro)
		}
		if err != nil {
			pd.Close()
			return nil, fmt.Errorf("proc view: GPU %s: %w", bus, err)
		}
		pd.binds = append(pd.binds, procBind{rel: "gpus/" + name, src: src})
	}
	for _, rel := range view.Expose {
		if !validRel(rel) {
			pd.Close()
			return nil, fmt.Errorf("proc view: invalid exposed path %q", rel)
		}
		hp := path.Join(view.HostDir, rel)
		kind := KindFile
		if st, err := os.Lstat(hp); err == nil && st.IsDir() {
			kind = KindDir
		}
		src, err := OpenSource(hp, kind, ro)
		if err != nil {
			pd.Close()
			return nil, fmt.Errorf("proc view: %w", err)
		}
		pd.binds = append(pd.binds, procBind{rel: rel, src: src})
	}
	return pd, nil
}

// MountProcDriver masks the container's /proc/driver/nvidia with a
// read-only, nosuid, nodev, noexec tmpfs holding pd's file copies and
// read-only binds of the selected GPUs' directories only, so that other
// GPUs' proc entries are invisible.
//
// When the container's /proc/driver exists but has no nvidia directory (no
// driver loaded in this kernel: procfs cannot grow a mount point), there is
// nothing to mask and the view is skipped with a warning.
func (r *Root) MountProcDriver(pd *ProcDriver, log *slog.Logger) error {
	if pd == nil {
		return nil
	}
	if skip, err := r.procDirMissing(); err != nil {
		return err
	} else if skip {
		if log != nil {
			log.Warn("container has no /proc/driver/nvidia (driver not loaded in this kernel); proc view skipped", "root", r.path)
		}
		return nil
	}
	t := Tmpfs{
		Mode:  0o555,
		Size:  "1m",
		Files: append([]TmpfsFile(nil), pd.files...),
		Flags: MountFlags{ReadOnly: true, NoSuid: true, NoDev: true, NoExec: true},
	}
	copied := map[string]bool{}
	for _, f := range pd.files {
		copied[f.Name] = true
	}
	for _, b := range pd.binds {
		if b.src.dir {
			t.Dirs = append(t.Dirs, b.rel)
			continue
		}
		if dir := path.Dir(b.rel); dir != "." {
			t.Dirs = append(t.Dirs, dir)
		}
		if !copied[b.rel] {
			// An empty mount point for the file, created before the
			// tmpfs becomes read-only.
			t.Files = append(t.Files, TmpfsFile{Name: b.rel, Mode: 0o444})
			copied[b.rel] = true
		}
	}
	if err := r.MountTmpfs(ContainerProcDriver, t); err != nil {
		return err
	}
	for _, b := range pd.binds {
		if err := r.Attach(b.src, ContainerProcDriver+"/"+b.rel); err != nil {
			return err
		}
	}
	return nil
}

// procDirMissing reports whether the container's /proc/driver/nvidia is
// absent from a procfs (which cannot hold a new mount point).
func (r *Root) procDirMissing() (bool, error) {
	if r.Exists(ContainerProcDriver) {
		return false, nil
	}
	for _, p := range []string{"/proc/driver", "/proc"} {
		fd, err := r.openDir(p)
		if err != nil {
			continue
		}
		var sfs unix.Statfs_t
		err = unix.Fstatfs(fd, &sfs)
		unix.Close(fd)
		if err != nil {
			return false, r.errorf(p, err)
		}
		return sfs.Type == unix.PROC_SUPER_MAGIC, nil
	}
	return false, nil
}

// ParamsMask is a prepared mask of the container's
// /proc/driver/nvidia/params (disable-device-node-modification): a
// read-only copy of the host's params in which ModifyDeviceFiles is 0, so
// that driver code in the container never creates device nodes. Prepare it
// on the host with PrepareParamsMask and mount it with Root.MaskParams,
// possibly in the container's mount namespace.
type ParamsMask struct {
	data []byte
}

// PrepareParamsMask reads hostDir's params and returns its mask; nil (and
// no error) when the host has no params file or its ModifyDeviceFiles is
// already 0, since there is nothing to mask then.
func PrepareParamsMask(hostDir string, log *slog.Logger) (*ParamsMask, error) {
	hostParams := path.Join(hostDir, "params")
	data, err := procfs.ReadFile(hostParams)
	if errors.Is(err, os.ErrNotExist) {
		if log != nil {
			log.Warn("no driver params on the host; nothing to do", "path", hostParams)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	masked := procfs.DisableDeviceFileModification(data)
	if string(masked) == string(data) {
		if log != nil {
			log.Debug("ModifyDeviceFiles is already 0")
		}
		return nil, nil
	}
	return &ParamsMask{data: masked}, nil
}

// MaskParams mounts pm read-only (nosuid, nodev, noexec) over the
// container's /proc/driver/nvidia/params; a container without that file
// (no driver in its procfs) is skipped with a warning. A nil pm does
// nothing.
func (r *Root) MaskParams(pm *ParamsMask, log *slog.Logger) error {
	if pm == nil {
		return nil
	}
	target := ContainerProcDriver + "/params"
	if !r.Exists(target) {
		if log != nil {
			log.Warn("container has no "+target+"; nothing to mask", "root", r.path)
		}
		return nil
	}
	s, err := DataSource("params", pm.data, DataOptions())
	if err != nil {
		return err
	}
	defer s.Close()
	return r.Attach(s, target)
}
