package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// TestDemoScript runs the README's first command (scripts/demo.sh, what
// `make demo` runs after the build) with this run's nctk: the container must
// print the GPU report of the driver at hand, the host's when it has one,
// else the fixture driver's (CUDA 12.2, no device), and leave nothing.
func TestDemoScript(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	for _, tool := range []string{"runc", "busybox", "gcc", "go"} {
		e2e.RequireTool(t, tool)
	}
	_, statErr := os.Stat("/proc/driver/nvidia/version")
	realDriver := statErr == nil
	if !realDriver {
		// The fixture driver's packages (make fixtures): missing, this
		// skips, or fails under NCTK_E2E_STRICT, as every fixture test.
		fixture.Build(t, fixture.Spec{GPUs: 1})
	}
	bin := filepath.Dir(tool(t, "nctk"))
	before, _ := filepath.Glob("/tmp/nctk-demo.*")
	cmd := exec.Command("bash", "../../scripts/demo.sh")
	cmd.Env = append(os.Environ(), "NCTK_DEMO_BIN="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	text := string(out)
	want := []string{"==> nvidia-container-runtime run (NVIDIA_VISIBLE_DEVICES=all)", "$ cudaprobe init", "==> done"}
	if realDriver {
		want = append(want, "cuInit: 0", "UUID: GPU-")
	} else {
		want = append(want, "libcuda: /usr/lib/x86_64-linux-gnu/libcuda.so.1", "cuDriverGetVersion: 12020", "cuInit: 100", "/dev/nvidia0", "/dev/nvidiactl")
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("demo output lacks %q:\n%s", w, text)
		}
	}
	after, _ := filepath.Glob("/tmp/nctk-demo.*")
	for _, d := range after {
		if !slices.Contains(before, d) {
			t.Errorf("demo left %s behind", d)
		}
	}
}
