package discover

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/ldcache"
)

// Graphics, display and OpenCL files: what NVIDIA 1.20's graphics mounts
// discoverer looks for (its internal/discover/graphics.go), found by the same
// rules but resolved inside the driver root.

// configFiles are looked up, relative to each config directory, in this
// order; each found file is mounted at its own path.
var configFiles = []string{
	"glvnd/egl_vendor.d/10_nvidia.json",
	"egl/egl_external_platform.d/15_nvidia_gbm.json",
	"egl/egl_external_platform.d/10_nvidia_wayland.json",
	"egl/egl_external_platform.d/09_nvidia_wayland2.json",
	"nvidia/nvoptix.bin",
	"X11/xorg.conf.d/10-nvidia.conf",
	"X11/xorg.conf.d/nvidia-drm-outputclass.conf",
	"OpenCL/vendors/nvidia.icd",
}

// vulkanFiles are looked up like configFiles, then at the driver root
// itself, and mounted below /etc whatever their host directory, where the
// Vulkan loader looks first.
var vulkanFiles = []string{
	"vulkan/icd.d/nvidia_icd.json",
	"vulkan/icd.d/nvidia_layers.json",
	"vulkan/implicit_layer.d/nvidia_layers.json",
	"vulkan/icd.d/nvidia_icd.x86_64.json",
}

// configDirs are the directories configFiles are looked up in (NVIDIA's
// /etc and $XDG_DATA_DIRS, whose default is /usr/local/share:/usr/share).
var configDirs = []string{"/etc", "/usr/local/share", "/usr/share"}

// egl platform libraries: not named by the driver version; NVIDIA matches
// <prefix>.*.* next to the other libraries.
var eglPlatformLibs = []string{"libnvidia-egl-gbm.so", "libnvidia-egl-wayland.so", "libnvidia-egl-wayland2.so"}

// xorgDirs are the X.Org module directories below each driver library
// directory and the fixed ones, in NVIDIA's lookup order.
func xorgDirs(libDirs []string) []string {
	var dirs []string
	sub := []string{"modules/drivers", "modules/extensions", "modules/updates/drivers", "modules/updates/extensions"}
	for _, l := range libDirs {
		dirs = append(dirs, path.Join(l, "nvidia/xorg"))
		for _, s := range sub {
			dirs = append(dirs, path.Join(l, "xorg", s))
		}
	}
	for _, base := range []string{"/usr/lib/xorg", "/usr/lib64/xorg", "/usr/X11R6/lib", "/usr/X11R6/lib64"} {
		for _, s := range sub {
			dirs = append(dirs, path.Join(base, s))
		}
	}
	return dirs
}

// graphics finds the graphics files (Driver.Graphics) and each GPU's DRM
// nodes and by-path links.
func (x *discoverer) graphics() error {
	c := x.cache
	if x.opts.Caps != nil && !x.opts.Caps.Has(caps.Graphics) && !x.opts.Caps.Has(caps.Display) {
		return nil
	}
	// Configuration files are looked up in the driver root's /etc,
	// /usr/local/share and /usr/share, or, with Options.ConfigSearchPaths,
	// in those host directories (NVIDIA's --config-search-path).
	cfgRoot, cfgDirs := x.root, configDirs
	if len(x.opts.ConfigSearchPaths) > 0 {
		cfgRoot, cfgDirs = newInRoot("/", nil), x.opts.ConfigSearchPaths
	}
	addIn := func(r *inRoot, p, dest string) bool {
		real, mode, err := r.statFollow(p)
		if err != nil || !mode.IsRegular() {
			return false
		}
		if slices.ContainsFunc(x.d.Graphics, func(f File) bool { return f.HostPath == r.host(real) }) {
			return true
		}
		f := File{Name: path.Base(p), Capability: caps.Graphics, Path: p, HostPath: r.host(real)}
		if dest != p {
			f.Dest = dest
		}
		x.d.Graphics = append(x.d.Graphics, f)
		return true
	}
	add := func(p, dest string) bool { return addIn(x.root, p, dest) }
	// Libraries: the EGL platform libraries, found through ld.so.cache.
	if c != nil {
		for _, prefix := range eglPlatformLibs {
			for _, e := range c.Lookup(ldcache.Class64, prefix) {
				dir := path.Dir(e.Value)
				real, err := x.root.resolve(dir)
				if err != nil {
					continue
				}
				matches, _ := globNames(x.root.loc(real), prefix+".*.*")
				for _, m := range matches {
					if x.addGraphicsLib(path.Join(dir, m)) {
						break
					}
				}
			}
		}
	}
	// libnvidia-vulkan-producer.so.<version> next to libcuda: NVIDIA's
	// graphics mounts carry it and its development link.
	libDirs := x.libcudaDirs()
	for _, d := range libDirs {
		x.addGraphicsLib(path.Join(d, "libnvidia-vulkan-producer.so."+x.d.Version))
	}
	// Configuration files.
	for _, f := range configFiles {
		for _, d := range cfgDirs {
			if addIn(cfgRoot, path.Join(d, f), path.Join(d, f)) {
				break
			}
		}
	}
	// X.Org modules: the first hit of each in the module directories.
	for _, name := range []string{"nvidia_drv.so", "libglxserver_nvidia.so." + x.d.Version} {
		for _, d := range xorgDirs(libDirs) {
			if add(path.Join(d, name), path.Join(d, name)) {
				break
			}
		}
	}
	// Vulkan: config directories, then the root itself (GKE keeps
	// {{root}}/vulkan); mounted below /etc.
	for _, f := range vulkanFiles {
		found := false
		for _, d := range cfgDirs {
			if found = addIn(cfgRoot, path.Join(d, f), path.Join("/etc", f)); found {
				break
			}
		}
		if !found {
			add(path.Join("/", f), path.Join("/etc", f))
		}
	}
	return x.drm()
}

