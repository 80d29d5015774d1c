package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nctk/nctk/internal/app"
)

// TestMain lets the test binary act as the hook for the real-exec test.
func TestMain(m *testing.M) {
	if os.Getenv("NCTK_HOOK_TEST_MAIN") == "1" {
		os.Exit(Main(app.FromOS()))
	}
	os.Exit(m.Run())
}

// bundle writes a bundle whose config.json has the given process
// environment and bounding capabilities.
func bundle(t *testing.T, env []string, bounding []string) string {
	t.Helper()
	dir := t.TempDir()
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"args": []string{"sh"}, "cwd": "/", "env": env, "user": map[string]any{"uid": 0, "gid": 0},
			"capabilities": map[string]any{"bounding": bounding},
		},
		"root":      map[string]any{"path": "rootfs"},
		"x-unknown": true,
	}
	b, _ := json.Marshal(spec)
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))
	must(t, os.Mkdir(filepath.Join(dir, "rootfs"), 0o755))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func state(pid int, bundle string) string {
	return fmt.Sprintf(`{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":%d,"bundle":%q}`, pid, bundle)
}

// writeConfig writes a config.toml and returns its path.
func writeConfig(t *testing.T, toml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	must(t, os.WriteFile(p, []byte(toml), 0o644))
	return p
}

type call struct {
	path       string
	argv, env  []string
	called     bool
	code       int
	out, errot string
}

func runHook(t *testing.T, stdin string, environ []string, args ...string) call {
	t.Helper()
	var c call
	var out, errb bytes.Buffer
	e := &app.Env{Args: append([]string{"nvidia-container-runtime-hook"}, args...), Stdin: strings.NewReader(stdin),
		Stdout: &out, Stderr: &errb, Environ: environ}
	c.code = mainWith(e, func(path string, argv, env []string) error {
		c.path, c.argv, c.env, c.called = path, argv, env, true
		return nil
	})
	c.out, c.errot = out.String(), errb.String()
	return c
}

// fakeCLI is an executable nvidia-container-cli in a temporary directory.
func fakeCLI(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), CLIName)
	must(t, os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	return p
}

