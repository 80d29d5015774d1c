package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	toml "github.com/pelletier/go-toml/v2"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// The tests in this file check the engine integration from the user's side:
// an engine's real configuration file edited by `nvidia-ctk runtime
// configure`, the engine started on it, and GPU containers run through it
// (the fixture driver's CUDA version from cudaprobe, exactly the selected
// device nodes); the nvidia-docker wrapper against that daemon; and the
// runtime's CDI mode over a spec from `nvidia-ctk cdi generate`.
//
// CRI-O is not started here (it is not packaged for the test hosts): the
// configured file itself is checked by internal/cli/ctk
// TestRuntimeConfigureCRIO and internal/engine TestEditCRIO.

// engCDISpec generates a CDI spec for host's fixture driver with
// `nvidia-ctk cdi generate` into a fresh spec directory, adds that
// directory to host's config.toml ([nvidia-container-runtime.modes.cdi]
// spec-dirs) and returns it.
func engCDISpec(t testing.TB, host *gpuHost) string {
	t.Helper()
	specDir := e2e.TempDir(t, "cdi")
	if err := os.Chmod(specDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e2e.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "cdi", "generate",
		"--driver-root", host.Root.Path, "--output", filepath.Join(specDir, "nvidia.yaml"),
		"--nvidia-cdi-hook-path", tool(t, "nvidia-cdi-hook"))
	cfg := readFile(t, host.Config)
	cfg = fmt.Appendf(cfg, "\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [%q]\n", specDir)
	if err := os.WriteFile(host.Config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return specDir
}

// engConfigure runs `nvidia-ctk runtime configure` and fails the test
// unless it succeeds.
func engConfigure(t testing.TB, args ...string) {
	t.Helper()
	e2e.MustRun(t, e2e.RunOpts{}, append([]string{tool(t, "nvidia-ctk"), "runtime", "configure"}, args...)...)
}

// engJSONKeys returns the top-level keys of a JSON object in document order.
func engJSONKeys(t testing.TB, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object (%v):\n%s", err, data)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("reading JSON keys: %v\n%s", err, data)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("reading JSON value of %s: %v\n%s", tok, err, data)
		}
	}
	return keys
}

