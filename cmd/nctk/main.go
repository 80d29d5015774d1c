// Command nctk is the multi-call binary behind every nctk tool. It is
// installed under NVIDIA's names (nvidia-container-runtime,
// nvidia-container-runtime-hook, nvidia-container-cli, nvidia-ctk,
// nvidia-cdi-hook, nvidia-docker) as links; the name it is invoked as picks
// the tool. `nctk TOOL ARGS…` runs a tool by name too.
package main

import (
	"os"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/rootfs"
	"github.com/nctk/nctk/internal/tools"
)

func main() {
	// Hidden re-exec entries run before anything else: the driver probe
	// child and the in-container helpers (confined ldconfig, …).
	if driverprobe.MaybeRunChild(os.Args) || rootfs.MaybeRunChild(os.Args) {
		return
	}
	os.Exit(tools.Run(app.FromOS()))
}
