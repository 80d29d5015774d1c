package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// TestHookInputErrors: nvidia-container-runtime-hook prestart (what dockerd
// --gpus runs) given a malformed OCI state, or a state whose bundle has a
// malformed config.json, fails with an error naming the input and leaves
// the bundle and the image as they were. The successful path is in
// TestDocker (gpus=…).
func TestHookInputErrors(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	host := newHost(t, fixture.Spec{Layout: "multiarch", GPUs: 2})
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{NoCudaprobe: true})
	hook := tool(t, "nvidia-container-runtime-hook")

	// The "container" the states name: a process in a mount namespace of
	// its own, so that nothing could reach the test's even if the hook went
	// further than it should.
	unshare := e2e.RequireTool(t, "unshare")
	ctr := exec.Command(unshare, "--mount", "--propagation", "private", "sleep", "300")
	if err := ctr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctr.Process.Kill(); _ = ctr.Wait() })
	state := func(bundle string) string {
		data, _ := json.Marshal(specs.State{Version: specs.Version, ID: "nctk-hook", Status: "created", Pid: ctr.Process.Pid, Bundle: bundle})
		return string(data)
	}
	for _, tc := range []struct {
		name    string
		stdin   func(bundle string) string
		spec    func(orig []byte) []byte
		mention []string
	}{
		{name: "state-not-json", stdin: func(string) string { return "{\"ociVersion\": \"1.0.2\", \"id\": " },
			mention: []string{"state"}},
		{name: "state-wrong-type", stdin: func(string) string { return `{"ociVersion":"1.0.2","id":"x","pid":"12","bundle":"/b"}` },
			mention: []string{"state", "pid"}},
		{name: "state-empty", stdin: func(string) string { return "" }, mention: []string{"state"}},
		{name: "bundle-config-malformed", stdin: state,
			spec:    func(orig []byte) []byte { return orig[:len(orig)/3] },
			mention: []string{"config.json"}},
		{name: "device-malformed", stdin: state,
			spec: func(orig []byte) []byte {
				return []byte(strings.Replace(string(orig), `"NVIDIA_VISIBLE_DEVICES=all"`, `"NVIDIA_VISIBLE_DEVICES=0,x"`, 1))
			},
			mention: []string{"x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rootfs := copyRootfs(t, image)
			bundle := e2e.MakeBundle(t, rootfs, "/bin/true")
			e2e.EditSpec(t, bundle, func(s *specs.Spec) {
				s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=all")
			})
			if tc.spec != nil {
				p := filepath.Join(bundle, "config.json")
				if err := os.WriteFile(p, tc.spec(readFile(t, p)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before, beforeRoot := snapshot(t, bundle), snapshot(t, rootfs)
			res := e2e.Run(t, e2e.RunOpts{Dir: bundle, Env: append([]string{"PATH=" + binDir + ":" + e2e.SystemPath}, host.Env...),
				Stdin: strings.NewReader(tc.stdin(bundle))}, hook, "prestart")
			if res.OK() {
				t.Fatalf("the hook succeeded, want an error")
			}
			for _, m := range tc.mention {
				if !strings.Contains(res.Stderr, m) {
					t.Errorf("the error does not mention %q:\n%s", m, res.Stderr)
				}
			}
			if strings.Contains(res.Stderr, "panic") || strings.Contains(res.Stderr, "goroutine ") {
				t.Errorf("the hook panicked:\n%s", res.Stderr)
			}
			if snapshot(t, bundle) != before || snapshot(t, rootfs) != beforeRoot {
				t.Errorf("a failed hook modified the bundle or the image")
			}
		})
	}
}
