package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// compatDir is where CUDA images keep forward-compatibility libraries.
const compatDir = "/usr/local/cuda/compat"

// fixtureLibcuda returns the host path of root's 64-bit libcuda.so.<version>.
func fixtureLibcuda(t testing.TB, root *fixture.Root) string {
	t.Helper()
	for _, l := range root.Libraries {
		if l.Name == "libcuda.so" && !l.Is32 {
			return root.HostPath(l.Path)
		}
	}
	t.Fatalf("fixture root %s has no libcuda", root.Path)
	return ""
}

// addCompat puts the library file lib into the image root as
// compatDir/name, with the libcuda.so.1 link the cuda-compat package has.
func addCompat(t testing.TB, root, lib, name string) {
	t.Helper()
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root+compatDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root+compatDir, name), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(name, root+compatDir+"/libcuda.so.1"); err != nil {
		t.Fatal(err)
	}
}

// checkCudaprobe checks that cudaprobe loaded libcuda.so.1 from dir and
// that it reported CUDA version cuda.
func checkCudaprobe(t *testing.T, out, dir string, cuda int) {
	t.Helper()
	p := parseProbe(out)
	got := p.section(t, "cudaprobe")
	if !strings.Contains(got, fmt.Sprintf("cuDriverGetVersion: %d\n", cuda)) || p.exit["cudaprobe"] != 0 {
		t.Errorf("cudaprobe (exit %d) does not report CUDA %d:\n%s", p.exit["cudaprobe"], cuda, got)
	}
	if want := "libcuda: " + dir + "/libcuda.so.1"; !strings.Contains(got, want) {
		t.Errorf("cudaprobe did not load %s:\n%s", want, got)
	}
}

