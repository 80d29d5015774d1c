package nvdocker

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/e2e"
)

// mainEnv makes the test binary act as nvidia-docker (see TestMain), so
// that tests can watch Main exec a fake docker.
const mainEnv = "NCTK_TEST_NVDOCKER_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		e := app.FromOS()
		e.Args = append([]string{"nvidia-docker"}, os.Args[1:]...)
		os.Exit(Main(e))
	}
	os.Exit(m.Run())
}

func TestRewrite(t *testing.T) {
	const rt = RuntimeFlag
	tests := []struct {
		name  string
		args  []string
		nvGPU string
		want  []string
		cmd   string
	}{
		{"run", []string{"run", "--rm", "img"}, "", []string{"run", rt, "--rm", "img"}, "run"},
		{"create", []string{"create", "img"}, "", []string{"create", rt, "img"}, "create"},
		{"run with NV_GPU", []string{"run", "img", "nvidia-smi"}, "0 1", []string{"run", rt, "-e", "NVIDIA_VISIBLE_DEVICES=0,1", "img", "nvidia-smi"}, "run"},
		{"commas and blanks", []string{"run", "img"}, " 0, 2 ,3", []string{"run", rt, "-e", "NVIDIA_VISIBLE_DEVICES=0,2,3", "img"}, "run"},
		{"uuid", []string{"run", "img"}, "GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f", []string{"run", rt, "-e", "NVIDIA_VISIBLE_DEVICES=GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f", "img"}, "run"},
		{"container run", []string{"container", "run", "img"}, "", []string{"container", "run", rt, "img"}, "run"},
		{"container create", []string{"container", "create", "img"}, "", []string{"container", "create", rt, "img"}, "create"},
		{"container ls", []string{"container", "ls"}, "0", []string{"container", "ls"}, "container"},
		{"-H value", []string{"-H", "unix:///x.sock", "run", "img"}, "", []string{"-H", "unix:///x.sock", "run", rt, "img"}, "run"},
		{"-H attached", []string{"-Hunix:///x.sock", "run", "img"}, "", []string{"-Hunix:///x.sock", "run", rt, "img"}, "run"},
		{"--host=", []string{"--host=unix:///x.sock", "run", "img"}, "", []string{"--host=unix:///x.sock", "run", rt, "img"}, "run"},
		{"--context", []string{"--context", "run", "run", "img"}, "", []string{"--context", "run", "run", rt, "img"}, "run"},
		{"--config named run", []string{"--config", "run", "ps"}, "", []string{"--config", "run", "ps"}, "ps"},
		{"-c", []string{"-c", "ctx", "create", "img"}, "", []string{"-c", "ctx", "create", rt, "img"}, "create"},
		{"-D -l", []string{"-D", "-l", "debug", "run", "img"}, "", []string{"-D", "-l", "debug", "run", rt, "img"}, "run"},
		{"-Dl cluster", []string{"-Dl", "debug", "run", "img"}, "", []string{"-Dl", "debug", "run", rt, "img"}, "run"},
		{"tls", []string{"--tls", "--tlsverify", "--tlscacert", "ca.pem", "--tlscert=c.pem", "--tlskey", "k.pem", "run", "img"}, "",
			[]string{"--tls", "--tlsverify", "--tlscacert", "ca.pem", "--tlscert=c.pem", "--tlskey", "k.pem", "run", rt, "img"}, "run"},
		{"--log-level", []string{"--log-level", "warn", "run", "img"}, "", []string{"--log-level", "warn", "run", rt, "img"}, "run"},
		{"only the first run", []string{"run", "img", "run"}, "", []string{"run", rt, "img", "run"}, "run"},
		{"exec passes through", []string{"exec", "c", "run"}, "0", []string{"exec", "c", "run"}, "exec"},
		{"ps", []string{"ps", "-a"}, "", []string{"ps", "-a"}, "ps"},
		{"version", []string{"version"}, "", []string{"version"}, "version"},
		{"images run", []string{"images", "run"}, "", []string{"images", "run"}, "images"},
		{"no command", []string{"--version"}, "", []string{"--version"}, ""},
		{"empty", nil, "", nil, ""},
		{"-- then run", []string{"-D", "--", "run", "img"}, "", []string{"-D", "--", "run", rt, "img"}, "run"},
		{"user runtime wins later", []string{"run", "--runtime=runc", "img"}, "", []string{"run", rt, "--runtime=runc", "img"}, "run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := Rewrite(tt.args, tt.nvGPU)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(inv.Args, tt.want) {
				t.Errorf("Rewrite(%q, %q) = %q, want %q", tt.args, tt.nvGPU, inv.Args, tt.want)
			}
			if inv.Command != tt.cmd {
				t.Errorf("command = %q, want %q", inv.Command, tt.cmd)
			}
		})
	}
}

