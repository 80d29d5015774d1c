package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestRealHostContainersScript runs scripts/check-real-host-containers.sh,
// made for GPU hosts, on a fixture driver root (--root): every path's
// container and check, doctor and one round of timing, so that the script
// a GPU host needs keeps working where no GPU is.
func TestRealHostContainersScript(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	for _, tool := range []string{"runc", "busybox", "gcc", "go"} {
		e2e.RequireTool(t, tool)
	}
	fx := fixture.Build(t, fixture.Spec{GPUs: 2})
	if !fx.DeviceNodes {
		t.Skipf("fixture root without device nodes: %s", fx.NoDeviceNodesReason)
	}
	bin := filepath.Dir(tool(t, "nctk"))
	tmp := t.TempDir()
	report := filepath.Join(tmp, "report.md")
	// The engine-applied paths need the CDI library's injection.
	inject := filepath.Join(tmp, "cdiinject")
	if out, err := exec.Command("go", "build", "-o", inject, "../cdiinject").CombinedOutput(); err != nil {
		t.Fatalf("go build test/cdiinject: %v\n%s", err, out)
	}
	// NVIDIA's nvidia-ctk needs NVML: a stand-in writes nctk's spec in
	// NVIDIA's layout as NVIDIA's tool writes it (no GOMAXPROCS in the
	// hooks' environment; the hook path as given, where nctk's makes it
	// absolute), so that the paths of NVIDIA's spec with nctk's hooks run.
	nvctk := filepath.Join(tmp, "nvidia-ctk")
	standIn := fmt.Sprintf(`#!/bin/sh
out= hook=
while [ $# -gt 0 ]; do case $1 in --output) out=$2; shift ;; --nvidia-cdi-hook-path) hook=$2; shift ;; esac; shift; done
abs=$(cd "$(dirname "$hook")" && pwd)/$(basename "$hook")
%q -q cdi generate --separate-hooks --driver-root %q --nvidia-cdi-hook-path "$hook" --output "$out.in.yaml" &&
	grep -v '^ *- GOMAXPROCS=1$' "$out.in.yaml" | sed "s|path: $abs\$|path: $hook|" >"$out" && rm "$out.in.yaml"
`, filepath.Join(bin, "nvidia-ctk"), fx.Path)
	if err := os.WriteFile(nvctk, []byte(standIn), 0o755); err != nil {
		t.Fatal(err)
	}
	// nctk's own hook stands in for NVIDIA's too ("NVIDIA's spec and
	// hooks"). The tools are named relative to the script's working
	// directory, as a user may: the script must make them absolute before
	// they go into specs that runc runs from elsewhere.
	if err := os.Symlink(filepath.Join(bin, "nvidia-cdi-hook"), filepath.Join(tmp, "nv-hook")); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../scripts/check-real-host-containers.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script, "--root", fx.Path, "--rounds", "1", "--out", report,
		"--cdi-inject", "./cdiinject", "--nvidia-ctk", "./nvidia-ctk", "--nvidia-cdi-hook", "./nv-hook", "--tmpfs")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "NCTK_BIN="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("check-real-host-containers.sh: %v\n%s", err, out)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, w := range []string{
		"ok        legacy all nodes: 2", "ok        legacy none nodes: 0", "ok        legacy void libcuda: 0",
		"ok        legacy cuda>=99.0 refused: yes", "ok        cdi gpu=0 (nctk --separate-hooks spec) nodes: 1",
		"ok        jit-cdi all libcuda: 1", "ok        docker --gpus hook nodes: 2",
		"ok        doctor on a bundle needing CUDA 99: finding: yes", "| plain runc |", "| legacy |",
		"ok        engine applies native nodes: 2", "ok        engine applies sep-native libcuda: 1",
		"ok        engine applies native-gmp writable: 0", "| native |", "| sep-native |", "| legacy-hook |", "| cdi-hook |",
		"ok        engine applies nctk's spec, then the runtime (native-rt) nodes: 2",
		"ok        engine applies sep's spec, then the runtime (sep-native-rt) libcuda: 1", "| native-rt |", "| sep-native-rt |",
		"ok        cdi all (NVIDIA's spec, nctk's hooks) nodes: 2", "ok        engine applies nvspec-native nodes: 2",
		"ok        engine applies nv's spec, then the runtime (nvspec-native-rt) libcuda: 1", "| nvspec-native |", "| nvspec-native-rt |",
		"ok        cdi all (NVIDIA's spec and hooks) nodes: 2", "ok        engine applies nv-native nodes: 2", "| nv-native |",
		// nctk's hook starts once per engine-applied container, also for a
		// spec in NVIDIA's layout (hookbatch).
		"ok        engine applies native hook-starts: 1", "ok        engine applies sep-native hook-starts: 1",
		"ok        engine applies nvspec-native hook-starts: 1",
		"RESULT: every container got what it asked for",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("report lacks %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, "MISMATCH") {
		t.Errorf("mismatches:\n%s", text)
	}
	// The --gpus hook's share is taken over legacy-hook's floor (the same
	// plan's mounts and devices made by runc).
	if !regexp.MustCompile(`(?m)^\| hook \| [0-9.]+ \| [-+][0-9.]+ \| [0-9.]+ \(legacy-hook's\) \| -?[0-9.]+ \| -?[0-9.]+ \|$`).MatchString(text) {
		t.Errorf("the hook row has no floor from legacy-hook:\n%s", text)
	}
	// The runtime paths, whose config.json lacks the driver's mounts, also
	// get their share over runc making the same container.
	for _, row := range []string{
		`\| cdi \| .* \| -?[0-9.]+ \(over cdi-hook's floor\) \|`,
		`\| legacy \| .* \| -?[0-9.]+ \(over legacy-hook's floor\) \|`,
		`\| native-rt \| .* \| -?[0-9.]+ \(over native's floor\) \|`,
		`\| sep-native-rt \| .* \| -?[0-9.]+ \(over sep-native's floor\) \|`,
	} {
		if !regexp.MustCompile(`(?m)^` + row + `$`).MatchString(text) {
			t.Errorf("no row matching %s:\n%s", row, text)
		}
	}
	// --tmpfs: the work directory's tmpfs is gone with it.
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), "nctk-hostcheck") {
		t.Errorf("the work directory's tmpfs is still mounted:\n%s", mounts)
	}
}
