package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The image name every test imports its rootfs as.
const testImage = "nctk-e2e:plain"

// checkNoDriver asserts that cudaprobe ran and failed to load libcuda.so.1.
func checkNoDriver(t *testing.T, r Result) {
	t.Helper()
	if r.OK() || !strings.Contains(r.Combined(), CudaprobeNoDriver) {
		t.Fatalf("cudaprobe without a driver: want failure with %q, got:\n%s", CudaprobeNoDriver, r)
	}
}

func checkOK(t *testing.T, r Result) {
	t.Helper()
	if !r.OK() || strings.TrimSpace(r.Stdout) != "ok" {
		t.Fatalf("want exit 0 and \"ok\", got:\n%s", r)
	}
}

// ctrRunOK runs `ctr run` through run (given a fresh container name) until
// it prints "ok": containerd 1.6's ctr can exit 0 before it has copied a
// container's output when the container exits at once on a loaded
// machine, so an exit 0 with no output at all is tried again, up to three
// times in all; anything else fails. It returns how many runs it took.
func ctrRunOK(t *testing.T, run func(name string) Result) int {
	t.Helper()
	for i := 1; ; i++ {
		r := run(fmt.Sprintf("run%d", i))
		if r.OK() && r.Stdout == "" && r.Stderr == "" && i < 3 {
			t.Logf("ctr run exited 0 without the container's output (ctr's output race); again:\n%s", r)
			continue
		}
		checkOK(t, r)
		return i
	}
}

func TestFullImageName(t *testing.T) {
	for in, want := range map[string]string{
		"e2e":                   "docker.io/library/e2e:latest",
		"e2e:1":                 "docker.io/library/e2e:1",
		"nctk/e2e:1":            "docker.io/nctk/e2e:1",
		"localhost/e2e":         "localhost/e2e:latest",
		"reg.example:5000/a/b":  "reg.example:5000/a/b:latest",
		"reg.example/a/b:2":     "reg.example/a/b:2",
		"docker.io/library/x:y": "docker.io/library/x:y",
	} {
		if got := FullImageName(in); got != want {
			t.Errorf("FullImageName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRootfsLayouts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		layout  Layout
		present []string
		absent  []string
	}{
		{LayoutDebian,
			[]string{"/etc/debian_version", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2", "/etc/ld.so.conf.d/x86_64-linux-gnu.conf"},
			[]string{"/usr/lib64"}},
		{LayoutLib64,
			[]string{"/usr/lib64/libc.so.6", "/lib64/ld-linux-x86-64.so.2", "/etc/ld.so.conf.d/lib64.conf"},
			[]string{"/etc/debian_version", "/usr/lib/x86_64-linux-gnu"}},
	} {
		t.Run(string(tc.layout), func(t *testing.T) {
			root := BuildRootfs(t, RootfsOptions{Layout: tc.layout})
			common := []string{
				"/bin/sh", "/usr/bin/busybox", CudaprobePath, "/etc/ld.so.conf", "/etc/ld.so.cache",
				"/etc/passwd", tc.layout.LibDir() + "/libm.so.6", tc.layout.LibDir() + "/libgcc_s.so.1",
			}
			for _, p := range append(common, tc.present...) {
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("missing %s: %v", p, err)
				}
			}
			for _, p := range append([]string{"/sbin/ldconfig", "/usr/sbin/ldconfig", "/usr/bin/ldd"}, tc.absent...) {
				if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
					t.Errorf("%s should not exist", p)
				}
			}
			// No NVIDIA file anywhere.
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && (strings.Contains(d.Name(), "nvidia") || strings.Contains(d.Name(), "libcuda")) {
					t.Errorf("unexpected NVIDIA file %s", p)
				}
				return nil
			})
			// The cache resolves the image's own libc at the layout's path.
			out := MustRun(t, RunOpts{Quiet: true}, RequireTool(t, "ldconfig"), "-r", root, "-p")
			if !strings.Contains(out, "libc.so.6 (libc6,x86-64) => ") {
				t.Errorf("ld.so.cache lacks libc.so.6:\n%s", out)
			}
			// Runs (chrooted) and fails to find the driver.
			checkNoDriver(t, Run(t, RunOpts{}, RequireTool(t, "chroot"), root, CudaprobePath))
		})
	}
}