// addGraphicsLib adds the library p (an in-root path) to Driver.Graphics with
// its SONAME, when it resolves to a regular file.
func (x *discoverer) addGraphicsLib(p string) bool {
	real, mode, err := x.root.statFollow(p)
	if err != nil || !mode.IsRegular() {
		return false
	}
	host := x.root.host(real)
	if slices.ContainsFunc(x.d.Graphics, func(f File) bool { return f.HostPath == host }) {
		return true
	}
	lib, err := inspectELF(x.root.loc(real), &x.elfBuf)
	if err != nil {
		x.warn("graphics library %s: %v", p, err)
		return false
	}
	x.d.Graphics = append(x.d.Graphics, File{Name: path.Base(p), Capability: caps.Graphics, Path: real,
		HostPath: host, SONAME: lib.SONAME, CacheFlags: lib.Flags, Library: true})
	return true
}

// libcudaDirs are the directories of the 64-bit libcuda (NVIDIA's driver
// library directories).
func (x *discoverer) libcudaDirs() []string {
	var dirs []string
	for _, f := range x.d.Libraries {
		if f.Name == "libcuda.so" && !f.Compat32 && !slices.Contains(dirs, path.Dir(f.Path)) {
			dirs = append(dirs, path.Dir(f.Path))
		}
	}
	return dirs
}

// drmDir is a GPU's sysfs directory of DRM class devices.
func drmDir(busID string) string {
	return "/sys/bus/pci/devices/" + strings.TrimPrefix(strings.ToLower(busID), "0000") + "/drm"
}

// drm finds, for each GPU, the /dev/dri nodes its sysfs drm/ directory names
// (card*, renderD*: every entry, as NVIDIA takes them) and the
// /dev/dri/by-path links that point at them.
func (x *discoverer) drm() error {
	var byPath []fs.DirEntry
	if ents, err := x.dev.loc("/dev/dri/by-path").readDir(); err == nil {
		byPath = ents
	}
	for i := range x.d.GPUs {
		g := &x.d.GPUs[i]
		ents, err := x.proc.loc(drmDir(g.BusID)).readDir()
		if err != nil {
			continue
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, n := range names {
			node, ok, err := x.node("/dev/dri/"+n, 226, -1)
			if err != nil {
				return fmt.Errorf("GPU %d (%s): DRM node: %w", g.Index, g.BusID, err)
			}
			if !ok {
				continue
			}
			g.DRMNodes = append(g.DRMNodes, node)
		}
		for _, e := range byPath {
			if !strings.HasPrefix(e.Name(), "pci-") || strings.Count(e.Name(), "-") < 2 {
				continue
			}
			target, err := readlink(x.dev.loc("/dev/dri/by-path/" + e.Name()))
			if err != nil {
				continue
			}
			if slices.ContainsFunc(g.DRMNodes, func(n DeviceNode) bool { return path.Base(n.Path) == path.Base(target) }) {
				g.DRMLinks = append(g.DRMLinks, DRMLink{Path: "/dev/dri/by-path/" + e.Name(), Target: target})
			}
		}
	}
	return nil
}

// globNames lists the names in the directory at l that match pattern
// (which has no separators), sorted.
func globNames(l loc, pattern string) ([]string, error) {
	ents, err := l.readDir()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if ok, _ := path.Match(pattern, e.Name()); ok {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
