package ctk

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/cdihook"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/rootfs"
)

// TestMain lets the test binary run as nvidia-cdi-hook (the hooks of a
// generated CDI spec, invoked by runc under that argv[0]) and as the
// confined-ldconfig child update-ldcache re-executes.
func TestMain(m *testing.M) {
	if rootfs.MaybeRunChild(os.Args) {
		return
	}
	if filepath.Base(os.Args[0]) == hookBinaryName {
		os.Exit(cdihook.Main(app.FromOS()))
	}
	os.Exit(m.Run())
}

// TestE2EPodmanCDI generates a spec with nvidia-ctk for a fixture driver
// root (Debian's real driver libraries, two GPUs whose minors are not their
// indices) and runs containers with podman 4.3 (CDI library v0.5,
// cdiVersion 0.5.0 at most) through it: --device nvidia.com/gpu=all gives
// the driver files, the ld.so.cache update (cudaprobe loads libcuda.so.1
// and reports the driver's CUDA version) and every device node;
// nvidia.com/gpu=1 gives only GPU 1's node.
func TestE2EPodmanCDI(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	fx := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 2})
	root := fx.Path
	if fx.CUDADriverVersion == 0 || !fx.DeviceNodes {
		t.Skipf("fixture without a measured CUDA version (%d) or device nodes (%s)", fx.CUDADriverVersion, fx.NoDeviceNodesReason)
	}
	cudaVersion := strconv.Itoa(fx.CUDADriverVersion)

	// The hooks run this test binary as nvidia-cdi-hook.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	hook := filepath.Join(bin, hookBinaryName)
	if err := os.Symlink(exe, hook); err != nil {
		t.Fatal(err)
	}

	specDir := t.TempDir()
	out := filepath.Join(specDir, "nvidia.yaml")
	if _, stderr, code := cdiRun(t, nil, "cdi", "generate", "--driver-root", root, "--output", out, "--nvidia-cdi-hook-path", hook); code != 0 {
		t.Fatalf("nvidia-ctk cdi generate: exit %d: %s", code, stderr)
	}
	spec, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(spec), "---\ncdiVersion: \"0.5.0\"\n") {
		t.Fatalf("spec is not cdiVersion 0.5.0:\n%.300s", spec)
	}

	p := e2e.NewPodman(t, e2e.PodmanOptions{CDISpecDir: specDir})
	image := p.ImportImage(e2e.BuildRootfs(t, e2e.RootfsOptions{}), "nctk-e2e:cdi")

	r := p.Podman("run", "--rm", "--network=none", "--device", "nvidia.com/gpu=all", image, "sh", "-c",
		"ls /dev/nvidia* && echo --- && grep -e nvidia -e libcuda /proc/self/mountinfo; echo ---; cudaprobe; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES")
	if !r.OK() {
		t.Fatalf("podman run --device nvidia.com/gpu=all:\n%s\nspec:\n%s", r, spec)
	}
	t.Logf("container output:\n%s", r.Stdout)
	for _, want := range []string{
		fx.GPUs[0].DevicePath, fx.GPUs[1].DevicePath, "/dev/nvidiactl", "/dev/nvidia-uvm",
		" /usr/lib/x86_64-linux-gnu/libcuda.so.", " /usr/bin/nvidia-smi ro,nosuid,nodev",
		"libcuda: /usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"cuDriverGetVersion: " + cudaVersion,
		"NVIDIA_VISIBLE_DEVICES=void",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("container output lacks %q", want)
		}
	}

	r = p.Podman("run", "--rm", "--network=none", "--device", "nvidia.com/gpu=1", image, "sh", "-c", "ls /dev")
	if !r.OK() {
		t.Fatalf("podman run --device nvidia.com/gpu=1:\n%s", r)
	}
	var gpuNodes []string
	for _, f := range strings.Fields(r.Stdout) {
		if len(f) > len("nvidia") && strings.HasPrefix(f, "nvidia") && f[len("nvidia")] >= '0' && f[len("nvidia")] <= '9' {
			gpuNodes = append(gpuNodes, "/dev/"+f)
		}
	}
	if want := []string{fx.GPUs[1].DevicePath}; !slices.Equal(gpuNodes, want) {
		t.Errorf("nvidia.com/gpu=1: GPU nodes %q, want %q only (GPU 1's minor is %d)", gpuNodes, want, fx.GPUs[1].Minor)
	}
	if !strings.Contains(r.Stdout, "nvidiactl") {
		t.Errorf("nvidia.com/gpu=1: no /dev/nvidiactl:\n%s", r.Stdout)
	}

	// An unknown device is an error of the engine, naming it.
	r = p.Podman("run", "--rm", "--network=none", "--device", "nvidia.com/gpu=7", image, "true")
	if r.OK() || !strings.Contains(r.Combined(), "nvidia.com/gpu=7") {
		t.Errorf("nvidia.com/gpu=7: want a failure naming the device:\n%s", r)
	}
}
