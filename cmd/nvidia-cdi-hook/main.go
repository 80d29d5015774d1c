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

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/cdihook"
	"github.com/nctk/nctk/internal/rootfs"
)

func main() {
	// The confined ldconfig re-executes this binary (rootfs.RunLdconfig).
	if rootfs.MaybeRunChild(os.Args) {
		return
	}
	os.Exit(cdihook.Main(app.FromOS()))
}