func TestPrestartArgv(t *testing.T) {
	cli := fakeCLI(t)
	base := "[nvidia-container-cli]\npath = \"" + cli + "\"\n"
	priv := []string{"CAP_SYS_ADMIN", "CAP_CHOWN"}
	// Host ldconfigs for the ".real" rule: wrapped has a .real, plain none.
	ld := t.TempDir()
	for _, f := range []string{"wrapped", "wrapped.real", "plain"} {
		must(t, os.WriteFile(filepath.Join(ld, f), nil, 0o755))
	}
	tests := []struct {
		name   string
		config string
		env    []string
		caps   []string
		flags  []string
		want   []string // argv after argv[0], without the final --pid and rootfs
	}{
		{"all, defaults", base, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", "--device=all", "--compute", "--utility"}},
		{"none: no --device", base, []string{"NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_DRIVER_CAPABILITIES=utility"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", "--utility"}},
		{"devices, caps in NVIDIA's order, requirements", base,
			[]string{"NVIDIA_VISIBLE_DEVICES=1,3", "NVIDIA_DRIVER_CAPABILITIES=video,compute,graphics,display,utility,compat32,ngx",
				"NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla,driver>=470", "NVIDIA_REQUIRE_ARCH=arch>=7.0"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", "--device=1,3",
				"--compat32", "--compute", "--display", "--graphics", "--ngx", "--utility", "--video",
				"--require=cuda>=12.0 brand=tesla,driver>=470", "--require=arch>=7.0"}},
		{"disable require", base, []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99", "NVIDIA_DISABLE_REQUIRE=true"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", "--device=0", "--compute", "--utility"}},
		{"every config key", base + `root = "/run/nvidia/driver"
load-kmods = false
no-pivot = true
debug = "/var/log/nvidia-container-toolkit.log"
ldcache = "/etc/ld.so.cache"
user = "root:video"
no-cgroups = true
ldconfig = "@/nonexistent/ldconfig"
[features]
disable-imex-channel-creation = true
[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "mount"
`, []string{"NVIDIA_VISIBLE_DEVICES=GPU-1234", "NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=all", "NVIDIA_IMEX_CHANNELS=0,2"}, priv, nil,
			[]string{"--root=/run/nvidia/driver", "--no-create-imex-channels", "--no-pivot", "--debug=/var/log/nvidia-container-toolkit.log",
				"--ldcache=/etc/ld.so.cache", "--user=root:video", "configure", "--cuda-compat-mode=mount", "--ldconfig=@/nonexistent/ldconfig",
				"--no-cgroups", "--device=GPU-1234", "--mig-config=all", "--mig-monitor=all", "--imex-channel=0,2", "--compute", "--utility"}},
		{"host ldconfig: .real preferred", base + "ldconfig = \"@" + ld + "/wrapped\"\n", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@" + ld + "/wrapped.real", "--device=0", "--compute", "--utility"}},
		{"host ldconfig: missing .real falls back", base + "ldconfig = \"@" + ld + "/plain.real\"\n", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@" + ld + "/plain", "--device=0", "--compute", "--utility"}},
		{"container ldconfig accepted by the feature: passed as it is", base + "ldconfig = \"/usr/sbin/ldconfig\"\n[features]\nallow-ldconfig-from-container = true\n",
			[]string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=/usr/sbin/ldconfig", "--device=0", "--compute", "--utility"}},
		{"cdi mode with skip-mode-detection: plain ids, no default kind", base + "[nvidia-container-runtime]\nmode = \"cdi\"\n[nvidia-container-runtime-hook]\nskip-mode-detection = true\n",
			[]string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", "--device=0", "--compute", "--utility"}},
		{"-debug", base, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil, []string{"-debug"},
			[]string{"--load-kmods", "--debug=/dev/stderr", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", "--device=all", "--compute", "--utility"}},
		{"legacy CUDA image", base, []string{"CUDA_VERSION=12.2.0"}, nil, nil,
			[]string{"--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", "--device=all",
				"--compat32", "--compute", "--display", "--graphics", "--ngx", "--utility", "--video", "--require=cuda>=12.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bundle(t, append(tt.env, "LD_PRELOAD=/proc/self/cwd/evil.so", "PATH=/image/bin"), tt.caps)
			args := append(append([]string{"-config", writeConfig(t, tt.config)}, tt.flags...), "prestart")
			c := runHook(t, state(4242, b), []string{"PATH=/usr/bin:/hookpath", "SECRET=hook-env", "CUDA_MPS_PIPE_DIRECTORY=/mps"}, args...)
			if c.code != 0 || !c.called {
				t.Fatalf("exit %d, exec called %v: %s", c.code, c.called, c.errot)
			}
			if c.path != cli {
				t.Errorf("path = %s, want %s", c.path, cli)
			}
			want := append(append([]string{CLIName}, tt.want...), "--pid=4242", filepath.Join(b, "rootfs"))
			if !reflect.DeepEqual(c.argv, want) {
				t.Errorf("argv:\n got %q\nwant %q", c.argv, want)
			}
			envs := strings.Join(c.env, "\n")
			if strings.Contains(envs, "LD_PRELOAD") || strings.Contains(envs, "/image/bin") || strings.Contains(envs, "SECRET") {
				t.Errorf("environment leaks image or hook variables: %q", c.env)
			}
			if !strings.HasPrefix(c.env[0], "PATH=") || !strings.Contains(c.env[0], "/hookpath") || !strings.Contains(envs, "CUDA_MPS_PIPE_DIRECTORY=/mps") {
				t.Errorf("environment = %q", c.env)
			}
		})
	}
}

func TestPrestartConfigEnvironmentAndRoot(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(root+"/usr/bin", 0o755))
	must(t, os.WriteFile(root+"/usr/bin/"+CLIName, []byte("#!/bin/sh\n"), 0o755))
	cfg := writeConfig(t, "[nvidia-container-cli]\nroot = \""+root+"\"\nenvironment = [\"NVC_X=1\", \"LD_LIBRARY_PATH=/drv\"]\n")
	b := bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil)
	c := runHook(t, state(7, b), []string{"PATH=/nonexistent"}, "-config", cfg, "prestart")
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.errot)
	}
	if c.path != root+"/usr/bin/"+CLIName {
		t.Errorf("CLI found at %s, want the driver root's copy first", c.path)
	}
	if !reflect.DeepEqual(c.env[1:], []string{"NVC_X=1", "LD_LIBRARY_PATH=/drv"}) || !strings.HasPrefix(c.env[0], "PATH="+root+"/usr/local/sbin:") {
		t.Errorf("env = %q", c.env)
	}
}

func TestPrestartNoOp(t *testing.T) {
	cfg := writeConfig(t, "[nvidia-container-cli]\npath = \"/nonexistent/cli\"\n")
	for _, env := range [][]string{nil, {"NVIDIA_VISIBLE_DEVICES="}, {"NVIDIA_VISIBLE_DEVICES=void"}, {"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"}} {
		b := bundle(t, env, nil)
		c := runHook(t, state(1, b), nil, "-config", cfg, "prestart")
		if c.code != 0 || c.called {
			t.Errorf("env %q: exit %d, exec %v: %s", env, c.code, c.called, c.errot)
		}
	}
	for _, cmd := range []string{"poststart", "poststop"} {
		if c := runHook(t, "", nil, cmd); c.code != 0 || c.called {
			t.Errorf("%s: exit %d", cmd, c.code)
		}
	}
}

func TestPrestartErrors(t *testing.T) {
	cli := fakeCLI(t)
	cfg := writeConfig(t, "[nvidia-container-cli]\npath = \""+cli+"\"\n")
	good := bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, nil)
	noProcess := t.TempDir()
	must(t, os.WriteFile(noProcess+"/config.json", []byte(`{"ociVersion":"1.0.2","root":{"path":"rootfs"}}`), 0o644))
	badJSON := t.TempDir()
	must(t, os.WriteFile(badJSON+"/config.json", []byte(`{"ociVersion":`), 0o644))
	unpriv := bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_CONFIG_DEVICES=all"}, nil)
	hugeRequire := bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=" + strings.Repeat("cuda>=12.0 ", 10000)}, nil)
	newline := bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=gpu\nlevel=error msg=forged"}, nil)
	fifoSpec := t.TempDir()
	must(t, syscall.Mkfifo(filepath.Join(fifoSpec, "config.json"), 0o644))
	tests := []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"empty state", "", []string{"-config", cfg, "prestart"}, "empty input"},
		{"malformed state", "{not json", []string{"-config", cfg, "prestart"}, "OCI state: invalid JSON"},
		{"state without pid", `{"bundle":"/x"}`, []string{"-config", cfg, "prestart"}, "pid 0"},
		{"missing bundle", state(1, "/nonexistent/bundle"), []string{"-config", cfg, "prestart"}, "/nonexistent/bundle/config.json"},
		{"spec without process", state(1, noProcess), []string{"-config", cfg, "prestart"}, "no process"},
		{"malformed spec", state(1, badJSON), []string{"-config", cfg, "prestart"}, "invalid OCI spec"},
		{"missing config", state(1, good), []string{"-config", "/nonexistent.toml", "prestart"}, "nonexistent.toml"},
		{"mig config unprivileged", state(1, unpriv), []string{"-config", cfg, "prestart"}, "NVIDIA_MIG_CONFIG_DEVICES"},
		{"100 KB NVIDIA_REQUIRE_CUDA", state(1, hugeRequire), []string{"-config", cfg, "prestart"}, "NVIDIA_REQUIRE_CUDA=\"cuda>=12.0 "},
		{"newline in a value", state(1, newline), []string{"-config", cfg, "prestart"}, `NVIDIA_DRIVER_CAPABILITIES="gpu\nlevel=error msg=forged"`},
		{"FIFO config.json", state(1, fifoSpec), []string{"-config", cfg, "prestart"}, "config.json: not a regular file: a FIFO"},
		{"cdi mode", state(1, good), []string{"-config", writeConfig(t, "[nvidia-container-cli]\npath = \""+cli+"\"\n[nvidia-container-runtime]\nmode = \"cdi\"\n"), "prestart"}, "not supported"},
		{"container ldconfig", state(1, good), []string{"-config", writeConfig(t, "[nvidia-container-cli]\npath = \""+cli+"\"\nldconfig = \"/sbin/ldconfig\"\n"), "prestart"},
			`nvidia-container-cli.ldconfig = "/sbin/ldconfig" is a container path (no "@"), refused unless features.allow-ldconfig-from-container = true`},
		{"relative cli path", state(1, good), []string{"-config", writeConfig(t, "[nvidia-container-cli]\npath = \"bin/cli\"\n"), "prestart"}, "not an absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := runHook(t, tt.stdin, []string{"PATH=/nonexistent"}, tt.args...)
			if c.code != 1 || c.called || !strings.Contains(c.errot, tt.want) {
				t.Errorf("exit %d, exec %v, stderr %.600q; want exit 1 with %q", c.code, c.called, c.errot, tt.want)
			}
			if strings.Count(c.errot, "\n") != 1 || len(c.errot) > 2048 {
				t.Errorf("stderr %.600q (%d bytes): want one short line", c.errot, len(c.errot))
			}
		})
	}
	// CLI not found anywhere: the error names the config file the hook
	// read (-config, or $NVIDIA_CTK_CONFIG_FILE_PATH) for the fix.
	if _, err := exec.LookPath("/usr/bin/" + CLIName); err == nil {
		t.Logf("skipping the no-CLI case: this host has /usr/bin/%s", CLIName)
		return
	}
	noCLI := writeConfig(t, "[nvidia-container-cli]\nroot = \"/nonexistent-root\"\n")
	for _, c := range []call{
		runHook(t, state(1, good), []string{"PATH=/nonexistent"}, "-config", noCLI, "prestart"),
		runHook(t, state(1, good), []string{"PATH=/nonexistent", "NVIDIA_CTK_CONFIG_FILE_PATH=" + noCLI}, "prestart"),
	} {
		if want := "not found in /nonexistent-root/usr/local/sbin:"; c.code != 1 || !strings.Contains(c.errot, want) || !strings.Contains(c.errot, "set nvidia-container-cli.path in "+noCLI+")") {
			t.Errorf("no CLI: exit %d, %q; want the search path and %s named", c.code, c.errot, noCLI)
		}
	}
}

