package discover

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/procfs"
)

// miniRoot is a hand-made driver root for targeted tests of discovery's
// rules (symlink handling, version selection, errors). The fixture package
// builds realistic roots from real driver packages; these are small and
// shaped to one question each.
type miniRoot struct {
	t     testing.TB
	dir   string
	cache []ldcache.Entry
}

const (
	flags64 = ldcache.FlagELFLibc6 | ldcache.ArchX8664
	flags32 = ldcache.FlagELFLibc6 | ldcache.ArchI386
)

func newMiniRoot(t testing.TB) *miniRoot {
	t.Helper()
	return &miniRoot{t: t, dir: t.TempDir()}
}

func (m *miniRoot) path(p string) string { return filepath.Join(m.dir, p) }

func (m *miniRoot) mkdir(p string) {
	m.t.Helper()
	if err := os.MkdirAll(m.path(p), 0o755); err != nil {
		m.t.Fatal(err)
	}
}

func (m *miniRoot) file(p, content string, mode os.FileMode) {
	m.t.Helper()
	m.mkdir(filepath.Dir(p))
	if err := os.WriteFile(m.path(p), []byte(content), mode); err != nil {
		m.t.Fatal(err)
	}
}

func (m *miniRoot) symlink(p, target string) {
	m.t.Helper()
	m.mkdir(filepath.Dir(p))
	if err := os.Symlink(target, m.path(p)); err != nil {
		m.t.Fatal(err)
	}
}

// elf copies a tiny real shared object (SONAME libnctktest.so.1) to p.
func (m *miniRoot) elf(p string, bits int) {
	m.t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("testdata/libsoname%d.so", bits))
	if err != nil {
		m.t.Fatal(err)
	}
	m.file(p, string(data), 0o755)
}

// lib installs dir/name.so.<version> with a SONAME link name.so.1 and adds
// both cache entries (SONAME first, as ldconfig orders them).
func (m *miniRoot) lib(dir, name, version string, bits int) {
	m.t.Helper()
	real := fmt.Sprintf("%s/%s.so.%s", dir, name, version)
	m.elf(real, bits)
	link := fmt.Sprintf("%s/%s.so.1", dir, name)
	if _, err := os.Lstat(m.path(link)); err == nil {
		os.Remove(m.path(link))
	}
	m.symlink(link, filepath.Base(real))
	f := int32(flags64)
	if bits == 32 {
		f = flags32
	}
	m.cache = append(m.cache, ldcache.Entry{Key: name + ".so.1", Value: link, Flags: f})
}

func (m *miniRoot) writeCache() {
	m.t.Helper()
	m.file("/etc/ld.so.cache", string(encodeCache(m.cache)), 0o644)
}

func (m *miniRoot) driver(version string) {
	m.file("/proc/driver/nvidia/version",
		fmt.Sprintf("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Thu Oct  2 10:00:00 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", version), 0o444)
	m.file("/proc/devices", "Character devices:\n  1 mem\n195 nvidia\n238 nvidia-uvm\n241 nvidia-caps\n242 nvidia-caps-imex-channels\n\nBlock devices:\n  8 sd\n", 0o444)
}

func (m *miniRoot) gpu(bus string, minor int, uuid string) {
	m.file("/proc/driver/nvidia/gpus/"+bus+"/information", fmt.Sprintf(
		"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ: \t\t 35\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\n"+
			"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
		uuid, bus, minor), 0o444)
}

// chardev makes a character device node; it skips the test without CAP_MKNOD.
func (m *miniRoot) chardev(p string, major, minor uint32) {
	m.t.Helper()
	m.mkdir(filepath.Dir(p))
	if err := unix.Mknod(m.path(p), syscall.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		if errors.Is(err, unix.EPERM) {
			m.t.Skipf("cannot create device nodes (%v): needs CAP_MKNOD", err)
		}
		m.t.Fatal(err)
	}
	if err := os.Chmod(m.path(p), 0o666); err != nil {
		m.t.Fatal(err)
	}
}

func (m *miniRoot) discover(mod func(*Options)) (*Driver, error) {
	o := Options{Root: m.dir}
	if mod != nil {
		mod(&o)
	}
	return Discover(o)
}

