package ctk

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/nctk/nctk/internal/e2e"
)

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
}

// TestE2EDockerConfigure configures a daemon.json with nvidia-ctk, starts a
// private dockerd with that file and checks that dockerd knows the runtime
// (and kept the other settings), then runs a container through it.
func TestE2EDockerConfigure(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	runc := e2e.RequireTool(t, "runc")
	binDir := t.TempDir()
	// A recording stand-in for nvidia-container-runtime that execs runc.
	fake := e2e.NewFakeTool(t, binDir, runtimeBinary, e2e.FakeToolOptions{Exec: runc})

	cfg := filepath.Join(t.TempDir(), "daemon.json")
	orig := `{
	"registry-mirrors": ["https://mirror.example.com"],
	"max-concurrent-downloads": 5,
	"runtimes": {"other": {"path": "` + runc + `"}}
}`
	if err := os.WriteFile(cfg, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, []string{"PATH=" + binDir}, "runtime", "configure", "--runtime=docker", "--config", cfg, "--set-as-default", "--runtime-path", fake.Path); code != 0 {
		t.Fatalf("nvidia-ctk runtime configure: exit %d: %s", code, stderr)
	}
	data, _ := os.ReadFile(cfg)
	t.Logf("configured %s:\n%s", cfg, data)

	// The harness writes its own config file; the later --config-file wins.
	d := e2e.StartDockerd(t, e2e.DockerdOptions{Args: []string{"--config-file", cfg}})
	var runtimes map[string]struct {
		Path string `json:"path"`
	}
	out := d.MustDocker("info", "--format", "{{json .Runtimes}}")
	if err := json.Unmarshal([]byte(out), &runtimes); err != nil {
		t.Fatalf("docker info runtimes %q: %v", out, err)
	}
	if runtimes["nvidia"].Path != fake.Path {
		t.Errorf("dockerd runtimes = %s, want nvidia with path %s", out, fake.Path)
	}
	if runtimes["other"].Path != runc {
		t.Errorf("the other runtime was lost: %s", out)
	}
	if def := strings.TrimSpace(d.MustDocker("info", "--format", "{{.DefaultRuntime}}")); def != "nvidia" {
		t.Errorf("default runtime = %q, want nvidia", def)
	}
	if m := d.MustDocker("info", "--format", "{{json .RegistryConfig.Mirrors}}"); !strings.Contains(m, "mirror.example.com") {
		t.Errorf("registry mirrors lost: %s", m)
	}

	// A container through the default (nvidia) runtime reaches our binary.
	d.ImportImage(e2e.BuildRootfs(t, e2e.RootfsOptions{}), "nctk-e2e:ctk")
	if r := d.Docker("run", "--rm", "--network=none", "nctk-e2e:ctk", "true"); !r.OK() {
		t.Fatalf("docker run through the configured runtime failed:\n%s\ndockerd log:\n%s", r, d.Log())
	}
	calls, err := fake.Calls()
	if err != nil {
		t.Fatal(err)
	}
	created := slices.ContainsFunc(calls, func(c e2e.FakeCall) bool { return slices.Contains(c.Argv, "create") })
	if !created {
		t.Errorf("dockerd never called %s create (calls: %d)", fake.Path, len(calls))
	}
}

// containerdTestConfig returns `containerd config default` with every
// machine-wide path moved into dir.
func containerdTestConfig(t *testing.T, containerd, dir string) []byte {
	t.Helper()
	out, err := exec.Command(containerd, "config", "default").Output()
	if err != nil {
		t.Fatalf("containerd config default: %v", err)
	}
	var m map[string]any
	if err := toml.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	m["root"] = filepath.Join(dir, "root")
	m["state"] = filepath.Join(dir, "state")
	m["grpc"].(map[string]any)["address"] = filepath.Join(dir, "containerd.sock")
	m["ttrpc"] = map[string]any{"address": filepath.Join(dir, "containerd.sock.ttrpc")}
	plugins := m["plugins"].(map[string]any)
	plugins["io.containerd.internal.v1.opt"] = map[string]any{"path": filepath.Join(dir, "opt")}
	cri := plugins["io.containerd.grpc.v1.cri"].(map[string]any)
	cri["sandbox_image"] = "registry.example.com/pause:kept"
	runc := cri["containerd"].(map[string]any)["runtimes"].(map[string]any)["runc"].(map[string]any)
	runc["options"].(map[string]any)["SystemdCgroup"] = true // must carry over to nvidia
	data, err := toml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("# test config: containerd config default, paths moved\n"), data...)
}