func TestUsageAndVersion(t *testing.T) {
	if c := runHook(t, "", nil, "bogus"); c.code != 2 || !strings.Contains(c.errot, "Usage") {
		t.Errorf("unknown command: exit %d %q", c.code, c.errot)
	}
	if c := runHook(t, "", nil); c.code != 2 {
		t.Errorf("no command: exit %d", c.code)
	}
	if c := runHook(t, "", nil, "-bogus"); c.code != 2 {
		t.Errorf("unknown flag: exit %d", c.code)
	}
	if c := runHook(t, "", nil, "-version"); c.code != 0 || !strings.HasPrefix(c.out, "NVIDIA Container Runtime Hook version ") {
		t.Errorf("-version: exit %d %q", c.code, c.out)
	}
	if c := runHook(t, "", nil, "-h"); c.code != 0 {
		t.Errorf("-h: exit %d", c.code)
	}
}

// TestRealExec runs the hook binary (this test binary) as an engine
// would, with a recording fake nvidia-container-cli: the CLI replaces the
// hook (same PID) with NVIDIA's argv and only the minimal environment.
func TestRealExec(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "record")
	cli := filepath.Join(dir, CLIName)
	must(t, os.WriteFile(cli, []byte("#!/bin/sh\n{ echo \"pid=$$\"; for a in \"$0\" \"$@\"; do echo \"arg=$a\"; done; env | sed 's/^/env=/'; } > "+rec+"\nexit 7\n"), 0o755))
	cfg := writeConfig(t, "[nvidia-container-cli]\npath = \""+cli+"\"\nload-kmods = false\n")
	b := bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=0", "LD_PRELOAD=/evil.so"}, nil)
	self, err := os.Executable()
	must(t, err)
	cmd := exec.Command(self, "-config", cfg, "prestart")
	cmd.Args[0] = "nvidia-container-runtime-hook"
	cmd.Env = []string{"NCTK_HOOK_TEST_MAIN=1", "PATH=/usr/bin:/bin", "SECRET=x"}
	cmd.Stdin = strings.NewReader(state(99, b))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("hook: %v (want the CLI's exit status 7): %s", err, stderr.String())
	}
	out, err := os.ReadFile(rec)
	must(t, err)
	var args, env []string
	pid := ""
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(l, "arg="):
			args = append(args, l[4:])
		case strings.HasPrefix(l, "env="):
			env = append(env, l[4:])
		case strings.HasPrefix(l, "pid="):
			pid = l[4:]
		}
	}
	want := []string{cli, "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", "--device=0", "--compute", "--utility", "--pid=99", filepath.Join(b, "rootfs")}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("argv:\n got %q\nwant %q", args, want)
	}
	if pid != strconv.Itoa(cmd.Process.Pid) {
		t.Errorf("CLI ran as pid %s, hook was %d: not exec'd in place", pid, cmd.Process.Pid)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "LD_PRELOAD") || strings.HasPrefix(kv, "SECRET") || strings.HasPrefix(kv, "NCTK_HOOK_TEST_MAIN") {
			t.Errorf("CLI environment has %s", kv)
		}
	}
}