func libPaths(d *Driver, compat32 bool) []string {
	var out []string
	for _, f := range d.Libraries {
		if f.Compat32 == compat32 {
			out = append(out, f.Path)
		}
	}
	return out
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// TestAbsoluteSymlinksResolveInsideRoot is the H100 host's layout: the
// driver lives in /usr/local/nvidia/lib64 and /lib holds absolute symlinks
// into it. Resolution must stay inside the root, never reach the host's
// /usr/local/nvidia.
func TestAbsoluteSymlinksResolveInsideRoot(t *testing.T) {
	const v = "580.159.04"
	m := newMiniRoot(t)
	m.driver(v)
	m.lib("/usr/local/nvidia/lib64", "libcuda", v, 64)
	m.lib("/usr/local/nvidia/lib64", "libnvidia-ml", v, 64)
	m.symlink("/lib/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1")
	// An escape attempt: ../../../ from inside the root stays at its top.
	m.symlink("/lib/libnvidia-ptxjitcompiler.so.1", "../../../../../../usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so."+v)
	m.elf("/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so."+v, 64)
	m.cache = append(m.cache,
		ldcache.Entry{Key: "libcuda.so.1", Value: "/lib/libcuda.so.1", Flags: flags64},
		ldcache.Entry{Key: "libnvidia-ptxjitcompiler.so.1", Value: "/lib/libnvidia-ptxjitcompiler.so.1", Flags: flags64},
	)
	m.writeCache()
	d, err := m.discover(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/usr/local/nvidia/lib64/libnvidia-ml.so." + v,
		"/usr/local/nvidia/lib64/libcuda.so." + v,
		"/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so." + v,
	}
	if got := libPaths(d, false); !equalStrings(got, want) {
		t.Errorf("libraries\n got %q\nwant %q", got, want)
	}
	for _, f := range d.Libraries {
		if f.HostPath != m.dir+f.Path {
			t.Errorf("%s: HostPath %s, want it under the root", f.Path, f.HostPath)
		}
		if f.SONAME != "libnctktest.so.1" {
			t.Errorf("%s: SONAME %q", f.Path, f.SONAME)
		}
	}
	if !equalStrings(d.LibDirs, []string{"/usr/local/nvidia/lib64"}) {
		t.Errorf("LibDirs %q", d.LibDirs)
	}
	if d.Version != v || d.LibraryVersion != v {
		t.Errorf("versions %q/%q, want %q", d.Version, d.LibraryVersion, v)
	}
}

func TestResolveLoops(t *testing.T) {
	m := newMiniRoot(t)
	m.symlink("/a", "/b")
	m.symlink("/b", "/a")
	m.symlink("/dir/self", ".")
	m.file("/dir/f", "x", 0o644)
	r := newInRoot(m.dir, nil)
	if _, err := r.resolve("/a"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("loop: %v, want ELOOP", err)
	}
	if p, err := r.resolve("/dir/self/self/../dir/f"); err != nil || p != "/dir/f" {
		t.Errorf("dot links: %q %v", p, err)
	}
	if _, err := r.resolve("/dir/f/x"); !isNotExist(err) {
		t.Errorf("file as directory: %v, want ENOTDIR", err)
	}
	if p, err := r.resolve("/../../dir/f"); err != nil || p != "/dir/f" {
		t.Errorf(".. above the root: %q %v", p, err)
	}
}

// TestStaleLibrariesSkipped: files of another driver version next to the
// current ones (an upgrade's leftovers) are not selected.
func TestStaleLibrariesSkipped(t *testing.T) {
	m := newMiniRoot(t)
	m.driver("535.261.03")
	m.lib("/usr/lib/x86_64-linux-gnu", "libnvidia-ml", "535.261.03", 64)
	m.lib("/usr/lib/x86_64-linux-gnu", "libcuda", "535.261.03", 64)
	m.elf("/opt/old/libcuda.so.470.256.02", 64)
	m.cache = append([]ldcache.Entry{{Key: "libcuda.so", Value: "/opt/old/libcuda.so.470.256.02", Flags: flags64}}, m.cache...)
	m.writeCache()
	d, err := m.discover(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"}
	if got := libPaths(d, false); !equalStrings(got, want) {
		t.Errorf("libraries %q, want %q", got, want)
	}
}

// TestCacheOfOtherLibraries: the cache is read keeping the names looked
// up only; the driver's libraries are found among thousands of others,
// and a cache without them is reported with every entry counted.
func TestCacheOfOtherLibraries(t *testing.T) {
	others := func(n int) []ldcache.Entry {
		var out []ldcache.Entry
		for i := range n {
			out = append(out, ldcache.Entry{Key: fmt.Sprintf("libother%d.so.1", i), Value: fmt.Sprintf("/usr/lib/libother%d.so.1", i), Flags: flags64})
		}
		return out
	}
	m := newMiniRoot(t)
	m.driver("535.261.03")
	m.cache = others(2000)
	m.lib("/usr/lib/x86_64-linux-gnu", "libcuda", "535.261.03", 64)
	m.cache = append(m.cache, others(3000)[2000:]...)
	m.lib("/usr/lib/x86_64-linux-gnu", "libnvidia-ml", "535.261.03", 64)
	m.writeCache()
	d, err := m.discover(func(o *Options) { o.Caps = caps.Default() })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"}
	if got := libPaths(d, false); !equalStrings(got, want) {
		t.Errorf("libraries %q, want %q", got, want)
	}

	m = newMiniRoot(t)
	m.driver("535.261.03")
	m.cache = others(1234)
	m.writeCache()
	d, err = m.discover(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, "(1234 entries)") }) {
		t.Errorf("warnings %q: want the cache's 1234 entries counted", d.Warnings)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(m *miniRoot)
		check func(t *testing.T, m *miniRoot, err error)
	}{
		{
			name:  "no driver",
			setup: func(m *miniRoot) {},
			check: func(t *testing.T, m *miniRoot, err error) {
				var e *NoDriverError
				if !errors.As(err, &e) {
					t.Fatalf("error %v (%T), want *NoDriverError", err, err)
				}
				want := fmt.Sprintf("no NVIDIA driver found under root %s: %s/proc/driver/nvidia/version: no such file "+
					"(is the nvidia kernel module loaded? is --root right?)", m.dir, m.dir)
				if err.Error() != want {
					t.Errorf("message\n got %s\nwant %s", err, want)
				}
			},
		},
		{
			name:  "garbage version file",
			setup: func(m *miniRoot) { m.file("/proc/driver/nvidia/version", "hello\n", 0o444) },
			check: func(t *testing.T, m *miniRoot, err error) {
				var e *NoDriverError
				if !errors.As(err, &e) || !strings.Contains(err.Error(), "NVRM version") {
					t.Fatalf("error %v, want *NoDriverError naming the missing NVRM line", err)
				}
			},
		},
		{
			name: "version mismatch",
			setup: func(m *miniRoot) {
				m.driver("535.261.03")
				m.lib("/usr/lib/x86_64-linux-gnu", "libnvidia-ml", "535.183.01", 64)
				m.lib("/usr/lib/x86_64-linux-gnu", "libcuda", "535.183.01", 64)
				m.writeCache()
			},
			check: func(t *testing.T, m *miniRoot, err error) {
				var e *VersionMismatchError
				if !errors.As(err, &e) {
					t.Fatalf("error %v (%T), want *VersionMismatchError", err, err)
				}
				if e.Module != "535.261.03" || e.Library != "535.183.01" ||
					e.LibraryPath != m.dir+"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.183.01" {
					t.Errorf("fields %+v", e)
				}
				for _, s := range []string{"driver/library version mismatch", "535.261.03", "535.183.01", e.LibraryPath, e.ModulePath} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("message %q lacks %q", err, s)
					}
				}
			},
		},
		{
			name:  "no ld.so.cache",
			setup: func(m *miniRoot) { m.driver("535.261.03") },
			check: func(t *testing.T, m *miniRoot, err error) {
				var e *LdCacheError
				if !errors.As(err, &e) || !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("error %v (%T), want *LdCacheError wrapping ErrNotExist", err, err)
				}
				want := fmt.Sprintf("cannot use the dynamic linker cache %s/etc/ld.so.cache: no such file (run ldconfig -r %s to regenerate it)", m.dir, m.dir)
				if err.Error() != want {
					t.Errorf("message\n got %s\nwant %s", err, want)
				}
			},
		},
		{
			name: "truncated ld.so.cache",
			setup: func(m *miniRoot) {
				m.driver("535.261.03")
				m.lib("/usr/lib", "libcuda", "535.261.03", 64)
				data := encodeCache(m.cache)
				m.file("/etc/ld.so.cache", string(data[:len(data)/2]), 0o644)
			},
			check: func(t *testing.T, m *miniRoot, err error) {
				var e *LdCacheError
				if !errors.As(err, &e) || !errors.Is(err, ldcache.ErrTruncated) {
					t.Fatalf("error %v (%T), want *LdCacheError wrapping ldcache.ErrTruncated", err, err)
				}
				for _, s := range []string{m.dir + "/etc/ld.so.cache", "truncated", "ldconfig"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("message %q lacks %q", err, s)
					}
				}
			},
		},
		{
			name: "ld.so.cache is not a cache",
			setup: func(m *miniRoot) {
				m.driver("535.261.03")
				m.file("/etc/ld.so.cache", "#!/bin/sh\n", 0o644)
			},
			check: func(t *testing.T, m *miniRoot, err error) {
				var e *LdCacheError
				if !errors.As(err, &e) || !errors.Is(err, ldcache.ErrBadMagic) {
					t.Fatalf("error %v (%T), want *LdCacheError wrapping ldcache.ErrBadMagic", err, err)
				}
			},
		},
		{
			name: "wrong device numbers",
			setup: func(m *miniRoot) {
				m.driver("535.261.03")
				m.writeCache()
				m.chardev("/dev/nvidiactl", 1, 3) // /dev/null's numbers
			},
			check: func(t *testing.T, m *miniRoot, err error) {
				var e *DeviceNodeError
				if !errors.As(err, &e) || e.Missing || e.GotMajor != 1 || e.GotMinor != 3 {
					t.Fatalf("error %v (%T), want *DeviceNodeError with 1:3", err, err)
				}
				want := fmt.Sprintf("invalid device node %s/dev/nvidiactl: expected character device 195:255, found 1:3", m.dir)
				if err.Error() != want {
					t.Errorf("message\n got %s\nwant %s", err, want)
				}
			},
		},
		{
			name: "device node is a regular file",
			setup: func(m *miniRoot) {
				m.driver("535.261.03")
				m.writeCache()
				m.gpu("0000:41:00.0", 0, "GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a00")
				m.file("/dev/nvidia0", "", 0o666)
			},
			check: func(t *testing.T, m *miniRoot, err error) {
				var e *DeviceNodeError
				if !errors.As(err, &e) || !strings.Contains(err.Error(), "found a regular file") {
					t.Fatalf("error %v (%T), want *DeviceNodeError saying it is a regular file", err, err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMiniRoot(t)
			tt.setup(m)
			d, err := m.discover(nil)
			if err == nil {
				t.Fatalf("no error; driver %+v", d)
			}
			tt.check(t, m, err)
		})
	}
}

