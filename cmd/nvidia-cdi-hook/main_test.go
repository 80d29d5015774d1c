package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLean: the hook binary links none of the libraries whose initialisers
// and pages every hook process would pay for (the CDI library and its YAML
// and validation packages, cilium/ebpf, the doctor, the engines' editors):
// the reason it is a binary of its own. An import that brings one back
// fails here.
func TestLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list -deps: %v (the go command is needed to list the binary's packages)", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %q", out)
	}
	for _, d := range deps {
		for _, banned := range []string{
			"tags.cncf.io/container-device-interface/pkg/cdi",
			"go.yaml.in/yaml",
			"sigs.k8s.io/yaml",
			"github.com/cilium/ebpf",
			"github.com/nctk/nctk/internal/doctor",
			"github.com/nctk/nctk/internal/engine",
			"github.com/nctk/nctk/internal/cdispec",
			"github.com/nctk/nctk/internal/ocispec",
		} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("nvidia-cdi-hook links %s", d)
			}
		}
	}
}
