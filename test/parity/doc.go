// Package parity holds black-box comparisons of nctk's built binaries with
// NVIDIA Container Toolkit 1.20's: the expected results under testdata are
// what NVIDIA's own tools, built from their public source, did on the same
// inputs (the inputs are this package's: rootfs trees, hook command lines,
// container environments, command lines). The tests run nctk's binaries on
// those inputs and compare.
//
// To record the expected results again, build NVIDIA's tools outside the
// repository and point the tests at them:
//
//	NCTK_PARITY_NVIDIA=/path/to/nvidia/bin go test ./test/parity -update
//
// Where nctk differs from NVIDIA on purpose, the test says which known
// difference it allows (knownDifferences, docs/nvidia-parity.md).
package parity