func TestMissingDeviceNodes(t *testing.T) {
	m := newMiniRoot(t)
	m.driver("535.261.03")
	m.lib("/usr/lib", "libcuda", "535.261.03", 64)
	m.writeCache()
	m.gpu("0000:41:00.0", 0, "GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a00")
	d, err := m.discover(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.ControlNodes) != 0 || d.GPUs[0].Node.Path != "" {
		t.Errorf("nodes reported that do not exist: %+v %+v", d.ControlNodes, d.GPUs[0].Node)
	}
	for _, w := range []string{"missing device /dev/nvidiactl", "missing device /dev/nvidia0 (GPU 0, 00000000:41:00.0)"} {
		if !strings.Contains(strings.Join(d.Warnings, "\n"), w) {
			t.Errorf("warnings %q lack %q", d.Warnings, w)
		}
	}
	err = d.CheckDevices(d.GPUs)
	var e *DeviceNodeError
	if !errors.As(err, &e) || !e.Missing {
		t.Fatalf("CheckDevices: %v, want a missing *DeviceNodeError", err)
	}
	for _, s := range []string{
		"missing device node /dev/nvidiactl: expected character device 195:255 at " + m.dir + "/dev/nvidiactl (load the driver and create the node: nvidia-modprobe, or pass --load-kmods)",
		"missing device node /dev/nvidia0: expected character device 195:0 at " + m.dir + "/dev/nvidia0 (load the driver and create the node: nvidia-modprobe -c 0, or pass --load-kmods)",
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("CheckDevices error\n%s\nlacks\n%s", err, s)
		}
	}
}

