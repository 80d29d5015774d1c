package ctk

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/fixture"
)

// TestCDIValidate generates a spec on a fixture root, changes the root as a
// driver upgrade, a GPU removal or addition or a module reload with new
// majors would, and checks that `cdi validate` exits 0 on the fresh spec
// and 1 on the stale one, naming the file, what differs and the fix.
func TestCDIValidate(t *testing.T) {
	cases := []struct {
		name string
		// change rebuilds or edits the root at dir after the spec was
		// generated; nil leaves it fresh.
		change func(t *testing.T, dir string, r *fixture.Root)
		want   []string // substrings of stdout (besides the file)
	}{
		{name: "fresh"},
		{name: "library version changed", change: func(t *testing.T, dir string, _ *fixture.Root) {
			rebuild(t, dir, fixture.Spec{Layout: fixture.Tesla470, GPUs: 2})
		}, want: []string{"it mounts driver 535.", "the live driver is 470.", "paths it names do not exist: "}},
		{name: "GPU removed", change: func(t *testing.T, dir string, _ *fixture.Root) {
			rebuild(t, dir, fixture.Spec{GPUs: 1})
		}, want: []string{"GPU 1 is gone"}},
		{name: "GPU added", change: func(t *testing.T, dir string, _ *fixture.Root) {
			rebuild(t, dir, fixture.Spec{GPUs: 3})
		}, want: []string{"was added: no device of the spec gives it"}},
		{name: "device major changed", change: func(t *testing.T, dir string, r *fixture.Root) {
			if !r.DeviceNodes {
				t.Skip("fixture has no device nodes: " + r.NoDeviceNodesReason)
			}
			p := filepath.Join(dir, "dev/nvidia-uvm")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mknod(p, syscall.S_IFCHR|0o666, int(unix.Mkdev(r.Majors.UVM+1, 0))); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"/dev/nvidia-uvm is device"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "root")
			r, err := fixture.BuildAt(dir, fixture.Spec{GPUs: 2})
			if err != nil {
				t.Skipf("fixture root: %v", err)
			}
			hook := filepath.Join(t.TempDir(), "nvidia-cdi-hook")
			if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			specDir := t.TempDir()
			specFile := filepath.Join(specDir, "nvidia.yaml")
			if _, stderr, code := cdiRun(t, nil, "cdi", "generate", "--driver-root="+dir,
				"--nvidia-cdi-hook-path="+hook, "--output="+specFile); code != 0 {
				t.Fatalf("generate: exit %d: %s", code, stderr)
			}
			if tc.change != nil {
				tc.change(t, dir, r)
			}
			stdout, stderr, code := cdiRun(t, nil, "cdi", "validate", "--spec-dir="+specDir)
			if tc.change == nil {
				if code != 0 || !strings.Contains(stdout, specFile+": ok") {
					t.Fatalf("fresh spec: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
				}
				return
			}
			if code != 1 {
				t.Errorf("stale spec: exit %d, want 1", code)
			}
			for _, w := range append([]string{specFile + ": stale", "fix: sudo nvidia-ctk cdi generate --output=" + specFile + " --driver-root=" + dir}, tc.want...) {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q", w)
				}
			}
			if !strings.Contains(stderr, "1 of 1 CDI spec(s) stale") {
				t.Errorf("stderr lacks the summary: %s", stderr)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
		})
	}
}

// rebuild replaces the fixture root at dir with a root built from s.
func rebuild(t *testing.T, dir string, s fixture.Spec) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := fixture.BuildAt(dir, s); err != nil {
		t.Fatal(err)
	}
}

// TestCDIValidateFreshLayouts: a spec just generated is fresh on every
// fixture layout, with MIG devices, IPC sockets, 32-bit libraries and
// firmware, devices named by index and type-index (no false alarm). UUID
// names are TestCDIValidate's: with MIG devices they would need the driver
// probe, which a fixture root cannot serve.
func TestCDIValidateFreshLayouts(t *testing.T) {
	for _, layout := range fixture.Layouts() {
		t.Run(string(layout), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "root")
			if _, err := fixture.BuildAt(dir, fixture.Spec{Layout: layout, GPUs: 3, MIG: true, IPC: true, Compat32: true, Firmware: true}); err != nil {
				t.Skipf("fixture root: %v", err)
			}
			hook := filepath.Join(t.TempDir(), "nvidia-cdi-hook")
			if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			specDir := t.TempDir()
			if _, stderr, code := cdiRun(t, nil, "cdi", "generate", "--driver-root="+dir, "--device-name-strategy=index,type-index",
				"--nvidia-cdi-hook-path="+hook, "--output="+filepath.Join(specDir, "nvidia.yaml")); code != 0 {
				t.Fatalf("generate: exit %d: %s", code, stderr)
			}
			if stdout, stderr, code := cdiRun(t, nil, "cdi", "validate", "--spec-dir="+specDir); code != 0 {
				t.Fatalf("fresh spec: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
		})
	}
}
