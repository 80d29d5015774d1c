package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// The tests in this file are the second engine matrix: Debian 13 (trixie)'s
// own engines — docker.io and docker-cli 26.1, containerd 1.7, podman 5.4,
// runc 1.1 — from a root made with debootstrap and cached
// (e2e.TrixieRoot), run in a private mount namespace pivoted into an
// overlay of that root (e2e.StartTrixie). nctk's binaries, the fixture
// driver root and the config.toml are at the same paths there (the host's
// /tmp is bound in). These engines read CDI specs natively, so the spec
// from `nvidia-ctk cdi generate` goes where they look by default, the
// root's /etc/cdi, as a user installing nctk on Debian 13 would put it.
//
// Podman runs its containers with runc: Debian 13's default runtime,
// crun 1.21, refuses the hybrid cgroups (v1 controllers, an empty v2
// hierarchy) of the test hosts, which runc still handles; TestTrixiePodman
// checks that refusal (or, on other hosts, crun's GPU container too), and
// TestTrixieCrun runs crun's GPU containers there in a namespace that sees
// the v2 hierarchy alone, without a cgroup per container.

// trixieHost is newHost for an engine root: the config.toml's runtime is
// the root's runc.
func trixieHost(t *testing.T, root *e2e.EngineRoot, spec fixture.Spec) *gpuHost {
	t.Helper()
	host := newHost(t, spec)
	runc := root.RequireTool(t, "runc")
	re := regexp.MustCompile(`(?m)^runtimes = \[.*\]$`)
	cfg := readFile(t, host.Config)
	if !re.Match(cfg) {
		t.Fatalf("%s has no runtimes line:\n%s", host.Config, cfg)
	}
	cfg = re.ReplaceAll(cfg, fmt.Appendf(nil, "runtimes = [%q]", runc))
	if err := os.WriteFile(host.Config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return host
}

// trixieCDISpec runs `nvidia-ctk cdi generate` in the root, writing the
// spec for host's fixture driver to the root's /etc/cdi/nvidia.yaml.
func trixieCDISpec(t *testing.T, root *e2e.EngineRoot, host *gpuHost) {
	t.Helper()
	root.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "cdi", "generate",
		"--driver-root", host.Root.Path, "--output", "/etc/cdi/nvidia.yaml",
		"--nvidia-cdi-hook-path", tool(t, "nvidia-cdi-hook"))
	// The same devices in NVIDIA's layout (one hook per step, update-ldcache
	// over the folder: what NVIDIA's tools and the device plugin write),
	// as class sepgpu.
	root.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "cdi", "generate", "--separate-hooks", "--class", "sepgpu",
		"--driver-root", host.Root.Path, "--output", "/etc/cdi/nvidia-sep.yaml",
		"--nvidia-cdi-hook-path", tool(t, "nvidia-cdi-hook"))
}

// checkVersion fails t unless out (a version line) starts with prefix.
func checkVersion(t *testing.T, what, out, prefix string) {
	t.Helper()
	if got := strings.TrimSpace(out); !strings.HasPrefix(got, prefix) {
		t.Fatalf("%s is %q, want %s* (Debian 13's)", what, got, prefix)
	}
}

