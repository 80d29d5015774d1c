package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/e2e/starts"
	"github.com/nctk/nctk/internal/engine"
	"github.com/nctk/nctk/internal/fixture"
)

// The tests in this file drive the Kubernetes path as kubelet does: a CRI
// client (k8s.io/cri-api runtime v1, e2e.DialCRI) talks to containerd's
// CRI plugin, on containerd's own `config default` with machine-wide paths
// moved into the test's directory, for each containerd of criEngines:
// Debian 13's 1.7 in the Debian 13 root (e2e.StartTrixie), Debian 12's 1.6
// on the host, and Debian unstable's 2.x (config version 3) installed into
// an overlay of the Debian 13 root (e2e.SidContainerdDeb). Each test case
// runs a pod sandbox on the host network (its pause image is the test
// image, imported with `ctr -n k8s.io image import`, with `sleep` as its
// command) and in it a container running the probe script, whose CRI log
// is read back and checked (checkGPU) for exactly the GPUs handed out, in
// each way NVIDIA's device plugin hands them out.

// criEngine is one containerd the CRI tests run.
type criEngine struct {
	// name names the subtests.
	name string
	// version is the start of `containerd --version`.
	version string
	// where: "trixie" (Debian 13's, in the Debian 13 root), "host"
	// (Debian 12's) or "sid" (Debian unstable's, installed into the
	// Debian 13 root).
	where string
	// cdi: the engine's CRI has CDI (enable_cdi; containerd 1.7 and later).
	cdi bool
}

// criEngines are the containerd versions the CRI tests run on.
func criEngines() []criEngine {
	return []criEngine{
		{name: "containerd-1.7", version: "containerd github.com/containerd/containerd 1.7.", where: "trixie", cdi: true},
		{name: "containerd-1.6", version: "containerd github.com/containerd/containerd 1.6.", where: "host"},
		{name: "containerd-2", version: "containerd github.com/containerd/containerd/v2 2.", where: "sid", cdi: true},
	}
}

// criNode is a Kubernetes node's container side: containerd with its CRI
// plugin (in an engine root, or on the host when root is nil), a fixture
// driver and a CRI client.
type criNode struct {
	root   *e2e.EngineRoot
	host   *gpuHost
	c      *e2e.Containerd
	cri    *e2e.CRI
	image  string
	libDir string
	// specDir is where nvidia-ctk's CDI spec is: the root's /etc/cdi, or
	// on the host a directory of the test that the host's config.toml
	// names in spec-dirs.
	specDir string
}

