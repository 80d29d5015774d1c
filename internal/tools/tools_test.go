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
// (scripts/build.sh's binaries and links, which the Makefile, the test
// harness and packaging/stage.sh use) are exactly the tools Run dispatches
// to, and that each link names a binary of the list.
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
	list := func(v string) []string {
		for _, l := range strings.Split(string(sh), "\n") {
			if rest, ok := strings.CutPrefix(l, v+`="`); ok {
				return strings.Fields(strings.TrimSuffix(rest, `"`))
			}
		}
		t.Fatalf("scripts/build.sh has no %s= line", v)
		return nil
	}
	bins := list("bins")
	// nctk is the multi-call binary, nctk-driverprobe a helper: neither
	// is a tool's name.
	tools := slices.DeleteFunc(slices.Clone(bins), func(b string) bool { return b == "nctk" || b == "nctk-driverprobe" })
	for _, l := range list("links") {
		name, bin, ok := strings.Cut(l, ":")
		if !ok || !slices.Contains(bins, bin) {
			t.Errorf("scripts/build.sh link %q: want NAME:BINARY with BINARY one of %q", l, bins)
		}
		tools = append(tools, name)
	}
	// The --gpus hook runs nvidia-container-cli in process only when the
	// CLI it finds is its own binary (hook.runCLI): a CLI linked anywhere
	// else would cost an exec on every such create.
	if !slices.Contains(list("links"), "nvidia-container-cli:nvidia-container-runtime-hook") {
		t.Errorf("scripts/build.sh: nvidia-container-cli must link to nvidia-container-runtime-hook")
	}
	slices.Sort(tools)
	if !slices.Equal(tools, names) {
		t.Errorf("scripts/build.sh binaries and links = %q, want %q", tools, names)
	}
}
