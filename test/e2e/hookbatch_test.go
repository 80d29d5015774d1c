package e2e

import (
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/e2e/starts"
)

// checkOneHookProcess runs a container of image ref with a spec in
// NVIDIA's layout (class sepgpu: nctk's --separate-hooks spec, five hook
// entries) through engine (podman's or docker's command line), whose
// runtime (runc or crun) runs the entries itself: nctk's hook binary
// starts once (the first entry does the others' work and masks their
// program in the container's mount namespace: internal/hookbatch), and
// that mask is not among the container's mounts.
func checkOneHookProcess(t *testing.T, engine func(args ...string) e2e.Result, ref string, extra ...string) {
	t.Helper()
	var res e2e.Result
	argv := append(append([]string{"run", "--rm", "--device", "nvidia.com/sepgpu=2"}, extra...),
		ref, "/bin/sh", "-c", "grep -c nctk-hook-done /proc/self/mountinfo; ls -l /usr/local/nvidia/lib64/libcuda.so.1 2>/dev/null || ls -l /usr/lib/x86_64-linux-gnu/libcuda.so.1")
	hook := tool(t, "nvidia-cdi-hook")
	n, err := starts.During(hook, func() error { res = engine(argv...); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("run: %s", res)
	}
	if n != 1 {
		t.Errorf("%s started %d times for the five hook entries, want once", hook, n)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) < 2 || lines[0] != "0" || !strings.Contains(lines[1], "libcuda.so.1 -> ") {
		t.Errorf("container: the mask among its mounts, or no libcuda.so.1 link:\n%s", res.Stdout)
	}
}