// criConfig writes containerd's `config default` (of the containerd in
// root, or the host's for a nil root) to <dir>/config.toml with its
// machine-wide paths moved into dir and restrict_oom_score_adj = true (the
// test hosts are containers without CAP_SYS_RESOURCE, where runc cannot
// give the pause container its oom_score_adj of -998 and every
// RunPodSandbox fails), and returns the file's path. Config versions 2
// (containerd 1.x) and 3 (2.x) are handled.
func criConfig(t *testing.T, root *e2e.EngineRoot, dir string) string {
	t.Helper()
	cfg := filepath.Join(dir, "config.toml")
	def := root.MustRun(t, e2e.RunOpts{Quiet: true}, "containerd", "config", "default")
	var doc map[string]any
	if err := toml.Unmarshal([]byte(def), &doc); err != nil {
		t.Fatalf("containerd config default does not parse: %v\n%s", err, def)
	}
	cri := criPluginPath(t, doc)
	for _, r := range []struct {
		keys  []string
		value any
	}{
		{[]string{"root"}, filepath.Join(dir, "root")},
		{[]string{"state"}, filepath.Join(dir, "state")},
		{[]string{"grpc", "address"}, filepath.Join(dir, "containerd.sock")},
		{[]string{"plugins", "io.containerd.internal.v1.opt", "path"}, filepath.Join(dir, "opt")},
		{append(slices.Clone(cri), "cni", "conf_dir"), filepath.Join(dir, "cni")},
		{append(slices.Clone(cri), "restrict_oom_score_adj"), true},
	} {
		table, ok := engLookup(doc, r.keys[:len(r.keys)-1]...).(map[string]any)
		key := r.keys[len(r.keys)-1]
		if _, has := table[key]; !ok || !has {
			t.Fatalf("containerd's config default has no %s:\n%s", strings.Join(r.keys, "."), def)
		}
		table[key] = r.value
	}
	// containerd 2's NRI plugin, enabled by default, has a socket of its own.
	if nri, ok := engLookup(doc, "plugins", "io.containerd.nri.v1.nri").(map[string]any); ok {
		nri["socket_path"] = filepath.Join(dir, "nri.sock")
	}
	out, err := toml.Marshal(doc)
	if err != nil {
		t.Fatalf("containerd config: %v", err)
	}
	if err := os.WriteFile(cfg, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// criPluginPath is the key path of the table holding the CRI plugin's
// runtimes, enable_cdi and restrict_oom_score_adj in the containerd config
// doc: plugins."io.containerd.grpc.v1.cri" in version 2,
// plugins."io.containerd.cri.v1.runtime" in version 3.
func criPluginPath(t *testing.T, doc map[string]any) []string {
	t.Helper()
	v, _ := doc["version"].(int64)
	if v != 2 && v != 3 {
		t.Fatalf("containerd config version %v, want 2 or 3", doc["version"])
	}
	return engine.CRIPluginPath(int(v))
}

// setSandboxImage sets the CRI's pause image in the containerd config doc:
// sandbox_image of the CRI plugin (version 2) or pinned_images.sandbox of
// the CRI images plugin (version 3).
func setSandboxImage(t *testing.T, doc map[string]any, image string) {
	t.Helper()
	if v, _ := doc["version"].(int64); v == 3 {
		pinned, ok := engLookup(doc, "plugins", "io.containerd.cri.v1.images", "pinned_images").(map[string]any)
		if !ok {
			t.Fatal("containerd config version 3 has no plugins.\"io.containerd.cri.v1.images\".pinned_images")
		}
		pinned["sandbox"] = image
		return
	}
	criTable(t, doc)["sandbox_image"] = image
}

// criEdit parses the containerd config file cfg, lets edit change the
// document and writes it back.
func criEdit(t *testing.T, cfg string, edit func(doc map[string]any)) {
	t.Helper()
	data := readFile(t, cfg)
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("containerd config %s: %v\n%s", cfg, err, data)
	}
	edit(doc)
	out, err := toml.Marshal(doc)
	if err != nil {
		t.Fatalf("containerd config %s: %v", cfg, err)
	}
	if err := os.WriteFile(cfg, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// criTable returns the CRI plugin's table in doc (criPluginPath), or the
// table below it at keys.
func criTable(t *testing.T, doc map[string]any, keys ...string) map[string]any {
	t.Helper()
	path := append(criPluginPath(t, doc), keys...)
	m, ok := engLookup(doc, path...).(map[string]any)
	if !ok {
		t.Fatalf("containerd config has no table %s", strings.Join(path, "."))
	}
	return m
}

// startCRINode starts containerd eng (CRI enabled) over a 4-GPU fixture
// driver, with nvidia-ctk's CDI spec in specDir and the config made by
// criConfig, then changed by configure (`nvidia-ctk runtime configure`,
// say) and by edit (criEdit), with the sandbox image set to the test
// image.
func startCRINode(t *testing.T, eng criEngine, configure func(cfg string, n *criNode), edit func(doc map[string]any)) *criNode {
	t.Helper()
	skipShort(t)
	e2e.RequireRoot(t)
	n := &criNode{libDir: e2e.LayoutDebian.LibDir()}
	if eng.where != "host" {
		n.root = e2e.StartTrixie(t)
		if eng.where == "sid" {
			n.root.InstallDebs(t, e2e.SidContainerdDeb(t))
		}
	}
	n.host = trixieHost(t, n.root, fixture.Spec{Layout: "multiarch", GPUs: 4})
	if n.root != nil {
		trixieCDISpec(t, n.root, n.host)
		n.specDir = "/etc/cdi"
	} else {
		n.specDir = engCDISpec(t, n.host)
	}
	checkVersion(t, "containerd", n.root.MustRun(t, e2e.RunOpts{}, "containerd", "--version"), eng.version)
	rootfs := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	n.image = e2e.FullImageName("nctk-e2e:cri")
	dir := e2e.TempDir(t, "ctrdcri")
	cfg := criConfig(t, n.root, dir)
	if configure != nil {
		configure(cfg, n)
	}
	criEdit(t, cfg, func(doc map[string]any) {
		setSandboxImage(t, doc, n.image)
		if edit != nil {
			edit(doc)
		}
	})
	n.c = e2e.StartContainerdWith(t, e2e.ContainerdOptions{Root: n.root, ConfigFile: cfg, Env: n.host.Env})
	n.cri = e2e.DialCRI(t, n.c)
	if got := n.cri.ImportImage(rootfs, "nctk-e2e:cri", "sleep", "3600"); got != n.image {
		t.Fatalf("imported %s, want %s", got, n.image)
	}
	return n
}

// probe is the probe container's config: the probe script, the host's
// ldconfig mounted where it expects it, unprivileged.
func (n *criNode) probe(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: n.image},
		Command:  []string{"/bin/sh", "-c", probeScript(n.libDir)},
		Mounts:   []*runtimeapi.Mount{{ContainerPath: probeLdconfig, HostPath: hostLdconfig, Readonly: true}},
		Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{}},
	}
}

