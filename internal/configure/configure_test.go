package configure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/cudacompat"
	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// container is a stand-in for a runtime-created container: a process in its
// own mount namespace (a private copy of ours, as runc makes before
// pivot_root) and, with cgroups, in its own v1 devices cgroup that denies
// everything but /dev/zero.
type container struct {
	pid    int
	rootfs string
	cgroup string // v1 devices cgroup dir, "" without
}

func startContainer(t testing.TB, withCgroup bool) *container {
	t.Helper()
	requireRoot(t)
	c := &container{rootfs: filepath.Join(t.TempDir(), "rootfs")}
	for _, d := range []string{"/etc", "/dev", "/proc", "/usr/bin", "/usr/lib/x86_64-linux-gnu"} {
		must(t, os.MkdirAll(c.rootfs+d, 0o755))
	}
	must(t, os.WriteFile(c.rootfs+"/etc/debian_version", []byte("12\n"), 0o644))
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	must(t, cmd.Start())
	c.pid = cmd.Process.Pid
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if c.cgroup != "" {
			os.Remove(c.cgroup)
		}
	})
	if withCgroup {
		base := "/sys/fs/cgroup/devices"
		if _, err := os.Stat(base + "/devices.allow"); err != nil {
			t.Skipf("no cgroup v1 devices hierarchy at %s: %v", base, err)
		}
		c.cgroup = filepath.Join(base, fmt.Sprintf("nctk-test-%d", c.pid))
		must(t, os.Mkdir(c.cgroup, 0o755))
		must(t, os.WriteFile(c.cgroup+"/devices.deny", []byte("a"), 0))
		must(t, os.WriteFile(c.cgroup+"/devices.allow", []byte("c 1:5 rwm"), 0))
		must(t, os.WriteFile(c.cgroup+"/cgroup.procs", []byte(strconv.Itoa(c.pid)), 0))
	}
	return c
}

// inside returns the path of a container path as the container sees it.
func (c *container) inside(p string) string {
	return fmt.Sprintf("/proc/%d/root%s%s", c.pid, c.rootfs, p)
}

// mounts returns the mounts below the rootfs in the container's namespace
// (container path -> mount options).
func (c *container) mounts(t *testing.T) map[string]string {
	t.Helper()
	return mountsUnder(t, fmt.Sprintf("/proc/%d/mountinfo", c.pid), c.rootfs)
}

func (c *container) devicesList(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(c.cgroup + "/devices.list")
	must(t, err)
	return string(b)
}

// driver is a fake host driver: a real shared library (so that ldconfig
// makes links and a cache), a binary, and a proc directory.
type driver struct {
	dir, lib, soname, bin, proc string
}

func newDriver(t testing.TB) *driver {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	if len(matches) == 0 {
		t.Skip("no host libz.so.1.* to stand in for a driver library")
	}
	d := &driver{dir: t.TempDir(), soname: "libz.so.1"}
	b, err := os.ReadFile(matches[0])
	must(t, err)
	d.lib = filepath.Join(d.dir, filepath.Base(matches[0]))
	must(t, os.WriteFile(d.lib, b, 0o755))
	d.bin = filepath.Join(d.dir, "nvidia-smi")
	must(t, os.WriteFile(d.bin, []byte("#!/bin/sh\necho fake nvidia-smi\n"), 0o755))
	d.proc = filepath.Join(d.dir, "proc")
	must(t, os.MkdirAll(d.proc+"/gpus/00000000:01:00.0", 0o755))
	must(t, os.MkdirAll(d.proc+"/gpus/00000000:02:00.0", 0o755))
	must(t, os.WriteFile(d.proc+"/params", []byte("ModifyDeviceFiles: 1\n"), 0o644))
	return d
}

func (d *driver) plan() *plan.Plan {
	ro := []string{plan.OptRO, plan.OptNoSuid, plan.OptNoDev, plan.OptRBind, plan.OptRPrivate}
	libdir := "/usr/lib/x86_64-linux-gnu"
	return &plan.Plan{
		Devices: []plan.Device{
			{Path: "/dev/nvidia0", HostPath: "/dev/null", Major: 1, Minor: 3},
			{Path: "/dev/nvidiactl", HostPath: "/dev/zero", Major: 1, Minor: 5},
		},
		Mounts: []plan.Mount{
			{Source: d.lib, Destination: libdir + "/" + filepath.Base(d.lib), Kind: plan.KindFile, Options: ro},
			{Source: d.bin, Destination: "/usr/bin/nvidia-smi", Kind: plan.KindFile, Options: ro},
		},
		// The SONAME link and the development link, as plan.Build makes them.
		Symlinks: []plan.Symlink{
			{Link: libdir + "/" + d.soname, Target: filepath.Base(d.lib)},
			{Link: libdir + "/libz.so", Target: d.soname},
		},
		LdconfigDirs: []string{libdir},
		Proc:         &plan.ProcView{HostDir: d.proc, Files: []string{"params", "version"}, GPUDirs: []string{"00000000:02:00.0"}},
	}
}