// TestDevicesAndGPUs: control nodes with the uvm major from /proc/devices,
// GPUs ordered by bus id (not minor), an excluded GPU left out, MIG state
// and IMEX channels.
func TestDevicesAndGPUs(t *testing.T) {
	m := newMiniRoot(t)
	m.driver("535.261.03")
	m.writeCache()
	m.chardev("/dev/nvidiactl", 195, 255)
	m.chardev("/dev/nvidia-uvm", 238, 0)
	m.chardev("/dev/nvidia-uvm-tools", 238, 1)
	m.gpu("0000:c1:00.0", 0, "GPU-00000000-0000-0000-0000-0000000000c1")
	m.gpu("0000:41:00.0", 3, "GPU-00000000-0000-0000-0000-000000000041")
	m.file("/proc/driver/nvidia/gpus/0000:81:00.0/information", "Model: x\nBus Location: 0000:81:00.0\nDevice Minor: 5\nGPU Excluded: Yes\n", 0o444)
	m.chardev("/dev/nvidia0", 195, 0)
	m.chardev("/dev/nvidia3", 195, 3)
	// GPU minor 3 (bus 41) is MIG-enabled with one GI and one CI.
	m.file("/proc/driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\ngpu3/gi0/access 30\ngpu3/gi1/access 39\ngpu3/gi1/ci0/access 48\ngpu0/gi1/access 12\n", 0o444)
	m.file("/proc/driver/nvidia/capabilities/gpu3/mig/gi1/access", "DeviceFileMinor: 39\nDeviceFileMode: 292\nDeviceFileModify: 1\n", 0o444)
	m.file("/proc/driver/nvidia/capabilities/gpu3/mig/gi1/ci0/access", "DeviceFileMinor: 48\nDeviceFileMode: 292\nDeviceFileModify: 1\n", 0o444)
	m.mkdir("/proc/driver/nvidia/capabilities/gpu0/mig")
	for _, n := range []uint32{1, 2, 39, 48, 12} {
		m.chardev(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", n), 241, n)
	}
	m.chardev("/dev/nvidia-caps-imex-channels/channel10", 242, 10)
	m.chardev("/dev/nvidia-caps-imex-channels/channel2", 242, 2)
	m.chardev("/dev/nvidia-caps-imex-channels/channel7", 99, 7) // wrong major: ignored

	d, err := m.discover(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ctl []string
	for _, n := range d.ControlNodes {
		ctl = append(ctl, fmt.Sprintf("%s %d:%d %o", n.Path, n.Major, n.Minor, n.Mode))
	}
	if want := []string{"/dev/nvidiactl 195:255 666", "/dev/nvidia-uvm 238:0 666", "/dev/nvidia-uvm-tools 238:1 666"}; !equalStrings(ctl, want) {
		t.Errorf("control nodes %q, want %q", ctl, want)
	}
	if len(d.GPUs) != 2 {
		t.Fatalf("%d GPUs, want 2 (the excluded one left out)", len(d.GPUs))
	}
	g0, g1 := d.GPUs[0], d.GPUs[1]
	if g0.Index != 0 || g0.BusID != "00000000:41:00.0" || g0.Minor != 3 || g0.Node.Path != "/dev/nvidia3" || g0.Node.Minor != 3 ||
		g0.UUID != "GPU-00000000-0000-0000-0000-000000000041" || g0.Model != "NVIDIA H100 80GB HBM3" ||
		g0.ProcDir != "/proc/driver/nvidia/gpus/0000:41:00.0" || g0.MIGCapsDir != "/proc/driver/nvidia/capabilities/gpu3" {
		t.Errorf("GPU 0: %+v", g0)
	}
	if g1.Index != 1 || g1.BusID != "00000000:c1:00.0" || g1.Minor != 0 || g1.Node.HostPath != m.dir+"/dev/nvidia0" {
		t.Errorf("GPU 1: %+v", g1)
	}
	if !g0.MIGCapable || !g0.MIGEnabled || len(g0.MIGDevices) != 1 {
		t.Fatalf("GPU 0 MIG: capable %v enabled %v devices %+v", g0.MIGCapable, g0.MIGEnabled, g0.MIGDevices)
	}
	mig := g0.MIGDevices[0]
	if mig.GI != 1 || mig.CI != 0 || mig.GIAccess.Minor != 39 || mig.CIAccess.Minor != 48 || mig.GIAccess.Major != 241 ||
		mig.GIAccessProc != "/proc/driver/nvidia/capabilities/gpu3/mig/gi1/access" ||
		mig.CIAccessProc != "/proc/driver/nvidia/capabilities/gpu3/mig/gi1/ci0/access" {
		t.Errorf("MIG device %+v", mig)
	}
	if !g1.MIGCapable || g1.MIGEnabled {
		t.Errorf("GPU 1: MIG capable %v enabled %v, want capable and disabled", g1.MIGCapable, g1.MIGEnabled)
	}
	var gpu3caps []uint32
	for _, n := range g0.MIGCapNodes {
		gpu3caps = append(gpu3caps, n.Minor)
	}
	if fmt.Sprint(gpu3caps) != "[39 48]" {
		t.Errorf("GPU minor 3 cap nodes %v, want [39 48] (30 has no node)", gpu3caps)
	}
	if d.MIGConfig.Minor != 1 || d.MIGMonitor.Minor != 2 || d.MIGConfig.Path != "/dev/nvidia-caps/nvidia-cap1" {
		t.Errorf("MIG config/monitor %+v %+v", d.MIGConfig, d.MIGMonitor)
	}
	if len(d.CapsNodes) != 5 || d.CapsNodes[0].Minor != 1 || d.CapsNodes[4].Minor != 48 {
		t.Errorf("caps nodes %+v", d.CapsNodes)
	}
	var imex []string
	for _, n := range d.IMEXChannels {
		imex = append(imex, n.Path)
	}
	if want := []string{"/dev/nvidia-caps-imex-channels/channel2", "/dev/nvidia-caps-imex-channels/channel10"}; !equalStrings(imex, want) {
		t.Errorf("IMEX channels %q, want %q", imex, want)
	}
}

// TestBinariesIPCsFirmware: a wrapper script on PATH loses to the real
// binary in the driver's directory; sockets and the MPS directory are
// found through /var/run → /run; firmware through /lib → usr/lib and the
// firmware_class custom path.
func TestBinariesIPCsFirmware(t *testing.T) {
	const v = "580.159.04"
	m := newMiniRoot(t)
	m.driver(v)
	m.writeCache()
	m.file("/usr/bin/nvidia-smi", "#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n", 0o755)
	m.elf("/usr/local/nvidia/bin/nvidia-smi", 64)
	m.file("/usr/bin/nvidia-debugdump", "#!/bin/sh\n", 0o755) // only a script: taken
	m.elf("/usr/bin/nvidia-persistenced", 64)
	if err := os.Chmod(m.path("/usr/bin/nvidia-persistenced"), 0o644); err != nil { // not executable
		t.Fatal(err)
	}
	m.elf("/usr/lib/nvidia/current/nvidia-cuda-mps-control", 64)
	m.symlink("/sbin", "usr/sbin")
	m.elf("/usr/sbin/nvidia-cuda-mps-server", 64)

	m.symlink("/var/run", "/run")
	for _, s := range []string{"/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket"} {
		m.mkdir(filepath.Dir(s))
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: m.path(s)}); err != nil {
			t.Skipf("cannot bind a unix socket at %s: %v", m.path(s), err)
		}
	}
	m.mkdir("/tmp/mps-pipes")

	m.symlink("/lib", "usr/lib")
	m.file("/usr/lib/firmware/nvidia/"+v+"/gsp_tu10x.bin", "fw", 0o644)
	m.file("/usr/lib/firmware/nvidia/"+v+"/gsp_ga10x.bin", "fw", 0o644)
	m.file("/usr/lib/firmware/nvidia/535.0.0/gsp_ga10x.bin", "old", 0o644)
	m.file("/usr/local/nvidia/firmware/nvidia/"+v+"/gsp_gb10x.bin", "fw", 0o644)
	m.file("/usr/local/nvidia/firmware/nvidia/"+v+"/gsp_ga10x.bin", "dup", 0o644)

	d, err := m.discover(func(o *Options) { o.MPSPipeDir = "/tmp/mps-pipes" })
	if err != nil {
		t.Fatal(err)
	}
	var bins []string
	for _, f := range d.Binaries {
		bins = append(bins, string(f.Capability)+" "+f.Name+" "+f.Path)
	}
	want := []string{
		"utility nvidia-smi /usr/local/nvidia/bin/nvidia-smi",
		"utility nvidia-debugdump /usr/bin/nvidia-debugdump",
		"compute nvidia-cuda-mps-control /usr/lib/nvidia/current/nvidia-cuda-mps-control",
		"compute nvidia-cuda-mps-server /usr/sbin/nvidia-cuda-mps-server",
	}
	if !equalStrings(bins, want) {
		t.Errorf("binaries\n got %q\nwant %q", bins, want)
	}
	var ipcs []string
	for _, f := range d.IPCs {
		ipcs = append(ipcs, fmt.Sprintf("%s %s %s %v", f.Capability, f.Name, f.Path, f.Dir))
	}
	want = []string{
		"utility persistenced /run/nvidia-persistenced/socket false",
		"utility fabricmanager /run/nvidia-fabricmanager/socket false",
		"compute mps /tmp/mps-pipes true",
	}
	if !equalStrings(ipcs, want) {
		t.Errorf("IPCs\n got %q\nwant %q", ipcs, want)
	}
	var fw []string
	for _, f := range d.Firmware {
		fw = append(fw, f.Path+" "+strings.TrimPrefix(f.HostPath, m.dir))
	}
	want = []string{
		"/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin /usr/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin",
		"/lib/firmware/nvidia/" + v + "/gsp_tu10x.bin /usr/lib/firmware/nvidia/" + v + "/gsp_tu10x.bin",
		"/usr/local/nvidia/firmware/nvidia/" + v + "/gsp_gb10x.bin /usr/local/nvidia/firmware/nvidia/" + v + "/gsp_gb10x.bin",
	}
	if !equalStrings(fw, want) {
		t.Errorf("firmware\n got %q\nwant %q", fw, want)
	}
	if !strings.Contains(strings.Join(d.Warnings, "\n"), "missing binary nvidia-persistenced") {
		t.Errorf("no warning for the non-executable nvidia-persistenced: %q", d.Warnings)
	}
}

