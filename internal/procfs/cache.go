package procfs

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/runcache"
)

// ModuleLoad identifies the nvidia kernel module's current load: the boot,
// and the inode of /sys/module/nvidia, which sysfs numbers anew whenever the
// module is loaded. ok is false when the module is not loaded (or sysfs is
// not there).
func ModuleLoad() (string, bool) {
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

// procFileKind is the run-cache kind of a proc file's contents.
const procFileKind = "procfile"

// Cache reads the driver's proc files and keeps their contents in a run
// cache directory: the driver makes them on every read, at a cost (about
// 0.7 ms a file on an H100 host), and they do not change while the module
// stays loaded (params, version, registry, a GPU's information). An entry is
// keyed on the module's load (ModuleLoad), the path and the file's inode, so
// a reload is a miss. Files that are not on procfs (fixture roots, tests),
// or a host without the module, are read every time, as is everything by a
// nil *Cache.
type Cache struct {
	dir        *runcache.Dir
	moduleLoad func() (string, bool)
	onProc     func(path string) bool

	asked  bool // moduleLoad called
	load   string
	loadOK bool
}

// NewCache returns a Cache keeping the files in dir; nil (files read every
// time) when dir is nil.
func NewCache(dir *runcache.Dir) *Cache {
	if dir == nil {
		return nil
	}
	return &Cache{dir: dir, moduleLoad: ModuleLoad, onProc: isProcFS}
}

func isProcFS(path string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(path, &fs) == nil && fs.Type == unix.PROC_SUPER_MAGIC
}

// ReadFile is ReadFile, from the cache when the file was read during this
// load of the module.
func (c *Cache) ReadFile(path string) ([]byte, error) {
	if c == nil || !c.onProc(path) {
		return ReadFile(path)
	}
	if !c.asked {
		c.asked = true
		c.load, c.loadOK = c.moduleLoad()
	}
	var st unix.Stat_t
	if !c.loadOK || unix.Stat(path, &st) != nil {
		return ReadFile(path)
	}
	key := runcache.KeyOf(fmt.Sprintf("%s %q %d.%d", c.load, path, st.Dev, st.Ino))
	var data []byte
	if c.dir.Load(procFileKind, key, &data) {
		return data, nil
	}
	data, err := ReadFile(path)
	if err == nil {
		_ = c.dir.Store(procFileKind, key, data) // a lost entry costs one more read
	}
	return data, err
}