func TestApply(t *testing.T) {
	c := startContainer(t, true)
	d := newDriver(t)
	p := d.plan()
	err := Apply(context.Background(), p, Container{PID: c.pid, Rootfs: c.rootfs}, Options{})
	must(t, err)

	libdir := "/usr/lib/x86_64-linux-gnu"
	lib := libdir + "/" + filepath.Base(d.lib)
	// In the container: the driver files, read-only.
	if b, err := os.ReadFile(c.inside("/usr/bin/nvidia-smi")); err != nil || !strings.Contains(string(b), "fake nvidia-smi") {
		t.Errorf("nvidia-smi in the container: %q, %v", b, err)
	}
	m := c.mounts(t)
	for _, p := range []string{lib, "/usr/bin/nvidia-smi", "/dev/nvidia0", "/dev/nvidiactl", "/proc/driver/nvidia", "/proc/driver/nvidia/gpus/00000000:02:00.0"} {
		if !strings.Contains(","+m[p]+",", ",ro,") {
			t.Errorf("%s: mount options %q, want a read-only mount", p, m[p])
		}
	}
	if !strings.Contains(m[lib], "nosuid") || !strings.Contains(m[lib], "nodev") {
		t.Errorf("library mount options %q", m[lib])
	}
	if strings.Contains(m["/dev/nvidia0"], "nodev") || !strings.Contains(m["/dev/nvidia0"], "noexec") {
		t.Errorf("device mount options %q", m["/dev/nvidia0"])
	}
	if _, ok := m["/proc/driver/nvidia/gpus/00000000:01:00.0"]; ok {
		t.Error("an unselected GPU's proc directory is mounted")
	}
	if b, _ := os.ReadFile(c.inside("/proc/driver/nvidia/params")); string(b) != "ModifyDeviceFiles: 0\n" {
		t.Errorf("params in the container: %q", b)
	}
	// Symlinks from the plan; the library in the image's ld.so.cache (written
	// in process: the host ldconfig runs only for CUDA compat libraries),
	// as the image's own loader reads it.
	if got, _ := os.Readlink(c.inside(libdir + "/libz.so")); got != d.soname {
		t.Errorf("libz.so -> %q", got)
	}
	if got, _ := os.Readlink(c.inside(libdir + "/" + d.soname)); got != filepath.Base(d.lib) {
		t.Errorf("%s -> %q (SONAME link)", d.soname, got)
	}
	cacheData, err := os.ReadFile(c.inside("/etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := ldcache.Parse(cacheData)
	must(t, err)
	found := false
	for _, e := range entries.Entries {
		found = found || e.Key == d.soname && e.Value == libdir+"/"+d.soname
	}
	if !found {
		t.Errorf("container ld.so.cache lacks %s -> %s/%s: %+v", d.soname, libdir, d.soname, entries.Entries)
	}
	// On the host the mounts are invisible: only the empty placeholder.
	if st, err := os.Stat(c.rootfs + lib); err != nil || st.Size() != 0 {
		t.Errorf("host view of %s: %v %v, want the empty placeholder", lib, st, err)
	}
	if hostMounts := mountsUnder(t, "/proc/self/mountinfo", c.rootfs); len(hostMounts) != 0 {
		t.Errorf("mounts leaked into the host namespace: %v", hostMounts)
	}
	// Device cgroup: exactly the plan's devices (1:5 was already allowed).
	list := c.devicesList(t)
	if !strings.Contains(list, "c 1:3 rw") || strings.Count(list, "\n") != 2 {
		t.Errorf("devices.list = %q, want c 1:5 rwm and c 1:3 rw", list)
	}
}

// mountsUnder returns the mounts below dir in the mount table mountinfo
// (mount point relative to dir -> mount options).
func mountsUnder(t *testing.T, mountinfo, dir string) map[string]string {
	t.Helper()
	mi, err := os.ReadFile(mountinfo)
	must(t, err)
	out := map[string]string{}
	for line := range strings.SplitSeq(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && strings.HasPrefix(f[4], dir+"/") {
			out[strings.TrimPrefix(f[4], dir)] = f[5]
		}
	}
	return out
}

// checkUntouched asserts that a failed Apply left nothing behind.
func checkUntouched(t *testing.T, c *container, listBefore string) {
	t.Helper()
	if m := c.mounts(t); len(m) != 0 {
		t.Errorf("mounts left in the container: %v", m)
	}
	var left []string
	filepath.Walk(c.rootfs, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && p != c.rootfs+"/etc/debian_version" {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("files left in the rootfs: %v", left)
	}
	if c.cgroup != "" {
		if got := c.devicesList(t); got != listBefore {
			t.Errorf("devices.list = %q, want it unchanged (%q)", got, listBefore)
		}
	}
}

func TestApplyFailuresRollBack(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options)
		want phase.Phase
		msg  string
	}{
		{"symlink at a destination", func(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options) {
			must(t, os.Symlink("/etc/shadow", c.rootfs+"/usr/bin/nvidia-smi"))
		}, phase.Mount, "/usr/bin/nvidia-smi"},
		{"missing source", func(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options) {
			p.Mounts[1].Source = d.dir + "/missing"
		}, phase.Mount, "missing"},
		{"wrong device number", func(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options) {
			p.Devices[0].Minor = 9
		}, phase.Mount, "invalid device node"},
		{"ld.so.cache not replaceable", func(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options) {
			must(t, os.MkdirAll(c.rootfs+"/etc/ld.so.cache/x", 0o755))
		}, phase.Ldcache, "ld.so.cache"},
		{"compat ldconfig fails", func(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options) {
			withCompat(t, c, d, p, o)
			o.LdconfigExe = "/bin/false"
		}, phase.Ldcache, "exit status 1"},
		{"container ldconfig refused", func(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options) {
			withCompat(t, c, d, p, o)
			o.Ldconfig = config.Ldconfig{Path: "/sbin/ldconfig"}
		}, phase.Ldcache, "container path"},
		{"bad compat mode", func(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options) {
			o.CUDACompatMode = "yes"
		}, phase.Input, "cuda-compat-mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startContainer(t, true)
			d := newDriver(t)
			p := d.plan()
			var o Options
			tt.edit(t, c, d, p, &o)
			var keep []string
			filepath.Walk(c.rootfs, func(p string, info os.FileInfo, err error) error {
				if err == nil && !info.IsDir() {
					keep = append(keep, p)
				}
				return nil
			})
			before := c.devicesList(t)
			err := Apply(context.Background(), p, Container{PID: c.pid, Rootfs: c.rootfs}, o)
			var ce *phase.Error
			if !errors.As(err, &ce) || ce.Phase != tt.want || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Apply = %v, want a %s error containing %q", err, tt.want, tt.msg)
			}
			for _, k := range keep {
				os.Remove(k) // the test's own hostile files
			}
			checkUntouched(t, c, before)
		})
	}
}