func TestFirmwareClassPath(t *testing.T) {
	const v = "580.159.04"
	m := newMiniRoot(t)
	m.driver(v)
	m.writeCache()
	m.file("/sys/module/firmware_class/parameters/path", "/opt/fw\n", 0o644)
	m.file("/opt/fw/nvidia/"+v+"/gsp_ga10x.bin", "fw", 0o644)
	m.file("/lib/firmware/nvidia/"+v+"/gsp_ga10x.bin", "shadowed", 0o644)
	d, err := m.discover(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Firmware) != 1 || d.Firmware[0].Path != "/opt/fw/nvidia/"+v+"/gsp_ga10x.bin" {
		t.Errorf("firmware %+v, want only the custom path's file", d.Firmware)
	}
}

// FuzzResolve resolves arbitrary paths in a root full of hostile symlinks
// (absolute, relative, escaping with .., loops): resolution never panics,
// and every result is a clean absolute path that exists inside the root.
func FuzzResolve(f *testing.F) {
	m := newMiniRoot(f)
	m.file("/usr/lib/libcuda.so.535", "x", 0o644)
	m.symlink("/lib", "usr/lib")
	m.symlink("/usr/lib/libcuda.so.1", "libcuda.so.535")
	m.symlink("/usr/lib/abs", "/usr/lib/libcuda.so.1")
	m.symlink("/usr/lib/escape", "../../../../../../../etc/passwd")
	m.symlink("/usr/lib/up", "..")
	m.symlink("/loop1", "/loop2")
	m.symlink("/loop2", "/loop1")
	m.symlink("/dangling", "/nowhere/at/all")
	for _, s := range []string{"/lib/libcuda.so.1", "/usr/lib/abs", "/usr/lib/escape", "/usr/lib/up/up/up/lib/abs", "/loop1", "/dangling", "../..", "", "/./.././lib//libcuda.so.535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r := newInRoot(m.dir, nil)
		got, err := r.resolve(p)
		if err != nil {
			return
		}
		if !strings.HasPrefix(got, "/") || filepath.Clean(got) != got {
			t.Fatalf("resolve(%q) = %q: not a clean absolute path", p, got)
		}
		if _, err := os.Lstat(r.host(got)); err != nil {
			t.Fatalf("resolve(%q) = %q, which does not exist in the root: %v", p, got, err)
		}
		if fi, _ := os.Lstat(r.host(got)); fi.Mode()&os.ModeSymlink != 0 {
			t.Fatalf("resolve(%q) = %q is still a symlink", p, got)
		}
	})
}

