package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildNctk builds nctk into dir as `make build` does into bin/: the static
// multi-call binary (CGO_ENABLED=0), its cgo driver probe helper, and a
// link to the binary for every tool name.
func BuildNctk(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		// CI's root PATH may lack Go's usual place.
		goBin = "/usr/local/go/bin/go"
	}
	builds := []struct{ out, pkg, cgo string }{
		{"nctk", "github.com/nctk/nctk/cmd/nctk", "0"},
		{"nctk-driverprobe", "github.com/nctk/nctk/cmd/nctk-driverprobe", "1"},
	}
	for _, b := range builds {
		cmd := exec.Command(goBin, "build", "-trimpath", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s (CGO_ENABLED=%s): %w\n%s", b.pkg, b.cgo, err, out)
		}
	}
	for _, n := range ToolNames() {
		if err := os.Symlink("nctk", filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("linking %s: %w", n, err)
		}
	}
	return nil
}

// MustBuildNctk builds nctk (BuildNctk) into a temporary directory that
// tb's cleanup removes, and returns that directory.
func MustBuildNctk(tb testing.TB) string {
	tb.Helper()
	dir := TempDir(tb, "bin")
	if err := BuildNctk(dir); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// ToolNames lists the names nctk is installed under, sorted (the keys of
// internal/tools.All, which imports every tool and so cannot be imported
// by the tools' own tests; internal/tools checks the two agree).
func ToolNames() []string {
	return []string{
		"nvidia-cdi-hook", "nvidia-container-cli", "nvidia-container-runtime", "nvidia-container-runtime-hook",
		"nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy",
		"nvidia-container-toolkit", "nvidia-ctk", "nvidia-docker",
	}
}