func TestApplyOptions(t *testing.T) {
	c := startContainer(t, true)
	d := newDriver(t)
	p := d.plan()
	p.LdconfigDirs = nil
	before := c.devicesList(t)
	must(t, Apply(context.Background(), p, Container{PID: c.pid, Rootfs: c.rootfs}, Options{NoCgroups: true, NoDevBind: true}))
	m := c.mounts(t)
	if _, ok := m["/dev/nvidia0"]; ok {
		t.Error("device mounted with NoDevBind")
	}
	if c.devicesList(t) != before {
		t.Error("device cgroup changed with NoCgroups")
	}
	if _, ok := m["/usr/bin/nvidia-smi"]; !ok {
		t.Error("driver files not mounted")
	}
}

func TestApplyInputErrors(t *testing.T) {
	tests := []struct {
		p    *plan.Plan
		c    Container
		want phase.Phase
	}{
		{nil, Container{PID: 1, Rootfs: "/x"}, phase.Input},
		{&plan.Plan{}, Container{PID: 1, Rootfs: "/"}, phase.Input},
		{&plan.Plan{}, Container{PID: 1, Rootfs: "relative"}, phase.Input},
		{&plan.Plan{}, Container{PID: 0, Rootfs: "/x"}, phase.Input},
		{&plan.Plan{}, Container{PID: 1 << 30, Rootfs: "/x"}, phase.Container},
	}
	for _, tt := range tests {
		err := Apply(context.Background(), tt.p, tt.c, Options{})
		var ce *phase.Error
		if !errors.As(err, &ce) || ce.Phase != tt.want {
			t.Errorf("Apply(%v, %+v) = %v, want a %s error", tt.p, tt.c, err, tt.want)
		}
	}
}