// TestScanMIGMinorsStops: the scan stops reading once it has found the
// minors it was asked for (a reader that fails after the first lines shows
// it), and reads to the end for minors it does not find.
func TestScanMIGMinorsStops(t *testing.T) {
	table := func() io.Reader {
		return io.MultiReader(strings.NewReader("config 1\nmonitor 2\ngpu0/gi0/access 3\n"), iotest.ErrReader(errors.New("read past the answer")))
	}
	keep := func(m uint32) bool { return m == 1 || m == 2 }
	got, err := scanMIGMinors(table(), keep, 2)
	if err != nil || len(got) != 2 || got["config"] != 1 || got["monitor"] != 2 {
		t.Errorf("scan for minors 1 and 2 = %v, %v; want config 1, monitor 2 and no read past them", got, err)
	}
	if _, err := scanMIGMinors(table(), func(m uint32) bool { return m == 9 }, 1); err == nil {
		t.Error("scan for a minor the table lacks did not read to the end")
	}
}

// FuzzScanMIGMinors checks the fast mig-minors scan against procfs's
// validating parser: on every ASCII table the parser accepts, the scan
// finds exactly the parser's entries for the minors it is asked about.
func FuzzScanMIGMinors(f *testing.F) {
	f.Add([]byte("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"), uint32(2))
	f.Add([]byte("gpu0/gi1/access  12\r\n\tgpu1/gi1/ci0/access\t0013\n\n"), uint32(13))
	f.Add([]byte("a 1 2\nb x\n c 99999999999\n"), uint32(1))
	f.Fuzz(func(t *testing.T, data []byte, want uint32) {
		keep := func(m uint32) bool { return m%7 == want%7 }
		got, err := scanMIGMinors(bytes.NewReader(data), keep, 0)
		if err != nil {
			return // a line longer than the scanner takes
		}
		for _, c := range data {
			if c >= 0x80 {
				return
			}
		}
		all, err := procfs.ParseMIGMinors(data)
		if err != nil {
			return
		}
		exp := map[string]uint32{}
		for k, v := range all {
			if keep(v) {
				exp[k] = v
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Fatalf("scan %v, parser %v", got, exp)
		}
	})
}

// encodeCache is an ld.so.cache holding entries in the given order, as
// ldcache's writer encodes it.
func encodeCache(entries []ldcache.Entry) []byte {
	data, err := ldcache.Encode(&ldcache.Cache{Entries: entries})
	if err != nil {
		panic(err)
	}
	return data
}

// TestDevLink: a library's DevLink names the development link (its
// SONAME up to ".so") only when the root has it as a symlink next to the
// library.
func TestDevLink(t *testing.T) {
	const v = "580.159.04"
	for _, tc := range []struct {
		name  string
		setup func(m *miniRoot, dir string)
		want  string
	}{
		{name: "symlink", setup: func(m *miniRoot, dir string) { m.symlink(dir+"/libnctktest.so", "libnctktest.so.1") }, want: "libnctktest.so"},
		{name: "dangling symlink", setup: func(m *miniRoot, dir string) { m.symlink(dir+"/libnctktest.so", "gone") }, want: "libnctktest.so"},
		{name: "regular file", setup: func(m *miniRoot, dir string) { m.file(dir+"/libnctktest.so", "x", 0o644) }},
		{name: "none", setup: func(*miniRoot, string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const dir = "/usr/lib/x86_64-linux-gnu"
			m := newMiniRoot(t)
			m.driver(v)
			m.lib(dir, "libnvidia-ml", v, 64)
			tc.setup(m, dir)
			m.writeCache()
			d, err := m.discover(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Libraries) != 1 || d.Libraries[0].DevLink != tc.want {
				t.Fatalf("libraries %+v, want one with DevLink %q", d.Libraries, tc.want)
			}
		})
	}
}

// TestIPCAndFirmwareSearch: sockets are found under /run when /var/run is
// no link to it, and GSP firmware in NVIDIA's firmware directories in
// their order (updates/<release>, updates, <release>, then /lib/firmware).
func TestIPCAndFirmwareSearch(t *testing.T) {
	const v = "580.159.04"
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	rel := unix.ByteSliceToString(uts.Release[:])
	for _, tc := range []struct {
		name   string
		files  []string // firmware files under /lib/firmware
		wantFW string   // the gsp_ga10x.bin found (its Path)
	}{
		{name: "updates release", files: []string{"updates/" + rel, "updates", rel, ""}, wantFW: "/lib/firmware/updates/" + rel},
		{name: "updates", files: []string{"updates", rel, ""}, wantFW: "/lib/firmware/updates"},
		{name: "release", files: []string{rel, ""}, wantFW: "/lib/firmware/" + rel},
		{name: "plain", files: []string{""}, wantFW: "/lib/firmware"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMiniRoot(t)
			m.driver(v)
			m.writeCache()
			m.mkdir("/var/run")
			s := "/run/nvidia-persistenced/socket"
			m.mkdir(filepath.Dir(s))
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if err := unix.Bind(fd, &unix.SockaddrUnix{Name: m.path(s)}); err != nil {
				t.Skipf("cannot bind a unix socket at %s: %v", m.path(s), err)
			}
			for _, dir := range tc.files {
				m.file(path.Join("/lib/firmware", dir, "nvidia", v, "gsp_ga10x.bin"), "fw", 0o644)
			}
			d, err := m.discover(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.IPCs) != 1 || d.IPCs[0].Path != s {
				t.Errorf("IPCs %+v, want only %s", d.IPCs, s)
			}
			if want := tc.wantFW + "/nvidia/" + v + "/gsp_ga10x.bin"; len(d.Firmware) != 1 || d.Firmware[0].Path != want {
				t.Errorf("firmware %+v, want only %s", d.Firmware, want)
			}
		})
	}
}