func TestRuncPlainContainer(t *testing.T) {
	t.Parallel()
	rc := NewRunc(t)
	for _, layout := range []Layout{LayoutDebian, LayoutLib64} {
		t.Run(string(layout), func(t *testing.T) {
			root := BuildRootfs(t, RootfsOptions{Layout: layout})
			checkOK(t, rc.Run(MakeBundle(t, root, "/bin/sh", "-c", "echo ok"), "ok-"+string(layout)))
			checkNoDriver(t, rc.Run(MakeBundle(t, root, CudaprobePath), "probe-"+string(layout)))
		})
	}

	// create/start/delete, with the output going to a file.
	root := BuildRootfs(t, RootfsOptions{})
	bundle := MakeBundle(t, root, "/bin/sh", "-c", "echo created-ok; cat /etc/hostname")
	EditSpec(t, bundle, func(s *specs.Spec) { s.Process.Env = append(s.Process.Env, "NCTK_E2E=1") })
	if r := rc.Create(bundle, "created"); !r.OK() {
		t.Fatalf("runc create: %v", r)
	}
	st, err := rc.State("created")
	if err != nil || st.Status != specs.StateCreated || st.Pid <= 0 {
		t.Fatalf("state after create: %+v, %v", st, err)
	}
	if r := rc.Start("created"); !r.OK() {
		t.Fatalf("runc start: %v", r)
	}
	if err := rc.WaitStopped("created", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if out := rc.Output("created"); !strings.Contains(out, "created-ok") {
		t.Errorf("container output %q lacks created-ok", out)
	}
	if r := rc.Delete("created"); !r.OK() {
		t.Fatalf("runc delete: %v", r)
	}
}

func TestDockerPlainContainer(t *testing.T) {
	t.Parallel()
	root := BuildRootfs(t, RootfsOptions{})
	bin := TempDir(t, "bin")
	runc := RequireTool(t, "runc")
	wrapper := NewFakeTool(t, bin, "e2e-runtime", FakeToolOptions{Exec: runc})
	d := StartDockerd(t, DockerdOptions{
		Runtimes: map[string]DockerRuntime{"e2e": {Path: wrapper.Path}},
	})
	d.ImportImage(root, testImage)
	checkOK(t, d.Docker("run", "--rm", "--network=none", testImage, "/bin/sh", "-c", "echo ok"))
	checkNoDriver(t, d.Docker("run", "--rm", "--network=none", testImage, CudaprobePath))

	// A runtime registered in the config file is called by path, with the
	// runc command line.
	checkOK(t, d.Docker("run", "--rm", "--network=none", "--runtime=e2e", testImage, "echo", "ok"))
	calls, err := wrapper.Calls()
	if err != nil {
		t.Fatal(err)
	}
	var create *FakeCall
	for i, c := range calls {
		if slices.Contains(c.Argv, "create") {
			create = &calls[i]
		}
	}
	if create == nil {
		t.Fatalf("runtime wrapper never called with create; calls: %+v", calls)
	}
	t.Logf("dockerd -> runtime create argv: %q", create.Argv)
	if create.Argv[0] != wrapper.Path || !slices.Contains(create.Argv, "--bundle") {
		t.Errorf("unexpected runtime argv %q", create.Argv)
	}
	if create.ConfigJSON == "" {
		t.Errorf("runtime create did not run in the bundle (cwd %s)", create.Cwd)
	}
}

// TestDockerGPUsHook records what docker 20.10's --gpus does: dockerd (which
// looked nvidia-container-runtime-hook up in its PATH at startup) adds a
// prestart hook [<abs path> prestart] with dockerd's environment and sets
// NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES in the container.
func TestDockerGPUsHook(t *testing.T) {
	t.Parallel()
	root := BuildRootfs(t, RootfsOptions{NoCudaprobe: true})
	bin := TempDir(t, "bin")
	hook := NewFakeTool(t, bin, "nvidia-container-runtime-hook", FakeToolOptions{})
	d := StartDockerd(t, DockerdOptions{ExtraPath: []string{bin}, Env: []string{"NCTK_E2E_DOCKERD=1"}})
	d.ImportImage(root, testImage)

	r := d.Docker("run", "--rm", "--network=none", "--gpus", `"device=0,1",capabilities=utility`, testImage,
		"/bin/sh", "-c", `echo "$NVIDIA_VISIBLE_DEVICES|$NVIDIA_DRIVER_CAPABILITIES"`)
	if !r.OK() || strings.TrimSpace(r.Stdout) != "0,1|utility" {
		t.Fatalf("docker run --gpus: want 0,1|utility, got:\n%s", r)
	}
	r = d.Docker("run", "--rm", "--network=none", "--gpus", "all", testImage,
		"/bin/sh", "-c", `echo "$NVIDIA_VISIBLE_DEVICES|${NVIDIA_DRIVER_CAPABILITIES-unset}"`)
	if !r.OK() || strings.TrimSpace(r.Stdout) != "all|unset" {
		t.Fatalf("docker run --gpus all: want all|unset, got:\n%s", r)
	}

	calls, err := hook.Calls()
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("hook called %d times, want 2: %+v", len(calls), calls)
	}
	c := calls[0]
	t.Logf("hook argv %q cwd %s\nstdin %s", c.Argv, c.Cwd, c.Stdin)
	if want := []string{hook.Path, "prestart"}; !slices.Equal(c.Argv, want) {
		t.Errorf("hook argv %q, want %q", c.Argv, want)
	}
	var state specs.State
	if err := json.Unmarshal([]byte(c.Stdin), &state); err != nil || state.Pid <= 0 || state.Bundle == "" {
		t.Errorf("hook stdin is not an OCI state with pid and bundle: %q (%v)", c.Stdin, err)
	}
	if c.Getenv("NCTK_E2E_DOCKERD") != "1" || !strings.HasPrefix(c.Getenv("PATH"), bin+":") {
		t.Errorf("hook env is not dockerd's: %q", c.Env)
	}
	var spec specs.Spec
	if err := json.Unmarshal([]byte(c.ConfigJSON), &spec); err != nil {
		t.Fatalf("bundle config.json from the hook's cwd: %v", err)
	}
	// The GPU hook comes first; dockerd adds its own libnetwork-setkey
	// prestart hook (/proc/<dockerd pid>/exe) after it, even with
	// --network=none.
	prestart := PrestartHooks(&spec)
	if len(prestart) == 0 {
		t.Fatalf("spec hooks: %+v", spec.Hooks)
	}
	for i, h := range prestart {
		t.Logf("spec prestart hook %d: path %s args %q env %q", i, h.Path, h.Args, h.Env)
	}
	h := prestart[0]
	if h.Path != hook.Path || !slices.Equal(h.Args, []string{"nvidia-container-runtime-hook", "prestart"}) {
		t.Errorf("spec prestart hook = %s %q; want %s [nvidia-container-runtime-hook prestart]", h.Path, h.Args, hook.Path)
	}
	for _, kv := range d.Env { // dockerd's environment (it adds TMPDIR itself)
		if !slices.Contains(h.Env, kv) {
			t.Errorf("spec prestart hook env %q lacks dockerd's %s", h.Env, kv)
		}
	}
}

