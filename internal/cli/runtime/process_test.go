package runtime

// Tests that run the wrapper as a real process: the test binary re-executes
// itself in "child" mode (TestMain), where it is nvidia-container-runtime
// with a plan read from a file, and really execs the low-level runtime — a
// recording script, or the real runc.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
)

// Environment of the child mode.
const (
	childEnv     = "NCTK_RUNTIME_TEST_CHILD"      // "1": run as nvidia-container-runtime
	childPlanEnv = "NCTK_RUNTIME_TEST_PLAN"       // JSON plan file, for containers requesting GPUs
	childHookEnv = "NCTK_RUNTIME_TEST_HOOK"       // hook binary path
	childErrEnv  = "NCTK_RUNTIME_TEST_PLAN_ERROR" // planner error message
	childProcEnv = "NCTK_RUNTIME_TEST_PROC"       // Runtime.ProcDriverDir ("" for the default)
	childRealEnv = "NCTK_RUNTIME_TEST_REAL"       // "1": the production planner (config from the config file)
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain())
	}
	if filepath.Base(os.Args[0]) == hookargs.Binary {
		os.Exit(hookRecorder())
	}
	os.Exit(m.Run())
}

// hookRecord is the file hookRecorder writes in its working directory.
const hookRecord = "nctk-hook.out"

