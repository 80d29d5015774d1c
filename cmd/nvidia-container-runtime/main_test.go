package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLean: the runtime binary links none of the libraries that only other
// tools need (cilium/ebpf, the doctor, the engine editors, the CLI and the
// prestart hook): the reason it is a binary of its own. An import that
// brings one back fails here.
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
			"github.com/cilium/ebpf",
			"github.com/nctk/nctk/internal/doctor",
			"github.com/nctk/nctk/internal/engine",
			"github.com/nctk/nctk/internal/configure",
			"github.com/nctk/nctk/internal/cli/ctk",
			"github.com/nctk/nctk/internal/cli/containercli",
			"github.com/nctk/nctk/internal/cli/hook",
			"github.com/nctk/nctk/internal/cli/nvdocker",
		} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("nvidia-container-runtime links %s", d)
			}
		}
	}
}