// run runs cfg in a new pod with the runtime handler and returns its log;
// the container must exit 0.
func (n *criNode) run(t *testing.T, handler string, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	pod := n.cri.RunPod(t, cfg.Metadata.Name, handler)
	res := pod.RunContainer(t, cfg, 2*time.Minute)
	if res.ExitCode != 0 {
		t.Fatalf("container %s (handler %q) exited %d:\n%s\ncontainerd log:\n%s", cfg.Metadata.Name, handler, res.ExitCode, res.Logs, n.c.Log())
	}
	return res.Logs
}

// criEnv is a container's environment of one variable (the CRI's
// KeyValue holds the value as bytes, which is a string on the wire).
func criEnv(key, value string) []*runtimeapi.KeyValue {
	return []*runtimeapi.KeyValue{{Key: key, Value: []byte(value)}}
}

// uuids returns the fixture GPUs' UUIDs for NVML indices idx.
func (n *criNode) uuids(t *testing.T, idx ...int) []string {
	t.Helper()
	var out []string
	for _, i := range idx {
		out = append(out, n.host.gpu(t, i).UUID)
	}
	return out
}

// runtimeWrapper writes an executable script to dir/name that runs
// nvidia-container-runtime on a config.toml of its own: host's with the
// top-level settings top put first and the lines runtimeTable and cdiTable
// added to the [nvidia-container-runtime] and
// [nvidia-container-runtime.modes.cdi] tables (the latter made when
// host's has none). A containerd runtime handler whose BinaryName is the
// script is one more node configuration on the same containerd.
func runtimeWrapper(t *testing.T, host *gpuHost, dir, name, top, runtimeTable, cdiTable string) string {
	t.Helper()
	cfg := string(readFile(t, host.Config))
	const table, cdi = "[nvidia-container-runtime]\n", "[nvidia-container-runtime.modes.cdi]\n"
	if !strings.Contains(cfg, table) {
		t.Fatalf("%s has no %s", host.Config, table)
	}
	cfg = top + "\n" + strings.Replace(cfg, table, table+runtimeTable+"\n", 1)
	if strings.Contains(cfg, cdi) {
		cfg = strings.Replace(cfg, cdi, cdi+cdiTable+"\n", 1)
	} else {
		cfg += "\n" + cdi + cdiTable + "\n"
	}
	cfgPath := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nNVIDIA_CTK_CONFIG_FILE_PATH=%q exec %q \"$@\"\n", cfgPath, tool(t, "nvidia-container-runtime"))
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCRINvidiaRuntime sets a node up, on each containerd of criEngines,
// as `nvidia-ctk runtime configure --runtime=containerd` does (the nvidia
// runtime handler, with container_annotations = ["cdi.k8s.io/*"] added as
// NVIDIA's device plugin documents for CDI annotations; enable_cdi stays as
// containerd's default has it: off in 1.7, so the runtime, not containerd,
// resolves them; absent in 1.6; on in 2.x, where containerd applies the
// annotated devices before the runtime sees them too) and runs pods the
// ways the device plugin hands GPUs out with the nvidia handler:
//   - envvar: NVIDIA_VISIBLE_DEVICES=<UUIDs>;
//   - cdi-annotations: a cdi.k8s.io/… annotation naming nvidia.com/gpu=N;
//   - volume-mounts: /dev/null at /var/run/nvidia-container-devices/<UUID>,
//     through a handler whose config.toml has
//     accept-nvidia-visible-devices-as-volume-mounts = true and
//     accept-nvidia-visible-devices-envvar-when-unprivileged = false,
//     which also refuses the pod's own NVIDIA_VISIBLE_DEVICES;
//   - the GPU Operator's own pods: NVIDIA_VISIBLE_DEVICES=all, through a
//     handler in cdi mode with default-kind management.nvidia.com/gpu and
//     the spec of `nvidia-ctk cdi generate --mode management`, which
//     also gives the MIG management nodes /dev/nvidia-caps/nvidia-cap1
//     and nvidia-cap2.
func TestCRINvidiaRuntime(t *testing.T) {
	skipShort(t)
	for _, eng := range criEngines() {
		t.Run(eng.name, func(t *testing.T) { criNvidiaRuntime(t, eng) })
	}
}

