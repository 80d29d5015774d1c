package tools

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		out  string
		err  string
	}{
		{"by argv[0]", []string{"/usr/bin/nvidia-ctk", "--version"}, 0, "nvidia-ctk version nctk", ""},
		{"as nctk TOOL", []string{"nctk", "nvidia-container-cli", "--version"}, 0, "cli-version:", ""},
		{"hook link name", []string{"/x/nvidia-container-toolkit", "-version"}, 0, "nctk", ""},
		{"unknown name", []string{"nctk"}, 2, "", "run as one of: nvidia-cdi-hook, nvidia-container-cli"},
		{"unknown tool", []string{"nctk", "nvidia-smi"}, 2, "", "run as one of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			e := &app.Env{Args: tc.args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}
			code := Run(e)
			if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.out) || !strings.Contains(errb.String(), tc.err) {
				t.Errorf("Run(%q) = %d, stdout %q, stderr %q", tc.args, code, out.String(), errb.String())
			}
		})
	}
	for _, n := range []string{"nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-toolkit",
		"nvidia-container-cli", "nvidia-ctk", "nvidia-cdi-hook", "nvidia-docker"} {
		if All()[n] == nil {
			t.Errorf("tool %s is not installed", n)
		}
	}
}

// TestInstalledNames checks that the names the build installs
// (scripts/build.sh's links, which the Makefile, the test harness and
// packaging/stage.sh use, and the hook binary of its own) are exactly the
// tools Run dispatches to.
func TestInstalledNames(t *testing.T) {
	var names []string
	for n := range All() {
		names = append(names, n)
	}
	slices.Sort(names)
	sh, err := os.ReadFile("../../scripts/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, l := range strings.Split(string(sh), "\n") {
		if rest, ok := strings.CutPrefix(l, `links="`); ok {
			tools = append(tools, strings.Fields(strings.TrimSuffix(rest, `"`))...)
		}
	}
	tools = append(tools, "nvidia-cdi-hook")
	slices.Sort(tools)
	if !slices.Equal(tools, names) {
		t.Errorf("scripts/build.sh links + nvidia-cdi-hook = %q, want %q", tools, names)
	}
}
