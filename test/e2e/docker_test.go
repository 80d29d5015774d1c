package e2e

import (
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// TestDocker runs GPU containers through a private dockerd (docker.io's,
// with its containerd and runc) over a 4-GPU fixture driver, in both ways
// Docker users ask for GPUs:
//   - the nvidia runtime, registered in daemon.json ("runtimes") and as the
//     "default-runtime", with NVIDIA_VISIBLE_DEVICES;
//   - `--gpus` with plain runc: dockerd found nvidia-container-runtime-hook
//     in its PATH at start and adds it as a prestart hook, which runs
//     nvidia-container-cli configure.
//
// The daemon's environment carries NVIDIA_CTK_CONFIG_FILE_PATH: dockerd
// passes it to containerd, the shim and so the runtime, and hands its whole
// environment to the --gpus hook.
func TestDocker(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	host := newHost(t, fixture.Spec{Layout: "multiarch", GPUs: 4})
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	d := e2e.StartDockerd(t, e2e.DockerdOptions{
		Runtimes:       map[string]e2e.DockerRuntime{"nvidia": {Path: tool(t, "nvidia-container-runtime")}},
		DefaultRuntime: "nvidia",
		ExtraPath:      []string{binDir},
		Env:            host.Env,
	})
	const img = "nctk-e2e:probe"
	d.ImportImage(image, img)
	libDir := e2e.LayoutDebian.LibDir()
	run, mustRun := dockerProbe(d, img, libDir)

	t.Run("runtime=nvidia/all", func(t *testing.T) {
		t.Parallel()
		out := mustRun(t, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all")
		checkGPU(t, out, want{host: host, GPUs: []int{0, 1, 2, 3}, LibDir: libDir})
	})
	t.Run("default-runtime/devices=1,3", func(t *testing.T) {
		t.Parallel()
		out := mustRun(t, "-e", "NVIDIA_VISIBLE_DEVICES=1,3")
		checkGPU(t, out, want{host: host, GPUs: []int{1, 3}, LibDir: libDir})
	})
	t.Run("runtime=nvidia/no-request", func(t *testing.T) {
		t.Parallel()
		checkNoGPU(t, mustRun(t, "--runtime=nvidia"))
	})
	t.Run("gpus=all", func(t *testing.T) {
		t.Parallel()
		out := mustRun(t, "--runtime=runc", "--gpus", "all")
		checkGPU(t, out, want{host: host, GPUs: []int{0, 1, 2, 3}, LibDir: libDir})
	})
	t.Run("gpus=device=1,3", func(t *testing.T) {
		t.Parallel()
		out := mustRun(t, "--runtime=runc", "--gpus", `"device=1,3"`)
		checkGPU(t, out, want{host: host, GPUs: []int{1, 3}, LibDir: libDir})
	})
	t.Run("requirement/runtime=nvidia", func(t *testing.T) {
		t.Parallel()
		res := run(t, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all", "-e", "NVIDIA_REQUIRE_CUDA=cuda>=13.1")
		checkDockerFailure(t, res, host)
	})
	t.Run("requirement/gpus", func(t *testing.T) {
		t.Parallel()
		res := run(t, "--runtime=runc", "--gpus", "all", "-e", "NVIDIA_REQUIRE_CUDA=cuda>=13.1")
		checkDockerFailure(t, res, host)
	})
}

// checkDockerFailure asserts that docker run failed before the container's
// program ran, with the requirement message.
func checkDockerFailure(t *testing.T, res e2e.Result, host *gpuHost) {
	t.Helper()
	if res.OK() {
		t.Fatalf("docker run succeeded, want a requirement error:\n%s", res.Combined())
	}
	if strings.Contains(res.Stdout, "@@@ cudaprobe") {
		t.Errorf("the container's program ran:\n%s", res.Stdout)
	}
	checkRequirementMessage(t, res.Stderr, host)
}

// dockerProbe returns functions that run the probe script in image img
// with docker run and args before the image: run returns the result,
// mustRun the output of a run that must succeed.
func dockerProbe(d *e2e.Dockerd, img, libDir string) (run func(t *testing.T, args ...string) e2e.Result, mustRun func(t *testing.T, args ...string) string) {
	run = func(t *testing.T, args ...string) e2e.Result {
		t.Helper()
		argv := append([]string{"run", "--rm", "--network=none", "-v", hostLdconfig + ":" + probeLdconfig + ":ro"}, args...)
		argv = append(argv, img, "/bin/sh", "-c", probeScript(libDir))
		return d.Docker(argv...)
	}
	mustRun = func(t *testing.T, args ...string) string {
		t.Helper()
		res := run(t, args...)
		if !res.OK() {
			t.Fatalf("docker run: %s", res)
		}
		return res.Stdout
	}
	return run, mustRun
}
