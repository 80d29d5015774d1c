package hook

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// TestE2ERuncLegacyHook is the legacy path end to end with real binaries:
// runc runs nvidia-container-runtime-hook as a prestart hook, the hook
// execs nvidia-container-cli configure, which discovers the fixture driver
// (real Debian driver libraries, 4 simulated GPUs), selects GPUs 1 and 3
// and configures the container. In the container cudaprobe loads the
// injected libcuda.so.1 through the ld.so.cache ldconfig made, and only the
// selected GPUs' nodes exist and pass the device cgroup.
func TestE2ERuncLegacyHook(t *testing.T) {
	e2e.RequireRoot(t)
	drv := fixture.Build(t, fixture.Spec{})
	if drv.CUDADriverVersion == 0 {
		t.Skip("the fixture's libcuda version was not measured")
	}
	bin := e2e.MustBuildNctk(t)
	cfg := writeConfig(t, fmt.Sprintf("[nvidia-container-cli]\nroot = %q\npath = %q\nload-kmods = false\n",
		drv.Path, filepath.Join(bin, "nvidia-container-cli")))
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	script := e2e.CudaprobePath + "; nvidia-smi -L 2>&1; ls /dev; cat /sys/fs/cgroup/devices/devices.list; " +
		"if echo x > /usr/lib/x86_64-linux-gnu/libcuda.so.1; then echo LIB-WRITABLE; fi"
	bundle := e2e.MakeBundle(t, image, "/bin/sh", "-c", script)
	e2e.EditSpec(t, bundle, func(s *specs.Spec) {
		s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=1,3", "LD_PRELOAD=/nonexistent.so")
		if s.Hooks == nil {
			s.Hooks = &specs.Hooks{}
		}
		//lint:ignore SA1019 prestart is where dockerd and NVIDIA put this hook
		s.Hooks.Prestart = append(s.Hooks.Prestart, specs.Hook{
			Path: filepath.Join(bin, "nvidia-container-runtime-hook"),
			Args: []string{"nvidia-container-runtime-hook", "-config", cfg, "prestart"},
			Env:  []string{"PATH=" + e2e.SystemPath},
		})
	})
	rc := e2e.NewRunc(t)
	res := rc.Run(bundle, "nctk-hook-e2e-"+filepath.Base(bundle))
	if !res.OK() {
		t.Fatalf("container failed: %s", res)
	}
	if want := "cuDriverGetVersion: " + strconv.Itoa(drv.CUDADriverVersion); !strings.Contains(res.Stdout, want) {
		t.Errorf("cudaprobe output lacks %q:\n%s", want, res.Stdout)
	}
	// nvidia-smi runs (libnvidia-ml found) and fails only for lack of a
	// real driver.
	if !strings.Contains(res.Stdout, "couldn't communicate with the NVIDIA driver") || strings.Contains(res.Stdout, "libnvidia-ml") {
		t.Errorf("nvidia-smi output unexpected:\n%s", res.Stdout)
	}
	var nodes []string
	for _, f := range strings.Fields(res.Stdout) {
		if strings.HasPrefix(f, "nvidia") && !strings.Contains(f, "-") {
			nodes = append(nodes, f)
		}
	}
	sort.Strings(nodes)
	want := []string{"nvidiactl", fmt.Sprintf("nvidia%d", drv.GPUs[1].Minor), fmt.Sprintf("nvidia%d", drv.GPUs[3].Minor)}
	sort.Strings(want)
	if strings.Join(nodes, " ") != strings.Join(want, " ") {
		t.Errorf("GPU nodes in /dev: %v, want %v", nodes, want)
	}
	for _, g := range []int{1, 3} {
		if rule := fmt.Sprintf("c 195:%d rw", drv.GPUs[g].Minor); !strings.Contains(res.Stdout, rule) {
			t.Errorf("devices.list lacks %q", rule)
		}
	}
	for _, g := range []int{0, 2} {
		if rule := fmt.Sprintf("c 195:%d ", drv.GPUs[g].Minor); strings.Contains(res.Stdout, rule) {
			t.Errorf("devices.list allows unselected GPU %d (%q)", g, rule)
		}
	}
	if strings.Contains(res.Stdout, "LIB-WRITABLE") {
		t.Error("an injected library is writable")
	}
}

// TestE2ERuncLegacyHookRequirement: an unsatisfiable requirement stops the
// container before it starts, naming the condition.
func TestE2ERuncLegacyHookRequirement(t *testing.T) {
	e2e.RequireRoot(t)
	drv := fixture.Build(t, fixture.Spec{GPUs: 1})
	if drv.CUDAVersion == "" {
		t.Skip("the fixture's CUDA version was not measured")
	}
	bin := e2e.MustBuildNctk(t)
	cfg := writeConfig(t, fmt.Sprintf("[nvidia-container-cli]\nroot = %q\npath = %q\nload-kmods = false\n",
		drv.Path, filepath.Join(bin, "nvidia-container-cli")))
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{NoCudaprobe: true})
	bundle := e2e.MakeBundle(t, image, "/bin/true")
	e2e.EditSpec(t, bundle, func(s *specs.Spec) {
		s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=99.0")
		//lint:ignore SA1019 prestart is where dockerd and NVIDIA put this hook
		s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{
			Path: filepath.Join(bin, "nvidia-container-runtime-hook"),
			Args: []string{"nvidia-container-runtime-hook", "-config", cfg, "prestart"},
			Env:  []string{"PATH=" + e2e.SystemPath},
		}}}
	})
	rc := e2e.NewRunc(t)
	res := rc.Run(bundle, "nctk-hook-req-"+filepath.Base(bundle))
	if res.OK() || !strings.Contains(res.Combined(), "requirement error") || !strings.Contains(res.Combined(), "cuda>=99.0") {
		t.Errorf("want the start refused with a requirement error naming cuda>=99.0: %s", res)
	}
}
