// Command nvidia-container-runtime is nctk's runc wrapper (and, installed
// as nvidia-container-runtime.cdi or .legacy, the wrapper with its mode
// fixed): the code of `nctk nvidia-container-runtime`, built as a binary of
// its own. Every container create an engine sends to the nvidia runtime
// starts it, and this binary starts without the eBPF library, the doctor,
// the engine editors and the other tools the multi-call nctk links
// (docs/benchmarks.md).
package main

import (
	"os"
	"path/filepath"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/runtime"
	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/rootfs"
)

func main() {
	// The driver probe and the confined ldconfig re-execute this binary.
	if driverprobe.MaybeRunChild(os.Args) || rootfs.MaybeRunChild(os.Args) {
		return
	}
	tool, ok := runtime.Tools()[filepath.Base(os.Args[0])]
	if !ok {
		tool = runtime.Main
	}
	os.Exit(tool(app.FromOS()))
}
