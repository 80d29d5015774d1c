package discover

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/runcache"
)

// The run-cache kinds of what discovery reads from NVIDIA's procfs files.
const (
	versionKind   = "moduleversion"
	gpuInfoKind   = "gpuinfo"
	migMinorsKind = "migminors"
)

// procCache returns the run cache directory (driverprobe.Config.OpenCache)
// and the key for what discovery reads from the proc files at paths (proc
// root paths: procfs.VersionPath, …), or nil when it is not cached. The
// driver makes those files on every read, and on real hosts that costs
// (a GPU's information file 0.2–0.7 ms on an H100, mig-minors 5–8 ms). On procfs the key is
// the module version found so far, the module's load (moduleLoad, kept in
// x.load for Verify) and each file's inode; what and extra (what else the
// answer depends on) complete it. Files that are not procfs (fixture roots)
// cost nothing worth caching and are read, except in tests
// (Options.cacheRegularProc), keyed on each file's identity: device, inode,
// size, mtime, ctime.
func (x *discoverer) procCache(what string, paths []string, extra string) (*runcache.Dir, string) {
	if len(paths) == 0 {
		return nil, ""
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(x.procAt(paths[0]), &fs); err != nil {
		return nil, ""
	}
	procFS := fs.Type == unix.PROC_SUPER_MAGIC
	if procFS && x.load == "" {
		x.load, _ = moduleLoad()
	}
	if (procFS && x.load == "") || (!procFS && !x.opts.cacheRegularProc) {
		return nil, ""
	}
	dir := x.runCache()
	if dir == nil {
		return nil, ""
	}
	var k strings.Builder
	fmt.Fprintf(&k, "%s module %q", what, x.d.Version)
	if procFS {
		k.WriteString(" " + x.load)
	}
	for _, p := range paths {
		var st unix.Stat_t
		if err := x.procLoc(p).stat(&st); err != nil {
			return nil, ""
		}
		fmt.Fprintf(&k, " %q %d.%d", p, st.Dev, st.Ino)
		if !procFS {
			fmt.Fprintf(&k, " %d %d %d", st.Size, st.Mtim.Nano(), st.Ctim.Nano())
		}
	}
	k.WriteString(" " + extra)
	return dir, runcache.KeyOf(k.String())
}

// runCache is the run cache directory (driverprobe.Config.OpenCache),
// opened and checked once per discovery; nil when it cannot be used.
func (x *discoverer) runCache() *runcache.Dir {
	if !x.rcOpened {
		x.rcOpened = true
		var note string
		if x.rc, note = x.opts.ProbeConfig.OpenCache(); x.rc == nil && note != "" {
			x.log.Debug("procfs facts not cached", "reason", note)
		}
	}
	return x.rc
}

// loadOrRead returns what dir holds for key (a procCache key) or, when
// nothing (or dir is nil), what read returns, then kept there.
func loadOrRead[T any](x *discoverer, dir *runcache.Dir, kind, key string, read func() (T, error)) (T, error) {
	var v T
	if dir != nil && dir.Load(kind, key, &v) {
		return v, nil
	}
	v, err := read()
	if err == nil && dir != nil {
		if err := dir.Store(kind, key, v); err != nil {
			x.log.Debug(kind+" not cached", "err", err)
		}
	}
	return v, err
}

// moduleLoad identifies the nvidia kernel module's current load: the boot,
// and the inode of /sys/module/nvidia, which sysfs numbers anew whenever
// the module is loaded. ok is false when the module is not loaded (or
// sysfs not there).
func moduleLoad() (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat("/sys/module/nvidia", &st); err != nil {
		return "", false
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("boot %s load %d.%d", strings.TrimSpace(string(b)), st.Dev, st.Ino), true
}
