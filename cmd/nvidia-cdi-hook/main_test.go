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
	)
}
