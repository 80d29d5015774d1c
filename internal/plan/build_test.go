package plan

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/selector"
)

// debianTarget is the layout of Debian-family x86-64 images.
func debianTarget() Target {
	return Target{LibDir: "/usr/lib/x86_64-linux-gnu", Lib32Dir: "/usr/lib/i386-linux-gnu", BinDir: "/usr/bin"}
}

func testDriver() *discover.Driver {
	lib := func(c caps.Capability, p, soname string, c32 bool) discover.File {
		return discover.File{Capability: c, Path: p, HostPath: "/drv" + p, SONAME: soname, Compat32: c32}
	}
	node := func(p string, maj, min uint32) discover.DeviceNode {
		return discover.DeviceNode{Path: p, HostPath: "/drv" + p, Major: maj, Minor: min, Mode: 0o666}
	}
	gpu := func(i, minor int, bus string) discover.GPU {
		return discover.GPU{Index: i, Minor: minor, BusID: bus, UUID: "GPU-" + bus,
			Node: node("/dev/nvidia"+string(rune('0'+minor)), 195, uint32(minor))}
	}
	return &discover.Driver{
		Version: "535.261.03",
		Libraries: []discover.File{
			lib(caps.Utility, "/usr/local/nvidia/lib64/libnvidia-ml.so.535.261.03", "libnvidia-ml.so.1", false),
			lib(caps.Compute, "/usr/local/nvidia/lib64/libcuda.so.535.261.03", "libcuda.so.1", false),
			lib(caps.Video, "/usr/local/nvidia/lib64/libnvcuvid.so.535.261.03", "libnvcuvid.so.1", false),
			lib(caps.Graphics, "/usr/local/nvidia/lib64/libGLX_nvidia.so.535.261.03", "libGLX_nvidia.so.0", false),
			lib(caps.Compute, "/usr/lib32/libcuda.so.535.261.03", "libcuda.so.1", true),
		},
		Binaries: []discover.File{
			{Name: "nvidia-smi", Capability: caps.Utility, Path: "/usr/local/nvidia/bin/nvidia-smi", HostPath: "/drv/usr/local/nvidia/bin/nvidia-smi"},
			{Name: "nvidia-cuda-mps-control", Capability: caps.Compute, Path: "/usr/local/nvidia/bin/nvidia-cuda-mps-control", HostPath: "/drv/x"},
		},
		IPCs: []discover.File{
			{Name: "persistenced", Capability: caps.Utility, Path: "/run/nvidia-persistenced/socket", HostPath: "/drv/run/nvidia-persistenced/socket"},
		},
		ControlNodes: []discover.DeviceNode{
			node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 510, 0),
			node("/dev/nvidia-uvm-tools", 510, 1), node("/dev/nvidia-modeset", 195, 254),
		},
		GPUs:      []discover.GPU{gpu(0, 0, "00000000:01:00.0"), gpu(1, 3, "00000000:02:00.0"), gpu(2, 1, "00000000:03:00.0")},
		ProcFiles: []string{"/drv/proc/driver/nvidia/params", "/drv/proc/driver/nvidia/version"},
	}
}

