// Command nctk-driverprobe is the driver probe child of a static nctk: it
// loads the NVIDIA driver's libcuda and NVML (cgo, dlopen) to answer what
// only the driver knows (CUDA version, compute capabilities, brands, MIG
// device UUIDs). nctk runs it from its own directory with the hidden
// argument internal/driverprobe.ChildArg, the request on stdin and the
// result written to file descriptor 3; it is not meant to be run by hand.
//
// Keeping the cgo code in this helper keeps nctk itself a static binary,
// which starts faster on every container create.
package main

import (
	"fmt"
	"os"

	"github.com/nctk/nctk/internal/driverprobe"
)

func main() {
	if driverprobe.MaybeRunChild(os.Args) {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: the driver probe helper of nctk; run `nvidia-container-cli info` instead\n", os.Args[0])
	os.Exit(2)
}
