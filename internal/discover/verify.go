package discover

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/procfs"
)

// identity is what Verify compares after discovery: the pinned roots and
// the kernel module's version.
type identity struct {
	pins []pinnedID
	// versionPath is the host path of /proc/driver/nvidia/version and
	// version what it said.
	versionPath string
	version     string
	// load is the module's load (moduleLoad) when discovery read the
	// version from procfs: then Verify compares it instead of reading
	// the version file again (11 µs to 0.7 ms on H100 hosts).
	load string
	// ldcache is the host path of the ld.so.cache searched.
	ldcache string
}

// pinnedID is a pinned root: its host path and the directory discovery
// read through it.
type pinnedID struct {
	path string
	id   fileID
}

// identity returns what Verify compares for this discovery.
func (x *discoverer) identity() *identity {
	id := &identity{versionPath: x.procPath(procfs.VersionPath), version: x.d.Version, ldcache: x.ldcache, load: x.load}
	for _, p := range x.pins {
		if p.id != (fileID{}) {
			id.pins = append(id.pins, pinnedID{path: p.path, id: p.id})
		}
	}
	return id
}

// DriverChangedError reports that the driver changed between discovery
// and the use of its result: a driver root renamed away or replaced, a
// file of the plan gone, another kernel module version loaded (a driver
// upgrade, a driver container restarting).
type DriverChangedError struct {
	// Root is the driver root.
	Root string
	// Path is what vanished or changed (a host path), Reason what happened
	// to it.
	Path   string
	Reason string
}

func (e *DriverChangedError) Error() string {
	return fmt.Sprintf("the NVIDIA driver under %s changed while the injection plan was built: %s %s "+
		"(a driver upgrade or a driver container restart?); retry once the driver is in place",
		e.Root, e.Path, e.Reason)
}

// Verify checks, after a plan was built from d and before anything uses
// it, that the driver is still the one discovery read: each driver, dev
// and proc root still names the directory discovery read through (not
// renamed away, not replaced), the kernel module reports the same version,
// and every path in paths (the host files the plan mounts or names)
// exists. It is a handful of stat calls and one small read: no second
// discovery. The error is a *DriverChangedError naming the first thing
// that changed.
func (d *Driver) Verify(paths []string) error {
	changed := func(p, reason string) error {
		return &DriverChangedError{Root: d.Root, Path: p, Reason: reason}
	}
	if id := d.ident; id != nil {
		for _, p := range id.pins {
			var st unix.Stat_t
			if err := unix.Stat(p.path, &st); err != nil {
				return changed(p.path, "vanished: "+errReason(err))
			}
			if (fileID{dev: st.Dev, ino: st.Ino}) != p.id {
				return changed(p.path, "was replaced by another directory")
			}
		}
		if id.load != "" {
			// The same load of the module: the same version (and no
			// reload of it meanwhile).
			if now, ok := moduleLoad(); !ok || now != id.load {
				return changed(id.versionPath, "belongs to another load of the kernel module (unloaded or loaded again)")
			}
		} else {
			v, err := procfs.ReadVersion(id.versionPath)
			if err != nil {
				return changed(id.versionPath, "cannot be read any more: "+errReason(err))
			}
			if v.NVRM != id.version {
				return changed(id.versionPath, fmt.Sprintf("now says kernel module %s, not %s", v.NVRM, id.version))
			}
		}
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return changed(p, "vanished: "+errReason(err))
		}
	}
	return nil
}

// errReason is the cause of a file error without the path it repeats.
func errReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, fs.ErrNotExist) {
		return "no such file or directory"
	}
	return err.Error()
}