// TestDockerGPUsWithoutHook: without the hook in dockerd's PATH, --gpus is
// refused by dockerd.
func TestDockerGPUsWithoutHook(t *testing.T) {
	t.Parallel()
	root := BuildRootfs(t, RootfsOptions{NoCudaprobe: true})
	d := StartDockerd(t, DockerdOptions{Path: "/usr/sbin:/usr/bin:/sbin:/bin"})
	d.ImportImage(root, testImage)
	r := d.Docker("run", "--rm", "--network=none", "--gpus", "all", testImage, "true")
	if r.OK() || !strings.Contains(r.Stderr, `could not select device driver "" with capabilities: [[gpu]]`) {
		t.Fatalf("docker run --gpus without the hook: want the device driver error, got:\n%s", r)
	}
}

func TestContainerdPlainContainer(t *testing.T) {
	t.Parallel()
	root := BuildRootfs(t, RootfsOptions{})
	c := StartContainerd(t)
	ref := c.ImportImage(root, testImage)
	ctrRunOK(t, func(name string) Result { return c.Ctr("run", "--rm", ref, name, "/bin/echo", "ok") })
	checkNoDriver(t, c.Ctr("run", "--rm", ref, "probe", CudaprobePath))
}

// TestCtrGPUs records what containerd 1.6's `ctr run --gpus N` does: a
// prestart hook `containerd oci-hook -- <abs nvidia-container-cli>
// --load-kmods configure --device=N --compute --compat32 --graphics
// --utility --video --display --pid={{pid}} {{rootfs}}`, both binaries
// resolved in ctr's PATH, with ctr's environment.
func TestCtrGPUs(t *testing.T) {
	t.Parallel()
	root := BuildRootfs(t, RootfsOptions{NoCudaprobe: true})
	c := StartContainerd(t)
	ref := c.ImportImage(root, testImage)
	bin := TempDir(t, "bin")
	cli := NewFakeTool(t, bin, "nvidia-container-cli", FakeToolOptions{})
	ctrEnv := RunOpts{Env: []string{"PATH=" + bin + ":" + SystemPath, "NCTK_E2E_CTR=1"}}
	containerd := RequireTool(t, "containerd")

	// The hook as ctr writes it into the spec.
	if r := c.CtrOpts(ctrEnv, "container", "create", "--gpus", "1", ref, "spec-only", "true"); !r.OK() {
		t.Fatalf("ctr container create --gpus: %v", r)
	}
	var info struct{ Spec specs.Spec }
	if err := json.Unmarshal([]byte(c.MustCtr("container", "info", "spec-only")), &info); err != nil {
		t.Fatalf("ctr container info: %v", err)
	}
	prestart := PrestartHooks(&info.Spec)
	if len(prestart) != 1 {
		t.Fatalf("spec hooks: %+v", info.Spec.Hooks)
	}
	h := prestart[0]
	t.Logf("ctr --gpus prestart hook: path %s args %q", h.Path, h.Args)
	wantArgs := []string{"containerd", "oci-hook", "--", cli.Path, "--load-kmods", "configure", "--device=1",
		"--compute", "--compat32", "--graphics", "--utility", "--video", "--display", "--pid={{pid}}", "{{rootfs}}"}
	if h.Path != containerd || !slices.Equal(h.Args, wantArgs) {
		t.Errorf("hook = %s %q, want %s %q", h.Path, h.Args, containerd, wantArgs)
	}
	if !slices.Contains(h.Env, "NCTK_E2E_CTR=1") {
		t.Errorf("hook env is not ctr's: %q", h.Env)
	}

	// And what the CLI is finally called with.
	runs := ctrRunOK(t, func(name string) Result {
		return c.CtrOpts(ctrEnv, "run", "--rm", "--gpus", "0", ref, name, "/bin/echo", "ok")
	})
	calls, err := cli.Calls()
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != runs {
		t.Fatalf("nvidia-container-cli called %d times for %d containers, want once each: %+v", len(calls), runs, calls)
	}
	calls = calls[runs-1:]
	argv := calls[0].Argv
	t.Logf("nvidia-container-cli argv %q cwd %s", argv, calls[0].Cwd)
	n := len(argv)
	if n < 2 || !slices.Equal(argv[:n-2], []string{cli.Path, "--load-kmods", "configure", "--device=0",
		"--compute", "--compat32", "--graphics", "--utility", "--video", "--display"}) ||
		!strings.HasPrefix(argv[n-2], "--pid=") || argv[n-2] == "--pid=0" ||
		argv[n-1] != filepath.Join(calls[0].Cwd, "rootfs") {
		t.Errorf("unexpected nvidia-container-cli argv %q", argv)
	}
	if calls[0].Getenv("NCTK_E2E_CTR") != "1" {
		t.Errorf("CLI env is not ctr's: %q", calls[0].Env)
	}
}

