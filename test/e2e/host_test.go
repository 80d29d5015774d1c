package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// cudaVersion535 is what libcuda of the 535 driver packages reports
// (cuDriverGetVersion: CUDA 12.2).
const cudaVersion535 = 12020

// gpuHost is a fixture driver root and the config.toml that points every
// nctk tool at it.
type gpuHost struct {
	Root *fixture.Root
	// Dir holds the config file and the tools' debug logs.
	Dir string
	// Config is config.toml; Env sets NVIDIA_CTK_CONFIG_FILE_PATH to it.
	Config string
	Env    []string
	// RuntimeLog and CLILog are the runtime's and the CLI's debug logs.
	RuntimeLog, CLILog string
}

// newHost builds a fixture driver root and writes a config.toml for it:
// [nvidia-container-cli] root is the fixture (so discovery, the hook and
// configure all see its /proc, /dev and libraries), ldconfig is the host's,
// no kernel modules are loaded, and the runtime execs the host's runc.
func newHost(t testing.TB, spec fixture.Spec) *gpuHost {
	t.Helper()
	runc := e2e.RequireTool(t, "runc")
	root := fixture.Build(t, spec)
	dir := e2e.TempDir(t, "host")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &gpuHost{
		Root:       root,
		Dir:        dir,
		Config:     filepath.Join(dir, "config.toml"),
		RuntimeLog: filepath.Join(dir, "runtime.log"),
		CLILog:     filepath.Join(dir, "cli.log"),
	}
	cfg := fmt.Sprintf(`[nvidia-container-cli]
root = %q
ldconfig = "@/sbin/ldconfig"
load-kmods = false
debug = %q

[nvidia-container-runtime]
runtimes = [%q]
log-level = "debug"
debug = %q
`, root.Path, h.CLILog, runc, h.RuntimeLog)
	if err := os.WriteFile(h.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	h.Env = []string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + h.Config}
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpLogs(t)
		}
	})
	return h
}

// dumpLogs puts the tools' debug logs into the test log.
func (h *gpuHost) dumpLogs(t testing.TB) {
	for _, f := range []string{h.RuntimeLog, h.CLILog} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(data)
		if len(s) > 20000 {
			s = "…" + s[len(s)-20000:]
		}
		t.Logf("%s:\n%s", f, s)
	}
}

// gpu returns the fixture GPU with NVML index i.
func (h *gpuHost) gpu(t testing.TB, i int) fixture.GPU {
	t.Helper()
	for _, g := range h.Root.GPUs {
		if g.Index == i {
			return g
		}
	}
	t.Fatalf("fixture has no GPU %d", i)
	return fixture.GPU{}
}

// copyRootfs clones an image root (built once per test with BuildRootfs)
// for one container: every container run writes its own ld.so.cache,
// symlinks and mount points into the image.
func copyRootfs(t testing.TB, src string) string {
	t.Helper()
	dst := filepath.Join(e2e.TempDir(t, "img"), "rootfs")
	e2e.MustRun(t, e2e.RunOpts{Quiet: true}, "cp", "-a", src, dst)
	return dst
}

// snapshot lists every path of a tree with its type, mode, size,
// modification time and link target: "nothing modified" checks compare two snapshots.
func snapshot(t testing.TB, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(&b, "%s %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode()&os.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			fmt.Fprintf(&b, " -> %s", l)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", root, err)
	}
	return b.String()
}
