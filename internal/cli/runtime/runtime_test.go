package runtime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
)

// A GPU container's spec as Docker writes it for `--gpus all` (with the
// prestart hook Docker adds) plus fields the runtime-spec does not define.
const gpuSpec = `{
  "ociVersion": "1.2.0",
  "process": {"cwd": "/", "args": ["nvidia-smi"], "x-future": 1,
    "env": ["PATH=/usr/bin:/bin", "LD_PRELOAD=/proc/self/cwd/poc.so", "NVIDIA_VISIBLE_DEVICES=all"]},
  "root": {"path": "rootfs"},
  "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}]},
  "linux": {"resources": {"devices": [{"allow": false, "access": "rwm"}]}, "x-vendor": {"a": [1, 2]}},
  "annotations": {"example.com/keep": "yes"}
}
`

const plainSpec = `{"ociVersion": "1.2.0", "process": {"cwd": "/", "args": ["sh"], "env": ["PATH=/bin"]}, "root": {"path": "rootfs"}}
`

func testPlan() *plan.Plan {
	return &plan.Plan{
		Devices: []plan.Device{{Path: "/dev/nvidia0", Major: 195, Minor: 0, FileMode: 0o666}},
		Mounts: []plan.Mount{{Source: "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05", Destination: "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05",
			Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}}},
		Symlinks:     []plan.Symlink{{Link: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Target: "libcuda.so.535.104.05"}},
		LdconfigDirs: []string{"/usr/lib/x86_64-linux-gnu"},
		Proc:         &plan.ProcView{HostDir: "/proc/driver/nvidia", Files: []string{"params", "version"}, GPUDirs: []string{"0000:01:00.0"}},
		Env:          []string{"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"},
	}
}

// gpuPlanner plans testPlan for containers with NVIDIA_VISIBLE_DEVICES set
// and records what it was given.
type gpuPlanner struct {
	calls []input
	err   error
}

func (g *gpuPlanner) Prepare(_ context.Context, in input) (*plan.Plan, error) {
	g.calls = append(g.calls, in)
	if g.err != nil {
		return nil, g.err
	}
	if !requestsGPUs(in.Spec) {
		return nil, nil
	}
	return testPlan(), nil
}