// FuzzPrestartState feeds arbitrary OCI state to prestart: it must fail
// cleanly or exec, never panic.
func FuzzPrestartState(f *testing.F) {
	dir := f.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[nvidia-container-cli]\npath = \"/nonexistent/cli\"\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	b := filepath.Join(dir, "bundle")
	os.MkdirAll(b+"/rootfs", 0o755)
	os.WriteFile(b+"/config.json", []byte(`{"ociVersion":"1.0.2","process":{"cwd":"/","env":["NVIDIA_VISIBLE_DEVICES=all"],"user":{"uid":0,"gid":0}},"root":{"path":"rootfs"}}`), 0o644)
	f.Add(state(1, b))
	f.Add(`{"pid":1,"bundlePath":"` + b + `"}`)
	f.Add(`{"pid":-1}`)
	f.Add(`[]`)
	f.Add(`{"pid":1e99,"bundle":7}`)
	f.Fuzz(func(t *testing.T, st string) {
		var out, errb bytes.Buffer
		e := &app.Env{Args: []string{"hook", "-config", cfg, "prestart"}, Stdin: strings.NewReader(st), Stdout: &out, Stderr: &errb}
		code := mainWith(e, func(string, []string, []string) error { return nil })
		if code != 0 && code != 1 {
			t.Fatalf("exit %d", code)
		}
	})
}

