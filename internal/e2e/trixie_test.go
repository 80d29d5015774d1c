package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestEngineRootLookTool(t *testing.T) {
	lower := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(lower, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "usr/bin/tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "usr/bin/data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// An absolute link, dangling on the host: its target is inside the root.
	if err := os.Symlink("/etc/alternatives/alt", filepath.Join(lower, "usr/sbin/alt")); err != nil {
		t.Fatal(err)
	}
	r := &EngineRoot{Lower: lower}
	for _, tc := range []struct {
		name, want string
	}{
		{"tool", "/usr/bin/tool"},
		{"alt", "/usr/sbin/alt"},
		{"/usr/bin/tool", "/usr/bin/tool"},
		{"data", ""},
		{"missing", ""},
		{"/usr/bin/missing", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.LookTool(tc.name)
			if tc.want == "" {
				if err == nil {
					t.Errorf("LookTool(%q) = %q, want an error", tc.name, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("LookTool(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
			}
		})
	}
}

func TestEngineRootCommand(t *testing.T) {
	var host *EngineRoot
	if got := host.Command("docker", "ps"); !slices.Equal(got, []string{"docker", "ps"}) {
		t.Errorf("nil root: Command = %q, want the argv itself", got)
	}
	r := &EngineRoot{pid: 42, nsenter: "/usr/bin/nsenter"}
	want := []string{"/usr/bin/nsenter", "--target", "42", "--mount", "--root", "--wd", "--", "docker", "ps"}
	if got := r.Command("docker", "ps"); !slices.Equal(got, want) {
		t.Errorf("Command = %q, want %q", got, want)
	}
}
