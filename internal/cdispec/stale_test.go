package cdispec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if _, err := Resolve([]string{"nvidia.com/gpu=0"}, []string{specDir}); err != nil {
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
	_, err = Resolve([]string{"nvidia.com/gpu=1"}, []string{specDir})
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
