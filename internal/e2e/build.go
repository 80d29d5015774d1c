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
// scripts/build.sh: the static binaries (CGO_ENABLED=0: the multi-call
// nctk, nvidia-container-runtime, nvidia-container-runtime-hook,
// nvidia-cdi-hook), the cgo driver probe helper, and a link to one of them
// for every other tool name.
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

// CheckLean fails t for every package the main package in the current
// directory links (`go list -deps .`) that is, or lies below, one of
// banned: the binaries an engine or runc starts on every create are kept
// free of code whose initialisers and pages each process would pay for.
func CheckLean(t *testing.T, banned ...string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list -deps: %v (the go command is needed to list the binary's packages)", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %q", out)
	}
	for _, d := range deps {
		for _, b := range banned {
			if d == b || strings.HasPrefix(d, b+"/") {
				t.Errorf("the binary links %s", d)
			}
		}
	}
}
