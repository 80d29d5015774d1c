// Command nctk is the multi-call binary with every nctk tool. It is
// installed under the names of the tools no container create starts
// (nvidia-ctk, nvidia-docker) as links; the name it is invoked as picks the
// tool, and `nctk TOOL ARGS…` runs any tool by name. The tools a create
// starts are binaries of their own as well (nvidia-container-runtime,
// nvidia-container-runtime-hook, nvidia-cdi-hook: scripts/build.sh).
package main

import (
	"github.com/nctk/nctk/internal/entry"
	"github.com/nctk/nctk/internal/tools"
)

func main() { entry.Main(tools.Run) }