// TestTrixieDocker runs GPU containers through Debian 13's dockerd 26.1
// (with its containerd 1.7 and runc 1.1) over a 4-GPU fixture driver, in
// the three ways Docker users ask for GPUs:
//   - CDI: `--device nvidia.com/gpu=N` with features.cdi on and the spec
//     in /etc/cdi, plain runc (dockerd applies the spec's edits and hooks);
//   - `--gpus` with plain runc (dockerd's prestart hook,
//     nvidia-container-runtime-hook, found in its PATH);
//   - `--runtime=nvidia` with NVIDIA_VISIBLE_DEVICES.
func TestTrixieDocker(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	root := e2e.StartTrixie(t)
	host := trixieHost(t, root, fixture.Spec{Layout: "multiarch", GPUs: 4})
	trixieCDISpec(t, root, host)
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	d := e2e.StartDockerd(t, e2e.DockerdOptions{
		Root:      root,
		Runtimes:  map[string]e2e.DockerRuntime{"nvidia": {Path: tool(t, "nvidia-container-runtime")}},
		ExtraPath: []string{binDir},
		Env:       host.Env,
		Config:    map[string]any{"features": map[string]bool{"cdi": true}},
	})
	if v := strings.Fields(d.MustDocker("version", "--format", "{{.Client.Version}} {{.Server.Version}}")); len(v) != 2 || !strings.HasPrefix(v[0], "26.1.") || !strings.HasPrefix(v[1], "26.1.") {
		t.Fatalf("docker client and server versions %q, want 26.1.* (Debian 13's)", v)
	}
	checkVersion(t, "runc", root.MustRun(t, e2e.RunOpts{}, "runc", "--version"), "runc version 1.1.")
	const img = "nctk-e2e:trixie"
	d.ImportImage(image, img)
	checkOneHookProcess(t, d.Docker, img)
	libDir := e2e.LayoutDebian.LibDir()
	run, mustRun := dockerProbe(d, img, libDir)

	for _, tc := range []struct {
		name string
		args []string
		gpus []int
		// cdi: the spec's common edits carry the modeset node too.
		cdi bool
	}{
		{"cdi/gpu=1", []string{"--device", "nvidia.com/gpu=1"}, []int{1}, true},
		{"cdi/gpu=0+gpu=2", []string{"--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=2"}, []int{0, 2}, true},
		{"cdi/gpu=all", []string{"--device", "nvidia.com/gpu=all"}, []int{0, 1, 2, 3}, true},
		// NVIDIA's layout: dockerd runs the spec's five hooks (nctk's
		// update-ldcache rebuilding the cache in process), or the runtime
		// does their work itself before runc.
		{"cdi/sepgpu=3", []string{"--device", "nvidia.com/sepgpu=3"}, []int{3}, true},
		{"runtime=nvidia/sepgpu=1", []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=nvidia.com/sepgpu=1"}, []int{1}, true},
		// dockerd applies the spec, then runs nctk's runtime, which does
		// the spec's own hooks itself (appliedEdits).
		{"runtime=nvidia/cdi/gpu=2", []string{"--runtime=nvidia", "--device", "nvidia.com/gpu=2"}, []int{2}, true},
		{"runtime=nvidia/cdi/sepgpu=0", []string{"--runtime=nvidia", "--device", "nvidia.com/sepgpu=0"}, []int{0}, true},
		{"gpus=all", []string{"--runtime=runc", "--gpus", "all"}, []int{0, 1, 2, 3}, false},
		{"gpus=device=1,3", []string{"--runtime=runc", "--gpus", `"device=1,3"`}, []int{1, 3}, false},
		{"runtime=nvidia/devices=2", []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=2"}, []int{2}, false},
		{"runtime=nvidia/all", []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all"}, []int{0, 1, 2, 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkGPU(t, mustRun(t, tc.args...), want{host: host, GPUs: tc.gpus, LibDir: libDir, Display: tc.cdi})
		})
	}
	t.Run("runtime=nvidia/no-request", func(t *testing.T) {
		t.Parallel()
		checkNoGPU(t, mustRun(t, "--runtime=nvidia"))
	})
	t.Run("cdi/unknown-device", func(t *testing.T) {
		t.Parallel()
		res := run(t, "--device", "nvidia.com/gpu=9")
		if res.OK() || strings.Contains(res.Stdout, "@@@ cudaprobe") || !strings.Contains(res.Stderr, "nvidia.com/gpu=9") {
			t.Errorf("docker run --device nvidia.com/gpu=9: want a failure naming the device before the container runs:\n%s", res)
		}
	})
}

// TestTrixiePodman runs GPU containers through Debian 13's podman 5.4
// (with runc, see above) with `--device nvidia.com/gpu=N`, resolved
// against the spec in the root's /etc/cdi.
func TestTrixiePodman(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	root := e2e.StartTrixie(t)
	host := trixieHost(t, root, fixture.Spec{Layout: "multiarch", GPUs: 4})
	trixieCDISpec(t, root, host)
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	p := e2e.NewPodman(t, e2e.PodmanOptions{Root: root, Env: host.Env})
	checkVersion(t, "podman", p.MustPodman("version", "--format", "{{.Client.Version}}"), "5.4.")
	ref := p.ImportImage(image, "nctk-e2e:trixie")
	checkOneHookProcess(t, p.Podman, ref)
	// This root's /run is fresh, as a host's after a boot, and no nctk
	// runtime ran: the hook made its cache directory and kept the host
	// ldconfig's directories there.
	root.MustRun(t, e2e.RunOpts{}, "/bin/sh", "-c", "test -s /run/nctk/cdi/ldconfig-dirs")
	libDir := e2e.LayoutDebian.LibDir()
	run := func(t *testing.T, args ...string) e2e.Result {
		t.Helper()
		argv := append([]string{"run", "--rm", "-v", hostLdconfig + ":" + probeLdconfig + ":ro"}, args...)
		argv = append(argv, ref, "/bin/sh", "-c", probeScript(libDir))
		return p.Podman(argv...)
	}
	for _, tc := range []struct {
		name    string
		devices []string
		gpus    []int
	}{
		{"gpu=1", []string{"nvidia.com/gpu=1"}, []int{1}},
		{"gpu=0+gpu=3", []string{"nvidia.com/gpu=0", "nvidia.com/gpu=3"}, []int{0, 3}},
		{"gpu=all", []string{"nvidia.com/gpu=all"}, []int{0, 1, 2, 3}},
		// NVIDIA's layout: podman runs the spec's five hooks, nctk's
		// update-ldcache rebuilding the cache in process.
		{"sepgpu=2", []string{"nvidia.com/sepgpu=2"}, []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var args []string
			for _, dev := range tc.devices {
				args = append(args, "--device", dev)
			}
			res := run(t, args...)
			if !res.OK() {
				t.Fatalf("podman run: %s", res)
			}
			checkGPU(t, res.Stdout, want{host: host, GPUs: tc.gpus, LibDir: libDir, Display: true})
		})
	}
	t.Run("unknown-device", func(t *testing.T) {
		t.Parallel()
		res := run(t, "--device", "nvidia.com/gpu=9")
		if res.OK() || strings.Contains(res.Stdout, "@@@ cudaprobe") || !strings.Contains(res.Stderr, "nvidia.com/gpu=9") {
			t.Errorf("podman run --device nvidia.com/gpu=9: want a failure naming the device before the container runs:\n%s", res)
		}
	})
	// Debian 13's default runtime: on a host with hybrid cgroups (v1
	// controllers, an empty v2 hierarchy at /sys/fs/cgroup/unified) crun
	// 1.21 refuses every container, which is why the cases above use runc;
	// elsewhere it must give the GPU like runc.
	t.Run("crun", func(t *testing.T) {
		t.Parallel()
		pc := e2e.NewPodman(t, e2e.PodmanOptions{Root: root, Env: host.Env, Runtime: root.RequireTool(t, "crun")})
		cref := pc.ImportImage(image, "nctk-e2e:trixie")
		res := pc.Podman("run", "--rm", "-v", hostLdconfig+":"+probeLdconfig+":ro", "--device", "nvidia.com/gpu=1",
			cref, "/bin/sh", "-c", probeScript(libDir))
		if hybridCgroups(t) {
			if res.OK() || !strings.Contains(res.Combined(), "hybrid mode not supported") {
				t.Errorf("podman --runtime crun on hybrid cgroups: want crun's refusal (hybrid mode not supported):\n%s", res)
			}
			return
		}
		if !res.OK() {
			t.Fatalf("podman --runtime crun run: %s", res)
		}
		checkGPU(t, res.Stdout, want{host: host, GPUs: []int{1}, LibDir: libDir, Display: true})
	})
}