// TestE2EContainerdConfigure configures containerd's full default config
// (version 2) through a drop-in, checks containerd's own view of the merged
// configuration (`containerd config dump`), then starts containerd with it
// and checks that the CRI plugin loaded the runtime.
func TestE2EContainerdConfigure(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	containerd := e2e.RequireTool(t, "containerd")
	ctr := e2e.RequireTool(t, "ctr")
	runc := e2e.RequireTool(t, "runc")

	dir := e2e.TempDir(t, "ctk-containerd")
	main := filepath.Join(dir, "config.toml")
	dropIn := filepath.Join(dir, "conf.d", "99-nvidia.toml")
	if err := os.WriteFile(main, containerdTestConfig(t, containerd, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, nil, "runtime", "configure", "--runtime=containerd", "--config", main,
		"--drop-in-config", dropIn, "--runtime-path", runc, "--set-as-default", "--cdi.enabled")
	if code != 0 {
		t.Fatalf("nvidia-ctk runtime configure: exit %d: %s", code, stderr)
	}

	// containerd's merged view.
	dump, err := exec.Command(containerd, "--config", main, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, dump)
	}
	var eff map[string]any
	if err := toml.Unmarshal(dump, &eff); err != nil {
		t.Fatalf("config dump output: %v", err)
	}
	criT := eff["plugins"].(map[string]any)["io.containerd.grpc.v1.cri"].(map[string]any)
	ctrd := criT["containerd"].(map[string]any)
	nv, _ := ctrd["runtimes"].(map[string]any)["nvidia"].(map[string]any)
	if nv == nil {
		t.Fatalf("containerd config dump has no nvidia runtime:\n%s", dump)
	}
	opts := nv["options"].(map[string]any)
	checks := []struct {
		what      string
		got, want any
	}{
		{"runtime_type", nv["runtime_type"], "io.containerd.runc.v2"},
		{"options.BinaryName", opts["BinaryName"], runc},
		{"options.SystemdCgroup (copied from runc)", opts["SystemdCgroup"], true},
		{"default_runtime_name", ctrd["default_runtime_name"], "nvidia"},
		{"sandbox_image (kept)", criT["sandbox_image"], "registry.example.com/pause:kept"},
		{"runc BinaryName (untouched)", ctrd["runtimes"].(map[string]any)["runc"].(map[string]any)["options"].(map[string]any)["BinaryName"], ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("config dump: %s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if imports, _ := eff["imports"].([]any); !slices.Contains(imports, any(dropIn)) {
		t.Errorf("config dump imports = %v, want %s among them", eff["imports"], dropIn)
	}

	// A containerd started with the file: the CRI plugin loads with the runtime.
	logPath := filepath.Join(dir, "containerd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(containerd, "--config", main)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = []string{"PATH=" + e2e.SystemPath, "HOME=" + dir, "TMPDIR=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	sock := filepath.Join(dir, "containerd.sock")
	var plugins string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if conn, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, err := exec.CommandContext(ctx, ctr, "--address", sock, "plugins", "ls").Output()
			cancel()
			if err == nil {
				plugins = string(out)
				break
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("containerd did not come up:\n%s", log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	criLine := ""
	for _, line := range strings.Split(plugins, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "io.containerd.grpc.v1" && f[1] == "cri" {
			criLine = line
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(criLine), "ok") {
		t.Errorf("ctr plugins ls: cri plugin not ok: %q\n%s", criLine, plugins)
	}
	// The CRI plugin logs the configuration it started with.
	var started string
	for time.Now().Before(deadline) {
		log, _ := os.ReadFile(logPath)
		if i := bytes.Index(log, []byte("Start cri plugin with config")); i >= 0 {
			started = string(log[i:])
			if j := strings.IndexByte(started, '\n'); j >= 0 {
				started = started[:j]
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(started, "nvidia:{Type:io.containerd.runc.v2") || !strings.Contains(started, "BinaryName:"+runc) ||
		!strings.Contains(started, "DefaultRuntimeName:nvidia") {
		t.Errorf("the CRI plugin did not start with the nvidia runtime: %q", started)
	}
}