func TestParseNVGPU(t *testing.T) {
	good := map[string]string{
		"0":       "0",
		"0,1":     "0,1",
		"0 1\t2":  "0,1,2",
		"all":     "all",
		" none ":  "none",
		"0:1,1:0": "0:1,1:0",
		"GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f,1":       "GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f,1",
		"MIG-4f1f8c5e-8a2b-5c3d-9e4f-0a1b2c3d4e5f":         "MIG-4f1f8c5e-8a2b-5c3d-9e4f-0a1b2c3d4e5f",
		"MIG-GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f/1/0": "MIG-GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f/1/0",
		"nvidia.com/gpu=0": "nvidia.com/gpu=0",
	}
	for in, want := range good {
		if got, err := ParseNVGPU(in); err != nil || got != want {
			t.Errorf("ParseNVGPU(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		",":           "names no GPU",
		"gpu0":        `"gpu0" is not a GPU index`,
		"0;1":         `"0;1" is not`,
		"-1":          `"-1" is not`,
		"all,0":       `"all" cannot be combined`,
		"GPU-xyz":     `"GPU-xyz" is not`,
		"0 $(reboot)": `"$(reboot)" is not`,
	}
	for in, want := range bad {
		_, err := ParseNVGPU(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "NV_GPU") {
			t.Errorf("ParseNVGPU(%q) error = %v, want it to mention NV_GPU and %q", in, err, want)
		}
	}
}

func FuzzRewrite(f *testing.F) {
	f.Add("-H\x00x\x00run\x00img", "0 1")
	f.Add("container\x00create\x00img", "GPU-0c6e6a2c")
	f.Add("-Dl\x00debug\x00run", "all")
	f.Fuzz(func(t *testing.T, joined, nvGPU string) {
		args := strings.Split(joined, "\x00")
		inv, err := Rewrite(args, nvGPU)
		if err != nil {
			return
		}
		n := 0
		if inv.Injected {
			n = 1
			if nvGPU != "" {
				n = 3
			}
		}
		if len(inv.Args) != len(args)+n {
			t.Fatalf("Rewrite(%q) = %q: %d arguments added, want %d", args, inv.Args, len(inv.Args)-len(args), n)
		}
	})
}

// fakeDocker writes a script that records its argv, one per line, in out.
func fakeDocker(t *testing.T, dir string) (script, out string) {
	t.Helper()
	script = filepath.Join(dir, "docker")
	out = filepath.Join(dir, "argv")
	body := "#!/bin/sh\nfor a in \"$0\" \"$@\"; do printf '%s\\n' \"$a\"; done > " + out + "\necho fake-docker-ran\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, out
}

func runWrapper(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{mainEnv + "=1"}, env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return so.String(), se.String(), code
}

func readArgv(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("fake docker did not run: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

func TestMainExecsDocker(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skipf("no /bin/sh for the fake docker: %v", err)
	}
	dir := t.TempDir()
	script, out := fakeDocker(t, dir)

	// Found in PATH; NV_GPU applied; the exec replaced the wrapper.
	stdout, stderr, code := runWrapper(t, []string{"PATH=" + dir, "NV_GPU=0 1", "NV_DEBUG=1"}, "-H", "unix:///d.sock", "run", "--rm", "img")
	if code != 0 || stdout != "fake-docker-ran\n" {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	want := []string{script, "-H", "unix:///d.sock", "run", RuntimeFlag, "-e", "NVIDIA_VISIBLE_DEVICES=0,1", "--rm", "img"}
	if got := readArgv(t, out); !reflect.DeepEqual(got[1:], want[1:]) {
		t.Errorf("docker argv = %q, want %q", got, want)
	}
	if !strings.Contains(stderr, "exec "+script+" docker -H unix:///d.sock run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=0,1 --rm img") {
		t.Errorf("NV_DEBUG output = %q", stderr)
	}

	// NV_DOCKER with extra words; version prints the wrapper version first.
	stdout, _, code = runWrapper(t, []string{"PATH=/nonexistent", "NV_DOCKER=" + script + " --debug"}, "version")
	if code != 0 || !strings.HasPrefix(stdout, "NVIDIA Docker: nctk ") || !strings.HasSuffix(stdout, "fake-docker-ran\n") {
		t.Errorf("version: exit %d stdout %q", code, stdout)
	}
	if got := readArgv(t, out); !reflect.DeepEqual(got, []string{script, "--debug", "version"}) {
		t.Errorf("docker argv = %q", got)
	}

	// Other commands pass through untouched, NV_GPU or not.
	if _, _, code = runWrapper(t, []string{"PATH=" + dir, "NV_GPU=3"}, "ps", "-a"); code != 0 {
		t.Fatalf("ps exit %d", code)
	}
	if got := readArgv(t, out); !reflect.DeepEqual(got[1:], []string{"ps", "-a"}) {
		t.Errorf("docker argv = %q", got)
	}

	// Errors: malformed NV_GPU (docker not run), missing docker.
	os.Remove(out)
	_, stderr, code = runWrapper(t, []string{"PATH=" + dir, "NV_GPU=0;rm"}, "run", "img")
	if code != 1 || !strings.HasPrefix(stderr, "nvidia-docker: NV_GPU=") {
		t.Errorf("bad NV_GPU: exit %d stderr %q", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("docker ran despite a malformed NV_GPU")
	}
	_, stderr, code = runWrapper(t, []string{"PATH=" + t.TempDir()}, "ps")
	if code != 1 || !strings.Contains(stderr, "nvidia-docker: NV_DOCKER=\"docker\": not found in PATH") {
		t.Errorf("missing docker: exit %d stderr %q", code, stderr)
	}
}

func BenchmarkRewrite(b *testing.B) {
	args := []string{"-H", "unix:///x", "--tlsverify", "run", "--rm", "-it", "img", "sh"}
	for b.Loop() {
		if _, err := Rewrite(args, "0 1 GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestE2ENvidiaDocker runs `nvidia-docker run` against a private dockerd
// whose nvidia runtime is a recording wrapper around runc, and checks the
// container the runtime was asked to create: it carries exactly the GPUs
// of NV_GPU.
func TestE2ENvidiaDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	e2e.RequireRoot(t)
	runc := e2e.RequireTool(t, "runc")
	fake := e2e.NewFakeTool(t, t.TempDir(), "nvidia-container-runtime", e2e.FakeToolOptions{Exec: runc})
	d := e2e.StartDockerd(t, e2e.DockerdOptions{Runtimes: map[string]e2e.DockerRuntime{"nvidia": {Path: fake.Path}}})
	d.ImportImage(e2e.BuildRootfs(t, e2e.RootfsOptions{}), "nctk-e2e:nvdocker")

	env := []string{"PATH=" + e2e.SystemPath, "HOME=" + t.TempDir(), "DOCKER_HOST=" + d.Host,
		"NV_DOCKER=" + d.CLI, "NV_GPU=1 GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f"}
	stdout, stderr, code := runWrapper(t, env, "run", "--rm", "--network=none", "nctk-e2e:nvdocker", "sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES")
	if code != 0 {
		t.Fatalf("nvidia-docker run: exit %d\nstdout %s\nstderr %s\ndockerd log:\n%s", code, stdout, stderr, d.Log())
	}
	const want = "1,GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a4f"
	if strings.TrimSpace(stdout) != want {
		t.Errorf("container saw NVIDIA_VISIBLE_DEVICES=%q, want %q", strings.TrimSpace(stdout), want)
	}
	calls, err := fake.Calls()
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Process struct {
			Env []string `json:"env"`
		} `json:"process"`
	}
	found := false
	for _, c := range calls {
		if !slices.Contains(c.Argv, "create") || c.ConfigJSON == "" {
			continue
		}
		if err := json.Unmarshal([]byte(c.ConfigJSON), &spec); err != nil {
			t.Fatalf("config.json given to the runtime: %v", err)
		}
		found = found || slices.Contains(spec.Process.Env, "NVIDIA_VISIBLE_DEVICES="+want)
	}
	if !found {
		t.Errorf("the nvidia runtime was not asked to create a container with NVIDIA_VISIBLE_DEVICES=%s (%d calls)", want, len(calls))
	}
}