// TestCudaCompat is CUDA forward compatibility end to end: the host runs
// the Tesla 470 driver (its libcuda reports CUDA 11.4) and the image ships
// the 535 driver's real libcuda in /usr/local/cuda/compat, as nvidia/cuda
// images do with the cuda-compat package. Through nvidia-container-runtime
// and runc — legacy mode, and CDI mode over the spec nvidia-ctk cdi
// generate wrote (its enable-cuda-compat done by the runtime in process) —
// through plain runc with docker --gpus's prestart hook (configure), and
// with the spec's hook chain run as a hook (a copy of nvidia-cdi-hook, not
// lifted) — the container's cudaprobe loads the compat libcuda (CUDA
// 12.2); with
// compat handling disabled in config.toml, with a compat library older than
// the host driver, or with a spec generated with --disable-hook
// enable-cuda-compat, it loads the host's (CUDA 11.4).
func TestCudaCompat(t *testing.T) {
	f := newRuncFixture(t, fixture.Spec{Layout: fixture.Tesla470, GPUs: 1}, e2e.RootfsOptions{})
	newer := fixtureLibcuda(t, fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 1}))
	older := fixtureLibcuda(t, f.host.Root)
	hostCuda := f.host.Root.CUDADriverVersion
	if hostCuda != 11040 {
		t.Fatalf("the Tesla 470 fixture's libcuda reports %d, want 11040", hostCuda)
	}
	libDir := e2e.LayoutDebian.LibDir()
	specDir := engCDISpec(t, f.host)
	// A second kind, generated without the compat hook.
	e2e.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "cdi", "generate",
		"--driver-root", f.host.Root.Path, "--output", filepath.Join(specDir, "nocompat.yaml"),
		"--vendor", "nocompat.example.com", "--class", "gpu",
		"--nvidia-cdi-hook-path", tool(t, "nvidia-cdi-hook"), "--disable-hook", "enable-cuda-compat")
	// A third kind whose hook is a copy of the multi-call nctk named
	// nvidia-cdi-hook: neither the runtime's own file nor the hook binary
	// built with it (another Go build ID), so its chain runs as a
	// createContainer hook.
	rawHook := filepath.Join(e2e.TempDir(t, "rawhook"), "nvidia-cdi-hook")
	e2e.MustRun(t, e2e.RunOpts{Quiet: true}, "cp", tool(t, "nctk"), rawHook)
	if err := os.Chmod(filepath.Dir(rawHook), 0o755); err != nil {
		t.Fatal(err)
	}
	e2e.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "cdi", "generate",
		"--driver-root", f.host.Root.Path, "--output", filepath.Join(specDir, "rawhook.yaml"),
		"--vendor", "rawhook.example.com", "--class", "gpu", "--nvidia-cdi-hook-path", rawHook)
	if spec := readFile(t, filepath.Join(specDir, "nvidia.yaml")); !strings.Contains(string(spec), "--host-driver-version="+f.host.Root.Version) {
		t.Errorf("the generated spec has no enable-cuda-compat --host-driver-version=%s", f.host.Root.Version)
	}
	if spec := readFile(t, filepath.Join(specDir, "nocompat.yaml")); strings.Contains(string(spec), "enable-cuda-compat") {
		t.Error("--disable-hook enable-cuda-compat left the hook in the spec")
	}

	// The same host with cuda-compat-mode = "disabled".
	disabled := *f.host
	disabled.Config = filepath.Join(t.TempDir(), "config.toml")
	cfg := readFile(t, f.host.Config)
	cfg = append(cfg, "\n[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"disabled\"\n"...)
	if err := os.WriteFile(disabled.Config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(disabled.Config), 0o755); err != nil {
		t.Fatal(err)
	}
	disabled.Env = []string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + disabled.Config}

	for _, tc := range []struct {
		name   string
		host   *gpuHost
		device string
		compat string // the compat library's file name
		lib    string // the compat library's content
		dir    string // where cudaprobe must find libcuda.so.1
		cuda   int
		// prestart runs plain runc with the prestart hook docker --gpus
		// adds (nvidia-container-runtime-hook: nvidia-container-cli
		// configure) instead of nvidia-container-runtime.
		prestart bool
	}{
		{"legacy", f.host, "all", "libcuda.so.535.261.03", newer, compatDir, cudaVersion535, false},
		{"legacy/compat-disabled", &disabled, "all", "libcuda.so.535.261.03", newer, libDir, hostCuda, false},
		{"legacy/older-compat", f.host, "all", "libcuda.so.460.106.00", older, libDir, hostCuda, false},
		{"cdi", f.host, "nvidia.com/gpu=0", "libcuda.so.535.261.03", newer, compatDir, cudaVersion535, false},
		{"cdi/older-compat", f.host, "nvidia.com/gpu=0", "libcuda.so.460.106.00", older, libDir, hostCuda, false},
		{"cdi/hook-disabled", f.host, "nocompat.example.com/gpu=0", "libcuda.so.535.261.03", newer, libDir, hostCuda, false},
		{"cdi/raw-hook", f.host, "rawhook.example.com/gpu=0", "libcuda.so.535.261.03", newer, compatDir, cudaVersion535, false},
		{"cdi/raw-hook/older-compat", f.host, "rawhook.example.com/gpu=0", "libcuda.so.460.106.00", older, libDir, hostCuda, false},
		{"prestart", f.host, "all", "libcuda.so.535.261.03", newer, compatDir, cudaVersion535, true},
		{"prestart/compat-disabled", &disabled, "all", "libcuda.so.535.261.03", newer, libDir, hostCuda, true},
		{"prestart/older-compat", f.host, "all", "libcuda.so.460.106.00", older, libDir, hostCuda, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newRuncCase(t, tc.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES="+tc.device)
			addCompat(t, c.rootfs, tc.lib, tc.compat)
			if tc.prestart {
				e2e.EditSpec(t, c.bundle, func(s *specs.Spec) {
					if s.Hooks == nil {
						s.Hooks = &specs.Hooks{}
					}
					//lint:ignore SA1019 prestart is where dockerd puts this hook
					s.Hooks.Prestart = append(s.Hooks.Prestart, specs.Hook{Path: tool(t, "nvidia-container-runtime-hook"),
						Args: []string{"nvidia-container-runtime-hook", "-config", tc.host.Config, "prestart"},
						Env:  []string{"PATH=" + filepath.Dir(tool(t, "nvidia-container-cli")) + ":" + e2e.SystemPath}})
				})
				c.rt = e2e.NewRuntime(t, e2e.RequireTool(t, "runc"))
				c.rt.Env = append(c.rt.Env, tc.host.Env...)
			}
			checkCudaprobe(t, c.run(), tc.dir, tc.cuda)
		})
	}
}