// TestMIGMinorsCached: the names of the capability nodes' minors are kept
// in the cache directory (the kernel rebuilds the whole mig-minors table
// for every open) and used while the table is the same; a changed table is
// read again; NoCache neither reads nor writes the cache.
func TestMIGMinorsCached(t *testing.T) {
	m := newMiniRoot(t)
	m.driver("535.261.03")
	m.writeCache()
	m.chardev("/dev/nvidiactl", 195, 255)
	m.gpu("0000:41:00.0", 0, "GPU-00000000-0000-0000-0000-000000000041")
	m.chardev("/dev/nvidia0", 195, 0)
	m.chardev("/dev/nvidia-caps/nvidia-cap1", 241, 1)
	m.chardev("/dev/nvidia-caps/nvidia-cap2", 241, 2)
	m.file("/proc/driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\n", 0o444)
	// The fixture's table is a regular file: cached as procfs would be.
	c := &cachedRuns{t: t, m: m, dir: t.TempDir(), regular: true}
	run, entries := c.run, func() []string { return c.entries(migMinorsKind) }
	if d := run(true); d.MIGConfig.Minor != 1 || len(entries()) != 0 {
		t.Fatalf("NoCache: config %+v, cache files %q", d.MIGConfig, entries())
	}
	if d := run(false); d.MIGConfig.Minor != 1 || d.MIGMonitor.Minor != 2 {
		t.Fatalf("config %+v monitor %+v", d.MIGConfig, d.MIGMonitor)
	}
	// An entry with other values for the same key is what a second
	// discovery reports: it did not read the table.
	c.forge(migMinorsKind, strings.NewReplacer(`"config":1`, `"config":2`, `"monitor":2`, `"monitor":1`))
	if d := run(false); d.MIGConfig.Minor != 2 || d.MIGMonitor.Minor != 1 {
		t.Errorf("cached entry not used: config %+v monitor %+v", d.MIGConfig, d.MIGMonitor)
	}
	// A new table (another driver) is another key.
	m.file("/proc/driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\ngpu0/gi0/access 3\n", 0o444)
	if d := run(false); d.MIGConfig.Minor != 1 || d.MIGMonitor.Minor != 2 {
		t.Errorf("stale entry used after the table changed: config %+v monitor %+v", d.MIGConfig, d.MIGMonitor)
	}
	if n := len(entries()); n != 2 {
		t.Errorf("%d cache files, want 2", n)
	}
}