func TestPodmanPlainContainer(t *testing.T) {
	t.Parallel()
	root := BuildRootfs(t, RootfsOptions{})
	p := NewPodman(t, PodmanOptions{})
	ref := p.ImportImage(root, testImage)
	checkOK(t, p.Podman("run", "--rm", ref, "/bin/sh", "-c", "echo ok"))
	checkNoDriver(t, p.Podman("run", "--rm", ref, CudaprobePath))
}

// TestPodmanCDI proves podman 4.3 applies a hand-written CDI spec (0.5.0)
// from a private directory: the env var and the mount reach the container.
func TestPodmanCDI(t *testing.T) {
	t.Parallel()
	root := BuildRootfs(t, RootfsOptions{NoCudaprobe: true})
	cdiDir := filepath.Join(TempDir(t, "cdi"), "specs")
	hostFile := filepath.Join(filepath.Dir(cdiDir), "fake-device-file")
	if err := writeFile(hostFile, []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := map[string]any{
		"cdiVersion": "0.5.0",
		"kind":       "nvidia.com/gpu",
		"devices": []any{map[string]any{
			"name": "all",
			"containerEdits": map[string]any{
				"env": []string{"NCTK_FAKE_DEVICE=all"},
				"mounts": []any{map[string]any{
					"hostPath": hostFile, "containerPath": "/run/nctk-fake/file",
					"options": []string{"ro", "nosuid", "nodev", "bind"},
				}},
			},
		}},
		"containerEdits": map[string]any{"env": []string{"NCTK_FAKE_COMMON=1"}},
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(cdiDir, "nctk-fake.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	p := NewPodman(t, PodmanOptions{CDISpecDir: cdiDir})
	ref := p.ImportImage(root, testImage)
	r := p.Podman("run", "--rm", "--device", "nvidia.com/gpu=all", ref,
		"/bin/sh", "-c", `echo "$NCTK_FAKE_DEVICE|$NCTK_FAKE_COMMON|$(cat /run/nctk-fake/file)"`)
	if !r.OK() || strings.TrimSpace(r.Stdout) != "all|1|hello from the host" {
		t.Fatalf("podman run --device nvidia.com/gpu=all: want all|1|hello from the host, got:\n%s", r)
	}
	r = p.Podman("run", "--rm", "--device", "nvidia.com/gpu=0", ref, "true")
	if r.OK() || !strings.Contains(r.Stderr, "unresolvable CDI devices nvidia.com/gpu=0") {
		t.Fatalf("unknown CDI device: want an unresolvable-device error, got:\n%s", r)
	}
}
