package main

import (
	"testing"

	"github.com/nctk/nctk/internal/e2e"
)

// TestLean: the --gpus hook binary, which runc starts on every such create,
// links the hook and the nvidia-container-cli it runs in process, no other
// tool (the runtime, nvidia-ctk's commands, nvidia-docker) nor the libraries
// only they use (the doctor, the engines' editors, the CRI client, the CDI
// spec cache, the CDI library's editor with its YAML parsers and
// validation, whose initialisers cost ~0.15 ms a start: internal/cdiedit):
// the reason it is a binary of its own.
func TestLean(t *testing.T) {
	e2e.CheckLean(t,
		"google.golang.org/grpc",
		"k8s.io/cri-api",
		"sigs.k8s.io/yaml",
		"go.yaml.in/yaml",
		"tags.cncf.io/container-device-interface/pkg/cdi",
		"github.com/nctk/nctk/internal/cdiedit",
		"github.com/nctk/nctk/internal/doctor",
		"github.com/nctk/nctk/internal/engine",
		"github.com/nctk/nctk/internal/cdispec",
		"github.com/nctk/nctk/internal/tools",
		"github.com/nctk/nctk/internal/cli/ctk",
		"github.com/nctk/nctk/internal/cli/runtime",
		"github.com/nctk/nctk/internal/cli/nvdocker",
		// Its initialisers (and the unicode tables it keeps) cost every
		// start (docs/benchmarks.md, twenty-second session).
		"regexp",
	)
}
