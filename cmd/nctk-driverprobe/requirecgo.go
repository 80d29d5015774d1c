//go:build !cgo

package main

// The helper exists to load driver libraries, which needs cgo: building it
// with CGO_ENABLED=0 fails here rather than producing a helper that cannot
// probe.
var _ = thisHelperMustBeBuiltWithCgo
