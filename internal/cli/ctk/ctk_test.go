package ctk

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/nctk/nctk/internal/app"
)

// run runs nvidia-ctk in-process.
func run(t testing.TB, environ []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var so, se bytes.Buffer
	e := &app.Env{Args: append([]string{"nvidia-ctk"}, args...), Stdin: strings.NewReader(""), Stdout: &so, Stderr: &se, Environ: environ}
	code = Main(e)
	return so.String(), se.String(), code
}

// fakeRuntimeDir returns a PATH directory holding an executable
// nvidia-container-runtime.
func fakeRuntimeDir(t testing.TB) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "nvidia-container-runtime")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

func TestGlobal(t *testing.T) {
	tests := []struct {
		name       string
		env        []string
		args       []string
		code       int
		out, err   string
		notOut     string
		wantStdout bool
	}{
		{name: "version", args: []string{"--version"}, out: "nvidia-ctk version nctk "},
		{name: "help", args: []string{"--help"}, out: "runtime"},
		{name: "-h", args: []string{"-h"}, out: "system"},
		{name: "no args", args: nil, out: "Commands:"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 1, err: `nvidia-ctk: nvidia-ctk: unknown command "frobnicate"`},
		{name: "unknown flag", args: []string{"--frob"}, code: 1, err: "nvidia-ctk: flag provided but not defined: -frob"},
		{name: "bad env twin", env: []string{"NVIDIA_CTK_DEBUG=maybe"}, args: []string{"runtime"}, code: 1, err: `NVIDIA_CTK_DEBUG="maybe"`},
		{name: "group without sub", args: []string{"runtime"}, code: 1, err: "configure"},
		{name: "group help", args: []string{"system", "--help"}, out: "create-dev-char-symlinks"},
		{name: "unknown sub", args: []string{"runtime", "frob"}, code: 1, err: `unknown command "frob"`},
		{name: "global flags after a group", args: []string{"runtime", "--debug", "-v", "--config=/nonexistent", "configure", "--help"}, out: "--nvidia-runtime-path"},
		{name: "global flags after a leaf", args: []string{"cdi", "list", "--quiet", "-d", "--help"}, out: "--spec-dir"},
		{name: "unknown flag after a group", args: []string{"runtime", "--frob"}, code: 1, err: "nvidia-ctk runtime: flag provided but not defined: -frob"},
		{name: "cdi group", args: []string{"cdi", "--help"}, out: "generate"},
		{name: "hook delegates to nvidia-cdi-hook", args: []string{"hook", "update-ldcache"}, code: 1, err: "nvidia-ctk hook update-ldcache: OCI state: empty input"},
		{name: "leaf help", args: []string{"runtime", "configure", "--help"}, out: "--nvidia-runtime-path, --runtime-path"},
		{name: "leaf positional", args: []string{"runtime", "configure", "extra"}, code: 1, err: `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := run(t, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stdout %q stderr %q)", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.out) {
				t.Errorf("stdout %q lacks %q", stdout, tt.out)
			}
			if !strings.Contains(stderr, tt.err) {
				t.Errorf("stderr %q lacks %q", stderr, tt.err)
			}
		})
	}
}

func TestRuntimeConfigureDocker(t *testing.T) {
	pathDir, _ := fakeRuntimeDir(t)
	environ := []string{"PATH=" + pathDir}
	cfg := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(cfg, []byte(`{"registry-mirrors": ["https://m.example"], "runtimes": {"crun": {"path": "crun"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	// Dry run: the result on stdout, the file untouched.
	stdout, stderr, code := run(t, environ, "runtime", "configure", "--config", cfg, "--set-as-default", "--cdi.enabled", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("dry-run output is not JSON: %v\n%s", err, stdout)
	}
	// dockerd looks the runtime up in its own PATH: the bare name, as
	// NVIDIA writes it.
	if got["default-runtime"] != "nvidia" || got["runtimes"].(map[string]any)["nvidia"].(map[string]any)["path"] != "nvidia-container-runtime" {
		t.Errorf("dry-run output: %s", stdout)
	}
	if data, _ := os.ReadFile(cfg); strings.Contains(string(data), "nvidia") {
		t.Errorf("dry run wrote the file")
	}

	// Real run, then a second one that changes nothing.
	if _, stderr, code = run(t, environ, "runtime", "configure", "--runtime=docker", "--config="+cfg, "--nvidia-set-as-default", "--enable-cdi"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "wrote updated config") || !strings.Contains(stderr, "restart dockerd") {
		t.Errorf("stderr = %q", stderr)
	}
	data, _ := os.ReadFile(cfg)
	if string(data) != stdout {
		t.Errorf("written file differs from the dry run:\n%s\n---\n%s", data, stdout)
	}
	if st, _ := os.Stat(cfg); st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v", st.Mode().Perm())
	}
	_, stderr, code = run(t, environ, "-d", "runtime", "configure", "--config", cfg, "--set-as-default", "--cdi.enabled")
	if code != 0 || !strings.Contains(stderr, "already up to date") {
		t.Errorf("second run: exit %d stderr %q", code, stderr)
	}
	if again, _ := os.ReadFile(cfg); !bytes.Equal(again, data) {
		t.Errorf("second run changed the file")
	}
	// --quiet silences info logs.
	if _, stderr, _ = run(t, environ, "--quiet", "runtime", "configure", "--config", cfg); stderr != "" {
		t.Errorf("--quiet stderr = %q", stderr)
	}
}

func TestRuntimeConfigureDefaultRuntimePath(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "daemon.json")
	stdout, stderr, code := run(t, []string{"PATH=" + t.TempDir()}, "runtime", "configure", "--config", cfg, "--dry-run")
	if code != 0 || !strings.Contains(stdout, `"path": "nvidia-container-runtime"`) {
		t.Errorf("docker: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	ctrd := filepath.Join(dir, "config.toml")
	stdout, stderr, code = run(t, []string{"PATH=" + t.TempDir()}, "runtime", "configure", "--runtime=containerd", "--config", ctrd, "--drop-in-config=", "--dry-run")
	if code != 0 || !strings.Contains(stdout, `BinaryName = '/usr/bin/nvidia-container-runtime'`) {
		t.Errorf("containerd: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	stdout, _, _ = run(t, nil, "runtime", "configure", "--config", cfg, "--dry-run", "--runtime-path", "my-runtime")
	if !strings.Contains(stdout, `"path": "my-runtime"`) {
		t.Errorf("docker keeps a bare name: %s", stdout)
	}
}

func TestRuntimeConfigureContainerd(t *testing.T) {
	pathDir, rtPath := fakeRuntimeDir(t)
	environ := []string{"PATH=" + pathDir}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	main := "# my containerd\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"
	if err := os.WriteFile(cfg, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}

	// --config given, no --drop-in-config: the default drop-in is written
	// all the same (as NVIDIA's does) and the main file imports its
	// directory.
	stdout, stderr, code := run(t, environ, "runtime", "configure", "--runtime", "containerd", "--config", cfg, "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, "# /etc/containerd/conf.d/99-nvidia.toml\n") || !strings.Contains(stdout, "# "+cfg+"\n# my containerd\nimports = ['/etc/containerd/conf.d/*.toml']\n") {
		t.Errorf("dry run with --config only:\n%s", stdout)
	}

	// --drop-in-config="": the main file is edited.
	stdout, stderr, code = run(t, environ, "runtime", "configure", "--runtime", "containerd", "--config", cfg, "--drop-in-config=", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var m map[string]any
	if err := toml.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("output is not TOML: %v\n%s", err, stdout)
	}
	if !strings.Contains(stdout, "BinaryName = '"+rtPath+"'") || !strings.Contains(stdout, "SystemdCgroup = true") {
		t.Errorf("dry run output:\n%s", stdout)
	}

	// With a drop-in: two files, the main one only gains an import.
	dropIn := filepath.Join(dir, "conf.d", "99-nvidia.toml")
	if _, stderr, code = run(t, environ, "runtime", "configure", "--runtime=containerd", "--config", cfg, "--drop-in-config", dropIn, "--set-as-default"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	gotMain, _ := os.ReadFile(cfg)
	if want := "# my containerd\nimports = ['" + filepath.Join(dir, "conf.d") + "/*.toml']\n" + main[len("# my containerd\n"):]; string(gotMain) != want {
		t.Errorf("main file:\n%s\nwant:\n%s", gotMain, want)
	}
	d, err := os.ReadFile(dropIn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d), "default_runtime_name = 'nvidia'") {
		t.Errorf("drop-in:\n%s", d)
	}

	// Relative runtime path for containerd is made absolute; a bare name
	// not in PATH is an error.
	stdout, _, code = run(t, environ, "runtime", "configure", "--runtime=containerd", "--config", cfg, "--drop-in-config=", "--dry-run", "--runtime-path", "bin/rt")
	if abs, _ := filepath.Abs("bin/rt"); code != 0 || !strings.Contains(stdout, "BinaryName = '"+abs+"'") {
		t.Errorf("relative path: exit %d\n%s", code, stdout)
	}
	_, stderr, code = run(t, environ, "runtime", "configure", "--runtime=containerd", "--config", cfg, "--drop-in-config=", "--dry-run", "--runtime-path", "no-such-runtime")
	if code != 1 || !strings.Contains(stderr, "needs an absolute path") {
		t.Errorf("bare name: exit %d stderr %q", code, stderr)
	}
}

func TestRuntimeConfigureCRIO(t *testing.T) {
	pathDir, rtPath := fakeRuntimeDir(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "crio.conf")
	if err := os.WriteFile(cfg, []byte("[crio.runtime]\ndefault_runtime = \"runc\"\n[crio.runtime.runtimes.runc]\nmonitor_path = \"/usr/libexec/crio/conmon\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dropIn := filepath.Join(dir, "crio.conf.d", "99-nvidia.toml")
	_, stderr, code := run(t, []string{"PATH=" + pathDir}, "runtime", "configure", "--runtime=crio", "--config", cfg, "--drop-in-config", dropIn, "--cdi.enabled")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "CDI is always enabled in CRI-O") {
		t.Errorf("no CDI note: %q", stderr)
	}
	var m map[string]any
	data, _ := os.ReadFile(dropIn)
	if err := toml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	rt := m["crio"].(map[string]any)["runtime"].(map[string]any)["runtimes"].(map[string]any)["nvidia"].(map[string]any)
	if rt["runtime_path"] != rtPath || rt["runtime_type"] != "oci" || rt["monitor_path"] != "/usr/libexec/crio/conmon" {
		t.Errorf("drop-in:\n%s", data)
	}
}

func TestRuntimeConfigureErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(bad, []byte(`{"runtimes": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"malformed", []string{"--config", bad}, "nvidia-ctk: " + bad + ": parsing JSON"},
		{"engine", []string{"--runtime", "podman"}, `nvidia-ctk: --runtime: unknown runtime "podman"`},
		{"docker drop-in", []string{"--config", bad, "--drop-in-config", "/x.json"}, "docker has no drop-in"},
		{"hook path", []string{"--config-mode", "oci-hook", "--nvidia-runtime-hook-path", "bin/hook"}, `--nvidia-runtime-hook-path: runtime hook path "bin/hook" must be absolute`},
		{"source", []string{"--config-source", "magic"}, `--config-source="magic"`},
		{"flag value", []string{"--set-as-default=perhaps"}, `invalid boolean value "perhaps"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := run(t, nil, append([]string{"runtime", "configure"}, tt.args...)...)
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d stderr %q, want 1 and %q", code, stderr, tt.want)
			}
		})
	}
	if data, _ := os.ReadFile(bad); string(data) != `{"runtimes": [` {
		t.Errorf("malformed file was modified")
	}
}

func TestConfigCommand(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := run(t, nil, "config", "default")
	if code != 0 || !strings.Contains(stdout, "[nvidia-container-runtime]") {
		t.Fatalf("config default: exit %d stderr %q\n%s", code, stderr, stdout)
	}
	def := stdout

	cfg := filepath.Join(dir, "config.toml")
	// A missing file prints the defaults; --in-place creates it.
	if stdout, _, code = run(t, nil, "config", "--config-file", cfg); code != 0 || stdout != def {
		t.Errorf("missing file: exit %d, output differs from the defaults", code)
	}
	if _, stderr, code = run(t, nil, "--quiet", "config", "-c", cfg, "--set", "nvidia-container-runtime.log-level=debug", "--set", "nvidia-container-cli.no-cgroups", "-i"); code != 0 {
		t.Fatalf("in-place: exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `log-level = "debug"`) || !strings.Contains(string(data), "no-cgroups = true") {
		t.Errorf("written config:\n%s", data)
	}
	// The global --config is the default file; NVIDIA_CTK_CONFIG too.
	if stdout, _, _ = run(t, nil, "--config", cfg, "config"); stdout != string(data) {
		t.Errorf("--config: output differs from the file")
	}
	if stdout, _, _ = run(t, []string{"NVIDIA_CTK_CONFIG=" + cfg}, "config"); stdout != string(data) {
		t.Errorf("NVIDIA_CTK_CONFIG: output differs from the file")
	}
	// NVIDIA's `config --config FILE` (an alias of --config-file).
	if stdout, _, _ = run(t, nil, "config", "--config", cfg); stdout != string(data) {
		t.Errorf("config --config: output differs from the file")
	}
	out := filepath.Join(dir, "out.toml")
	if _, _, code = run(t, nil, "config", "-c", cfg, "-o", out, "--set", "nvidia-container-runtime.mode=cdi"); code != 0 {
		t.Errorf("--output: exit %d", code)
	}
	if o, _ := os.ReadFile(out); !strings.Contains(string(o), `mode = "cdi"`) {
		t.Errorf("--output file:\n%s", o)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "--set", "no.such.key=1"}, `unknown key "no"`},
		{[]string{"config", "--set", "nvidia-container-cli.load-kmods=perhaps"}, "not a boolean"},
		{[]string{"config", "--set", "=1"}, "no key"},
		{[]string{"config", "-i", "-o", out}, "exclude each other"},
	} {
		if _, stderr, code := run(t, nil, tt.args...); code != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d stderr %q, want %q", tt.args, code, stderr, tt.want)
		}
	}
}

func TestRuntimeConfigureContainerdCommandSource(t *testing.T) {
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		t.Skipf("containerd is not installed: %v", err)
	}
	dir := t.TempDir()
	main := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(main, []byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"example.com/pause:from-main\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dropIn := filepath.Join(dir, "conf.d", "99-nvidia.toml")
	environ := []string{"PATH=" + filepath.Dir(containerd)}
	stdout, stderr, code := run(t, environ, "-d", "runtime", "configure", "--runtime=containerd", "--config", main,
		"--drop-in-config", dropIn, "--config-source", "command", "--runtime-path", "/usr/bin/nvidia-container-runtime", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "containerd --config "+main+" config dump") {
		t.Errorf("stderr %q does not show the dump command", stderr)
	}
	// The drop-in copies the effective CRI table: the main file's setting
	// and containerd's defaults (which the file did not spell out).
	for _, want := range []string{"# " + dropIn, "sandbox_image = 'example.com/pause:from-main'", "max_concurrent_downloads = 3",
		"BinaryName = '/usr/bin/nvidia-container-runtime'", "# " + main, "imports = ['" + filepath.Dir(dropIn) + "/*.toml']"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("dry-run output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestRuntimeConfigureContainerdDefaultDropIn(t *testing.T) {
	// Without --config and --drop-in-config, the default drop-in is used;
	// a dry run reads the machine's files and writes nothing.
	stdout, stderr, code := run(t, nil, "runtime", "configure", "--runtime=containerd", "--runtime-path", "/usr/bin/nvidia-container-runtime", "--dry-run")
	if code != 0 {
		t.Skipf("the machine's containerd config cannot be read here: %s", stderr)
	}
	if !strings.Contains(stdout, "runtimes.nvidia") {
		t.Errorf("dry-run output:\n%s", stdout)
	}
	if strings.HasPrefix(stdout, "# ") && !strings.HasPrefix(stdout, "# /etc/containerd/conf.d/99-nvidia.toml\n") {
		t.Errorf("first file is not the default drop-in:\n%s", stdout)
	}
}

// TestHelpAndInfo: NVIDIA's help command and its alias h, for nvidia-ctk
// and for a command below it, and the info placeholder.
func TestHelpAndInfo(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // a substring of stdout ("" for empty stdout)
		stderr string
	}{
		{args: []string{"h"}, stdout: "Usage: nvidia-ctk COMMAND"},
		{args: []string{"help"}, stdout: "Usage: nvidia-ctk COMMAND"},
		{args: []string{"h", "cdi"}, stdout: "Usage: nvidia-ctk cdi COMMAND"},
		{args: []string{"help", "cdi", "generate"}, stdout: "--feature-flag"},
		{args: []string{"cdi", "h", "transform", "root"}, stdout: "--relative-to"},
		{args: []string{"h", "warp"}, code: 1, stderr: `unknown command "warp"`},
		{args: []string{"info"}},
		{args: []string{"info", "--x"}, code: 1, stderr: "flag provided but not defined"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := run(t, nil, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, stderr)
			}
			if tc.stdout == "" && tc.code == 0 && stdout != "" || !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout %q, want %q", stdout, tc.stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr %q, want %q", stderr, tc.stderr)
			}
		})
	}
}

// TestQuietOverridesDebug: as NVIDIA's, --quiet logs errors only and wins
// over --debug, before or after the command.
func TestQuietOverridesDebug(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--quiet", "--debug", "cdi", "list", "--spec-dir", dir},
		{"cdi", "list", "--spec-dir", dir, "-d", "--quiet"},
		{"--debug", "cdi", "--quiet", "list", "--spec-dir", dir},
	} {
		if _, stderr, code := run(t, nil, args...); code != 0 || stderr != "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
		}
	}
	if _, stderr, _ := run(t, nil, "--debug", "cdi", "list", "--spec-dir", dir); !strings.Contains(stderr, "level=DEBUG") {
		t.Errorf("--debug: no debug log: %q", stderr)
	}
}
