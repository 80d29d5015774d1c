package main

import (
	"testing"

	"github.com/nctk/nctk/internal/e2e"
)

// TestLean: the hook binary links none of the libraries whose initialisers
// and pages every hook process would pay for (the CDI library and its YAML
// and validation packages, cilium/ebpf, the doctor, the engines' editors):
// the reason it is a binary of its own. An import that brings one back
// fails here.
func TestLean(t *testing.T) {
	e2e.CheckLean(t,
		"tags.cncf.io/container-device-interface/pkg/cdi",
		"go.yaml.in/yaml",
		"sigs.k8s.io/yaml",
		"github.com/cilium/ebpf",
		"github.com/nctk/nctk/internal/doctor",
		"github.com/nctk/nctk/internal/engine",
		"github.com/nctk/nctk/internal/cdispec",
		"github.com/nctk/nctk/internal/ocispec",
		// Their initialisers cost every hook start (docs/benchmarks.md,
		// twenty-second session).
		"debug/elf",
		"regexp",
	)
}

// TestOneP: a hook started without GOMAXPROCS (NVIDIA's specs name none)
// limits itself to one P; a count in its environment is left to the Go
// runtime.
func TestOneP(t *testing.T) {
	for _, tt := range []struct {
		env  string
		want int // the count oneP sets, 0 for none
	}{
		{"", 1},
		{"1", 0},
		{"8", 0},
	} {
		set := 0
		oneP(func(k string) string {
			if k != "GOMAXPROCS" {
				t.Errorf("oneP read %s", k)
			}
			return tt.env
		}, func(n int) int { set = n; return 16 })
		if set != tt.want {
			t.Errorf("GOMAXPROCS=%q: oneP set %d Ps, want %d", tt.env, set, tt.want)
		}
	}
}