// hookRecorder stands in for nvidia-cdi-hook: it records its arguments,
// working directory (the container rootfs for a createContainer hook) and
// exact environment into hookRecord there.
func hookRecorder() int {
	cwd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := "args: " + strings.Join(os.Args[1:], " ") + "\ncwd: " + cwd + "\n" + strings.Join(os.Environ(), "\n") + "\n"
	if err := os.WriteFile(filepath.Join(cwd, hookRecord), []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func childMain() int {
	r := New()
	r.HookPath = os.Getenv(childHookEnv)
	r.ProcDriverDir = os.Getenv(childProcEnv)
	if os.Getenv(childRealEnv) == "1" {
		r.planner = defaultPlanner()
		return r.Run(app.FromOS())
	}
	r.planner = preparerFunc(func(_ context.Context, in input) (*plan.Plan, error) {
		if msg := os.Getenv(childErrEnv); msg != "" {
			return nil, errors.New(msg)
		}
		if !requestsGPUs(in.Spec) {
			return nil, nil
		}
		data, err := os.ReadFile(os.Getenv(childPlanEnv))
		if err != nil {
			return nil, err
		}
		var p plan.Plan
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, err
		}
		return &p, nil
	})
	return r.Run(app.FromOS())
}

// fakeRuntimeScript records argv, cwd, the exact environment (as the kernel
// gave it), stdin for `update`, and the bundle's config.json at exec time.
const fakeRuntimeScript = `#!/bin/sh
rec="$FAKE_REC"
printf '%s\0' "$0" "$@" > "$rec/argv"
pwd > "$rec/cwd"
cat /proc/$$/environ > "$rec/env"
for a in "$@"; do [ "$a" = update ] && cat > "$rec/stdin"; done
if [ -n "$FAKE_BUNDLE" ] && [ -f "$FAKE_BUNDLE/config.json" ]; then cp "$FAKE_BUNDLE/config.json" "$rec/config.json"; fi
echo "fake-runc stdout"
echo "fake-runc stderr" >&2
exit "${FAKE_EXIT:-0}"
`

type child struct {
	t        *testing.T
	bin      string
	runtime  string
	rec      string
	bundle   string
	planFile string
	cfgFile  string
}

func newChild(t *testing.T, spec string) *child {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &child{t: t, bin: bin, rec: filepath.Join(dir, "rec"), bundle: writeBundle(t, spec)}
	if err := os.Mkdir(c.rec, 0o755); err != nil {
		t.Fatal(err)
	}
	c.runtime = writeExecutable(t, filepath.Join(dir, "fake-runc"), fakeRuntimeScript)
	c.cfgFile = filepath.Join(dir, "config.toml")
	c.writeConfig(c.runtime)
	c.planFile = filepath.Join(dir, "plan.json")
	p := testPlan()
	p.Proc = nil
	c.writePlan(p)
	return c
}

func (c *child) writeConfig(runtimes ...string) {
	q, _ := json.Marshal(runtimes)
	toml := fmt.Sprintf("[nvidia-container-runtime]\nruntimes = %s\n", q)
	if err := os.WriteFile(c.cfgFile, []byte(toml), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

func (c *child) writePlan(p *plan.Plan) {
	data, err := json.Marshal(p)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(c.planFile, data, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

type childResult struct {
	code           int
	stdout, stderr string
	env            []string
	dir            string
}

// run runs the wrapper as a process with args (argv[0] is
// nvidia-container-runtime) and extra environment.
func (c *child) run(stdin string, extraEnv []string, args ...string) childResult {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Args[0] = "nvidia-container-runtime"
	cmd.Dir = c.t.TempDir()
	cmd.Env = append([]string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		childEnv + "=1",
		childPlanEnv + "=" + c.planFile,
		childHookEnv + "=/usr/local/bin/nvidia-cdi-hook",
		"NVIDIA_CTK_CONFIG_FILE_PATH=" + c.cfgFile,
		"FAKE_REC=" + c.rec,
		"FAKE_BUNDLE=" + c.bundle,
		"SOME_VAR=a b\tc",
	}, extraEnv...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return childResult{code: code, stdout: stdout.String(), stderr: stderr.String(), env: cmd.Env, dir: cmd.Dir}
}

func (c *child) recorded(name string) string {
	data, err := os.ReadFile(filepath.Join(c.rec, name))
	if err != nil {
		c.t.Fatalf("fake runtime did not record %s: %v", name, err)
	}
	return string(data)
}

func nulSplit(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\x00"), "\x00")
}

func TestProcessCreateExecsRuntime(t *testing.T) {
	for _, cmd := range []string{"create", "run"} {
		t.Run(cmd, func(t *testing.T) {
			// Without --pid-file nothing is done after the create (a
			// create with one and mounts runs the low-level runtime as a
			// child: TestCreateAfterCreateWork); the low-level runtime is
			// exec'ed.
			c := newChild(t, gpuSpec)
			logFile := filepath.Join(c.bundle, "log.json")
			args := []string{"--root", "/run/nctk-test", "--log", logFile, "--log-format", "json", cmd,
				"--bundle", c.bundle, "ctr-1"}
			res := c.run("", nil, args...)
			if res.code != 0 {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", res.code, res.stdout, res.stderr)
			}
			// stdio is the runtime's only.
			if res.stdout != "fake-runc stdout\n" || res.stderr != "fake-runc stderr\n" {
				t.Errorf("stdout %q stderr %q", res.stdout, res.stderr)
			}
			if got, want := nulSplit(c.recorded("argv")), append([]string{c.runtime}, args...); !slices.Equal(got, want) {
				t.Errorf("argv %q\nwant %q", got, want)
			}
			if got := nulSplit(c.recorded("env")); !slices.Equal(got, res.env) {
				t.Errorf("env %q\nwant %q", got, res.env)
			}
			if got := strings.TrimSpace(c.recorded("cwd")); got != res.dir {
				t.Errorf("cwd %q, want %q", got, res.dir)
			}
			// The runtime saw the edited spec.
			doc, err := ocispec.Parse("seen", []byte(c.recorded("config.json")))
			if err != nil {
				t.Fatal(err)
			}
			s := doc.Spec()
			// No proc view on this host: no hook; the symlinks and the cache
			// were done in the rootfs before the runtime ran.
			if len(s.Linux.Devices) != 1 || len(s.Mounts) != 1 || s.Hooks != nil ||
				!slices.Contains(s.Process.Env, "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu") {
				t.Errorf("spec seen by the runtime: %s", c.recorded("config.json"))
			}
			checkRootfsDone(t, filepath.Join(c.bundle, "rootfs"))
			if _, err := os.Stat(logFile); err == nil {
				t.Errorf("log written on success: %s", readFile(t, logFile))
			}
		})
	}
}

func TestProcessPassThrough(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		stdin string
		exit  string
	}{
		{"state", []string{"--root", "/r", "state", "id"}, "", "0"},
		{"exit status", []string{"--root", "/r", "kill", "id", "KILL"}, "", "3"},
		{"update stdin", []string{"update", "--resources=-", "id"}, `{"memory":{"limit":1}}`, "0"},
		{"features", []string{"features"}, "", "0"},
		{"exec", []string{"--log", "/l", "exec", "--process", "/p.json", "--detach", "id"}, "", "0"},
		{"delete", []string{"delete", "--force", "id"}, "", "0"},
		{"start", []string{"start", "id"}, "", "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newChild(t, "{malformed")
			res := c.run(tt.stdin, []string{"FAKE_EXIT=" + tt.exit}, tt.args...)
			if fmt.Sprint(res.code) != tt.exit {
				t.Errorf("exit %d, want %s (stderr %s)", res.code, tt.exit, res.stderr)
			}
			if res.stdout != "fake-runc stdout\n" || res.stderr != "fake-runc stderr\n" {
				t.Errorf("stdout %q stderr %q", res.stdout, res.stderr)
			}
			if got, want := nulSplit(c.recorded("argv")), append([]string{c.runtime}, tt.args...); !slices.Equal(got, want) {
				t.Errorf("argv %q\nwant %q", got, want)
			}
			if got := nulSplit(c.recorded("env")); !slices.Equal(got, res.env) {
				t.Errorf("env %q\nwant %q", got, res.env)
			}
			if tt.stdin != "" && c.recorded("stdin") != tt.stdin {
				t.Errorf("stdin %q", c.recorded("stdin"))
			}
		})
	}
}

func TestProcessVersion(t *testing.T) {
	c := newChild(t, plainSpec)
	res := c.run("", nil, "--version")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "NVIDIA Container Runtime version ") ||
		!strings.HasSuffix(res.stdout, "\nfake-runc stdout\n") {
		t.Errorf("exit %d stdout %q", res.code, res.stdout)
	}
}

func TestProcessNonGPUContainer(t *testing.T) {
	c := newChild(t, plainSpec)
	res := c.run("", nil, "create", "-b", c.bundle, "id")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if got := readFile(t, filepath.Join(c.bundle, "config.json")); string(got) != plainSpec {
		t.Errorf("spec changed: %s", got)
	}
}

func TestProcessErrors(t *testing.T) {
	tests := []struct {
		name, spec string
		env        []string
		want       string
	}{
		{"malformed spec", `{"ociVersion": "1.2.0",,}`, nil, "config.json: malformed JSON at line 1, column 24"},
		{"requirement", gpuSpec, []string{childErrEnv + "=requirement error: unsatisfied condition: cuda>=13.1 (host driver 580.159.04 supports CUDA 13.0)"},
			"cuda>=13.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newChild(t, tt.spec)
			logFile := filepath.Join(t.TempDir(), "log.json")
			res := c.run("", tt.env, "--log", logFile, "--log-format", "json", "create", "--bundle", c.bundle, "id")
			if res.code != 1 {
				t.Fatalf("exit %d", res.code)
			}
			if res.stdout != "" || !strings.Contains(res.stderr, tt.want) {
				t.Errorf("stdout %q stderr %q", res.stdout, res.stderr)
			}
			lines := logLines(t, logFile)
			if len(lines) != 1 || lines[0]["level"] != "error" || !strings.Contains(lines[0]["msg"], tt.want) {
				t.Errorf("log %v", lines)
			}
			if _, err := os.Stat(filepath.Join(c.rec, "argv")); err == nil {
				t.Error("runtime ran after an error")
			}
			if got := readFile(t, filepath.Join(c.bundle, "config.json")); string(got) != tt.spec {
				t.Errorf("bundle changed: %s", got)
			}
		})
	}
}

// requestsGPUs reports whether NVIDIA_VISIBLE_DEVICES asks for anything (the
// test planner's stand-in for internal/request).
func requestsGPUs(s *specs.Spec) bool {
	if s == nil || s.Process == nil {
		return false
	}
	v, set := "", false
	for _, kv := range s.Process.Env {
		if val, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok {
			v, set = val, true
		}
	}
	return set && strings.TrimSpace(v) != "" && !strings.Contains(v, "void")
}