// TestRunCLI: nvidia-container-cli that is this binary runs in process with
// exactly the argv and environment an exec would get, and its status comes
// back as the hook's own; any other binary is exec'd.
func TestRunCLI(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "nvidia-container-cli")
	must(t, os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755))
	for _, tt := range []struct {
		name       string
		path       string
		status     int
		wantInProc bool
		wantErr    bool
	}{
		{"self, success", self, 0, true, false},
		{"self, failure", self, 3, true, true},
		{"other binary", other, 0, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			e := &app.Env{Args: []string{"nvidia-container-runtime-hook"}, Stdout: &stdout, Stderr: &stderr,
				Environ: []string{"LD_PRELOAD=/evil.so", "PATH=/hook"}}
			var inProc, execd bool
			argv, env := []string{"nvidia-container-cli", "configure", "--pid=1", "/r"}, []string{"PATH=/usr/bin"}
			run := runCLI(e, func(p string, a, en []string) error {
				execd = p == tt.path && slices.Equal(a, argv) && slices.Equal(en, env)
				return nil
			}, func(ce *app.Env) int {
				inProc = slices.Equal(ce.Args, argv) && slices.Equal(ce.Environ, env) && ce.Stderr == e.Stderr
				return tt.status
			})
			err := run(tt.path, argv, env)
			if inProc != tt.wantInProc || execd == tt.wantInProc || (err != nil) != tt.wantErr {
				t.Fatalf("in process %v, exec'd %v, err %v", inProc, execd, err)
			}
			var status cliExit
			if tt.wantErr && (!errors.As(err, &status) || int(status) != tt.status) {
				t.Errorf("error %v, want status %d", err, tt.status)
			}
		})
	}
}
