package containercli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/cli/containercli/nvc"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/plan"
)

// syntheticDriver is a discovery result shaped like an H100 host with
// two GPUs, the second with one MIG device, for format tests that do not
// need a driver root.
func syntheticDriver() *discover.Driver {
	lib := func(c caps.Capability, name, p string, c32 bool) discover.File {
		return discover.File{Name: name, Capability: c, Path: p, HostPath: p, Compat32: c32}
	}
	node := func(p string, maj, min uint32) discover.DeviceNode {
		return discover.DeviceNode{Path: p, HostPath: p, Major: maj, Minor: min, Mode: 0o666}
	}
	return &discover.Driver{
		Root: "/", Version: "580.159.04", LibraryVersion: "580.159.04",
		CUDAVersion: "13.0", CUDAVersionSource: discover.SourceLibcuda, CUDADriverVersion: 13000,
		Libraries: []discover.File{
			lib(caps.Utility, "libnvidia-ml.so", "/usr/lib64/libnvidia-ml.so.580.159.04", false),
			lib(caps.Compute, "libcuda.so", "/usr/lib64/libcuda.so.580.159.04", false),
			lib(caps.Video, "libnvcuvid.so", "/usr/lib64/libnvcuvid.so.580.159.04", false),
			lib(caps.Graphics, "libGLX_nvidia.so", "/usr/lib64/libGLX_nvidia.so.580.159.04", false),
			lib(caps.Utility, "libnvidia-ml.so", "/usr/lib32/libnvidia-ml.so.580.159.04", true),
			lib(caps.Compute, "libcuda.so", "/usr/lib32/libcuda.so.580.159.04", true),
		},
		Binaries: []discover.File{
			{Name: "nvidia-smi", Capability: caps.Utility, Path: "/usr/bin/nvidia-smi", HostPath: "/usr/bin/nvidia-smi"},
			{Name: "nvidia-cuda-mps-control", Capability: caps.Compute, Path: "/usr/bin/nvidia-cuda-mps-control", HostPath: "/usr/bin/nvidia-cuda-mps-control"},
		},
		IPCs: []discover.File{
			{Name: "persistenced", Capability: caps.Utility, Path: "/run/nvidia-persistenced/socket", HostPath: "/run/nvidia-persistenced/socket"},
			{Name: "fabricmanager", Capability: caps.Utility, Path: "/run/nvidia-fabricmanager/socket", HostPath: "/run/nvidia-fabricmanager/socket"},
			{Name: "mps", Capability: caps.Compute, Path: "/tmp/nvidia-mps", HostPath: "/tmp/nvidia-mps", Dir: true},
		},
		Firmware: []discover.File{{Name: "gsp_ga10x.bin", Path: "/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin", HostPath: "/usr/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin"}},
		ControlNodes: []discover.DeviceNode{
			node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 238, 0), node("/dev/nvidia-uvm-tools", 238, 1), node("/dev/nvidia-modeset", 195, 254),
		},
		CapsNodes:    []discover.DeviceNode{node("/dev/nvidia-caps/nvidia-cap1", 241, 1), node("/dev/nvidia-caps/nvidia-cap2", 241, 2), node("/dev/nvidia-caps/nvidia-cap39", 241, 39), node("/dev/nvidia-caps/nvidia-cap48", 241, 48)},
		IMEXChannels: []discover.DeviceNode{node("/dev/nvidia-caps-imex-channels/channel0", 242, 0)},
		MIGConfig:    node("/dev/nvidia-caps/nvidia-cap1", 241, 1),
		MIGMonitor:   node("/dev/nvidia-caps/nvidia-cap2", 241, 2),
		GPUs: []discover.GPU{
			{Index: 0, Minor: 0, UUID: "GPU-774c6ebd-adc7-ea5d-795d-101cecb6b8f4", BusID: "00000000:41:00.0", Model: "NVIDIA H100 80GB HBM3",
				Brand: "Nvidia", Arch: "9.0", Node: node("/dev/nvidia0", 195, 0), MIGCapsDir: "/proc/driver/nvidia/capabilities/gpu0"},
			{Index: 1, Minor: 1, UUID: "GPU-11111111-adc7-ea5d-795d-101cecb6b8f4", BusID: "00000000:c1:00.0", Model: "NVIDIA H100 80GB HBM3",
				Node: node("/dev/nvidia1", 195, 1), MIGCapable: true, MIGEnabled: true, MIGCapsDir: "/proc/driver/nvidia/capabilities/gpu1",
				MIGCapNodes: []discover.DeviceNode{node("/dev/nvidia-caps/nvidia-cap39", 241, 39), node("/dev/nvidia-caps/nvidia-cap48", 241, 48)},
				MIGDevices: []discover.MIGDevice{{Index: 0, UUID: "MIG-5a4fb5a8-0000-0000-0000-000000000001", GI: 1, CI: 0,
					GIAccess: node("/dev/nvidia-caps/nvidia-cap39", 241, 39), CIAccess: node("/dev/nvidia-caps/nvidia-cap48", 241, 48),
					GIAccessProc: "/proc/driver/nvidia/capabilities/gpu1/mig/gi1/access", CIAccessProc: "/proc/driver/nvidia/capabilities/gpu1/mig/gi1/ci0/access"}}},
		},
	}
}

