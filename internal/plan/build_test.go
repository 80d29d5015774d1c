package plan

import (
	"slices"
	"testing"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
)

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
			opts:     Options{Caps: caps.Default(), GPUs: []discover.GPU{d.GPUs[1]}, Target: DebianTarget()},
			devices:  []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3"},
			mounts:   []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03", "/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-control", "/run/nvidia-persistenced/socket"},
			symlinks: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"},
			ldconfig: []string{"/usr/lib/x86_64-linux-gnu"},
			procGPUs: []string{"00000000:02:00.0"},
		},
		{
			name:     "none: libraries and control nodes, no GPU node",
			opts:     Options{Caps: caps.Set{caps.Utility: true}, Target: DebianTarget(), NoPersistenced: true},
			devices:  []string{"/dev/nvidiactl"},
			mounts:   []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03", "/usr/bin/nvidia-smi"},
			symlinks: []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"},
			ldconfig: []string{"/usr/lib/x86_64-linux-gnu"},
		},
		{
			name:     "video implies compute libs and uvm; display gives modeset and graphics; compat32",
			opts:     Options{Caps: caps.Set{caps.Video: true, caps.Display: true, caps.Compat32: true}, Target: DebianTarget()},
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
	o := Options{Caps: caps.Full(), GPUs: d.GPUs, Target: DebianTarget()}
	for b.Loop() {
		if _, err := Build(d, o); err != nil {
			b.Fatal(err)
		}
	}
}
