package cdihook

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/appprofile"
	"github.com/nctk/nctk/internal/cudacompat/compattest"
)

// TestHookKillThenRetry: create-symlinks killed at a random point leaves at
// most its own temporary files and some of the links (or the image's file
// it was replacing, swapped aside); running the hook again gives exactly
// the root of a run that was never interrupted.
func TestHookKillThenRetry(t *testing.T) {
	var args []string
	for i := range 40 {
		args = append(args, "--link", fmt.Sprintf("libfoo.so.%d::/usr/lib/x86_64-linux-gnu/libfoo%d.so", i, i))
	}
	args = append([]string{"create-symlinks"}, args...)
	image := func(root string) {
		must(t, os.MkdirAll(root+"/usr/lib/x86_64-linux-gnu", 0o755))
		// Image files the links replace (ForceSymlink swaps them aside).
		for i := range 40 {
			if i%3 == 0 {
				must(t, os.WriteFile(fmt.Sprintf("%s/usr/lib/x86_64-linux-gnu/libfoo%d.so", root, i), []byte("image"), 0o644))
			}
		}
	}
	b, root := bundle(t)
	image(root)
	start := time.Now()
	if r := execHook(t, stateFor(b), args...); r.code != 0 {
		t.Fatalf("clean run: exit %d: %s", r.code, r.stderr)
	}
	span := time.Since(start)
	want := hostSnapshot(t, root)
	rel := func(m map[string]string, root string) map[string]string {
		out := map[string]string{}
		for p, v := range m {
			out[strings.TrimPrefix(p, root)] = v
		}
		return out
	}
	want = rel(want, root)

	budget := 8 * time.Second
	if testing.Short() {
		budget = 2 * time.Second
	}
	bin, err := os.Executable()
	must(t, err)
	var runs, temps int
	for deadline := time.Now().Add(budget); time.Now().Before(deadline); runs++ {
		b, root := bundle(t)
		image(root)
		cmd := exec.Command(bin, args...)
		cmd.Args[0] = "nvidia-cdi-hook"
		cmd.Env = []string{"NCTK_CDIHOOK_TEST_MAIN=1", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.Stdin = strings.NewReader(stateFor(b))
		must(t, cmd.Start())
		time.Sleep(time.Duration(rand.Int64N(int64(span) + 1)))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if m, _ := filepath.Glob(root + "/usr/lib/x86_64-linux-gnu/.*.nctk-*"); len(m) > 0 {
			temps++
		}
		if r := execHook(t, stateFor(b), args...); r.code != 0 {
			t.Fatalf("run %d: the run after a kill: exit %d: %s", runs, r.code, r.stderr)
		}
		if d := diffHost(rel(hostSnapshot(t, root), root), want); len(d) > 0 {
			t.Fatalf("run %d: the run after a kill differs from a clean run: %v", runs, d)
		}
	}
	t.Logf("%d kills within %v; %d left temporary files; every retry matched a clean run", runs, span, temps)
}

// TestHooksRemoveStaleTemps: the temporary files a killed hook left (named
// with the pid of a process that is gone) in the directories a hook writes
// to are removed by the next run of each hook; a live process's are kept.
func TestHooksRemoveStaleTemps(t *testing.T) {
	cmd := exec.Command("/bin/true")
	must(t, cmd.Run())
	dead, live := strconv.Itoa(cmd.Process.Pid), strconv.Itoa(os.Getpid())
	const lib = "/usr/lib/x86_64-linux-gnu"
	tests := []struct {
		name  string
		dir   string
		image func(root string)
		args  []string
	}{
		{"create-symlinks", lib, nil, []string{"create-symlinks", "--link", "libcuda.so.1::" + lib + "/libcuda.so"}},
		{"enable-cuda-compat", "/etc/ld.so.conf.d", func(root string) {
			must(t, os.MkdirAll(root+"/usr/local/cuda/compat", 0o755))
			must(t, os.WriteFile(root+"/usr/local/cuda/compat/libcuda.so.590.1.1", compattest.NoteELF("", "", "", 4), 0o644))
		}, []string{"enable-cuda-compat", "--host-driver-version=580.65.06"}},
		{"update-application-profile", appprofile.Dir, func(root string) {
			must(t, os.MkdirAll(root+"/dev", 0o755))
		}, []string{"update-application-profile"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			if tc.image != nil {
				tc.image(root)
			}
			dir := filepath.Join(root, tc.dir)
			must(t, os.MkdirAll(dir, 0o755))
			stale := []string{".x.conf.nctk-" + dead + "-0", ".libcuda.so.nctk-link-" + dead + "-1", ".libcuda.so.nctk-old-" + dead + "-0"}
			kept := ".x.conf.nctk-" + live + "-0"
			for _, n := range append(stale, kept) {
				must(t, os.WriteFile(filepath.Join(dir, n), nil, 0o644))
			}
			if r := execHook(t, stateFor(b), tc.args...); r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for _, n := range stale {
				if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
					t.Errorf("%s left", n)
				}
			}
			if _, err := os.Lstat(filepath.Join(dir, kept)); err != nil {
				t.Errorf("a live process's %s removed: %v", kept, err)
			}
		})
	}
}
