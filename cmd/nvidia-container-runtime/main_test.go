package main

import (
	"testing"

	"github.com/nctk/nctk/internal/e2e"
)

// TestLean: the runtime binary, which an engine starts on every create,
// links no other tool (nvidia-ctk's commands, the --gpus hook and its
// in-process configure, nvidia-docker), nor the libraries only they use
// (cilium/ebpf, the doctor, the engines' editors, the CRI client): the
// reason it is a binary of its own.
func TestLean(t *testing.T) {
	e2e.CheckLean(t,
		"github.com/cilium/ebpf",
		"google.golang.org/grpc",
		"k8s.io/cri-api",
		"github.com/nctk/nctk/internal/doctor",
		"github.com/nctk/nctk/internal/engine",
		"github.com/nctk/nctk/internal/configure",
		"github.com/nctk/nctk/internal/tools",
		"github.com/nctk/nctk/internal/cli/ctk",
		"github.com/nctk/nctk/internal/cli/hook",
		"github.com/nctk/nctk/internal/cli/containercli",
		"github.com/nctk/nctk/internal/cli/nvdocker",
	)
}
