package parity

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
)

// update records the expected results from NVIDIA's tools (in the
// directory $NCTK_PARITY_NVIDIA) instead of checking nctk's.
var update = flag.Bool("update", false, "record testdata from NVIDIA's tools in $NCTK_PARITY_NVIDIA")

// binDir holds nctk built for this run (TestMain), or NVIDIA's tools with
// -update; buildErr is why it is empty.
var (
	binDir   string
	buildErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	rc := run(m)
	if libs.dir != "" {
		os.RemoveAll(libs.dir)
	}
	os.Exit(rc)
}

func run(m *testing.M) int {
	if *update {
		binDir = os.Getenv("NCTK_PARITY_NVIDIA")
		if binDir == "" {
			fmt.Fprintln(os.Stderr, "parity: -update needs NCTK_PARITY_NVIDIA (the directory of NVIDIA's built tools)")
			return 2
		}
		return m.Run()
	}
	if !testing.Short() {
		dir, err := os.MkdirTemp("", "nctk-parity-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "parity:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		if buildErr = e2e.BuildNctk(dir); buildErr == nil {
			binDir = dir
		}
	}
	return m.Run()
}

// tool returns the path of the tool name under test (nctk's, or NVIDIA's
// with -update).
func tool(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() && !*update {
		t.Skip("-short: the parity tests run the built binaries")
	}
	if binDir == "" {
		t.Fatalf("building nctk: %v", buildErr)
	}
	p := filepath.Join(binDir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("tool %s: %v", name, err)
	}
	return p
}

// needRoot skips a test that needs root (mount namespaces, pivot_root,
// device nodes) when not run as root, saying why.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the hooks mount, pivot_root and mknod as an engine runs them")
	}
}

// golden compares got with the file testdata/name, or writes it with
// -update. norm is applied to both before comparing (the known
// differences), then expect, when not nil, to NVIDIA's (a difference of
// one case); the file keeps NVIDIA's result as it was.
func golden(t *testing.T, name, got string, norm, expect func(string) string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("expected result: %v (record it with -update and NVIDIA's tools)", err)
	}
	w, g := string(want), got
	if norm != nil {
		w, g = norm(w), norm(g)
	}
	if expect != nil {
		w = expect(w)
	}
	if w != g {
		t.Errorf("nctk differs from NVIDIA 1.20 (%s):\n%s", path, lineDiff(w, g))
	}
}

// exitCode is the exit status in err, what running a command returned: 0
// for nil. A command that could not run at all fails the test, naming
// what.
func exitCode(t *testing.T, what string, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("%s: %v", what, err)
	}
	return ee.ExitCode()
}