// TestEngineDocker configures Docker the way a user does: a daemon.json
// with settings of its own (a registry mirror, a label, a download limit,
// another runtime) gets `nvidia-ctk runtime configure --runtime=docker`,
// and a private dockerd is started on exactly that file (the harness's
// --config-file is overridden: the later flag wins) with
// NVIDIA_CTK_CONFIG_FILE_PATH pointing the runtime at a 4-GPU fixture
// driver. That daemon serves:
//   - docker run --runtime=nvidia with NVIDIA_VISIBLE_DEVICES=1,3, while
//     plain docker run still uses runc;
//   - nvidia-docker with NV_GPU (index, UUID, blank-separated list) and
//     NV_DOCKER naming docker 20.10's client with -H for this daemon;
//   - the runtime's CDI mode: NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all and
//     =nvidia.com/gpu=1 resolved against a spec from nvidia-ctk cdi generate.
//
// Then the file gets `--set-as-default` and a second dockerd (the restart)
// runs GPU containers without --runtime, and the other runtime still runs
// containers without a GPU.
func TestEngineDocker(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	runc := e2e.RequireTool(t, "runc")
	host := newHost(t, fixture.Spec{Layout: "multiarch", GPUs: 4})
	engCDISpec(t, host)
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	nvRuntime := tool(t, "nvidia-container-runtime")

	dir := e2e.TempDir(t, "daemonjson")
	cfg := filepath.Join(dir, "daemon.json")
	orig := fmt.Sprintf(`{
  "registry-mirrors": ["https://mirror.example.invalid"],
  "labels": ["nctk-e2e=kept"],
  "max-concurrent-downloads": 5,
  "runtimes": {
    "plain": {"path": %q}
  }
}
`, runc)
	if err := os.WriteFile(cfg, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	type runtimeEntry struct {
		Path string `json:"path"`
	}
	type daemonJSON struct {
		Mirrors   []string                `json:"registry-mirrors"`
		Labels    []string                `json:"labels"`
		Downloads int                     `json:"max-concurrent-downloads"`
		Runtimes  map[string]runtimeEntry `json:"runtimes"`
		Default   *string                 `json:"default-runtime"`
	}
	checkFile := func(t *testing.T, wantDefault string) []byte {
		t.Helper()
		data := readFile(t, cfg)
		var got daemonJSON
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("configured daemon.json does not parse: %v\n%s", err, data)
		}
		if got.Runtimes["nvidia"].Path != nvRuntime {
			t.Errorf("runtimes.nvidia.path = %q, want %q", got.Runtimes["nvidia"].Path, nvRuntime)
		}
		if got.Runtimes["plain"].Path != runc {
			t.Errorf("the other runtime was not kept: runtimes = %v", got.Runtimes)
		}
		if fmt.Sprint(got.Mirrors) != "[https://mirror.example.invalid]" || fmt.Sprint(got.Labels) != "[nctk-e2e=kept]" || got.Downloads != 5 {
			t.Errorf("unrelated settings were not kept: mirrors %v, labels %v, max-concurrent-downloads %d", got.Mirrors, got.Labels, got.Downloads)
		}
		switch {
		case wantDefault == "" && got.Default != nil:
			t.Errorf("default-runtime = %q without --set-as-default", *got.Default)
		case wantDefault != "" && (got.Default == nil || *got.Default != wantDefault):
			t.Errorf("default-runtime = %v, want %q", got.Default, wantDefault)
		}
		keys := engJSONKeys(t, data)
		wantKeys := []string{"registry-mirrors", "labels", "max-concurrent-downloads", "runtimes"}
		if wantDefault != "" {
			wantKeys = append(wantKeys, "default-runtime")
		}
		if !reflect.DeepEqual(keys, wantKeys) {
			t.Errorf("daemon.json keys %q, want %q (the file's own order, new keys last)", keys, wantKeys)
		}
		if t.Failed() {
			t.Logf("%s:\n%s", cfg, data)
		}
		return data
	}
	// startDockerd starts a dockerd on the file and checks that the file's
	// settings are what it runs with.
	startDockerd := func(t *testing.T, wantDefault string) *e2e.Dockerd {
		t.Helper()
		d := e2e.StartDockerd(t, e2e.DockerdOptions{Args: []string{"--config-file", cfg}, Env: host.Env})
		var info struct {
			DefaultRuntime string
			Runtimes       map[string]runtimeEntry
			Labels         []string
			RegistryConfig struct{ Mirrors []string }
		}
		out := d.MustDocker("info", "--format", "{{json .}}")
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("docker info: %v\n%s", err, out)
		}
		if info.DefaultRuntime != wantDefault || info.Runtimes["nvidia"].Path != nvRuntime || info.Runtimes["plain"].Path != runc {
			t.Errorf("dockerd: default runtime %q, runtimes %v; want default %s, nvidia (%s) and plain (%s)",
				info.DefaultRuntime, info.Runtimes, wantDefault, nvRuntime, runc)
		}
		if fmt.Sprint(info.Labels) != "[nctk-e2e=kept]" || !strings.Contains(fmt.Sprint(info.RegistryConfig.Mirrors), "mirror.example.invalid") {
			t.Errorf("dockerd: labels %v, mirrors %v: the file's own settings are not in effect", info.Labels, info.RegistryConfig.Mirrors)
		}
		d.ImportImage(image, engImage)
		return d
	}
	libDir := e2e.LayoutDebian.LibDir()
	probeArgs := func(args ...string) []string {
		argv := append([]string{"run", "--rm", "--network=none", "-v", hostLdconfig + ":" + probeLdconfig + ":ro"}, args...)
		return append(argv, engImage, "/bin/sh", "-c", probeScript(libDir))
	}
	mustDocker := func(t *testing.T, d *e2e.Dockerd, args ...string) string {
		t.Helper()
		res := d.Docker(probeArgs(args...)...)
		if !res.OK() {
			t.Fatalf("docker run: %s", res)
		}
		return res.Stdout
	}

	engConfigure(t, "--runtime=docker", "--config", cfg, "--nvidia-runtime-path", nvRuntime)
	first := checkFile(t, "")
	engConfigure(t, "--runtime=docker", "--config", cfg, "--nvidia-runtime-path", nvRuntime)
	if again := readFile(t, cfg); !bytes.Equal(again, first) {
		t.Errorf("configuring twice changed the file:\nfirst:\n%s\nsecond:\n%s", first, again)
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Run("runtime=nvidia", func(t *testing.T) {
		d := startDockerd(t, "runc")
		t.Run("devices=1,3", func(t *testing.T) {
			t.Parallel()
			out := mustDocker(t, d, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1,3")
			checkGPU(t, out, want{host: host, GPUs: []int{1, 3}, LibDir: libDir})
		})
		t.Run("not-default", func(t *testing.T) {
			t.Parallel()
			checkNoGPU(t, mustDocker(t, d, "-e", "NVIDIA_VISIBLE_DEVICES=1,3"))
		})

		// nvidia-docker reaches this daemon only through NV_DOCKER's -H:
		// DOCKER_HOST names a socket that does not exist.
		cliDir := e2e.TempDir(t, "nvdocker")
		nvDocker := func(t *testing.T, nvGPU string, args ...string) e2e.Result {
			t.Helper()
			return e2e.Run(t, e2e.RunOpts{Env: []string{
				"NV_GPU=" + nvGPU,
				"NV_DOCKER=" + d.CLI + " -H " + d.Host,
				"DOCKER_HOST=unix://" + filepath.Join(cliDir, "no-such.sock"),
				"DOCKER_CONFIG=" + cliDir,
				"DOCKER_CONTEXT=",
			}}, append([]string{tool(t, "nvidia-docker")}, args...)...)
		}
		for _, tc := range []struct {
			name  string
			nvGPU func(t *testing.T) string
			gpus  []int
		}{
			{"NV_GPU=1", func(*testing.T) string { return "1" }, []int{1}},
			{"NV_GPU=uuid", func(t *testing.T) string { return host.gpu(t, 2).UUID }, []int{2}},
		} {
			t.Run("nvidia-docker/"+tc.name, func(t *testing.T) {
				t.Parallel()
				res := nvDocker(t, tc.nvGPU(t), probeArgs()...)
				if !res.OK() {
					t.Fatalf("nvidia-docker run: %s", res)
				}
				checkGPU(t, res.Stdout, want{host: host, GPUs: tc.gpus, LibDir: libDir})
			})
		}
		t.Run("nvidia-docker/create", func(t *testing.T) {
			// What the wrapper asked dockerd for: --runtime=nvidia (runc
			// is this daemon's default) and NV_GPU as the variable.
			t.Parallel()
			name := "nctk-nvdocker-create"
			uuid := host.gpu(t, 3).UUID
			if res := nvDocker(t, "0 "+uuid, "create", "--name", name, "--network=none", engImage, "true"); !res.OK() {
				t.Fatalf("nvidia-docker create: %s", res)
			}
			defer d.Docker("rm", "-f", name)
			out := strings.TrimSpace(d.MustDocker("inspect", "--format", "{{.HostConfig.Runtime}} {{json .Config.Env}}", name))
			rt, env, _ := strings.Cut(out, " ")
			if rt != "nvidia" {
				t.Errorf("nvidia-docker create: the container's runtime is %q, want nvidia", rt)
			}
			if wantEnv := fmt.Sprintf("%q", "NVIDIA_VISIBLE_DEVICES=0,"+uuid); !strings.Contains(env, wantEnv) {
				t.Errorf("nvidia-docker create: environment %s lacks %s", env, wantEnv)
			}
			// A command other than run/create passes through untouched.
			if res := nvDocker(t, "1", "inspect", "--format", "{{.HostConfig.Runtime}}", name); !res.OK() || strings.TrimSpace(res.Stdout) != "nvidia" {
				t.Errorf("nvidia-docker inspect (passed through): %s", res)
			}
		})
		t.Run("nvidia-docker/bad-NV_GPU", func(t *testing.T) {
			t.Parallel()
			res := nvDocker(t, "1,x", probeArgs()...)
			if res.OK() || !strings.Contains(res.Stderr, "x") || strings.Contains(res.Stdout, "@@@ cudaprobe") {
				t.Errorf("nvidia-docker with NV_GPU=1,x: want a failure naming the value before any container runs:\n%s", res)
			}
		})

		t.Run("cdi/nvidia.com/gpu=all", func(t *testing.T) {
			t.Parallel()
			out := mustDocker(t, d, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all")
			checkGPU(t, out, want{host: host, GPUs: []int{0, 1, 2, 3}, LibDir: libDir, Display: true})
		})
		t.Run("cdi/nvidia.com/gpu=1", func(t *testing.T) {
			t.Parallel()
			out := mustDocker(t, d, "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1")
			checkGPU(t, out, want{host: host, GPUs: []int{1}, LibDir: libDir, Display: true})
		})
	})

	t.Run("set-as-default", func(t *testing.T) {
		engConfigure(t, "--runtime=docker", "--config", cfg, "--nvidia-runtime-path", nvRuntime, "--set-as-default")
		checkFile(t, "nvidia")
		if t.Failed() {
			t.FailNow()
		}
		d := startDockerd(t, "nvidia")
		t.Run("devices=1,3", func(t *testing.T) {
			t.Parallel()
			out := mustDocker(t, d, "-e", "NVIDIA_VISIBLE_DEVICES=1,3")
			checkGPU(t, out, want{host: host, GPUs: []int{1, 3}, LibDir: libDir})
		})
		t.Run("cdi/nvidia.com/gpu=3", func(t *testing.T) {
			t.Parallel()
			out := mustDocker(t, d, "-e", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=3")
			checkGPU(t, out, want{host: host, GPUs: []int{3}, LibDir: libDir, Display: true})
		})
		t.Run("runtime=plain", func(t *testing.T) {
			t.Parallel()
			checkNoGPU(t, mustDocker(t, d, "--runtime=plain", "-e", "NVIDIA_VISIBLE_DEVICES=all"))
		})
	})
}

// checkLifted fails t for each of hooks (a config.json's createContainer
// hooks) that does a step the runtime does itself: create-symlinks,
// update-ldcache.
func checkLifted(t *testing.T, hooks []specs.Hook) {
	t.Helper()
	for _, h := range hooks {
		if slices.Contains(h.Args, "update-ldcache") || slices.Contains(h.Args, "create-symlinks") {
			t.Errorf("createContainer hook %q left in config.json, want its work done by the runtime", h.Args)
		}
	}
}

// engImage is the test image's name in the engines of this file.
const engImage = "nctk-e2e:engines"

// TestRuntimeCDIMode runs containers through nvidia-container-runtime and
// runc with CDI device names in NVIDIA_VISIBLE_DEVICES, resolved against
// the spec nvidia-ctk cdi generate wrote for a 4-GPU fixture driver (the
// spec directory comes from config.toml). The spec's common edits carry
// the control nodes (modeset included), libraries and nvidia-cdi-hook's
// symlink and ld.so.cache hooks; each named device adds its node only.
func TestRuntimeCDIMode(t *testing.T) {
	f := newRuncFixture(t, fixture.Spec{Layout: "multiarch", GPUs: 4}, e2e.RootfsOptions{})
	specDir := engCDISpec(t, f.host)
	libDir := e2e.LayoutDebian.LibDir()
	e2e.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "cdi", "generate", "--separate-hooks", "--class", "sepgpu",
		"--driver-root", f.host.Root.Path, "--output", filepath.Join(specDir, "nvidia-sep.yaml"),
		"--nvidia-cdi-hook-path", tool(t, "nvidia-cdi-hook"))

	for _, tc := range []struct {
		name   string
		device func(t *testing.T) string
		gpus   []int
	}{
		{"nvidia.com/gpu=1", func(*testing.T) string { return "nvidia.com/gpu=1" }, []int{1}},
		{"nvidia.com/gpu=uuid", func(t *testing.T) string { return "nvidia.com/gpu=" + f.host.gpu(t, 3).UUID }, []int{3}},
		{"nvidia.com/gpu=0,2", func(*testing.T) string { return "nvidia.com/gpu=0,nvidia.com/gpu=2" }, []int{0, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES="+tc.device(t))
			checkGPU(t, c.run(), want{host: f.host, GPUs: tc.gpus, LibDir: libDir, Display: true})
		})
	}
	// A spec in NVIDIA's layout (one hook per step, as NVIDIA's tools and
	// the device plugin write it): the runtime does every step itself,
	// update-ldcache over whole folders included (rebuilt before runc
	// mounts the driver's files), and the container root gets what the
	// same spec's hooks, run by runc, give it; the container sees its GPU.
	t.Run("nvidia-layout/lifted", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=nvidia.com/sepgpu=1")
		// The same bundle for plain runc with the spec applied by the CDI
		// library (as podman or containerd's CRI apply it).
		hooksRoot := copyRootfs(t, f.image)
		hooksBundle := e2e.MakeBundle(t, hooksRoot, "/bin/true")
		e2e.EditSpec(t, hooksBundle, func(s *specs.Spec) {
			injectCDI(t, s, specDir, "nvidia.com/sepgpu=1")
		})
		if res := c.rt.Create(c.bundle, c.id); !res.OK() {
			t.Fatalf("create: %s\n%s", res, c.rt.Output(c.id))
		}
		checkLifted(t, c.createContainerHooks())
		runc := e2e.NewRuntime(t, e2e.RequireTool(t, "runc"))
		hid := "nctk-hooks-" + filepath.Base(hooksBundle)
		if res := runc.Create(hooksBundle, hid); !res.OK() {
			t.Fatalf("runc create with the spec's hooks: %s\n%s", res, runc.Output(hid))
		}
		// The probe's own mount point (newRuncCase) is made by runc in
		// the runtime's bundle only.
		skip := []string{"/var/cache/ldconfig", path.Dir(probeLdconfig)}
		if d := e2e.TreeDiff(e2e.TreeState(t, c.rootfs, skip...), e2e.TreeState(t, hooksRoot, skip...)); len(d) > 0 {
			t.Errorf("the runtime's container root differs from the hooks':\n%s", strings.Join(d, "\n"))
		}
		if res := c.rt.Start(c.id); !res.OK() {
			t.Fatalf("start: %s", res)
		}
		if err := c.rt.WaitStopped(c.id, time.Minute); err != nil {
			t.Fatal(err)
		}
		checkGPU(t, c.rt.Output(c.id), want{host: f.host, GPUs: []int{1}, LibDir: libDir, Display: true})
	})
	// A spec whose hooks run `nvidia-ctk hook …` (NVIDIA's tools before
	// nvidia-cdi-hook wrote that form; nvidia-ctk is nctk's multi-call
	// binary, installed beside the runtime's own): the runtime knows it for
	// its own too and does the steps itself.
	t.Run("nvidia-ctk-hook/lifted", func(t *testing.T) {
		t.Parallel()
		e2e.MustRun(t, e2e.RunOpts{}, tool(t, "nvidia-ctk"), "cdi", "generate", "--separate-hooks", "--class", "ctkgpu",
			"--driver-root", f.host.Root.Path, "--output", filepath.Join(specDir, "nvidia-ctk.yaml"),
			"--nvidia-ctk-path", tool(t, "nvidia-ctk"))
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=nvidia.com/ctkgpu=1")
		if res := c.rt.Create(c.bundle, c.id); !res.OK() {
			t.Fatalf("create: %s\n%s", res, c.rt.Output(c.id))
		}
		checkLifted(t, c.createContainerHooks())
		if res := c.rt.Start(c.id); !res.OK() {
			t.Fatalf("start: %s", res)
		}
		if err := c.rt.WaitStopped(c.id, time.Minute); err != nil {
			t.Fatal(err)
		}
		checkGPU(t, c.rt.Output(c.id), want{host: f.host, GPUs: []int{1}, LibDir: libDir, Display: true})
	})
	// An image the in-process rebuild does not reproduce (a legacy hwcap
	// subdirectory in a library directory): update-ldcache stays a hook,
	// runs the host's ldconfig, and the container still sees its GPU.
	t.Run("nvidia-layout/ldconfig-hook", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=nvidia.com/sepgpu=1")
		if err := os.MkdirAll(filepath.Join(c.rootfs, libDir, "tls"), 0o755); err != nil {
			t.Fatal(err)
		}
		if res := c.rt.Create(c.bundle, c.id); !res.OK() {
			t.Fatalf("create: %s\n%s", res, c.rt.Output(c.id))
		}
		hooks := c.createContainerHooks()
		if len(hooks) != 1 || !slices.Contains(hooks[0].Args, "update-ldcache") {
			t.Errorf("createContainer hooks: %+v, want one call starting at update-ldcache", hooks)
		}
		if res := c.rt.Start(c.id); !res.OK() {
			t.Fatalf("start: %s", res)
		}
		if err := c.rt.WaitStopped(c.id, time.Minute); err != nil {
			t.Fatal(err)
		}
		checkGPU(t, c.rt.Output(c.id), want{host: f.host, GPUs: []int{1}, LibDir: libDir, Display: true})
	})
	t.Run("error/unknown-device", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9")
		msg := c.mustFailCreate()
		for _, s := range []string{"nvidia.com/gpu=9", specDir} {
			if !strings.Contains(msg, s) {
				t.Errorf("the error does not name %q:\n%s", s, msg)
			}
		}
	})
}

