package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// TestContainerd runs GPU containers through a private containerd with
// ctr, over a 4-GPU fixture driver:
//   - `ctr run --gpus 0`: ctr adds a prestart hook `containerd oci-hook --
//     <nvidia-container-cli> --load-kmods configure --device=0 --compute
//     --compat32 --graphics --utility --video --display --pid={{pid}}
//     {{rootfs}}` (the CLI is looked up in ctr's PATH);
//   - `ctr run --runc-binary nvidia-container-runtime`: the runc shim
//     executes the runtime wrapper instead of runc.
//
// containerd's oci-hook passes no --root, and NVIDIA's nvidia-container-cli
// reads no config file, so the CLI ctr finds is a one-line script that adds
// --root=<fixture> and execs nctk's CLI (on a real host the driver is in /
// and no --root is needed). The runtime wrapper reads config.toml through
// NVIDIA_CTK_CONFIG_FILE_PATH, which containerd passes on to its shims.
func TestContainerd(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	host := newHost(t, fixture.Spec{Layout: "multiarch", GPUs: 4})
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	cliDir := filepath.Join(host.Dir, "cli")
	if err := os.Mkdir(cliDir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nexec %q --root=%q \"$@\"\n", tool(t, "nvidia-container-cli"), host.Root.Path)
	if err := os.WriteFile(filepath.Join(cliDir, "nvidia-container-cli"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := e2e.StartContainerdWith(t, e2e.ContainerdOptions{Env: host.Env})
	ref := c.ImportImage(image, "nctk-e2e:probe")
	libDir := e2e.LayoutDebian.LibDir()
	ctrEnv := append([]string{"PATH=" + cliDir + ":" + e2e.SystemPath, "NVC_DEBUG_FILE=" + host.CLILog}, host.Env...)
	run := func(t *testing.T, id string, args ...string) string {
		t.Helper()
		argv := ctrProbeArgv(ref, id, libDir, args...)
		res := c.CtrOpts(e2e.RunOpts{Env: ctrEnv}, argv...)
		if !res.OK() {
			t.Fatalf("ctr run: %s\ncontainerd log:\n%s", res, c.Log())
		}
		return res.Stdout
	}
	t.Run("gpus=0", func(t *testing.T) {
		t.Parallel()
		out := run(t, "nctk-gpus", "--gpus", "0")
		checkGPU(t, out, want{host: host, GPUs: []int{0}, LibDir: libDir, Display: true})
	})
	t.Run("runc-binary=nvidia-container-runtime", func(t *testing.T) {
		t.Parallel()
		out := run(t, "nctk-runtime", "--runc-binary", tool(t, "nvidia-container-runtime"), "--env", "NVIDIA_VISIBLE_DEVICES=1,3")
		checkGPU(t, out, want{host: host, GPUs: []int{1, 3}, LibDir: libDir})
	})
}

// ctrProbeArgv is the `ctr run` command line that runs the probe script in
// container id of image ref, with args before the image. ctr's default spec
// has no /sys/fs/cgroup: the container's own cgroups are mounted (runc's
// cgroup mount type) to read its device rules.
func ctrProbeArgv(ref, id, libDir string, args ...string) []string {
	argv := append([]string{"run", "--rm",
		"--mount", "type=bind,src=" + hostLdconfig + ",dst=" + probeLdconfig + ",options=rbind:ro",
		"--mount", "type=cgroup,src=cgroup,dst=/sys/fs/cgroup,options=ro:nosuid:noexec:nodev"}, args...)
	return append(argv, ref, id, "/bin/sh", "-c", probeScript(libDir))
}
