package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BuildNctk builds nctk into dir as `make build` does into bin/, with
// scripts/build.sh: the static multi-call binary (CGO_ENABLED=0), the
// nvidia-cdi-hook binary, the cgo driver probe helper, and a link to the
// multi-call binary for every other tool name.
func BuildNctk(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		// CI's root PATH may lack Go's usual place.
		goBin = "/usr/local/go/bin/go"
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return fmt.Errorf("go env GOMOD: %q, %v: run from inside the nctk module", mod, err)
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(mod), "scripts", "build.sh"), dir)
	cmd.Env = append(os.Environ(), "GO="+goBin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("scripts/build.sh %s: %w\n%s", dir, err, out)
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
