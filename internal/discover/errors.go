package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// NoDriverError reports that no NVIDIA kernel driver is visible under the
// root: /proc/driver/nvidia/version is missing or unreadable.
type NoDriverError struct {
	// Root is the driver root, Path the host path of the version file.
	Root string
	Path string
	Err  error
}

func (e *NoDriverError) Error() string {
	what := "cannot be read"
	if errors.Is(e.Err, fs.ErrNotExist) {
		what = "no such file"
	} else if e.Err != nil {
		what = e.Err.Error()
	}
	return fmt.Sprintf("no NVIDIA driver found under root %s: %s: %s (is the nvidia kernel module loaded? is --root right?)",
		e.Root, e.Path, what)
}

func (e *NoDriverError) Unwrap() error { return e.Err }

// VersionMismatchError is the "Driver/library version mismatch": the kernel
// module and the user-space libraries under the root belong to different
// driver versions, usually after an upgrade without a reboot or with a
// driver root that does not match the loaded module.
type VersionMismatchError struct {
	// Module is the kernel module's version and ModulePath the file it was
	// read from (host path).
	Module     string
	ModulePath string
	// Library is the version in the library file names and LibraryPath the
	// library (host path) that carries it.
	Library     string
	LibraryPath string
}

func (e *VersionMismatchError) Error() string {
	return fmt.Sprintf("driver/library version mismatch: kernel module is %s (%s) but the driver libraries are %s (%s); "+
		"reboot or reload the nvidia module after a driver upgrade, or point --root at the driver matching the module",
		e.Module, e.ModulePath, e.Library, e.LibraryPath)
}

// LdCacheError reports a missing, unreadable or corrupt ld.so.cache.
type LdCacheError struct {
	// Path is the host path of the cache file; Root the driver root.
	Path string
	Root string
	Err  error
}

func (e *LdCacheError) Error() string {
	fix := "run ldconfig to regenerate it"
	if e.Root != "" && e.Root != "/" {
		fix = fmt.Sprintf("run ldconfig -r %s to regenerate it", e.Root)
	}
	reason := "cannot be read"
	switch {
	case errors.Is(e.Err, fs.ErrNotExist):
		reason = "no such file"
	case e.Err != nil:
		reason = e.Err.Error()
	}
	return fmt.Sprintf("cannot use the dynamic linker cache %s: %s (%s)", e.Path, reason, fix)
}

func (e *LdCacheError) Unwrap() error { return e.Err }

// DeviceNodeError reports a device node that is missing or is not the
// character device the driver's numbers call for.
type DeviceNodeError struct {
	// Path is the node's path under the dev root, HostPath the file checked.
	Path     string
	HostPath string
	// Major and Minor are the expected device numbers.
	Major, Minor uint32
	// Missing is true when the node does not exist; otherwise GotMajor and
	// GotMinor hold what was found (or Reason says why it is unusable).
	Missing            bool
	GotMajor, GotMinor uint32
	Reason             string
}

func (e *DeviceNodeError) Error() string {
	if e.Missing {
		return fmt.Sprintf("missing device node %s: expected character device %d:%d at %s "+
			"(load the driver and create the node: %s, or pass --load-kmods)",
			e.Path, e.Major, e.Minor, e.HostPath, modprobeHint(e.Path))
	}
	if e.Reason != "" {
		return fmt.Sprintf("invalid device node %s: expected character device %d:%d, %s", e.HostPath, e.Major, e.Minor, e.Reason)
	}
	return fmt.Sprintf("invalid device node %s: expected character device %d:%d, found %d:%d",
		e.HostPath, e.Major, e.Minor, e.GotMajor, e.GotMinor)
}

// modprobeHint names the nvidia-modprobe invocation that creates a node.
func modprobeHint(p string) string {
	base := path.Base(p)
	switch {
	case base == "nvidiactl":
		return "nvidia-modprobe"
	case strings.HasPrefix(base, "nvidia-uvm"):
		return "nvidia-modprobe -u -c 0"
	case base == "nvidia-modeset":
		return "nvidia-modprobe -m"
	case strings.HasPrefix(base, "nvidia") && strings.Trim(base[len("nvidia"):], "0123456789") == "" && base != "nvidia":
		return "nvidia-modprobe -c " + base[len("nvidia"):]
	}
	return "nvidia-modprobe"
}