func TestInfoFormat(t *testing.T) {
	var b bytes.Buffer
	writeInfo(&b, syntheticDriver())
	want := `NVRM version:   580.159.04
CUDA version:   13.0

Device Index:   0
Device Minor:   0
Model:          NVIDIA H100 80GB HBM3
Brand:          Nvidia
GPU UUID:       GPU-774c6ebd-adc7-ea5d-795d-101cecb6b8f4
Bus Location:   00000000:41:00.0
Architecture:   9.0

Device Index:   1
Device Minor:   1
Model:          NVIDIA H100 80GB HBM3
Brand:          Unknown
GPU UUID:       GPU-11111111-adc7-ea5d-795d-101cecb6b8f4
Bus Location:   00000000:c1:00.0
Architecture:   Unknown
`
	if b.String() != want {
		t.Errorf("info\n got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	writeInfoCSV(&b, syntheticDriver())
	want = `NVRM version,CUDA version
580.159.04,13.0

Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture
0,0,NVIDIA H100 80GB HBM3,Nvidia,GPU-774c6ebd-adc7-ea5d-795d-101cecb6b8f4,00000000:41:00.0,9.0
1,1,NVIDIA H100 80GB HBM3,Unknown,GPU-11111111-adc7-ea5d-795d-101cecb6b8f4,00000000:c1:00.0,Unknown
`
	if b.String() != want {
		t.Errorf("info --csv\n got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestListLines(t *testing.T) {
	tests := []struct {
		args  string
		want  string
		phase string
		err   string
	}{
		{args: "", want: `/dev/nvidiactl
/dev/nvidia-uvm
/dev/nvidia-uvm-tools
/dev/nvidia-modeset
/dev/nvidia0
/dev/nvidia1
/proc/driver/nvidia/capabilities/gpu1/mig/gi1/access
/proc/driver/nvidia/capabilities/gpu1/mig/gi1/ci0/access
/dev/nvidia-caps/nvidia-cap39
/dev/nvidia-caps/nvidia-cap48
/usr/bin/nvidia-smi
/usr/bin/nvidia-cuda-mps-control
/usr/lib64/libnvidia-ml.so.580.159.04
/usr/lib64/libcuda.so.580.159.04
/usr/lib64/libnvcuvid.so.580.159.04
/usr/lib64/libGLX_nvidia.so.580.159.04
/usr/lib32/libnvidia-ml.so.580.159.04
/usr/lib32/libcuda.so.580.159.04
/run/nvidia-persistenced/socket
/run/nvidia-fabricmanager/socket
/tmp/nvidia-mps
/usr/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin`},
		{args: "--libraries", want: `/usr/lib64/libnvidia-ml.so.580.159.04
/usr/lib64/libcuda.so.580.159.04
/usr/lib64/libnvcuvid.so.580.159.04
/usr/lib64/libGLX_nvidia.so.580.159.04`},
		{args: "-l --compat32 --utility", want: `/usr/lib64/libnvidia-ml.so.580.159.04
/usr/lib32/libnvidia-ml.so.580.159.04`},
		{args: "--compute", want: `/dev/nvidiactl
/dev/nvidia-uvm
/dev/nvidia-uvm-tools
/dev/nvidia0
/dev/nvidia1
/proc/driver/nvidia/capabilities/gpu1/mig/gi1/access
/proc/driver/nvidia/capabilities/gpu1/mig/gi1/ci0/access
/dev/nvidia-caps/nvidia-cap39
/dev/nvidia-caps/nvidia-cap48
/usr/bin/nvidia-cuda-mps-control
/usr/lib64/libcuda.so.580.159.04
/usr/lib32/libcuda.so.580.159.04
/tmp/nvidia-mps
/usr/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin`},
		{args: "--video -l", want: `/usr/lib64/libcuda.so.580.159.04
/usr/lib64/libnvcuvid.so.580.159.04`},
		{args: "-d 1 -b", want: `/dev/nvidiactl
/dev/nvidia-uvm
/dev/nvidia-uvm-tools
/dev/nvidia-modeset
/dev/nvidia1
/usr/bin/nvidia-smi
/usr/bin/nvidia-cuda-mps-control`},
		{args: "--device=GPU-774c6ebd-adc7-ea5d-795d-101cecb6b8f4 --display", want: `/dev/nvidiactl
/dev/nvidia-modeset
/dev/nvidia0`},
		{args: "-d 1:0", want: `/dev/nvidiactl
/dev/nvidia-uvm
/dev/nvidia-uvm-tools
/dev/nvidia-modeset
/dev/nvidia1
/proc/driver/nvidia/capabilities/gpu1/mig/gi1/access
/proc/driver/nvidia/capabilities/gpu1/mig/gi1/ci0/access
/dev/nvidia-caps/nvidia-cap39
/dev/nvidia-caps/nvidia-cap48`},
		{args: "-d 1 --mig-config=all", want: `/dev/nvidiactl
/dev/nvidia-uvm
/dev/nvidia-uvm-tools
/dev/nvidia-modeset
/dev/nvidia1
/proc/driver/nvidia/capabilities/mig/config
/dev/nvidia-caps/nvidia-cap1
/proc/driver/nvidia/capabilities/gpu1
/dev/nvidia-caps
/dev/nvidia-caps/nvidia-cap39
/dev/nvidia-caps/nvidia-cap48`},
		// "all" allows MIG config and monitor (NVIDIA's CLI does); they
		// replace the MIG devices' access capabilities.
		{args: "-d all --mig-config=all --mig-monitor=all", want: `/dev/nvidiactl
/dev/nvidia-uvm
/dev/nvidia-uvm-tools
/dev/nvidia-modeset
/dev/nvidia0
/dev/nvidia1
/proc/driver/nvidia/capabilities/mig/config
/dev/nvidia-caps/nvidia-cap1
/proc/driver/nvidia/capabilities/gpu1
/dev/nvidia-caps
/dev/nvidia-caps/nvidia-cap39
/dev/nvidia-caps/nvidia-cap48
/proc/driver/nvidia/capabilities/mig/monitor
/dev/nvidia-caps/nvidia-cap2`},
		// No MIG-capable GPU selected: nothing to configure.
		{args: "-d 0 --mig-monitor=all", want: `/dev/nvidiactl
/dev/nvidia-uvm
/dev/nvidia-uvm-tools
/dev/nvidia-modeset
/dev/nvidia0`},
		{args: "--mig-config=all", want: ``},
		{args: "--imex-channel=0 -i --no-persistenced --no-fabricmanager", want: `/dev/nvidia-caps-imex-channels/channel0
/tmp/nvidia-mps`},
		{args: "--imex-channel=0", want: `/dev/nvidiactl
/dev/nvidia-uvm
/dev/nvidia-uvm-tools
/dev/nvidia-modeset
/dev/nvidia0
/dev/nvidia1
/proc/driver/nvidia/capabilities/gpu1/mig/gi1/access
/proc/driver/nvidia/capabilities/gpu1/mig/gi1/ci0/access
/dev/nvidia-caps/nvidia-cap39
/dev/nvidia-caps/nvidia-cap48
/dev/nvidia-caps-imex-channels/channel0
/usr/bin/nvidia-smi
/usr/bin/nvidia-cuda-mps-control
/usr/lib64/libnvidia-ml.so.580.159.04
/usr/lib64/libcuda.so.580.159.04
/usr/lib64/libnvcuvid.so.580.159.04
/usr/lib64/libGLX_nvidia.so.580.159.04
/usr/lib32/libnvidia-ml.so.580.159.04
/usr/lib32/libcuda.so.580.159.04
/run/nvidia-persistenced/socket
/run/nvidia-fabricmanager/socket
/tmp/nvidia-mps
/usr/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin`},
		{args: "-f --no-gsp-firmware", want: ``},
		{args: "--compat32", want: ``},
		{args: "-d 7", phase: "device", err: "7: unknown device"},
		{args: "--imex-channel=5", phase: "device", err: "missing device /dev/nvidia-caps-imex-channels/channel5"},
		{args: "-d 1:0 --mig-config=all", phase: "mig-config", err: "cannot enable mig-config with specific MIG devices selected"},
		{args: "-d 0,1:0 --mig-monitor=all", phase: "mig-monitor", err: "cannot enable mig-monitor with specific MIG devices selected"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			parsed, _, err := nvc.Parse(listOptions(), strings.Fields(tt.args), false)
			if err != nil {
				t.Fatal(err)
			}
			r, err := parseList(parsed)
			if err != nil {
				t.Fatal(err)
			}
			lines, phase, err := listLines(syntheticDriver(), r)
			if tt.err != "" {
				if err == nil || phase != tt.phase || !strings.HasPrefix(err.Error(), tt.err) {
					t.Fatalf("phase %q error %v, want %q: %q…", phase, err, tt.phase, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(lines, "\n"); got != tt.want {
				t.Errorf("list %s\n got:\n%s\nwant:\n%s", tt.args, got, tt.want)
			}
		})
	}
}

func TestListOptionErrors(t *testing.T) {
	for args, want := range map[string]string{
		"--mig-config=0":         "mig-config error: only 'all' devices are currently supported",
		"--imex-channel=x":       "input error: invalid IMEX channel: x",
		"--imex-channel=1048576": "input error: invalid IMEX channel: 1048576",
	} {
		parsed, _, err := nvc.Parse(listOptions(), strings.Fields(args), false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseList(parsed); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

func TestMainUsage(t *testing.T) {
	tests := []struct {
		args   string
		code   int
		stdout string
		stderr string
	}{
		{args: "", code: 64, stderr: "nvidia-container-cli: missing command\nTry `nvidia-container-cli --help' or `nvidia-container-cli --usage' for more information.\n"},
		{args: "frobnicate", code: 64, stderr: "nvidia-container-cli: unknown command: frobnicate\n"},
		{args: "--bogus info", code: 64, stderr: "nvidia-container-cli: unrecognized option '--bogus'\n"},
		{args: "info --bogus", code: 64, stderr: "Try `nvidia-container-cli info --help'"},
		{args: "list extra", code: 64, stderr: "unexpected argument: extra"},
		{args: "--version", code: 0, stdout: "cli-version: " + CompatVersion + "\nlib-version: " + CompatVersion + "\nbuild date: "},
		{args: "--help", code: 0, stdout: "Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]"},
		{args: "list --help", code: 0, stdout: "      --mig-config=ID"},
		{args: "info --usage", code: 0, stdout: "Usage: nvidia-container-cli info [OPTION...]\n"},
		{args: "configure /rootfs", code: 1, stderr: "nvidia-container-cli: input error: configure: not built into this binary yet\n"},
		{args: "--root=/nonexistent/nctk-root info", code: 1, stderr: "nvidia-container-cli: initialization error: no NVIDIA driver found under root /nonexistent/nctk-root: /nonexistent/nctk-root/proc/driver/nvidia/version: no such file (is the nvidia kernel module loaded? is --root right?)\n"},
		{args: "--root=/nonexistent/nctk-root list", code: 1, stderr: "nvidia-container-cli: initialization error: no NVIDIA driver found"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			var out, errb bytes.Buffer
			e := &app.Env{Args: append([]string{"nvidia-container-cli"}, strings.Fields(tt.args)...), Stdout: &out, Stderr: &errb}
			code := MainWith(e, Commands{})
			if code != tt.code || !strings.Contains(out.String(), tt.stdout) || !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("exit %d, want %d\nstdout %q (want %q)\nstderr %q (want %q)", code, tt.code, out.String(), tt.stdout, errb.String(), tt.stderr)
			}
		})
	}
	// configure is delegated when provided.
	var got []string
	c := Commands{Configure: func(e *app.Env, g *nvc.Globals, args []string) int {
		got = append([]string{g.Root}, args...)
		return 7
	}}
	if code := MainWith(&app.Env{Args: strings.Fields("nvidia-container-cli -r /drv configure --pid=1 /rootfs")}, c); code != 7 ||
		strings.Join(got, " ") != "/drv --pid=1 /rootfs" {
		t.Errorf("configure hook: exit %d args %q", code, got)
	}
}

// TestListMissingControlNode: list fails as every path that builds a plan
// does when /dev/nvidiactl is missing, even when it lists no device.
func TestListMissingControlNode(t *testing.T) {
	for _, args := range []string{"", "-l", "-d 0"} {
		parsed, _, err := nvc.Parse(listOptions(), strings.Fields(args), false)
		if err != nil {
			t.Fatal(err)
		}
		r, err := parseList(parsed)
		if err != nil {
			t.Fatal(err)
		}
		d := syntheticDriver()
		d.ControlNodes = d.ControlNodes[1:]
		_, phase, err := listLines(d, r)
		if phase != "device" || !errors.Is(err, plan.ErrMissingDevice) ||
			!strings.HasPrefix(err.Error(), "missing device node /dev/nvidiactl: expected character device 195:255 at /dev/nvidiactl") {
			t.Errorf("list %s: phase %q, error %v; want a device error for /dev/nvidiactl", args, phase, err)
		}
	}
}