// TestTrixieCrun runs GPU containers through Debian 13's podman with crun
// 1.21, the runtime it uses by default. Where the host's cgroups are hybrid,
// which crun refuses (TestTrixiePodman), the root's namespace sees the
// unified hierarchy alone (cgroup2 mounted over /sys/fs/cgroup) and podman
// makes no cgroup for the container (--cgroups=disabled): crun then runs
// the spec's hooks as on a cgroup v2 host. crun passes them the OCI state
// on stdin at once, and nctk's hooks, not under runc's init, read it
// (ocistate.RuncHookRoot does not apply): nctk's spec (one chained hook)
// and NVIDIA's layout (five hooks).
func TestTrixieCrun(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	root := e2e.StartTrixie(t)
	crun := root.RequireTool(t, "crun")
	var extra []string
	hybrid := hybridCgroups(t)
	if hybrid {
		root.MustRun(t, e2e.RunOpts{}, "/bin/sh", "-c", "umount -R /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup")
		extra = []string{"--cgroups=disabled"}
	}
	checkVersion(t, "crun", root.MustRun(t, e2e.RunOpts{}, crun, "--version"), "crun version 1.21")
	host := trixieHost(t, root, fixture.Spec{Layout: "multiarch", GPUs: 4})
	trixieCDISpec(t, root, host)
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	p := e2e.NewPodman(t, e2e.PodmanOptions{Root: root, Env: host.Env, Runtime: crun})
	ref := p.ImportImage(image, "nctk-e2e:trixie")
	checkOneHookProcess(t, p.Podman, ref, extra...)
	libDir := e2e.LayoutDebian.LibDir()
	for _, tc := range []struct {
		device string
		gpus   []int
	}{
		{"nvidia.com/gpu=1", []int{1}},
		{"nvidia.com/gpu=all", []int{0, 1, 2, 3}},
		{"nvidia.com/sepgpu=2", []int{2}},
	} {
		t.Run(tc.device, func(t *testing.T) {
			t.Parallel()
			argv := append([]string{"run", "--rm", "-v", hostLdconfig + ":" + probeLdconfig + ":ro", "--device", tc.device}, extra...)
			res := p.Podman(append(argv, ref, "/bin/sh", "-c", probeScript(libDir))...)
			if !res.OK() {
				t.Fatalf("podman --runtime crun run: %s", res)
			}
			// Without a cgroup there are no device rules to read.
			checkGPU(t, res.Stdout, want{host: host, GPUs: tc.gpus, LibDir: libDir, Display: true, NoCgroupCheck: hybrid})
		})
	}
}

