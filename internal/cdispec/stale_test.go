package cdispec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/planner"
)

// TestResolveNamesStaleSpec: a device a stale spec lacks (a GPU added after
// the spec was written) fails resolution with the message `cdi validate`
// gives, naming the spec and the command that rewrites it.
func TestResolveNamesStaleSpec(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	if _, err := fixture.BuildAt(dir, fixture.Spec{GPUs: 1}); err != nil {
		t.Skipf("fixture root: %v", err)
	}
	hook := filepath.Join(t.TempDir(), "nvidia-cdi-hook")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec, err := Generate(context.Background(), planner.Job{Driver: discover.Options{Root: dir}},
		Options{NoProbe: true, Hook: ocispec.HookConfig{Path: hook}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := Encode(spec, FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	specDir := t.TempDir()
	file := filepath.Join(specDir, "nvidia.yaml")
	if err := WriteFile(file, data); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ResolveCached([]string{"nvidia.com/gpu=0"}, []string{specDir}, ""); err != nil {
		t.Fatalf("fresh spec: %v", err)
	}
	r, err := StaleSpecs([]string{specDir}, StaleOptions{})
	if err != nil || len(r.Specs) != 1 || len(r.Stale) != 0 || len(r.Errors) != 0 {
		t.Fatalf("fresh spec: report %+v, %v", r, err)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := fixture.BuildAt(dir, fixture.Spec{GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	_, _, err = ResolveCached([]string{"nvidia.com/gpu=1"}, []string{specDir}, "")
	var ue *UnresolvedError
	if !errors.As(err, &ue) {
		t.Fatalf("Resolve: %v, want an UnresolvedError", err)
	}
	if len(ue.Stale) != 1 || ue.Stale[0].Spec != file {
		t.Fatalf("Stale = %+v, want the spec %s", ue.Stale, file)
	}
	for _, w := range []string{"CDI spec " + file + " is stale", "was added", "run: sudo nvidia-ctk cdi generate --output=" + file + " --driver-root=" + dir} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
}

// TestCheckStale compares hand-made specs with a hand-made live system
// (files in a temporary directory, /dev/null as the device node, a driver
// value), one difference per case; needs no fixture driver.
func TestCheckStale(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libcuda.so.535.261.03")
	hook := filepath.Join(dir, "nvidia-cdi-hook")
	noexec := filepath.Join(dir, "not-executable")
	for name, mode := range map[string]os.FileMode{lib: 0o644, hook: 0o755, noexec: 0o644} {
		if err := os.WriteFile(name, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	gpu := func(index, minor int, uuid string) discover.GPU {
		return discover.GPU{Index: index, Minor: minor, UUID: uuid}
	}
	const uuid0, uuid1 = "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111"
	live := &discover.Driver{Version: "535.261.03", LibraryVersion: "535.261.03", GPUs: []discover.GPU{gpu(0, 0, uuid0)}}
	// spec: device "0" and uuid0 on /dev/nvidia0 (host node /dev/null, 1:3).
	spec := func(edit func(s *cdi.Spec)) *cdi.Spec {
		node := func(minor int) *cdi.DeviceNode {
			return &cdi.DeviceNode{Path: "/dev/nvidia" + itoa(minor), HostPath: "/dev/null", Type: "c", Major: 1, Minor: 3}
		}
		s := &cdi.Spec{Version: "0.5.0", Kind: "nvidia.com/gpu",
			Devices: []cdi.Device{
				{Name: "0", ContainerEdits: cdi.ContainerEdits{DeviceNodes: []*cdi.DeviceNode{node(0)}}},
				{Name: uuid0, ContainerEdits: cdi.ContainerEdits{DeviceNodes: []*cdi.DeviceNode{node(0)}}},
			},
			ContainerEdits: cdi.ContainerEdits{
				Mounts: []*cdi.Mount{{HostPath: lib, ContainerPath: "/usr/lib/libcuda.so.535.261.03"}},
				Hooks:  []*cdi.Hook{{HookName: "createContainer", Path: hook}},
			}}
		if edit != nil {
			edit(s)
		}
		return s
	}
	cases := []struct {
		name string
		spec *cdi.Spec
		live *discover.Driver
		want string // substring of a problem; "" means fresh
	}{
		{name: "fresh", spec: spec(nil), live: live},
		{name: "missing mount", spec: spec(func(s *cdi.Spec) {
			s.ContainerEdits.Mounts[0].HostPath = filepath.Join(dir, "libcuda.so.520.0.1")
		}), live: live, want: "libcuda.so.520.0.1 does not exist"},
		{name: "hook not executable", spec: spec(func(s *cdi.Spec) { s.ContainerEdits.Hooks[0].Path = noexec }),
			live: live, want: "hook " + noexec + " is not executable"},
		{name: "device major changed", spec: spec(func(s *cdi.Spec) { s.Devices[0].ContainerEdits.DeviceNodes[0].Major = 195 }),
			live: live, want: "/dev/null is device 1:3, the spec gives 195:3"},
		{name: "driver upgraded", spec: spec(nil),
			live: &discover.Driver{Version: "550.54.14", LibraryVersion: "550.54.14", GPUs: live.GPUs},
			want: "it mounts driver 535.261.03 libraries, the live driver is 550.54.14"},
		{name: "GPU gone", spec: spec(nil), live: &discover.Driver{Version: "535.261.03", GPUs: []discover.GPU{gpu(0, 0, uuid1)}},
			want: "GPU " + uuid0 + " is gone"},
		{name: "GPU moved", spec: spec(nil), live: &discover.Driver{Version: "535.261.03", GPUs: []discover.GPU{gpu(0, 2, uuid0)}},
			want: "is /dev/nvidia2 now"},
		{name: "GPU added", spec: spec(nil), live: &discover.Driver{Version: "535.261.03", GPUs: []discover.GPU{gpu(0, 0, uuid0), gpu(1, 1, uuid1)}},
			want: "GPU 1 (" + uuid1 + ", /dev/nvidia1) was added"},
		{name: "other vendors: files only", spec: spec(func(s *cdi.Spec) { s.Kind = "example.com/gpu" }),
			live: &discover.Driver{Version: "550.54.14"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, "nvidia.yaml")
			e := CheckStale(tc.spec, file, Live{Driver: tc.live})
			if tc.want == "" {
				if e != nil {
					t.Fatalf("fresh spec reported stale: %v", e)
				}
				return
			}
			if e == nil {
				t.Fatalf("stale spec (%s) not reported", tc.want)
			}
			if !strings.Contains(strings.Join(e.Problems, "\n"), tc.want) {
				t.Errorf("problems %q lack %q", e.Problems, tc.want)
			}
			if e.Spec != file || e.Fix != "sudo nvidia-ctk cdi generate --output="+file {
				t.Errorf("spec %q fix %q", e.Spec, e.Fix)
			}
		})
	}
}
