// Command nvidia-cdi-hook runs the hooks of CDI specs (create-symlinks,
// update-ldcache, enable-cuda-compat, …, several chained with ";"): the
// code of `nctk nvidia-cdi-hook`, built as a binary of its own. An engine
// starts one hook process per hook entry of a spec on every container
// create, and this binary starts without the CDI, YAML and eBPF libraries
// and the other tools the multi-call nctk links (docs/benchmarks.md).
// nctk's runtime recognises it by its Go build ID, which scripts/build.sh
// links into nctk (version.HookBuildID).
package main

import (
	"os"
	"runtime"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/cdihook"
	"github.com/nctk/nctk/internal/rootfs"
)

func main() {
	// The confined ldconfig re-executes this binary (rootfs.RunLdconfig).
	if rootfs.MaybeRunChild(os.Args) {
		return
	}
	oneP(os.Getenv, runtime.GOMAXPROCS)
	os.Exit(cdihook.Main(app.FromOS()))
}

// oneP gives the process one P unless GOMAXPROCS names a count. A hook does
// its work on one goroutine; nctk's specs start their hooks with
// GOMAXPROCS=1, NVIDIA's specs name none, and on a host with many CPUs the
// runtime would then wake further threads as the work readies goroutines
// (docs/benchmarks.md). The Ps made before main stay made.
func oneP(getenv func(string) string, gomaxprocs func(int) int) {
	if getenv("GOMAXPROCS") == "" {
		gomaxprocs(1)
	}
}