func writeBundle(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeExecutable(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

type execCall struct {
	called    bool
	path      string
	argv, env []string
}

type harness struct {
	rt      *Runtime
	exec    *execCall
	planner *gpuPlanner
	runc    string
	hook    string
	stdout  bytes.Buffer
	stderr  bytes.Buffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	bin := t.TempDir()
	h := &harness{exec: &execCall{}, planner: &gpuPlanner{}}
	h.runc = writeExecutable(t, filepath.Join(bin, "runc"), "#!/bin/sh\nexit 0\n")
	h.hook = writeExecutable(t, filepath.Join(bin, "nvidia-cdi-hook"), "#!/bin/sh\nexit 0\n")
	h.rt = &Runtime{
		planner: h.planner,
		LoadConfig: func(*app.Env) (*config.Config, error) {
			c := config.Default()
			c.Runtime.Runtimes = []string{"no-such-runtime", h.runc}
			return c, nil
		},
		HookPath: h.hook,
		// A host whose kernel shows the driver: the proc view needs its hook.
		ProcDriverDir: t.TempDir(),
		Exec: func(path string, argv, env []string) error {
			h.exec.called, h.exec.path, h.exec.argv, h.exec.env = true, path, argv, env
			return nil
		},
		Version: "test",
	}
	return h
}

func (h *harness) run(args ...string) int {
	e := &app.Env{Args: append([]string{"nvidia-container-runtime"}, args...), Stdout: &h.stdout, Stderr: &h.stderr,
		Environ: []string{"PATH=/usr/bin:/bin", "FOO=bar"}}
	return h.rt.Run(e)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCreateAndRunEditSpecAndExec(t *testing.T) {
	for _, cmd := range [][]string{
		// Without --pid-file (a create with one does the proc view itself
		// afterwards: TestCreateAfterCreateWork) and as a run.
		{"--root", "/run/r", "--log", "@LOG@", "--log-format", "json", "create", "--bundle", "@BUNDLE@", "--console-socket", "s", "id"},
		{"run", "-d", "-b=@BUNDLE@", "id"},
		{"--systemd-cgroup", "create", "id", "-bundle", "@BUNDLE@"},
	} {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			h := newHarness(t)
			bundle := writeBundle(t, gpuSpec)
			args := slices.Clone(cmd)
			for i := range args {
				args[i] = strings.NewReplacer("@BUNDLE@", bundle, "@LOG@", filepath.Join(bundle, "log.json")).Replace(args[i])
			}
			if code := h.run(args...); code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			if !h.exec.called || h.exec.path != h.runc {
				t.Fatalf("exec %+v, want %s", h.exec, h.runc)
			}
			if want := append([]string{h.runc}, args...); !slices.Equal(h.exec.argv, want) {
				t.Errorf("argv %q, want %q", h.exec.argv, want)
			}
			if !slices.Equal(h.exec.env, []string{"PATH=/usr/bin:/bin", "FOO=bar"}) {
				t.Errorf("env %q", h.exec.env)
			}
			doc, err := ocispec.Load(filepath.Join(bundle, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			s := doc.Spec()
			if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/nvidia0" || len(s.Linux.Resources.Devices) != 2 {
				t.Errorf("devices not injected: %+v", s.Linux)
			}
			if strings.Contains(string(readFile(t, filepath.Join(bundle, "config.json"))), "nvidia-container-runtime-hook") {
				t.Errorf("NVIDIA prestart hook kept")
			}
			// One hook, for the proc view only: the symlinks and the cache
			// are done in the rootfs before the runtime runs.
			if len(s.Hooks.CreateContainer) != 1 || s.Hooks.CreateContainer[0].Path != h.hook ||
				!slices.Equal(s.Hooks.CreateContainer[0].Args, []string{hookargs.Binary, hookargs.NameMountProcDriver,
					"--host-dir", "/proc/driver/nvidia", "--file", "params", "--file", "version", "--gpu", "0000:01:00.0"}) {
				t.Errorf("hooks %+v", s.Hooks.CreateContainer)
			}
			checkRootfsDone(t, filepath.Join(bundle, "rootfs"))
			for _, hk := range s.Hooks.CreateContainer {
				if !slices.Equal(hk.Env, hookargs.Env()) {
					t.Errorf("hook env %q", hk.Env)
				}
			}
			if s.Annotations["example.com/keep"] != "yes" || !strings.Contains(string(readFile(t, filepath.Join(bundle, "config.json"))), `"x-vendor":{"a":[1,2]}`) {
				t.Errorf("unknown fields lost")
			}
			if got := h.planner.calls[0].Rootfs; got != filepath.Join(bundle, "rootfs") {
				t.Errorf("rootfs %q", got)
			}
			if st, _ := os.Stat(filepath.Join(bundle, "config.json")); st.Mode().Perm() != 0o600 {
				t.Errorf("mode %v", st.Mode())
			}
		})
	}
}

func TestBundleDefaultsToCwd(t *testing.T) {
	h := newHarness(t)
	bundle := writeBundle(t, gpuSpec)
	t.Chdir(bundle)
	if code := h.run("create", "id"); code != 0 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	if !strings.Contains(string(readFile(t, filepath.Join(bundle, "config.json"))), "/dev/nvidia0") {
		t.Error("spec in cwd not edited")
	}
}

func TestAbsoluteRootPath(t *testing.T) {
	h := newHarness(t)
	root := t.TempDir()
	bundle := writeBundle(t, strings.Replace(gpuSpec, `"path": "rootfs"`, `"path": "`+root+`/"`, 1))
	if code := h.run("create", "-b", bundle, "id"); code != 0 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	if got := h.planner.calls[0].Rootfs; got != root {
		t.Errorf("rootfs %q, want %q", got, root)
	}
}

func TestNonGPUContainerUntouched(t *testing.T) {
	h := newHarness(t)
	bundle := writeBundle(t, plainSpec)
	path := filepath.Join(bundle, "config.json")
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if code := h.run("create", "--bundle", bundle, "id"); code != 0 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	if got := readFile(t, path); string(got) != plainSpec {
		t.Errorf("spec changed: %s", got)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(old) {
		t.Error("spec rewritten")
	}
	if !h.exec.called {
		t.Error("runtime not exec'd")
	}
}

func TestOtherCommandsPassThrough(t *testing.T) {
	for _, args := range [][]string{
		{"state", "id"}, {"start", "id"}, {"delete", "--force", "id"}, {"kill", "id", "9"},
		{"exec", "--process", "/p.json", "id"}, {"ps", "--format", "json", "id"}, {"features"},
		{"spec"}, {"--help"}, {"list"}, {"update", "--resources=-", "id"}, {"restore", "--bundle", "B", "id"},
		{"--no-such-global", "state", "id"}, {"events", "--stats", "id"}, {},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			h := newHarness(t)
			// A malformed spec in the bundle and the cwd proves it is not read.
			bundle := writeBundle(t, "{not json")
			t.Chdir(bundle)
			args := slices.Clone(args)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "B", bundle)
			}
			if code := h.run(args...); code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			if want := append([]string{h.runc}, args...); !slices.Equal(h.exec.argv, want) {
				t.Errorf("argv %q, want %q", h.exec.argv, want)
			}
			if len(h.planner.calls) != 0 {
				t.Error("planner called")
			}
			if h.stdout.Len() != 0 || h.stderr.Len() != 0 {
				t.Errorf("output %q %q", h.stdout.String(), h.stderr.String())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, flag := range []string{"--version", "-v", "-version"} {
		h := newHarness(t)
		if code := h.run(flag); code != 0 {
			t.Fatalf("exit %d", code)
		}
		if !strings.HasPrefix(h.stdout.String(), "NVIDIA Container Runtime version test\n") {
			t.Errorf("banner %q", h.stdout.String())
		}
		if !slices.Equal(h.exec.argv, []string{h.runc, flag}) {
			t.Errorf("argv %q", h.exec.argv)
		}
	}
}

// logLines returns the JSON lines of a --log file.
func logLines(t *testing.T, path string) []map[string]string {
	t.Helper()
	var out []map[string]string
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	for sc.Scan() {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		args    []string
		setup   func(h *harness)
		wantMsg []string
	}{
		{"malformed spec", `{"ociVersion": "1.2.0", "process": {"env": ["A=B",]}}`, []string{"create", "--bundle", "BUNDLE", "id"}, nil,
			[]string{"BUNDLE/config.json", "line 1, column 51"}},
		{"wrong field type", `{"ociVersion": "1.2.0", "process": {"env": "A=B"}}`, []string{"run", "-b", "BUNDLE", "id"}, nil,
			[]string{"BUNDLE/config.json", "process.env"}},
		{"missing spec", "", []string{"create", "--bundle", "BUNDLE/nope", "id"}, nil, []string{"BUNDLE/nope/config.json"}},
		{"no root", `{"ociVersion": "1.2.0", "process": {"cwd": "/", "args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=all"]}}`,
			[]string{"create", "--bundle", "BUNDLE", "id"}, nil, []string{"root.path"}},
		{"planner error", gpuSpec, []string{"create", "--bundle", "BUNDLE", "id"},
			func(h *harness) {
				h.planner.err = errors.New("requirement not met: cuda>=13.1, host driver supports CUDA 13.0")
			},
			[]string{"cuda>=13.1"}},
		{"no runtime", gpuSpec, []string{"create", "--bundle", "BUNDLE", "id"},
			func(h *harness) {
				h.rt.LoadConfig = func(*app.Env) (*config.Config, error) {
					c := config.Default()
					c.Runtime.Runtimes = []string{"no-such-runtime-1", "/no/such/runtime-2"}
					return c, nil
				}
			}, []string{"no low-level runtime found", "no-such-runtime-1"}},
		{"config error", gpuSpec, []string{"create", "--bundle", "BUNDLE", "id"},
			func(h *harness) {
				h.rt.LoadConfig = func(*app.Env) (*config.Config, error) { return nil, errors.New("config /etc/x.toml: bad key") }
			}, []string{"/etc/x.toml"}},
		{"bundle without value", gpuSpec, []string{"create", "id", "--bundle"}, nil, []string{"needs a value"}},
		{"relative mount in plan", gpuSpec, []string{"create", "--bundle", "BUNDLE", "id"},
			func(h *harness) {
				h.rt.planner = preparerFunc(func(context.Context, input) (*plan.Plan, error) {
					p := testPlan()
					p.Mounts[0].Source = "relative/lib.so"
					return p, nil
				})
			}, []string{"relative/lib.so"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if tt.setup != nil {
				tt.setup(h)
			}
			bundle := t.TempDir()
			if tt.spec != "" {
				bundle = writeBundle(t, tt.spec)
			}
			logFile := filepath.Join(t.TempDir(), "log.json")
			args := []string{"--root", "/run/x", "--log", logFile, "--log-format", "json"}
			for _, a := range tt.args {
				args = append(args, strings.ReplaceAll(a, "BUNDLE", bundle))
			}
			before, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
			if code := h.run(args...); code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			if h.exec.called {
				t.Error("runtime exec'd after an error")
			}
			after, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
			if !bytes.Equal(before, after) {
				t.Error("bundle modified")
			}
			entries, _ := os.ReadDir(bundle)
			for _, e := range entries {
				if e.Name() != "config.json" && e.Name() != "rootfs" {
					t.Errorf("left in bundle: %s", e.Name())
				}
			}
			lines := logLines(t, logFile)
			if len(lines) != 1 {
				t.Fatalf("log lines %v", lines)
			}
			l := lines[0]
			if l["level"] != "error" {
				t.Errorf("level %q", l["level"])
			}
			if _, err := time.Parse(time.RFC3339, l["time"]); err != nil {
				t.Errorf("time %q: %v", l["time"], err)
			}
			for _, w := range tt.wantMsg {
				w = strings.ReplaceAll(w, "BUNDLE", bundle)
				if !strings.Contains(l["msg"], w) {
					t.Errorf("log msg %q does not contain %q", l["msg"], w)
				}
				if !strings.Contains(h.stderr.String(), w) {
					t.Errorf("stderr %q does not contain %q", h.stderr.String(), w)
				}
			}
		})
	}
}

func TestTextLogFormat(t *testing.T) {
	h := newHarness(t)
	h.planner.err = errors.New("boom")
	bundle := writeBundle(t, gpuSpec)
	logFile := filepath.Join(t.TempDir(), "log")
	if code := h.run("--log", logFile, "create", "-b", bundle, "id"); code != 1 {
		t.Fatalf("exit %d", code)
	}
	got := string(readFile(t, logFile))
	if !strings.Contains(got, "level=error") || !strings.Contains(got, "msg=boom") || !strings.HasPrefix(got, "time=") {
		t.Errorf("text log %q", got)
	}
}

func TestDebugLogFromConfig(t *testing.T) {
	h := newHarness(t)
	debug := filepath.Join(t.TempDir(), "runtime.log")
	load := h.rt.LoadConfig
	h.rt.LoadConfig = func(e *app.Env) (*config.Config, error) {
		c, err := load(e)
		c.Runtime.Debug, c.Runtime.LogLevel = debug, "debug"
		return c, err
	}
	bundle := writeBundle(t, gpuSpec)
	if code := h.run("create", "-b", bundle, "id"); code != 0 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	got := string(readFile(t, debug))
	for _, w := range []string{"level=info", "injected GPU access", "level=debug", "exec low-level runtime"} {
		if !strings.Contains(got, w) {
			t.Errorf("debug log lacks %q:\n%s", w, got)
		}
	}
	// Nothing goes to a --log file unless there is a warning or an error.
	logFile := filepath.Join(t.TempDir(), "log.json")
	h2 := newHarness(t)
	if code := h2.run("--log", logFile, "create", "-b", writeBundle(t, gpuSpec), "id"); code != 0 {
		t.Fatal(code)
	}
	if _, err := os.Stat(logFile); err == nil {
		t.Errorf("--log written on success: %s", readFile(t, logFile))
	}
}

func TestHookPathFoundNextToProgram(t *testing.T) {
	h := newHarness(t)
	h.rt.HookPath = ""
	bin := t.TempDir()
	hook := writeExecutable(t, filepath.Join(bin, "nvidia-cdi-hook"), "#!/bin/sh\n")
	bundle := writeBundle(t, gpuSpec)
	e := &app.Env{Args: []string{filepath.Join(bin, "nvidia-container-runtime"), "create", "-b", bundle, "id"},
		Stdout: &h.stdout, Stderr: &h.stderr, Environ: []string{"PATH=/nonexistent"}}
	if code := h.rt.Run(e); code != 0 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	doc, err := ocispec.Load(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := doc.Spec().Hooks.CreateContainer[0].Path; got != hook {
		t.Errorf("hook path %q, want %q", got, hook)
	}
}

func TestFindRuntime(t *testing.T) {
	dir := t.TempDir()
	runc := writeExecutable(t, filepath.Join(dir, "nctk-test-runc"), "#!/bin/sh\n")
	crun := writeExecutable(t, filepath.Join(dir, "nctk-test-crun"), "#!/bin/sh\n")
	if err := os.WriteFile(filepath.Join(dir, "noexec"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "self")
	if err := os.Symlink(runc, self); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cands []string
		path  string
		self  string
		want  string
	}{
		{[]string{"nctk-test-runc", "nctk-test-crun"}, dir, "", runc},
		{[]string{"nope", "nctk-test-crun"}, dir, "", crun},
		{[]string{"noexec", "nctk-test-crun"}, dir, "", crun},
		{[]string{crun, "nctk-test-runc"}, "", "", crun},
		{[]string{"nctk-test-runc", "nctk-test-crun"}, dir, self, crun}, // runc is this program: skipped
		{[]string{"", "nctk-test-crun"}, "/nonexistent:" + dir, "", crun},
	}
	for _, tt := range tests {
		got, err := findRuntime(tt.cands, tt.path, tt.self)
		if err != nil || got != tt.want {
			t.Errorf("findRuntime(%q, %q) = %q, %v; want %q", tt.cands, tt.path, got, err, tt.want)
		}
	}
	if _, err := findRuntime(nil, dir, ""); err == nil {
		t.Error("empty list accepted")
	}
	if got, err := findRuntime([]string{"runc"}, "", ""); err != nil || !filepath.IsAbs(got) {
		t.Logf("runc from the standard directories: %q, %v", got, err)
	}
	if _, err := findRuntime([]string{"/nonexistent/runc"}, dir, ""); err == nil {
		t.Error("missing path accepted")
	}
}

// hostLdconfigPath is the --ldconfig-path the runtime gives update-ldcache.
func hostLdconfigPath(c *config.Config) string {
	l, err := c.HostLdconfig()
	if err != nil {
		return "error: " + err.Error()
	}
	return l.Path
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.toml")
	writeExecutable(t, cfgFile, `
unknown-key = 1
[nvidia-container-cli]
ldconfig = "@/sbin/ldconfig.real"
[nvidia-container-runtime]
debug = "/var/log/nvidia-container-runtime.log"
log-level = "debug"
runtimes = ["crun", "/usr/bin/runc"]
`)
	c, err := loadConfig(&app.Env{Environ: []string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + cfgFile}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Runtime.Runtimes, []string{"crun", "/usr/bin/runc"}) || c.Runtime.Debug != "/var/log/nvidia-container-runtime.log" ||
		hostLdconfigPath(c) != "/sbin/ldconfig.real" || c.Path != cfgFile || len(c.Warnings) == 0 {
		t.Errorf("config %+v", c)
	}
	// Missing file: defaults, unless named explicitly.
	c, err = loadConfig(&app.Env{Environ: []string{"XDG_CONFIG_HOME=" + dir}})
	if err != nil || !slices.Equal(c.Runtime.Runtimes, []string{"runc", "crun"}) {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	if _, err := loadConfig(&app.Env{Environ: []string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + filepath.Join(dir, "nope.toml")}}); err == nil {
		t.Error("missing explicit config accepted")
	}
	writeExecutable(t, cfgFile, "[nvidia-container-runtime\n")
	if _, err := loadConfig(&app.Env{Environ: []string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + cfgFile}}); err == nil || !strings.Contains(err.Error(), cfgFile) {
		t.Errorf("malformed config: %v", err)
	}
}

// checkRootfsDone asserts that testPlan's symlink, ld.so.cache and
// ld.so.conf drop-in are in the rootfs.
func checkRootfsDone(t *testing.T, rootfs string) {
	t.Helper()
	if l, err := os.Readlink(filepath.Join(rootfs, "usr/lib/x86_64-linux-gnu/libcuda.so.1")); err != nil || l != "libcuda.so.535.104.05" {
		t.Errorf("symlink in rootfs: %q, %v", l, err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "etc/ld.so.cache")); err != nil {
		t.Errorf("ld.so.cache not written: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(rootfs, "etc/ld.so.conf.d/00-nctk.conf")); err != nil || !strings.Contains(string(b), "/usr/lib/x86_64-linux-gnu\n") {
		t.Errorf("ld.so.conf drop-in: %q, %v", b, err)
	}
}

// TestProcViewHook: the createContainer hook (for the proc view only) is
// emitted when the host kernel shows /proc/driver/nvidia, or when the spec
// mounts no procfs (the hook decides on the image); otherwise the spec gets
// no hook at all and no nvidia-cdi-hook is needed; the symlinks and the
// cache are in the rootfs either way.
func TestProcViewHook(t *testing.T) {
	procSpec := strings.Replace(gpuSpec, `"root":`, `"mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}], "root":`, 1)
	for _, tc := range []struct {
		name     string
		spec     string
		hostProc bool
		noProc   bool
		want     bool
	}{
		{"driver loaded", procSpec, true, false, true},
		{"no driver in kernel", procSpec, false, false, false},
		{"no driver, no procfs mount", gpuSpec, false, false, true},
		{"no proc view in plan", procSpec, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if !tc.hostProc {
				h.rt.ProcDriverDir = filepath.Join(t.TempDir(), "nope")
			}
			if tc.noProc {
				h.rt.planner = preparerFunc(func(context.Context, input) (*plan.Plan, error) {
					p := testPlan()
					p.Proc = nil
					return p, nil
				})
			}
			if !tc.want {
				h.rt.HookPath = "" // not needed: not looked up
			}
			bundle := writeBundle(t, tc.spec)
			e := &app.Env{Args: []string{"nvidia-container-runtime", "create", "-b", bundle, "id"},
				Stdout: &h.stdout, Stderr: &h.stderr, Environ: []string{"PATH=/nonexistent"}}
			if code := h.rt.Run(e); code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			doc, err := ocispec.Load(filepath.Join(bundle, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cc []string
			if hs := doc.Spec().Hooks; hs != nil {
				for _, hk := range hs.CreateContainer {
					cc = append(cc, strings.Join(hk.Args, " "))
				}
			}
			switch {
			case tc.want && (len(cc) != 1 || !strings.HasPrefix(cc[0], hookargs.Binary+" "+hookargs.NameMountProcDriver+" ") || strings.Contains(cc[0], ";")):
				t.Errorf("createContainer hooks %q, want the proc view hook only", cc)
			case !tc.want && len(cc) != 0:
				t.Errorf("createContainer hooks %q, want none", cc)
			}
			checkRootfsDone(t, filepath.Join(bundle, "rootfs"))
		})
	}
}

// TestRootfsErrorsLeaveNothing: a failure in the rootfs step (the image
// has a file where a symlink goes; /etc is not a directory) stops before the
// runtime with config.json unchanged and the rootfs as it was (symlinks
// made before the failure removed).
func TestRootfsErrorsLeaveNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, rootfs string)
		want  string
	}{
		{"file at symlink", func(t *testing.T, rootfs string) {
			mustWrite(t, filepath.Join(rootfs, "usr/lib/x86_64-linux-gnu/libcuda.so.1"), "image file")
		}, "libcuda.so.1"},
		{"etc not a directory", func(t *testing.T, rootfs string) {
			mustWrite(t, filepath.Join(rootfs, "etc"), "not a dir")
		}, "/etc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			bundle := writeBundle(t, gpuSpec)
			rootfs := filepath.Join(bundle, "rootfs")
			tc.setup(t, rootfs)
			var before []string
			_ = filepath.WalkDir(rootfs, func(p string, _ os.DirEntry, _ error) error { before = append(before, p); return nil })
			spec := readFile(t, filepath.Join(bundle, "config.json"))
			if code := h.run("create", "-b", bundle, "id"); code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			if h.exec.called {
				t.Error("runtime exec'd after an error")
			}
			if !strings.Contains(h.stderr.String(), tc.want) {
				t.Errorf("stderr %q does not name %q", h.stderr.String(), tc.want)
			}
			if !bytes.Equal(spec, readFile(t, filepath.Join(bundle, "config.json"))) {
				t.Error("config.json modified")
			}
			var after []string
			_ = filepath.WalkDir(rootfs, func(p string, _ os.DirEntry, _ error) error { after = append(after, p); return nil })
			if !slices.Equal(before, after) {
				t.Errorf("rootfs changed:\n%q\nwant %q", after, before)
			}
		})
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCreateTwice: applying the plan again (a restarted container) succeeds
// and changes neither config.json nor the rootfs.
func TestCreateTwice(t *testing.T) {
	h := newHarness(t)
	bundle := writeBundle(t, gpuSpec)
	rootfs := filepath.Join(bundle, "rootfs")
	if code := h.run("create", "-b", bundle, "id"); code != 0 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	spec := readFile(t, filepath.Join(bundle, "config.json"))
	cache := readFile(t, filepath.Join(rootfs, "etc/ld.so.cache"))
	if code := h.run("create", "-b", bundle, "id"); code != 0 {
		t.Fatalf("second create: exit %d: %s", code, h.stderr.String())
	}
	if !bytes.Equal(spec, readFile(t, filepath.Join(bundle, "config.json"))) {
		t.Error("second create changed config.json")
	}
	if !bytes.Equal(cache, readFile(t, filepath.Join(rootfs, "etc/ld.so.cache"))) {
		t.Error("second create changed ld.so.cache")
	}
	checkRootfsDone(t, rootfs)
}

// TestModeOverride: nvidia-container-runtime.cdi and .legacy plan in their
// mode whatever config.toml says; the plain name keeps the config's.
func TestModeOverride(t *testing.T) {
	tests := []struct{ override, want string }{
		{config.ModeCDI, config.ModeCDI},
		{config.ModeLegacy, config.ModeLegacy},
		{"", "csv"},
	}
	for _, tc := range tests {
		h := newHarness(t)
		load := h.rt.LoadConfig
		h.rt.LoadConfig = func(e *app.Env) (*config.Config, error) {
			c, err := load(e)
			c.Runtime.Mode = "csv"
			return c, err
		}
		h.rt.ModeOverride = tc.override
		if code := h.run("create", "-b", writeBundle(t, gpuSpec), "id"); code != 0 {
			t.Fatalf("%q: exit %d: %s", tc.override, code, h.stderr.String())
		}
		if got := h.planner.calls[0].Config.Runtime.Mode; got != tc.want {
			t.Errorf("override %q: planned in mode %q, want %q", tc.override, got, tc.want)
		}
	}
}
