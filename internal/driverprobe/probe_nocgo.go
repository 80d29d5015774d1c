//go:build !cgo

package driverprobe

// haveCgo reports whether this build can load driver libraries.
const haveCgo = false

// runProbe cannot load libraries without cgo; it says so.
func runProbe(req Request) Result {
	return Result{CUDAError: "nctk was built without cgo (CGO_ENABLED=0) and cannot load " + req.Libcuda}
}
