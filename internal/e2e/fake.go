package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// FakeTool is a shell-script stand-in for a binary an engine executes (a
// hook, nvidia-container-cli, a runtime...). Every invocation records its
// argv, environment, working directory, standard input and the
// config.json of its working directory (OCI hooks and runtimes run in the
// bundle), then prints FakeToolOptions.Stdout and exits with ExitCode, or
// execs FakeToolOptions.Exec with the same arguments.
type FakeTool struct {
	// Path is the script (Dir/<name>).
	Path string
	// LogDir receives one sub-directory per call.
	LogDir string
}

// FakeCall is one recorded invocation of a FakeTool.
type FakeCall struct {
	// Argv is the full argument vector, Argv[0] as the caller passed it.
	Argv []string
	// Env is the environment, KEY=VALUE.
	Env []string
	// Stdin is what the caller wrote to standard input (OCI hooks get the
	// container state JSON there).
	Stdin string
	// Cwd is the working directory.
	Cwd string
	// ConfigJSON is the content of ./config.json at call time, if there was
	// one (the bundle's OCI spec, for hooks and runtimes).
	ConfigJSON string
}

// FakeToolOptions says what a FakeTool does after recording a call.
type FakeToolOptions struct {
	// ExitCode is the exit status (when Exec is empty).
	ExitCode int
	// Stdout is printed to standard output (when Exec is empty).
	Stdout string
	// Exec, if set, is exec'ed with the call's arguments (argv[0] becomes
	// Exec), making the fake a recording wrapper, e.g. around runc. Standard
	// input is then passed through unread (Stdin stays empty).
	Exec string
}

// Getenv returns the value of key in the call's environment.
func (c FakeCall) Getenv(key string) string {
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// NewFakeTool writes an executable script named name into dir (created if
// needed), recording calls under a fresh directory of the test.
func NewFakeTool(t testing.TB, dir, name string, o FakeToolOptions) *FakeTool {
	t.Helper()
	logDir := filepath.Join(TempDir(t, "fake"), "calls")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatalf("e2e: fake tool: %v", err)
	}
	f := &FakeTool{Path: filepath.Join(dir, name), LogDir: logDir}
	var tail string
	if o.Exec != "" {
		tail = "exec " + shellQuote(o.Exec) + ` "$@"` + "\n"
	} else {
		tail = "if [ -t 0 ]; then : > \"$d/stdin\"; else cat > \"$d/stdin\"; fi\n" +
			"printf '%s' " + shellQuote(o.Stdout) + "\n" +
			"exit " + strconv.Itoa(o.ExitCode) + "\n"
	}
	script := "#!/bin/sh\n" +
		"# Fake " + name + " written by nctk's e2e harness: records each call.\n" +
		"d=$(mktemp -d " + shellQuote(logDir) + "/$(date +%s%N)-XXXXXX) || exit 99\n" +
		"printf '%s\\0' \"$0\" \"$@\" > \"$d/argv\"\n" +
		"env -0 > \"$d/env\"\n" +
		"pwd > \"$d/cwd\"\n" +
		"if [ -f config.json ]; then cp config.json \"$d/config.json\"; fi\n" +
		tail
	if err := writeFile(f.Path, []byte(script), 0o755); err != nil {
		t.Fatalf("e2e: fake tool: %v", err)
	}
	if err := os.Chmod(f.Path, 0o755); err != nil {
		t.Fatalf("e2e: fake tool: %v", err)
	}
	return f
}

// Calls returns the recorded invocations, oldest first.
func (f *FakeTool) Calls() ([]FakeCall, error) {
	ents, err := os.ReadDir(f.LogDir)
	if err != nil {
		return nil, fmt.Errorf("e2e: reading fake tool calls: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	calls := make([]FakeCall, 0, len(names))
	for _, n := range names {
		d := filepath.Join(f.LogDir, n)
		argv, err := os.ReadFile(filepath.Join(d, "argv"))
		if err != nil {
			return nil, fmt.Errorf("e2e: reading fake tool call: %w", err)
		}
		env, _ := os.ReadFile(filepath.Join(d, "env"))
		stdin, _ := os.ReadFile(filepath.Join(d, "stdin"))
		cwd, _ := os.ReadFile(filepath.Join(d, "cwd"))
		config, _ := os.ReadFile(filepath.Join(d, "config.json"))
		calls = append(calls, FakeCall{
			Argv:       splitNUL(argv),
			Env:        splitNUL(env),
			Stdin:      string(stdin),
			Cwd:        strings.TrimSuffix(string(cwd), "\n"),
			ConfigJSON: string(config),
		})
	}
	return calls, nil
}

func splitNUL(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// FakeProcDriver makes a host driver proc directory (what a loaded driver
// shows at /proc/driver/nvidia): params with ModifyDeviceFiles 1, version,
// and gpus/<bus id>/information for each of busIDs. It returns the
// directory.
func FakeProcDriver(t testing.TB, busIDs ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "proc-driver-nvidia")
	files := map[string]string{
		"params":  "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n",
		"version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03\n",
	}
	for _, id := range busIDs {
		files["gpus/"+id+"/information"] = "Model: \t\t NVIDIA H100\nBus Location: \t " + id + "\n"
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