func criNvidiaRuntime(t *testing.T, eng criEngine) {
	nvRuntime := tool(t, "nvidia-container-runtime")
	var volumes, operator string
	n := startCRINode(t, eng, func(cfg string, n *criNode) {
		n.root.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "runtime", "configure", "--runtime=containerd",
			"--config", cfg, "--drop-in-config=", "--nvidia-runtime-path", nvRuntime)
		dir := filepath.Dir(cfg)
		volumes = runtimeWrapper(t, n.host, dir, "nvidia-volumes",
			"accept-nvidia-visible-devices-as-volume-mounts = true\naccept-nvidia-visible-devices-envvar-when-unprivileged = false", "", "")
		operator = runtimeWrapper(t, n.host, dir, "nvidia-operator", "", `mode = "cdi"`,
			`default-kind = "management.nvidia.com/gpu"`)
		n.root.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "cdi", "generate", "--mode", "management",
			"--driver-root", n.host.Root.Path, "--output", filepath.Join(n.specDir, "nvidia-management.yaml"),
			"--nvidia-cdi-hook-path", tool(t, "nvidia-cdi-hook"))
	}, func(doc map[string]any) {
		if v, want := criTable(t, doc)["enable_cdi"], map[string]any{"containerd-1.7": false, "containerd-1.6": nil, "containerd-2": true}[eng.name]; v != want {
			t.Fatalf("%s's enable_cdi = %v, want %v by default", eng.name, v, want)
		}
		runtimes := criTable(t, doc, "containerd", "runtimes")
		nv, ok := runtimes["nvidia"].(map[string]any)
		if !ok || nv["runtime_type"] != "io.containerd.runc.v2" || engLookup(nv, "options", "BinaryName") != nvRuntime {
			t.Fatalf("nvidia-ctk runtime configure wrote the nvidia runtime %v, want runtime_type io.containerd.runc.v2 and BinaryName %s", nv, nvRuntime)
		}
		nv["container_annotations"] = []any{"cdi.k8s.io/*"}
		for name, bin := range map[string]string{"nvidia-volumes": volumes, "nvidia-operator": operator} {
			rt := maps.Clone(nv)
			opts := maps.Clone(nv["options"].(map[string]any))
			opts["BinaryName"] = bin
			rt["options"] = opts
			delete(rt, "container_annotations")
			runtimes[name] = rt
		}
	})

	t.Run("envvar", func(t *testing.T) {
		t.Parallel()
		cfg := n.probe("envvar")
		cfg.Envs = criEnv("NVIDIA_VISIBLE_DEVICES", strings.Join(n.uuids(t, 1, 3), ","))
		checkGPU(t, n.run(t, "nvidia", cfg), want{host: n.host, GPUs: []int{1, 3}, LibDir: n.libDir})
	})
	t.Run("cdi-annotations", func(t *testing.T) {
		t.Parallel()
		cfg := n.probe("cdi-annotations")
		cfg.Annotations = map[string]string{"cdi.k8s.io/nvidia-device-plugin_gpu-2": "nvidia.com/gpu=2"}
		checkGPU(t, n.run(t, "nvidia", cfg), want{host: n.host, GPUs: []int{2}, LibDir: n.libDir, Display: true})
	})
	t.Run("volume-mounts", func(t *testing.T) {
		t.Parallel()
		cfg := n.probe("volume-mounts")
		uuid := n.uuids(t, 0)[0]
		// The device plugin sets the variable to the mounts' directory;
		// a pod's own "all" would ask for every GPU if it were honoured.
		cfg.Envs = criEnv("NVIDIA_VISIBLE_DEVICES", "all")
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: "/var/run/nvidia-container-devices/" + uuid, HostPath: "/dev/null", Readonly: true})
		checkGPU(t, n.run(t, "nvidia-volumes", cfg), want{host: n.host, GPUs: []int{0}, LibDir: n.libDir})
	})
	t.Run("volume-mounts/envvar-refused", func(t *testing.T) {
		t.Parallel()
		cfg := n.probe("envvar-refused")
		cfg.Envs = criEnv("NVIDIA_VISIBLE_DEVICES", "all")
		checkNoGPU(t, n.run(t, "nvidia-volumes", cfg))
	})
	t.Run("gpu-operator", func(t *testing.T) {
		t.Parallel()
		cfg := n.probe("gpu-operator")
		cfg.Envs = criEnv("NVIDIA_VISIBLE_DEVICES", "all")
		checkGPU(t, n.run(t, "nvidia-operator", cfg), want{host: n.host, GPUs: []int{0, 1, 2, 3}, LibDir: n.libDir, Display: true,
			Extra: []string{"nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"}})
	})
}

