// Package entry is what the main of every nctk binary that can run the
// driver probe does: the hidden re-exec entries first (the driver probe
// child, the confined ldconfig and the other in-container helpers rootfs
// re-executes the binary for), then the tool, with the process's context
// and its status as the exit status.
package entry

import (
	"os"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/rootfs"
)

// Main runs tool as the process's main and exits with its status.
func Main(tool app.Tool) {
	if driverprobe.MaybeRunChild(os.Args) || rootfs.MaybeRunChild(os.Args) {
		return
	}
	os.Exit(tool(app.FromOS()))
}