// TestGPUInformationCached: the GPUs' information files are read once
// while they are the same files (the run cache keeps what they said), and
// again once one changed; NoCache reads them every time.
func TestGPUInformationCached(t *testing.T) {
	m := newMiniRoot(t)
	m.driver("535.261.03")
	m.writeCache()
	m.chardev("/dev/nvidiactl", 195, 255)
	m.gpu("0000:41:00.0", 0, "GPU-00000000-0000-0000-0000-000000000041")
	m.chardev("/dev/nvidia0", 195, 0)
	m.gpu("0000:42:00.0", 1, "GPU-00000000-0000-0000-0000-000000000042")
	m.chardev("/dev/nvidia1", 195, 1)
	c := &cachedRuns{t: t, m: m, dir: t.TempDir()}
	run, entries := c.run, func() []string { return c.entries(gpuInfoKind) }
	uuids := func(d *Driver) string {
		var out []string
		for _, g := range d.GPUs {
			out = append(out, g.UUID)
		}
		return strings.Join(out, " ")
	}
	const both = "GPU-00000000-0000-0000-0000-000000000041 GPU-00000000-0000-0000-0000-000000000042"
	if d := run(true); uuids(d) != both || len(entries()) != 0 {
		t.Fatalf("NoCache: GPUs %s, cache files %q", uuids(d), entries())
	}
	// Files that are not procfs are read, not cached (but in tests).
	if d := run(false); uuids(d) != both || len(entries()) != 0 {
		t.Fatalf("regular files: GPUs %s, cache files %q", uuids(d), entries())
	}
	c.regular = true
	if d := run(false); uuids(d) != both {
		t.Fatalf("GPUs %s", uuids(d))
	}
	// An entry saying something else for the same key is what the next
	// discovery reports: it read no information file.
	c.forge(gpuInfoKind, strings.NewReplacer("000000000042", "0000000000ff"))
	if d := run(false); !strings.HasSuffix(uuids(d), "0000000000ff") {
		t.Errorf("cached entry not used: GPUs %s", uuids(d))
	}
	// A GPU's file written again (another driver load): read again.
	m.gpu("0000:42:00.0", 1, "GPU-00000000-0000-0000-0000-000000000043")
	if d := run(false); !strings.HasSuffix(uuids(d), "000000000043") {
		t.Errorf("stale entry used after an information file changed: GPUs %s", uuids(d))
	}
	if d := run(true); !strings.HasSuffix(uuids(d), "000000000043") {
		t.Errorf("NoCache: GPUs %s", uuids(d))
	}
}

// cachedRuns discovers a mini root with the run cache in dir.
type cachedRuns struct {
	t   *testing.T
	m   *miniRoot
	dir string
	// regular caches the fixture's proc files (regular files) as procfs
	// files are.
	regular bool
}

// run discovers, reading and writing the cache unless noCache.
func (c *cachedRuns) run(noCache bool) *Driver {
	c.t.Helper()
	d, err := c.m.discover(func(o *Options) {
		o.ProbeConfig.CacheDir, o.ProbeConfig.NoCache, o.cacheRegularProc = c.dir, noCache, c.regular
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return d
}

// entries are the cache files of kind.
func (c *cachedRuns) entries(kind string) []string {
	c.t.Helper()
	e, err := filepath.Glob(filepath.Join(c.dir, kind+"-*.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	return e
}

// forge rewrites the one cache file of kind with r, which must change it.
func (c *cachedRuns) forge(kind string, r *strings.Replacer) {
	c.t.Helper()
	files := c.entries(kind)
	if len(files) != 1 {
		c.t.Fatalf("cache files %q, want one", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		c.t.Fatal(err)
	}
	forged := r.Replace(string(data))
	if forged == string(data) {
		c.t.Fatalf("unexpected cache entry %s", data)
	}
	if err := os.WriteFile(files[0], []byte(forged), 0o644); err != nil {
		c.t.Fatal(err)
	}
}
