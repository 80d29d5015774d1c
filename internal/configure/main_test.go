package configure

import (
	"os"
	"testing"

	"github.com/nctk/nctk/internal/rootfs"
)

func TestMain(m *testing.M) {
	if rootfs.MaybeRunChild(os.Args) {
		return
	}
	if job := os.Getenv(hookEnvVar); job != "" {
		os.Exit(runAsHook(job))
	}
	if job := os.Getenv(applyEnvVar); job != "" {
		os.Exit(runApply(job))
	}
	os.Exit(m.Run())
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("needs root (namespaces, mounts, cgroups); running as uid %d", os.Geteuid())
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
