// End-to-end GPU container tests: real runc, dockerd and containerd
// (private instances from internal/e2e) run a busybox+glibc image through
// nvidia-container-runtime, the nvidia-container-runtime-hook (docker --gpus)
// and nvidia-container-cli configure (ctr run --gpus), over fixture driver
// roots made from real NVIDIA driver packages (internal/fixture). Every
// assertion is made on what the container itself sees: cudaprobe's
// cuDriverGetVersion, nvidia-smi's error, its /dev, device cgroup,
// mountinfo and ld.so.cache.
//
// The tests need root, runc, dockerd, containerd and the cached driver
// packages (make fixtures); missing tools skip with the reason, or fail
// with NCTK_E2E_STRICT=1 (CI). -short skips them all.

package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/rootfs"
)

// binDir holds nctk built for this test run and its links; TestMain sets it
// before any test runs ("" with -short, or when the build failed, see
// buildErr).
var binDir string

// buildErr is why nctk could not be built.
var buildErr error

func TestMain(m *testing.M) {
	// The driver probe and the confined ldconfig re-execute the test
	// binary when the tests call the libraries in-process (BenchmarkCreate).
	if driverprobe.MaybeRunChild(os.Args) || rootfs.MaybeRunChild(os.Args) {
		return
	}
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if !testing.Short() {
		dir, err := os.MkdirTemp("", "nctk-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		// The daemons execute these as root from other processes: the
		// directory must be traversable.
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		if buildErr = e2e.BuildNctk(dir); buildErr == nil {
			binDir = dir
		}
	}
	return m.Run()
}

// tool returns the absolute path of one of nctk's tools for this run.
func tool(t testing.TB, name string) string {
	t.Helper()
	if binDir == "" {
		if buildErr != nil {
			t.Fatalf("building nctk: %v", buildErr)
		}
		t.Fatal("nctk was not built (-short?)")
	}
	return filepath.Join(binDir, name)
}

// skipShort skips an end-to-end test under -short.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: runs containers")
	}
}
