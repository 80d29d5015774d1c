package configure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/phase"
)

// mountInTest mounts (or binds) src at dst in the test's own mount
// namespace until the test ends.
func mountInTest(t *testing.T, src, dst, fstype string, flags uintptr) {
	t.Helper()
	must(t, os.MkdirAll(dst, 0o755))
	if err := unix.Mount(src, dst, fstype, flags, ""); err != nil {
		t.Fatalf("mount %s on %s: %v", src, dst, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
}

// TestApplyStandalone: with a real procfs at ROOTFS/proc (and the devices
// cgroup hierarchy visible in the rootfs, as a standalone caller sets it
// up), Apply reaches the container through ROOTFS/proc.
func TestApplyStandalone(t *testing.T) {
	c := startContainer(t, true)
	d := newDriver(t)
	mountInTest(t, "proc", c.rootfs+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
	mountInTest(t, "/sys/fs/cgroup/devices", c.rootfs+"/sys/fs/cgroup/devices", "", unix.MS_BIND)
	p := d.plan()
	must(t, Apply(context.Background(), p, Container{PID: c.pid, Rootfs: c.rootfs, ProcRoot: c.rootfs}, Options{}))
	if b, err := os.ReadFile(c.inside("/usr/bin/nvidia-smi")); err != nil || !strings.Contains(string(b), "fake nvidia-smi") {
		t.Errorf("nvidia-smi in the container: %q, %v", b, err)
	}
	if list := c.devicesList(t); !strings.Contains(list, "c 1:3 rw") {
		t.Errorf("devices.list = %q, want c 1:3 rw added", list)
	}
}

// TestApplyStandaloneFakeCgroup: with a real procfs at ROOTFS/proc but the
// container's devices cgroup only as image files under ROOTFS/sys/fs/cgroup
// (the caller did not mount the hierarchy), Apply refuses before writing
// rules to the image's files or mounting anything.
func TestApplyStandaloneFakeCgroup(t *testing.T) {
	c := startContainer(t, true)
	d := newDriver(t)
	mountInTest(t, "proc", c.rootfs+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
	fake := c.rootfs + c.cgroup
	must(t, os.MkdirAll(fake, 0o755))
	for _, f := range []string{"devices.list", "devices.allow", "devices.deny"} {
		must(t, os.WriteFile(fake+"/"+f, nil, 0o644))
	}
	before := c.devicesList(t)
	err := Apply(context.Background(), d.plan(), Container{PID: c.pid, Rootfs: c.rootfs, ProcRoot: c.rootfs}, Options{})
	var ce *phase.Error
	if !errors.As(err, &ce) || ce.Phase != phase.Container || !strings.Contains(err.Error(), fake+" is not on a cgroup (v1) file system") {
		t.Fatalf("Apply = %v, want a container error naming %s", err, fake)
	}
	if b, _ := os.ReadFile(fake + "/devices.allow"); len(b) != 0 {
		t.Errorf("rules written to the image's fake devices.allow: %q", b)
	}
	if got := c.devicesList(t); got != before {
		t.Errorf("devices.list = %q, want it unchanged (%q)", got, before)
	}
	if m := c.mounts(t); len(m) != 0 {
		t.Errorf("mounts left in the container: %v", m)
	}
}

// TestApplyStandaloneCgroupSwap: the device cgroup directory is opened and
// checked once; when the image swaps it by a rename in the rootfs for a
// directory of its own files after the check, the rules still reach the
// checked cgroup through the opened directory, never the image's files.
func TestApplyStandaloneCgroupSwap(t *testing.T) {
	c := startContainer(t, true)
	d := newDriver(t)
	mountInTest(t, "proc", c.rootfs+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
	mountInTest(t, "/sys/fs/cgroup/devices", c.rootfs+"/sys/fs/cgroup/devices", "", unix.MS_BIND)
	parent := c.rootfs + "/sys/fs/cgroup"
	fake := c.rootfs + c.cgroup
	swapped := false
	hooks := &applyHooks{afterCgroupOpen: func() {
		// The checked directory moves away (with the mount below it) and
		// image files take its path.
		must(t, os.Rename(parent, parent+".real"))
		t.Cleanup(func() {
			must(t, os.RemoveAll(parent))
			must(t, os.Rename(parent+".real", parent))
		})
		must(t, os.MkdirAll(fake, 0o755))
		for _, f := range []string{"devices.list", "devices.allow", "devices.deny"} {
			must(t, os.WriteFile(fake+"/"+f, nil, 0o644))
		}
		swapped = true
	}}
	err := Apply(context.Background(), d.plan(), Container{PID: c.pid, Rootfs: c.rootfs, ProcRoot: c.rootfs}, Options{hooks: hooks})
	must(t, err)
	if !swapped {
		t.Fatal("the directory was not swapped: hook not run")
	}
	for _, f := range []string{"devices.allow", "devices.deny"} {
		if b, err := os.ReadFile(fake + "/" + f); err != nil || len(b) != 0 {
			t.Errorf("the image's fake %s = %q, %v; want it empty", f, b, err)
		}
	}
	if list := c.devicesList(t); !strings.Contains(list, "c 1:3 rw") {
		t.Errorf("devices.list = %q, want c 1:3 rw added to the checked cgroup", list)
	}
}

// TestOpenInRootNoSymlinks: the device cgroup directory is reached below
// the root one component at a time; a symlink anywhere on the way (put
// there after securejoin resolved the path) is refused, not followed.
func TestOpenInRootNoSymlinks(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(root+"/a/b/c", 0o755))
	must(t, os.Symlink("/sys/fs/cgroup", root+"/a/link"))
	must(t, os.Symlink("b", root+"/a/rel"))
	tests := []struct {
		name, p, err string
	}{
		{"plain", root + "/a/b/c", ""},
		{"the root", root, ""},
		{"absolute symlink", root + "/a/link", "symlink"},
		{"symlink in the middle", root + "/a/rel/c", "symlink"},
		{"outside", "/sys/fs/cgroup", "not below the container root"},
		{"missing", root + "/a/x", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := openInRootNoSymlinks(root, tt.p)
			if tt.err == "" {
				must(t, err)
				var st, want unix.Stat_t
				must(t, unix.Fstat(fd, &st))
				unix.Close(fd)
				must(t, unix.Stat(tt.p, &want))
				if st.Ino != want.Ino || st.Dev != want.Dev {
					t.Errorf("opened another directory than %s", tt.p)
				}
				return
			}
			if err == nil {
				unix.Close(fd)
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("openInRootNoSymlinks(%s) = %v, want an error containing %q", tt.p, err, tt.err)
			}
		})
	}
}

// TestApplyStandaloneNotProcfs: a ROOTFS/proc that is not a procfs mount is
// refused before anything changes, and nothing in it is read or followed.
func TestApplyStandaloneNotProcfs(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, c *container)
		msg  string
	}{
		{"fake files", func(t *testing.T, c *container) {
			// Files that would steer Apply to a cgroup and a "namespace"
			// of the image's choosing.
			pid := c.rootfs + "/proc/" + strconv.Itoa(c.pid)
			must(t, os.MkdirAll(pid+"/ns", 0o755))
			must(t, os.MkdirAll(c.rootfs+"/proc/self", 0o755))
			must(t, os.WriteFile(pid+"/ns/mnt", []byte("fake"), 0o644))
			must(t, os.WriteFile(pid+"/cgroup", []byte("4:devices:/\n"), 0o644))
			must(t, os.WriteFile(c.rootfs+"/proc/self/mountinfo",
				[]byte("30 25 0:26 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"), 0o644))
		}, "file system type"},
		{"symlink to the host's /proc", func(t *testing.T, c *container) {
			must(t, os.Remove(c.rootfs+"/proc"))
			must(t, os.Symlink("/proc", c.rootfs+"/proc"))
		}, "symlink"},
		{"relative symlink", func(t *testing.T, c *container) {
			must(t, os.Remove(c.rootfs+"/proc"))
			must(t, os.Symlink("../../../../../../../../proc", c.rootfs+"/proc"))
		}, "symlink"},
		{"missing", func(t *testing.T, c *container) {
			must(t, os.Remove(c.rootfs+"/proc"))
		}, "no such file"},
		{"a file", func(t *testing.T, c *container) {
			must(t, os.Remove(c.rootfs+"/proc"))
			must(t, os.WriteFile(c.rootfs+"/proc", nil, 0o644))
		}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startContainer(t, true)
			d := newDriver(t)
			tt.edit(t, c)
			var keep []string
			filepath.Walk(c.rootfs, func(p string, info os.FileInfo, err error) error {
				if err == nil && !info.IsDir() {
					keep = append(keep, p)
				}
				return nil
			})
			before := c.devicesList(t)
			err := Apply(context.Background(), d.plan(), Container{PID: c.pid, Rootfs: c.rootfs, ProcRoot: c.rootfs}, Options{})
			var ce *phase.Error
			want := c.rootfs + "/proc is not a procfs mount"
			if !errors.As(err, &ce) || ce.Phase != phase.Container || !errors.Is(err, ErrNotProcfs) ||
				!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Apply = %v, want a container error containing %q and %q", err, want, tt.msg)
			}
			for _, k := range keep {
				os.Remove(k) // the test's own hostile files
			}
			checkUntouched(t, c, before)
		})
	}
}

// TestOpenProcDirHost: the host's /proc is used as it is.
func TestOpenProcDirHost(t *testing.T) {
	d, err := openProcDir("")
	must(t, err)
	defer d.Close()
	data, err := d.readFile("self/status")
	must(t, err)
	if want := fmt.Sprintf("Pid:\t%d\n", os.Getpid()); !strings.Contains(string(data), want) {
		t.Errorf("self/status lacks %q", want)
	}
}