func paths[T any](xs []T, f func(T) string) []string {
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

func TestBuild(t *testing.T) {
	d := testDriver()
	tests := []struct {
		name      string
		opts      Options
		devices   []string
		mounts    []string
		symlinks  []string
		ldconfig  []string
		procGPUs  []string
		wantError bool
	}{
		{
			name:     "default caps, GPU 1 only",
			opts:     Options{Caps: caps.Default(), GPUs: []discover.GPU{d.GPUs[1]}, Target: debianTarget()},
			devices:  []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3"},
			mounts:   []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03", "/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-control", "/run/nvidia-persistenced/socket"},
			symlinks: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"},
			ldconfig: []string{"/usr/lib/x86_64-linux-gnu"},
			procGPUs: []string{"00000000:02:00.0"},
		},
		{
			name:     "none: libraries and control nodes, no GPU node",
			opts:     Options{Caps: caps.Set{caps.Utility: true}, Target: debianTarget(), NoPersistenced: true},
			devices:  []string{"/dev/nvidiactl"},
			mounts:   []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03", "/usr/bin/nvidia-smi"},
			symlinks: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"},
			ldconfig: []string{"/usr/lib/x86_64-linux-gnu"},
		},
		{
			name:     "video implies compute libs and uvm; display gives modeset and graphics; compat32",
			opts:     Options{Caps: caps.Set{caps.Video: true, caps.Display: true, caps.Compat32: true}, Target: debianTarget()},
			devices:  []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"},
			mounts:   []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03", "/usr/lib/x86_64-linux-gnu/libnvcuvid.so.535.261.03", "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.535.261.03", "/usr/lib/i386-linux-gnu/libcuda.so.535.261.03"},
			symlinks: []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so", "/usr/lib/x86_64-linux-gnu/libnvcuvid.so.1", "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.0", "/usr/lib/x86_64-linux-gnu/libGLX_indirect.so.0", "/usr/lib/i386-linux-gnu/libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so"},
			ldconfig: []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"},
		},
		{
			name:     "driver-root paths when the target has no lib dir (CDI)",
			opts:     Options{Caps: caps.Set{caps.Compute: true}, Target: Target{BinDir: "/usr/bin"}},
			devices:  []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"},
			mounts:   []string{"/usr/local/nvidia/lib64/libcuda.so.535.261.03", "/usr/bin/nvidia-cuda-mps-control"},
			symlinks: []string{"/usr/local/nvidia/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so"},
			ldconfig: []string{"/usr/local/nvidia/lib64"},
		},
		{
			name:      "selected GPU without a node",
			opts:      Options{Caps: caps.Default(), GPUs: []discover.GPU{{Index: 5, UUID: "GPU-x"}}},
			wantError: true,
		},
		{
			name:      "missing IMEX channel",
			opts:      Options{Caps: caps.Default(), IMEXChannels: []int{3}},
			wantError: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(d, tc.opts)
			if tc.wantError {
				if err == nil {
					t.Fatalf("Build succeeded, want error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if got := paths(p.Devices, func(d Device) string { return d.Path }); !slices.Equal(got, tc.devices) {
				t.Errorf("devices = %q, want %q", got, tc.devices)
			}
			if got := paths(p.Mounts, func(m Mount) string { return m.Destination }); !slices.Equal(got, tc.mounts) {
				t.Errorf("mounts = %q, want %q", got, tc.mounts)
			}
			if got := paths(p.Symlinks, func(s Symlink) string { return s.Link }); !slices.Equal(got, tc.symlinks) {
				t.Errorf("symlinks = %q, want %q", got, tc.symlinks)
			}
			if !slices.Equal(p.LdconfigDirs, tc.ldconfig) {
				t.Errorf("ldconfig dirs = %q, want %q", p.LdconfigDirs, tc.ldconfig)
			}
			if p.Proc == nil || !slices.Equal(p.Proc.GPUDirs, tc.procGPUs) {
				t.Errorf("proc view = %+v, want GPU dirs %q", p.Proc, tc.procGPUs)
			}
			for _, m := range p.Mounts {
				if !slices.Contains(m.Options, OptNoSuid) || !slices.Contains(m.Options, OptNoDev) || !slices.Contains(m.Options, OptRPrivate) {
					t.Errorf("mount %s options %q lack nosuid/nodev/rprivate", m.Destination, m.Options)
				}
				if m.Kind == KindFile && !slices.Contains(m.Options, OptRO) {
					t.Errorf("file mount %s is not read-only: %q", m.Destination, m.Options)
				}
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	d := testDriver()
	o := Options{Caps: caps.Full(), GPUs: d.GPUs, Target: debianTarget()}
	for b.Loop() {
		if _, err := Build(d, o); err != nil {
			b.Fatal(err)
		}
	}
}

// migDriver is testDriver with GPU 1 in MIG mode: one MIG device (GI 1,
// CI 0), its GPU's MIG capabilities, and the MIG config and monitor
// capabilities.
func migDriver() *discover.Driver {
	d := testDriver()
	node := func(p string, min uint32) discover.DeviceNode {
		return discover.DeviceNode{Path: p, HostPath: "/drv" + p, Major: 237, Minor: min, Mode: 0o444}
	}
	d.MIGConfig, d.MIGMonitor = node("/dev/nvidia-caps/nvidia-cap1", 1), node("/dev/nvidia-caps/nvidia-cap2", 2)
	gi, ci := node("/dev/nvidia-caps/nvidia-cap39", 39), node("/dev/nvidia-caps/nvidia-cap40", 40)
	d.CapsNodes = []discover.DeviceNode{d.MIGConfig, d.MIGMonitor, gi, ci}
	g := &d.GPUs[1]
	g.MIGCapable, g.MIGEnabled = true, true
	g.MIGCapsDir = "/proc/driver/nvidia/capabilities/gpu3"
	g.MIGCapNodes = []discover.DeviceNode{gi, ci}
	g.MIGDevices = []discover.MIGDevice{{UUID: "MIG-1", GI: 1, GIAccess: gi, CIAccess: ci,
		GIAccessProc: "/proc/driver/nvidia/capabilities/gpu3/mig/gi1/access",
		CIAccessProc: "/proc/driver/nvidia/capabilities/gpu3/mig/gi1/ci0/access"}}
	return d
}

// TestBuildMIG: MIG devices bring their access capabilities; MIG config
// and monitor bring their own capability and the MIG-capable GPUs' (not
// every nvidia-caps node, not the MIG devices'), are refused with
// specific MIG devices and allowed with "all".
func TestBuildMIG(t *testing.T) {
	d := migDriver()
	one := selector.Selection{GPUs: []discover.GPU{d.GPUs[1]}, MIG: []selector.SelectedMIG{{Parent: d.GPUs[1], MIG: d.GPUs[1].MIGDevices[0]}}}
	all := selector.Selection{All: true, GPUs: d.GPUs, MIG: one.MIG}
	type dev struct {
		path  string
		class DeviceClass
		grant string
		proc  string
	}
	ctl := []dev{{"/dev/nvidiactl", DeviceDriver, "", ""}}
	tests := []struct {
		name    string
		opts    Options
		devices []dev
		expose  []string
		err     string // MIGSelectionError option
	}{
		{name: "MIG device", opts: Options{}.Select(one),
			devices: append(slices.Clone(ctl), dev{"/dev/nvidia3", DeviceGPU, "", ""},
				dev{"/dev/nvidia-caps/nvidia-cap39", DeviceMIG, "MIG-1", "capabilities/gpu3/mig/gi1/access"},
				dev{"/dev/nvidia-caps/nvidia-cap40", DeviceMIG, "MIG-1", "capabilities/gpu3/mig/gi1/ci0/access"}),
			expose: []string{"capabilities/gpu3/mig/gi1/access", "capabilities/gpu3/mig/gi1/ci0/access"}},
		{name: "MIG device and mig-config", opts: Options{MIGConfig: true}.Select(one), err: "mig-config"},
		{name: "MIG device and mig-monitor", opts: Options{MIGMonitor: true}.Select(one), err: "mig-monitor"},
		{name: "GPU 1 and mig-config", opts: Options{MIGConfig: true, GPUs: []discover.GPU{d.GPUs[1]}},
			devices: append(slices.Clone(ctl), dev{"/dev/nvidia3", DeviceGPU, "", ""},
				dev{"/dev/nvidia-caps/nvidia-cap1", DeviceMIGAdmin, GrantMIGConfig, "capabilities/mig/config"},
				dev{"/dev/nvidia-caps/nvidia-cap39", DeviceMIGAdmin, d.GPUs[1].UUID, "capabilities/gpu3"},
				dev{"/dev/nvidia-caps/nvidia-cap40", DeviceMIGAdmin, d.GPUs[1].UUID, "capabilities/gpu3"}),
			expose: []string{"capabilities/mig/config", "capabilities/gpu3"}},
		{name: "all, mig-config and mig-monitor", opts: Options{MIGConfig: true, MIGMonitor: true}.Select(all),
			devices: append(slices.Clone(ctl), dev{"/dev/nvidia0", DeviceGPU, "", ""}, dev{"/dev/nvidia3", DeviceGPU, "", ""}, dev{"/dev/nvidia1", DeviceGPU, "", ""},
				dev{"/dev/nvidia-caps/nvidia-cap1", DeviceMIGAdmin, GrantMIGConfig, "capabilities/mig/config"},
				dev{"/dev/nvidia-caps/nvidia-cap39", DeviceMIGAdmin, d.GPUs[1].UUID, "capabilities/gpu3"},
				dev{"/dev/nvidia-caps/nvidia-cap40", DeviceMIGAdmin, d.GPUs[1].UUID, "capabilities/gpu3"},
				dev{"/dev/nvidia-caps/nvidia-cap2", DeviceMIGAdmin, GrantMIGMonitor, "capabilities/mig/monitor"}),
			expose: []string{"capabilities/mig/config", "capabilities/gpu3", "capabilities/mig/monitor"}},
		{name: "mig-config without a MIG-capable GPU", opts: Options{MIGConfig: true, GPUs: []discover.GPU{d.GPUs[0]}},
			devices: append(slices.Clone(ctl), dev{"/dev/nvidia0", DeviceGPU, "", ""})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Caps = caps.Set{caps.Utility: true}
			p, err := Build(d, tc.opts)
			if tc.err != "" {
				var me *MIGSelectionError
				if !errors.As(err, &me) || me.Option != tc.err || err.Error() != "cannot enable "+tc.err+" with specific MIG devices selected" {
					t.Fatalf("Build: %v, want a *MIGSelectionError for %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []dev
			for _, d := range p.Devices {
				got = append(got, dev{d.Path, d.Class, d.Grant, d.Proc})
			}
			if !slices.Equal(got, tc.devices) {
				t.Errorf("devices\n got %+v\nwant %+v", got, tc.devices)
			}
			if !slices.Equal(p.Proc.Expose, tc.expose) {
				t.Errorf("exposed %q, want %q", p.Proc.Expose, tc.expose)
			}
		})
	}
}

// TestBuildMissingNodes: a missing node fails the plan with a
// *MissingDeviceError naming each node and how to create it.
func TestBuildMissingNodes(t *testing.T) {
	tests := []struct {
		name  string
		drv   func(d *discover.Driver)
		opts  Options
		nodes []string // *discover.DeviceNodeError paths
		msg   []string
	}{
		{name: "no nvidiactl", drv: func(d *discover.Driver) { d.ControlNodes = d.ControlNodes[1:] },
			nodes: []string{"/dev/nvidiactl"}, msg: []string{"missing device node /dev/nvidiactl: expected character device 195:255 at /drv/dev/nvidiactl", "nvidia-modprobe"}},
		{name: "GPU without a node", drv: func(d *discover.Driver) { d.GPUs[2].Node = discover.DeviceNode{} },
			opts:  Options{GPUs: []discover.GPU{{Index: 2, Minor: 1}}},
			nodes: []string{"/dev/nvidia1"}, msg: []string{"missing device node /dev/nvidia1: expected character device 195:1", "nvidia-modprobe -c 1"}},
		{name: "no nvidiactl and no GPU node", drv: func(d *discover.Driver) { d.ControlNodes = nil },
			opts:  Options{GPUs: []discover.GPU{{Index: 2, Minor: 1}}},
			nodes: []string{"/dev/nvidiactl", "/dev/nvidia1"}, msg: []string{"/dev/nvidiactl: expected", "; missing device node /dev/nvidia1:"}},
		{name: "IMEX channel", opts: Options{IMEXChannels: []int{3}},
			msg: []string{"missing device /dev/nvidia-caps-imex-channels/channel3 (IMEX channel 3"}},
		{name: "MIG capability", drv: func(d *discover.Driver) { d.GPUs[1].MIGDevices[0].CIAccess = discover.DeviceNode{} },
			opts: Options{MIG: []selector.SelectedMIG{{Parent: discover.GPU{Index: 1}, MIG: discover.MIGDevice{UUID: "MIG-1", CIAccessProc: "/proc/driver/nvidia/capabilities/gpu3/mig/gi1/ci0/access"}}}},
			msg:  []string{"missing device node for MIG device MIG-1 of GPU 1: no /dev/nvidia-caps node for /proc/driver/nvidia/capabilities/gpu3/mig/gi1/ci0/access"}},
		{name: "MIG monitor capability", drv: func(d *discover.Driver) { d.MIGMonitor = discover.DeviceNode{} },
			opts: Options{MIGMonitor: true, GPUs: []discover.GPU{{Index: 1, Minor: 3, MIGCapable: true, Node: discover.DeviceNode{Path: "/dev/nvidia3"}}}},
			msg:  []string{"missing device node for the MIG monitor capability (/proc/driver/nvidia/capabilities/mig/monitor"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := migDriver()
			if tc.drv != nil {
				tc.drv(d)
			}
			tc.opts.Caps = caps.Set{caps.Utility: true}
			p, err := Build(d, tc.opts)
			var me *MissingDeviceError
			if p != nil || !errors.As(err, &me) || !errors.Is(err, ErrMissingDevice) {
				t.Fatalf("Build: %v, want a *MissingDeviceError", err)
			}
			var nodes []string
			for _, e := range me.Errs {
				for _, e := range unjoin(e) {
					var ne *discover.DeviceNodeError
					if errors.As(e, &ne) && ne.Missing {
						nodes = append(nodes, ne.Path)
					}
				}
			}
			if !slices.Equal(nodes, tc.nodes) {
				t.Errorf("missing nodes %q, want %q", nodes, tc.nodes)
			}
			for _, s := range tc.msg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error\n%s\nlacks %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestBuildMountClasses: every driver file mount says what it is.
func TestBuildMountClasses(t *testing.T) {
	d := testDriver()
	d.Firmware = []discover.File{{Path: "/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin", HostPath: "/drv/usr/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin"}}
	p, err := Build(d, Options{Caps: caps.Full()})
	if err != nil {
		t.Fatal(err)
	}
	got := map[MountClass][]string{}
	for _, m := range p.Mounts {
		got[m.Class] = append(got[m.Class], m.Source)
	}
	want := map[MountClass][]string{
		MountLibrary:  paths(d.Libraries, func(f discover.File) string { return f.HostPath }),
		MountBinary:   {"/drv/usr/local/nvidia/bin/nvidia-smi", "/drv/x"},
		MountIPC:      {"/drv/run/nvidia-persistenced/socket"},
		MountFirmware: {"/drv/usr/lib/firmware/nvidia/535.261.03/gsp_ga10x.bin"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mounts by class\n got %v\nwant %v", got, want)
	}
}

// TestBuildDevLinks: every library whose host has a development link gets
// it in the container, pointing to the SONAME (to the file when the SONAME
// is the file's name), besides the SONAME link and NVIDIA's fixed links.
func TestBuildDevLinks(t *testing.T) {
	const dir = "/usr/lib/x86_64-linux-gnu"
	for _, tc := range []struct {
		name string
		lib  discover.File
		want []Symlink
	}{
		{name: "soname", lib: discover.File{Path: dir + "/libnvidia-ml.so.580.1", SONAME: "libnvidia-ml.so.1", DevLink: "libnvidia-ml.so"},
			want: []Symlink{{dir + "/libnvidia-ml.so.1", "libnvidia-ml.so.580.1"}, {dir + "/libnvidia-ml.so", "libnvidia-ml.so.1"}}},
		{name: "soname is the file", lib: discover.File{Path: dir + "/libnvidia-glcore.so.580.1", SONAME: "libnvidia-glcore.so.580.1", DevLink: "libnvidia-glcore.so"},
			want: []Symlink{{dir + "/libnvidia-glcore.so", "libnvidia-glcore.so.580.1"}}},
		{name: "no host link", lib: discover.File{Path: dir + "/libnvidia-cfg.so.580.1", SONAME: "libnvidia-cfg.so.1"},
			want: []Symlink{{dir + "/libnvidia-cfg.so.1", "libnvidia-cfg.so.580.1"}}},
		{name: "libcuda always", lib: discover.File{Path: dir + "/libcuda.so.580.1", SONAME: "libcuda.so.1", DevLink: "libcuda.so"},
			want: []Symlink{{dir + "/libcuda.so.1", "libcuda.so.580.1"}, {dir + "/libcuda.so", "libcuda.so.1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.lib.Capability = caps.Utility
			tc.lib.HostPath = "/drv" + tc.lib.Path
			d := testDriver()
			d.Libraries = []discover.File{tc.lib}
			p, err := Build(d, Options{Caps: caps.Set{caps.Utility: true}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Symlinks, tc.want) {
				t.Errorf("symlinks %v, want %v", p.Symlinks, tc.want)
			}
		})
	}
}

// TestBuildGraphics: graphics or display bring the graphics files (Vulkan's
// below /etc; libraries with their SONAME link, into ld.so.cache; the GBM,
// vulkan-producer and GLX server links) and, per selected GPU, its DRM
// nodes and by-path links, made by a hook; other capabilities none of it.
func TestBuildGraphics(t *testing.T) {
	d := testDriver()
	d.LibraryVersion = "535.261.03"
	const lib = "/usr/local/nvidia/lib64"
	d.Libraries = append(d.Libraries, discover.File{Capability: caps.Compute, Path: lib + "/libnvidia-allocator.so.535.261.03",
		HostPath: "/drv" + lib + "/libnvidia-allocator.so.535.261.03", SONAME: "libnvidia-allocator.so.1"})
	d.Graphics = []discover.File{
		{Path: lib + "/libnvidia-egl-gbm.so.1.1.0", HostPath: "/drv/egl-gbm", SONAME: "libnvidia-egl-gbm.so.1", Library: true},
		{Path: lib + "/libnvidia-vulkan-producer.so.535.261.03", HostPath: "/drv/producer", Library: true},
		{Path: "/usr/share/vulkan/icd.d/nvidia_icd.json", Dest: "/etc/vulkan/icd.d/nvidia_icd.json", HostPath: "/drv/icd"},
		{Path: "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.535.261.03", HostPath: "/drv/glx"},
	}
	dri := func(p string, minor uint32) discover.DeviceNode {
		return discover.DeviceNode{Path: p, HostPath: "/drv" + p, Major: 226, Minor: minor, Mode: 0o660, GID: 44}
	}
	d.GPUs[1].DRMNodes = []discover.DeviceNode{dri("/dev/dri/card2", 2), dri("/dev/dri/renderD129", 129)}
	d.GPUs[1].DRMLinks = []discover.DRMLink{{Path: "/dev/dri/by-path/pci-0000:02:00.0-card", Target: "../card2"}}
	d.GPUs[2].DRMNodes = []discover.DeviceNode{dri("/dev/dri/card3", 3)}
	for _, tc := range []struct {
		name      string
		caps      caps.Set
		target    Target
		mounts    []string // graphics mounts: destination
		links     []string // graphics symlinks: link -> target
		devices   []string
		devLinks  []string
		ldconfDir []string
		mig       bool // GPU 1 is there as the parent of a selected MIG device
	}{
		{name: "compute", caps: caps.Set{caps.Compute: true},
			devices: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3"}, ldconfDir: []string{lib}},
		{name: "display, CDI layout", caps: caps.Set{caps.Display: true, caps.Compute: true},
			mounts: []string{lib + "/libnvidia-egl-gbm.so.1.1.0", lib + "/libnvidia-vulkan-producer.so.535.261.03",
				"/etc/vulkan/icd.d/nvidia_icd.json", "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.535.261.03"},
			links: []string{lib + "/libnvidia-egl-gbm.so.1 -> libnvidia-egl-gbm.so.1.1.0",
				lib + "/libnvidia-vulkan-producer.so -> libnvidia-vulkan-producer.so.535.261.03",
				"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so -> libglxserver_nvidia.so.535.261.03",
				lib + "/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1"},
			devices: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia3",
				"/dev/dri/card2", "/dev/dri/renderD129"},
			devLinks:  []string{"/dev/dri/by-path/pci-0000:02:00.0-card -> ../card2"},
			ldconfDir: []string{lib}},
		{name: "graphics, image layout", caps: caps.Set{caps.Graphics: true}, target: debianTarget(),
			mounts: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-egl-gbm.so.1.1.0", "/usr/lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so.535.261.03",
				"/etc/vulkan/icd.d/nvidia_icd.json", "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.535.261.03"},
			links: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-egl-gbm.so.1 -> libnvidia-egl-gbm.so.1.1.0",
				"/usr/lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so -> libnvidia-vulkan-producer.so.535.261.03",
				"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so -> libglxserver_nvidia.so.535.261.03"},
			devices:   []string{"/dev/nvidiactl", "/dev/nvidia3", "/dev/dri/card2", "/dev/dri/renderD129"},
			devLinks:  []string{"/dev/dri/by-path/pci-0000:02:00.0-card -> ../card2"},
			ldconfDir: []string{"/usr/lib/x86_64-linux-gnu"}},
		{name: "display, a MIG device of the GPU", caps: caps.Set{caps.Display: true}, mig: true,
			mounts: []string{lib + "/libnvidia-egl-gbm.so.1.1.0", lib + "/libnvidia-vulkan-producer.so.535.261.03",
				"/etc/vulkan/icd.d/nvidia_icd.json", "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.535.261.03"},
			links: []string{lib + "/libnvidia-egl-gbm.so.1 -> libnvidia-egl-gbm.so.1.1.0",
				lib + "/libnvidia-vulkan-producer.so -> libnvidia-vulkan-producer.so.535.261.03",
				"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so -> libglxserver_nvidia.so.535.261.03"},
			devices:   []string{"/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"},
			ldconfDir: []string{lib}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Caps: tc.caps, GPUs: d.GPUs[1:2], Target: tc.target}
			if tc.mig {
				capNode := func(m uint32) discover.DeviceNode {
					return discover.DeviceNode{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m), HostPath: "/drv/c", Major: 511, Minor: m, Mode: 0o444}
				}
				o.MIG = []selector.SelectedMIG{{Parent: d.GPUs[1], MIG: discover.MIGDevice{Index: 0, UUID: "MIG-x",
					GIAccess: capNode(12), CIAccess: capNode(13)}}}
			}
			p, err := Build(d, o)
			if err != nil {
				t.Fatal(err)
			}
			var mounts []string
			for _, m := range p.Mounts {
				if m.Class == MountGraphics {
					mounts = append(mounts, m.Destination)
				}
			}
			link := func(s Symlink) string { return s.Link + " -> " + s.Target }
			var links []string
			for _, s := range p.Symlinks {
				if strings.Contains(s.Link, "egl-gbm") || strings.Contains(s.Link, "producer") || strings.Contains(s.Link, "glxserver") ||
					strings.Contains(s.Link, "/gbm/") {
					links = append(links, link(s))
				}
			}
			devs := paths(p.Devices, func(d Device) string { return d.Path })
			devLinks := paths(p.DevSymlinks, link)
			if !slices.Equal(mounts, tc.mounts) || !slices.Equal(links, tc.links) || !slices.Equal(devs, tc.devices) ||
				!slices.Equal(devLinks, tc.devLinks) {
				t.Errorf("mounts %q\nwant %q\nlinks %q\nwant %q\ndevices %q\nwant %q\ndev links %q\nwant %q",
					mounts, tc.mounts, links, tc.links, devs, tc.devices, devLinks, tc.devLinks)
			}
			if !slices.Equal(p.LdconfigDirs, tc.ldconfDir) {
				t.Errorf("ldconfig dirs %q, want %q", p.LdconfigDirs, tc.ldconfDir)
			}
			if tc.mounts != nil && !slices.Contains(p.LdcacheLibs(), tc.mounts[0]) {
				t.Errorf("ld.so.cache libraries %q lack %s", p.LdcacheLibs(), tc.mounts[0])
			}
		})
	}
}