// TestCRICDIDevices runs pods, on each containerd of criEngines that has
// CDI, with containerd's own CDI support (enable_cdi = true,
// cdi_spec_dirs the directory holding nvidia-ctk's spec) and
// no NVIDIA runtime at all: the default runc handler, the GPUs asked for
// in the CRI's CDIDevices field as the device plugin's cdi-cri strategy
// does.
func TestCRICDIDevices(t *testing.T) {
	skipShort(t)
	for _, eng := range criEngines() {
		t.Run(eng.name, func(t *testing.T) {
			if !eng.cdi {
				t.Skipf("%s has no CDI in its CRI (enable_cdi came with containerd 1.7)", eng.name)
			}
			criCDIDevices(t, eng)
		})
	}
}

func criCDIDevices(t *testing.T, eng criEngine) {
	var specDir string
	n := startCRINode(t, eng, func(_ string, n *criNode) { specDir = n.specDir }, func(doc map[string]any) {
		cri := criTable(t, doc)
		cri["enable_cdi"] = true
		cri["cdi_spec_dirs"] = []any{specDir}
		runtimes := criTable(t, doc, "containerd", "runtimes")
		if _, ok := runtimes["nvidia"]; ok {
			t.Fatalf("containerd's default config has an nvidia runtime: %v", runtimes)
		}
		if def := criTable(t, doc, "containerd")["default_runtime_name"]; def != "runc" {
			t.Fatalf("default_runtime_name = %v, want runc", def)
		}
	})
	if n.root != nil {
		// NVIDIA's layout (class sepgpu, five hook entries), as the device
		// plugin's and the GPU Operator's specs: runc starts nctk's hook
		// once, the first entry doing the others' work (hookbatch).
		t.Run("sepgpu=2", func(t *testing.T) {
			cfg := n.probe("cdi-cri-sepgpu2")
			cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "nvidia.com/sepgpu=2"}}
			var logs string
			hook := tool(t, "nvidia-cdi-hook")
			started, err := starts.During(hook, func() error { logs = n.run(t, "", cfg); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if started != 1 {
				t.Errorf("%s started %d times for the five hook entries, want once", hook, started)
			}
			checkGPU(t, logs, want{host: n.host, GPUs: []int{2}, LibDir: n.libDir, Display: true})
		})
	}
	for _, tc := range []struct {
		name    string
		devices []string
		gpus    []int
	}{
		{"gpu=1", []string{"nvidia.com/gpu=1"}, []int{1}},
		{"gpu=0+gpu=3", []string{"nvidia.com/gpu=0", "nvidia.com/gpu=3"}, []int{0, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := n.probe("cdi-cri-" + strings.NewReplacer("=", "", "+", "-").Replace(tc.name))
			for _, d := range tc.devices {
				cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: d})
			}
			checkGPU(t, n.run(t, "", cfg), want{host: n.host, GPUs: tc.gpus, LibDir: n.libDir, Display: true})
		})
	}
	t.Run("unknown-device", func(t *testing.T) {
		t.Parallel()
		cfg := n.probe("cdi-cri-unknown")
		cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "nvidia.com/gpu=9"}}
		pod := n.cri.RunPod(t, cfg.Metadata.Name, "")
		_, err := n.cri.Runtime.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod.ID, Config: cfg, SandboxConfig: pod.Config})
		if err == nil || !strings.Contains(err.Error(), "nvidia.com/gpu=9") {
			t.Errorf("CreateContainer with CDI device nvidia.com/gpu=9: got %v, want an error naming the device", err)
		}
	})
}
