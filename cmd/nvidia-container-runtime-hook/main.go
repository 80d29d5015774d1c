// Command nvidia-container-runtime-hook is the prestart hook `docker run
// --gpus` adds (the code of `nctk nvidia-container-runtime-hook`, which
// configures the container in process), built as a binary of its own:
// runc starts it on every such create, and without the tools it does not
// run (the runtime, nvidia-ctk's CDI, engine and doctor commands) it starts
// sooner (docs/benchmarks.md). Installed also as nvidia-container-toolkit
// (a link to it, as NVIDIA ships that name) and as nvidia-container-cli:
// the hook runs the CLI in process when the CLI it finds is this binary.
package main

import (
	"os"
	"path/filepath"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/containercli"
	"github.com/nctk/nctk/internal/cli/hook"
	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/rootfs"
)

func main() {
	// Hidden re-exec entries first: the driver probe child and the
	// in-container helpers configure re-executes this binary for.
	if driverprobe.MaybeRunChild(os.Args) || rootfs.MaybeRunChild(os.Args) {
		return
	}
	e := app.FromOS()
	if filepath.Base(e.Args[0]) == hook.CLIName {
		os.Exit(containercli.Main(e))
	}
	os.Exit(hook.Main(e))
}
