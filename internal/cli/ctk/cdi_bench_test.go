package ctk

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// benchRoot is the fixture root of the CDI benchmarks: the Debian layout
// with 8 GPUs, 32-bit libraries, IPC sockets and GSP firmware.
func benchRoot(b *testing.B) string {
	b.Helper()
	return fixture.Build(b, fixture.Spec{Layout: fixture.Debian, GPUs: 8, Compat32: true, IPC: true, Firmware: true}).Path
}

// BenchmarkGenerate is `nvidia-ctk cdi generate --output FILE` in process:
// discovery of the benchmark root, the spec, the CDI library's checks,
// encoding and the atomic write.
func BenchmarkGenerate(b *testing.B) {
	root := benchRoot(b)
	out := filepath.Join(b.TempDir(), "nvidia.yaml")
	environ := []string{"XDG_CONFIG_HOME=" + b.TempDir()}
	args := []string{"nvidia-ctk", "cdi", "generate", "--driver-root", root, "--output", out, "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook"}
	b.ReportAllocs()
	for b.Loop() {
		var so, se bytes.Buffer
		if code := Main(&app.Env{Args: args, Stdin: strings.NewReader(""), Stdout: &so, Stderr: &se, Environ: environ}); code != 0 {
			b.Fatalf("exit %d: %s", code, se.String())
		}
	}
}

// BenchmarkGenerateProcess is the whole process: nctk built from
// cmd/nctk, run as nvidia-ctk cdi generate for the same root, once per
// iteration (exec, Go runtime start, discovery, spec, validation, write).
func BenchmarkGenerateProcess(b *testing.B) {
	root := benchRoot(b)
	dir := e2e.MustBuildNctk(b)
	ctk := filepath.Join(dir, "nvidia-ctk")
	out := filepath.Join(dir, "nvidia.yaml")
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + dir}
	b.ResetTimer()
	for b.Loop() {
		cmd := exec.Command(ctk, "cdi", "generate", "--driver-root", root, "--output", out, "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook")
		cmd.Env = env
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, o)
		}
	}
}