// TestEngineContainerd configures containerd's own default configuration
// (`containerd config default`, with its machine-wide paths moved into the
// test's directory) with `nvidia-ctk runtime configure
// --runtime=containerd --drop-in-config=""` (in place: without it the
// default drop-in in /etc/containerd/conf.d is written), checks that only the nvidia runtime entry was
// added, that containerd's merged view (`containerd config dump`) and its
// CRI plugin, started on the file, have the entry, and runs a GPU container
// with ctr through the runtime binary the entry names (ctr 1.6 cannot pick a
// CRI runtime by name: `--runtime io.containerd.runc.v2 --runc-binary`).
func TestEngineContainerd(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	containerd := e2e.RequireTool(t, "containerd")
	e2e.RequireTool(t, "ctr")
	e2e.RequireTool(t, "containerd-shim-runc-v2")
	host := newHost(t, fixture.Spec{Layout: "multiarch", GPUs: 4})
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	nvRuntime := tool(t, "nvidia-container-runtime")

	dir := e2e.TempDir(t, "ctrdcfg")
	cfg := filepath.Join(dir, "config.toml")
	def := e2e.MustRun(t, e2e.RunOpts{Quiet: true}, containerd, "config", "default")
	moved := def
	for _, r := range []struct{ old, new string }{
		{`root = "/var/lib/containerd"`, fmt.Sprintf("root = %q", filepath.Join(dir, "root"))},
		{`state = "/run/containerd"`, fmt.Sprintf("state = %q", filepath.Join(dir, "state"))},
		{`address = "/run/containerd/containerd.sock"`, fmt.Sprintf("address = %q", filepath.Join(dir, "containerd.sock"))},
		{`path = "/opt/containerd"`, fmt.Sprintf("path = %q", filepath.Join(dir, "opt"))},
		{`conf_dir = "/etc/cni/net.d"`, fmt.Sprintf("conf_dir = %q", filepath.Join(dir, "cni"))},
	} {
		if n := strings.Count(moved, r.old); n != 1 {
			t.Fatalf("containerd config default has %d lines %s, want 1:\n%s", n, r.old, def)
		}
		moved = strings.Replace(moved, r.old, r.new, 1)
	}
	if err := os.WriteFile(cfg, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	var before map[string]any
	if err := toml.Unmarshal([]byte(moved), &before); err != nil {
		t.Fatalf("containerd's default config: %v", err)
	}

	// The nvidia entry, from a TOML document (the file, or config dump).
	nvidiaEntry := func(t *testing.T, doc map[string]any) map[string]any {
		t.Helper()
		rts, _ := engLookup(doc, "plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes").(map[string]any)
		nv, _ := rts["nvidia"].(map[string]any)
		if nv == nil {
			t.Fatalf("no plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia")
		}
		return nv
	}
	checkEntry := func(t *testing.T, what string, nv map[string]any) {
		t.Helper()
		if nv["runtime_type"] != "io.containerd.runc.v2" || engLookup(nv, "options", "BinaryName") != nvRuntime {
			t.Errorf("%s: nvidia runtime = %v, want runtime_type io.containerd.runc.v2 and options.BinaryName %s", what, nv, nvRuntime)
		}
	}

	t.Run("configure", func(t *testing.T) {
		engConfigure(t, "--runtime=containerd", "--config", cfg, "--drop-in-config=", "--nvidia-runtime-path", nvRuntime)
		data := readFile(t, cfg)
		var after map[string]any
		if err := toml.Unmarshal(data, &after); err != nil {
			t.Fatalf("configured config.toml does not parse: %v\n%s", err, data)
		}
		checkEntry(t, cfg, nvidiaEntry(t, after))
		// Everything else is what containerd wrote.
		delete(engLookup(after, "plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes").(map[string]any), "nvidia")
		if !reflect.DeepEqual(after, before) {
			t.Errorf("configure changed more than the nvidia runtime entry:\n%s", data)
		}
		engConfigure(t, "--runtime=containerd", "--config", cfg, "--drop-in-config=", "--nvidia-runtime-path", nvRuntime)
		if again := readFile(t, cfg); !bytes.Equal(again, data) {
			t.Errorf("configuring twice changed the file:\nfirst:\n%s\nsecond:\n%s", data, again)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	// containerd's merged view of the file names the runtime ctr runs.
	dump := e2e.MustRun(t, e2e.RunOpts{Quiet: true}, containerd, "--config", cfg, "config", "dump")
	var eff map[string]any
	if err := toml.Unmarshal([]byte(dump), &eff); err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, dump)
	}
	nv := nvidiaEntry(t, eff)
	checkEntry(t, "containerd config dump", nv)
	binary, _ := engLookup(nv, "options", "BinaryName").(string)

	c := e2e.StartContainerdWith(t, e2e.ContainerdOptions{ConfigFile: cfg, Env: host.Env})
	t.Run("cri plugin loaded the entry", func(t *testing.T) {
		line := engWaitLog(t, c.LogFile, "Start cri plugin with config")
		for _, s := range []string{"nvidia:{Type:io.containerd.runc.v2", "BinaryName:" + nvRuntime} {
			if !strings.Contains(line, s) {
				t.Errorf("the CRI plugin's configuration lacks %q:\n%s", s, line)
			}
		}
	})

	ref := c.ImportImage(image, engImage)
	libDir := e2e.LayoutDebian.LibDir()
	for _, tc := range []struct {
		name, env string
		gpus      []int
	}{
		{"all", "NVIDIA_VISIBLE_DEVICES=all", []int{0, 1, 2, 3}},
		{"devices=2", "NVIDIA_VISIBLE_DEVICES=2", []int{2}},
	} {
		t.Run("ctr run/"+tc.name, func(t *testing.T) {
			t.Parallel()
			out := engMustCtr(t, c, "run", "--rm",
				"--runtime", "io.containerd.runc.v2", "--runc-binary", binary, "--env", tc.env,
				"--mount", "type=bind,src="+hostLdconfig+",dst="+probeLdconfig+",options=rbind:ro",
				"--mount", "type=cgroup,src=cgroup,dst=/sys/fs/cgroup,options=ro:nosuid:noexec:nodev",
				ref, "nctk-"+strings.ReplaceAll(tc.name, "=", "-"), "/bin/sh", "-c", probeScript(libDir))
			checkGPU(t, out, want{host: host, GPUs: tc.gpus, LibDir: libDir})
		})
	}
}

// engLookup follows keys through nested TOML tables; nil when absent.
func engLookup(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		t, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = t[k]
	}
	return v
}

// engMustCtr runs ctr against c, logging to t (a parallel subtest), and
// returns its stdout, failing t unless it exits 0.
func engMustCtr(t testing.TB, c *e2e.Containerd, args ...string) string {
	t.Helper()
	r := e2e.Run(t, e2e.RunOpts{}, c.CtrArgv(args...)...)
	if !r.OK() {
		t.Fatalf("ctr %s: %s", args[0], r)
	}
	return r.Stdout
}

// engWaitLog waits (up to 30s) for a line of the log file containing s
// and returns it.
func engWaitLog(t testing.TB, logFile, s string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		data := readFile(t, logFile)
		if i := bytes.Index(data, []byte(s)); i >= 0 {
			line := data[i:]
			if j := bytes.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			return string(line)
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd never logged %q", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