// withCompat puts a compat libcuda of a newer branch (580) than the host's
// (535) in the image, makes the plan inject a libcuda and turns compat
// handling on: Apply then runs the host ldconfig over the compat directory.
func withCompat(t *testing.T, c *container, d *driver, p *plan.Plan, o *Options) {
	t.Helper()
	must(t, os.MkdirAll(c.rootfs+CompatDir, 0o755))
	b, err := os.ReadFile(d.lib)
	must(t, err)
	must(t, os.WriteFile(c.rootfs+CompatDir+"/libcuda.so.580.65.06", b, 0o755))
	p.Mounts[0].Destination = "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1"
	o.CUDACompatMode, o.DriverVersion = CompatLdconfig, "535.261.03"
}

// fixedDirs are ldconfig's built-in directories, known.
type fixedDirs []string

func (d fixedDirs) SystemDirs(string) ([]string, error) { return d, nil }

func TestCompatDir(t *testing.T) {
	// The cache as the host's ldconfig writes it over the driver's and the
	// compat directory, and as the in-process rebuild writes it (with the
	// ldconfig's directories known; the sandbox would fail).
	caches := map[string][]string{}
	for _, mode := range []string{"ldconfig", "in process"} {
		t.Run(mode, func(t *testing.T) {
			c := startContainer(t, false)
			d := newDriver(t)
			p := d.plan()
			var o Options
			// Its directory joins ldconfig's command line (nothing is mounted).
			withCompat(t, c, d, p, &o)
			if mode == "in process" {
				sys, err := rootfs.ProbeSystemDirs(context.Background(), hostLdconfigPath(t))
				must(t, err)
				o.LdconfigDirs, o.LdconfigExe = fixedDirs(sys), "/bin/false"
			}
			must(t, Apply(context.Background(), p, Container{PID: c.pid, Rootfs: c.rootfs}, o))
			cache, _ := os.ReadFile(c.inside("/etc/ld.so.cache"))
			if !strings.Contains(string(cache), CompatDir) {
				t.Error("compat directory not in the container's ld.so.cache")
			}
			parsed, err := ldcache.Parse(cache)
			must(t, err)
			for _, e := range parsed.Entries {
				caches[mode] = append(caches[mode], fmt.Sprintf("%s => %s %#x", e.Key, e.Value, e.Flags))
			}
			// Listed first for the image's own ldconfig runs, as enable-cuda-compat
			// does (the e2e TestCudaCompat checks the loader's choice).
			if conf, err := os.ReadFile(c.inside(cudacompat.Conf)); err != nil || string(conf) != CompatDir+"\n" {
				t.Errorf("%s = %q, %v", cudacompat.Conf, conf, err)
			}
			if _, ok := c.mounts(t)[CompatDir+"/libcuda.so.580.65.06"]; ok {
				t.Error("a compat library from the image was mounted")
			}
		})
	}
	if a, b := caches["ldconfig"], caches["in process"]; len(a) == 0 || !slices.Equal(a, b) {
		t.Errorf("ld.so.cache entries:\nldconfig   %q\nin process %q", a, b)
	}
}