// hybridCgroups reports whether the host mounts cgroup v1 controllers at
// /sys/fs/cgroup and a cgroup v2 hierarchy at /sys/fs/cgroup/unified.
func hybridCgroups(t *testing.T) bool {
	t.Helper()
	var top, unified unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &top); err != nil {
		t.Fatalf("statfs /sys/fs/cgroup: %v", err)
	}
	if top.Type == unix.CGROUP2_SUPER_MAGIC {
		return false
	}
	return unix.Statfs("/sys/fs/cgroup/unified", &unified) == nil && unified.Type == unix.CGROUP2_SUPER_MAGIC
}

// TestTrixieContainerd runs GPU containers through Debian 13's containerd
// 1.7 with its ctr, over a 4-GPU fixture driver, as TestContainerd does
// with Debian 12's: `ctr run --gpus 1` (containerd's oci-hook running
// nvidia-container-cli configure, through the same --root script) and
// `ctr run --runc-binary nvidia-container-runtime`.
func TestTrixieContainerd(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	root := e2e.StartTrixie(t)
	host := trixieHost(t, root, fixture.Spec{Layout: "multiarch", GPUs: 4})
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	cliDir := filepath.Join(host.Dir, "cli")
	if err := os.Mkdir(cliDir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nexec %q --root=%q \"$@\"\n", tool(t, "nvidia-container-cli"), host.Root.Path)
	if err := os.WriteFile(filepath.Join(cliDir, "nvidia-container-cli"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := e2e.StartContainerdWith(t, e2e.ContainerdOptions{Root: root, Env: host.Env})
	checkVersion(t, "containerd", root.MustRun(t, e2e.RunOpts{}, "containerd", "--version"), "containerd github.com/containerd/containerd 1.7.")
	checkVersion(t, "ctr", c.MustCtr("--version"), "ctr github.com/containerd/containerd 1.7.")
	ref := c.ImportImage(image, "nctk-e2e:trixie")
	libDir := e2e.LayoutDebian.LibDir()
	ctrEnv := append([]string{"PATH=" + cliDir + ":" + e2e.SystemPath, "NVC_DEBUG_FILE=" + host.CLILog}, host.Env...)
	run := func(t *testing.T, id string, args ...string) string {
		t.Helper()
		argv := ctrProbeArgv(ref, id, libDir, args...)
		res := e2e.Run(t, e2e.RunOpts{Env: ctrEnv}, c.CtrArgv(argv...)...)
		if !res.OK() {
			t.Fatalf("ctr run: %s\ncontainerd log:\n%s", res, c.Log())
		}
		return res.Stdout
	}
	t.Run("gpus=1", func(t *testing.T) {
		t.Parallel()
		out := run(t, "nctk-gpus", "--gpus", "1")
		checkGPU(t, out, want{host: host, GPUs: []int{1}, LibDir: libDir, Display: true})
	})
	t.Run("runc-binary=nvidia-container-runtime", func(t *testing.T) {
		t.Parallel()
		out := run(t, "nctk-runtime", "--runc-binary", tool(t, "nvidia-container-runtime"), "--env", "NVIDIA_VISIBLE_DEVICES=0,2")
		checkGPU(t, out, want{host: host, GPUs: []int{0, 2}, LibDir: libDir})
	})
}

// TestTrixieContainerdConfigure configures Debian 13's containerd 1.7 the
// way a Kubernetes node is set up: its own `containerd config default`
// (machine-wide paths moved into the test's directory, and
// restrict_oom_score_adj = true, which containers the CRI starts on these
// hosts were seen to need; the plugin itself starts either way) gets `nvidia-ctk runtime configure
// --runtime=containerd --drop-in-config=""`; containerd started on the file
// must load the nvidia runtime into its CRI plugin, and ctr runs a GPU
// container through the runtime binary that entry names. (Pods through the
// CRI API itself are not driven here.)
func TestTrixieContainerdConfigure(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	root := e2e.StartTrixie(t)
	host := trixieHost(t, root, fixture.Spec{Layout: "multiarch", GPUs: 4})
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	nvRuntime := tool(t, "nvidia-container-runtime")

	dir := e2e.TempDir(t, "ctrdcfg")
	cfg := criConfig(t, root, dir)
	root.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "runtime", "configure", "--runtime=containerd",
		"--config", cfg, "--drop-in-config=", "--nvidia-runtime-path", nvRuntime)
	var doc map[string]any
	data := readFile(t, cfg)
	if err := toml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("configured config.toml does not parse: %v\n%s", err, data)
	}
	nv, _ := engLookup(doc, "plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "nvidia").(map[string]any)
	if nv["runtime_type"] != "io.containerd.runc.v2" || engLookup(nv, "options", "BinaryName") != nvRuntime {
		t.Fatalf("configured nvidia runtime = %v, want runtime_type io.containerd.runc.v2 and options.BinaryName %s\n%s", nv, nvRuntime, data)
	}

	c := e2e.StartContainerdWith(t, e2e.ContainerdOptions{Root: root, ConfigFile: cfg, Env: host.Env})
	line := engWaitLog(t, c.LogFile, "Start cri plugin with config")
	for _, s := range []string{"nvidia:{Type:io.containerd.runc.v2", "BinaryName:" + nvRuntime} {
		if !strings.Contains(line, s) {
			t.Errorf("containerd 1.7's CRI plugin configuration lacks %q:\n%s", s, line)
		}
	}
	// The plugin runs (it logs this after loading its configuration).
	engWaitLog(t, c.LogFile, "Start streaming server")
	ref := c.ImportImage(image, "nctk-e2e:trixie")
	libDir := e2e.LayoutDebian.LibDir()
	res := e2e.Run(t, e2e.RunOpts{}, c.CtrArgv("run", "--rm",
		"--runtime", "io.containerd.runc.v2", "--runc-binary", nvRuntime, "--env", "NVIDIA_VISIBLE_DEVICES=3",
		"--mount", "type=bind,src="+hostLdconfig+",dst="+probeLdconfig+",options=rbind:ro",
		"--mount", "type=cgroup,src=cgroup,dst=/sys/fs/cgroup,options=ro:nosuid:noexec:nodev",
		ref, "nctk-cri-entry", "/bin/sh", "-c", probeScript(libDir))...)
	if !res.OK() {
		t.Fatalf("ctr run: %s\ncontainerd log:\n%s", res, c.Log())
	}
	checkGPU(t, res.Stdout, want{host: host, GPUs: []int{3}, LibDir: libDir})
}
