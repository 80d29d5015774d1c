package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

const testSpec = `cdiVersion: 0.6.0
kind: example.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/null
containerEdits:
  env:
  - FROM_SPEC=1
  hooks:
  - hookName: createContainer
    path: /usr/bin/true
`

func TestRun(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gpu.yaml"), []byte(testSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	const config = `{"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["A=1"]},
	 "hooks": {"createRuntime": [{"path": "/bin/own"}]}}`
	for _, tc := range []struct {
		name      string
		args      []string
		in        string
		wantHooks []string // createContainer then createRuntime hook paths
		wantErr   string
	}{
		{name: "inject", args: []string{dir, "example.com/gpu=0"}, in: config, wantHooks: []string{"/usr/bin/true", "/bin/own"}},
		{name: "drop hooks", args: []string{"-drop-hooks", dir, "example.com/gpu=0"}, in: config, wantHooks: []string{"/bin/own"}},
		{name: "unknown device", args: []string{dir, "example.com/gpu=1"}, in: config, wantErr: "unresolvable CDI devices example.com/gpu=1"},
		{name: "bad config", args: []string{dir, "example.com/gpu=0"}, in: "{", wantErr: "config.json on stdin"},
		{name: "no device", args: []string{dir}, in: config, wantErr: "usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(tc.args, strings.NewReader(tc.in), &out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s specs.Spec
			if err := json.Unmarshal(out.Bytes(), &s); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range append(append([]specs.Hook{}, s.Hooks.CreateContainer...), s.Hooks.CreateRuntime...) {
				got = append(got, h.Path)
			}
			if strings.Join(got, ",") != strings.Join(tc.wantHooks, ",") {
				t.Errorf("hooks %v, want %v", got, tc.wantHooks)
			}
			if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/null" || !strings.Contains(strings.Join(s.Process.Env, " "), "FROM_SPEC=1") {
				t.Errorf("edits not applied: devices %v env %v", s.Linux.Devices, s.Process.Env)
			}
		})
	}
}

// TestCountStarts: the command runs, its output passes through and the
// count follows it (starts.During counts; its own test checks the
// counting), a failing command is an error, no command a usage error.
func TestCountStarts(t *testing.T) {
	watched := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(watched, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"-count-starts", watched, "/bin/sh", "-c", "echo ran"}, strings.NewReader(""), &out); err != nil || out.String() != "ran\nhook-starts=0\n" {
		t.Errorf("count-starts: %q, %v", out.String(), err)
	}
	if err := run([]string{"-count-starts", watched, "/bin/sh", "-c", "exit 3"}, strings.NewReader(""), &bytes.Buffer{}); err == nil {
		t.Error("a failing command: no error")
	}
	if err := run([]string{"-count-starts", watched}, strings.NewReader(""), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("no command: %v", err)
	}
}