func TestCompatDirRule(t *testing.T) {
	elfLib, err := os.ReadFile("/proc/self/exe")
	must(t, err)
	p := &plan.Plan{Mounts: []plan.Mount{{Destination: "/usr/lib/libcuda.so.470.256.02", Kind: plan.KindFile}}}
	tests := []struct {
		name    string
		image   func(root string)
		mode    string
		want    string
		wantErr string
	}{
		{"newer branch", func(root string) { must(t, os.WriteFile(root+CompatDir+"/libcuda.so.535.261.03", elfLib, 0o644)) }, CompatLdconfig, CompatDir, ""},
		{"newer branch, mount mode", func(root string) { must(t, os.WriteFile(root+CompatDir+"/libcuda.so.535.261.03", elfLib, 0o644)) }, CompatMount, CompatDir, ""},
		{"newer branch, disabled", func(root string) { must(t, os.WriteFile(root+CompatDir+"/libcuda.so.535.261.03", elfLib, 0o644)) }, CompatDisabled, "", ""},
		{"same branch", func(root string) { must(t, os.WriteFile(root+CompatDir+"/libcuda.so.470.300.01", elfLib, 0o644)) }, CompatLdconfig, "", ""},
		{"link out of the root", func(root string) { must(t, os.Symlink("/proc/self/exe", root+CompatDir+"/libcuda.so.535.261.03")) }, CompatLdconfig, "", ""},
		{"FIFO", func(root string) { must(t, unix.Mkfifo(root+CompatDir+"/libcuda.so.535.261.03", 0o644)) }, CompatLdconfig, "", "not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			must(t, os.MkdirAll(root+CompatDir, 0o755))
			tc.image(root)
			r, err := rootfs.Open(root)
			must(t, err)
			defer r.Close()
			got, err := compatDir(r, p, Options{CUDACompatMode: tc.mode, DriverVersion: "470.256.02"}, slog.New(slog.DiscardHandler))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("compatDir = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// BenchmarkApply measures a whole configure (2 devices, 2 files, a
// symlink, the proc view, cgroup v1 rules, ldconfig) against a fresh
// container each time.
func BenchmarkApply(b *testing.B) {
	d := newDriver(b)
	p := d.plan()
	for b.Loop() {
		b.StopTimer()
		c := startContainer(b, true)
		b.StartTimer()
		must(b, Apply(context.Background(), p, Container{PID: c.pid, Rootfs: c.rootfs}, Options{}))
	}
}

// BenchmarkApplyNoLdconfig is BenchmarkApply without the ldconfig run.
func BenchmarkApplyNoLdconfig(b *testing.B) {
	d := newDriver(b)
	p := d.plan()
	p.LdconfigDirs = nil
	for b.Loop() {
		b.StopTimer()
		c := startContainer(b, true)
		b.StartTimer()
		must(b, Apply(context.Background(), p, Container{PID: c.pid, Rootfs: c.rootfs}, Options{}))
	}
}

// inodeFacts is a rootfs.LibFacts answering for inodes it knows and
// recording those it is taught.
type inodeFacts struct {
	known  map[uint64]ldcache.Library
	learnt map[uint64]bool
}

func (f *inodeFacts) Library(st *unix.Stat_t) (ldcache.Library, bool, bool) {
	lib, ok := f.known[st.Ino]
	return lib, ok, ok
}

func (f *inodeFacts) Learn(st *unix.Stat_t, _ ldcache.Library, _ bool) { f.learnt[st.Ino] = true }

// TestApplyLibFacts: with Options.LibFacts, the container's ld.so.cache
// records what they say about a driver library (its headers are not
// read), and they are taught what was read.
func TestApplyLibFacts(t *testing.T) {
	for _, known := range []bool{false, true} {
		c := startContainer(t, true)
		d := newDriver(t)
		var st unix.Stat_t
		must(t, unix.Stat(d.lib, &st))
		f := &inodeFacts{known: map[uint64]ldcache.Library{}, learnt: map[uint64]bool{}}
		if known {
			f.known[st.Ino] = ldcache.Library{SONAME: "libfromfacts.so.7", Flags: ldcache.FlagELFLibc6 | 0x0300}
		}
		must(t, Apply(context.Background(), d.plan(), Container{PID: c.pid, Rootfs: c.rootfs}, Options{LibFacts: f}))
		cacheData, err := os.ReadFile(c.inside("/etc/ld.so.cache"))
		must(t, err)
		entries, err := ldcache.Parse(cacheData)
		must(t, err)
		var keys []string
		for _, e := range entries.Entries {
			keys = append(keys, e.Key)
		}
		if got := slices.Contains(keys, "libfromfacts.so.7"); got != known {
			t.Errorf("facts know the library: %v; the cache has their SONAME: %v (%q)", known, got, keys)
		}
		if got := slices.Contains(keys, d.soname); got == known {
			t.Errorf("facts know the library: %v; the cache has its own SONAME %s: %v", known, d.soname, got)
		}
		if !known && !f.learnt[st.Ino] {
			t.Errorf("the facts were not taught %s: %v", d.lib, f.learnt)
		}
	}
}

// hostLdconfigPath is the host's default ldconfig as Apply resolves it.
func hostLdconfigPath(t *testing.T) string {
	t.Helper()
	p, err := config.Ldconfig{}.HostPath()
	if err != nil {
		t.Skipf("no host ldconfig: %v", err)
	}
	return p
}
