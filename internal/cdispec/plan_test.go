package cdispec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/cdiedit"
	"github.com/nctk/nctk/internal/ocispec"
)

// TestPlanForThroughOCISpec follows the runtime's CDI mode: device names
// resolved into a plan, applied by the same spec editor as the legacy path.
func TestPlanForThroughOCISpec(t *testing.T) {
	dir := specDir(t)
	tests := []struct {
		name    string
		devs    []string
		nodes   []string
		absent  []string
		wantErr bool
	}{
		{name: "GPU 0", devs: []string{"nvidia.com/gpu=0"},
			nodes: []string{"/dev/nvidiactl", "/dev/nvidia0"}, absent: []string{"/dev/nvidia2"}},
		{name: "all", devs: []string{"nvidia.com/gpu=all"}, nodes: []string{"/dev/nvidia0", "/dev/nvidia2"}},
		{name: "unknown device", devs: []string{"nvidia.com/gpu=9"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanFor(tc.devs, []string{dir}, "")
			if tc.wantErr {
				var ue *UnresolvedError
				if !errors.As(err, &ue) {
					t.Fatalf("PlanFor error = %v, want *UnresolvedError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			doc, err := ocispec.Parse("config.json", []byte(`{"ociVersion":"1.2.0","process":{"args":["sh"],"env":["PATH=/bin"],"cwd":"/","x-unknown":1},"root":{"path":"rootfs"},"linux":{}}`))
			if err != nil {
				t.Fatal(err)
			}
			if err := ocispec.Apply(doc, p, ocispec.HookConfig{EditCDI: cdiedit.Apply}); err != nil {
				t.Fatal(err)
			}
			s := doc.Spec()
			var nodes []string
			for _, d := range s.Linux.Devices {
				nodes = append(nodes, d.Path)
			}
			for _, n := range tc.nodes {
				if !slices.Contains(nodes, n) {
					t.Errorf("device %s missing from %v", n, nodes)
				}
			}
			for _, n := range tc.absent {
				if slices.Contains(nodes, n) {
					t.Errorf("device %s injected, not requested", n)
				}
			}
			if len(s.Linux.Resources.Devices) != len(s.Linux.Devices) {
				t.Errorf("%d cgroup rules for %d devices", len(s.Linux.Resources.Devices), len(s.Linux.Devices))
			}
			if !slices.Contains(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=void") {
				t.Errorf("env %v lacks NVIDIA_VISIBLE_DEVICES=void", s.Process.Env)
			}
			if s.Hooks == nil || len(s.Hooks.CreateContainer) == 0 {
				t.Fatalf("no createContainer hooks from the spec")
			}
			for _, h := range s.Hooks.CreateContainer {
				for _, kv := range h.Env {
					if strings.HasPrefix(kv, "LD_") {
						t.Errorf("hook env %v", h.Env)
					}
				}
			}
			data, err := doc.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), `"x-unknown"`) {
				t.Errorf("unknown field dropped: %s", data)
			}
		})
	}
}
