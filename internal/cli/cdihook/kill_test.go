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

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/appprofile"
	"github.com/nctk/nctk/internal/cudacompat/compattest"
	"github.com/nctk/nctk/internal/e2e"
)

// TestHookKillThenRetry: a hook killed at a random point leaves at most its
// own temporary files and part of its work (create-symlinks: some of the
// links, or the image's file it was replacing, swapped aside;
// update-ldcache --folder: some SONAME links, the drop-ins, not the
// cache); running the hook again gives exactly the root of a run that was
// never interrupted.
func TestHookKillThenRetry(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu"
	t.Run("create-symlinks", func(t *testing.T) {
		var args []string
		for i := range 40 {
			args = append(args, "--link", fmt.Sprintf("libfoo.so.%d::%s/libfoo%d.so", i, lib, i))
		}
		killThenRetry(t, lib, append([]string{"create-symlinks"}, args...), func(root string) {
			must(t, os.MkdirAll(root+lib, 0o755))
			// Image files the links replace (ForceSymlink swaps them aside).
			for i := range 40 {
				if i%3 == 0 {
					must(t, os.WriteFile(fmt.Sprintf("%s%s/libfoo%d.so", root, lib, i), []byte("image"), 0o644))
				}
			}
		})
	})
	t.Run("update-ldcache --folder", func(t *testing.T) {
		// The host's small versioned libraries (regular files), each with
		// its own SONAME, without their SONAME links: the rebuild makes
		// those.
		var drv []string
		all, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/lib*.so.*.*")
		for _, f := range all {
			if st, err := os.Lstat(f); err == nil && st.Mode().IsRegular() && st.Size() < 256<<10 && len(drv) < 40 {
				drv = append(drv, f)
			}
		}
		if len(drv) < 5 {
			t.Skipf("only %d small versioned libraries in /usr/lib/x86_64-linux-gnu to build an image from", len(drv))
		}
		const folder = "/usr/local/nvidia/lib64"
		killThenRetry(t, folder, []string{"update-ldcache", "--folder", folder}, func(root string) {
			must(t, os.MkdirAll(root+folder, 0o755))
			for i, f := range drv {
				data, err := os.ReadFile(f)
				must(t, err)
				must(t, os.WriteFile(root+folder+"/"+filepath.Base(f), data, 0o755))
				if i%4 == 0 {
					// A stale SONAME-named link the rebuild replaces.
					must(t, os.Symlink("gone", root+folder+"/"+filepath.Base(f)+".stale.so.1"))
				}
			}
		})
	})
}

// killThenRetry kills the hook args at random points over image and checks
// that each run after a kill gives the root of a clean run; dir is where
// its temporary files would be.
func killThenRetry(t *testing.T, dir string, args []string, image func(root string)) {
	b, root := bundle(t)
	image(root)
	start := time.Now()
	if r := execHook(t, stateFor(b), args...); r.code != 0 {
		t.Fatalf("clean run: exit %d: %s", r.code, r.stderr)
	}
	span := time.Since(start)
	rel := func(m map[string]string, root string) map[string]string {
		out := map[string]string{}
		for p, v := range m {
			out[strings.TrimPrefix(p, root)] = v
		}
		return out
	}
	want := rel(hostSnapshot(t, root), root)

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
		if m, _ := filepath.Glob(root + dir + "/.*.nctk-*"); len(m) > 0 {
			temps++
		}
		if r := execHook(t, stateFor(b), args...); r.code != 0 {
			t.Fatalf("run %d: the run after a kill: exit %d: %s", runs, r.code, r.stderr)
		}
		if d := e2e.TreeDiff(rel(hostSnapshot(t, root), root), want); len(d) > 0 {
			t.Fatalf("run %d: the run after a kill differs from a clean run: %v", runs, d)
		}
	}
	t.Logf("%d kills within %v; %d left temporary files; every retry matched a clean run", runs, span, temps)
}

// TestHooksRemoveStaleTemps: the temporary files a killed hook left (named
// with the pid of a process that is gone) are removed by the next run of
// each hook where it can have left them: a directory the hook writes a
// file into, and one where a link it makes finds an entry already there (a
// killed run replacing it); a live process's are kept. Where every link is
// new, the directory is not read (a run killed there made no temporary).
func TestHooksRemoveStaleTemps(t *testing.T) {
	cmd := exec.Command("/bin/true")
	must(t, cmd.Run())
	dead, live := strconv.Itoa(cmd.Process.Pid), strconv.Itoa(os.Getpid())
	const lib = "/usr/lib/x86_64-linux-gnu"
	link := []string{"create-symlinks", "--link", "libcuda.so.1::" + lib + "/libcuda.so"}
	tests := []struct {
		name  string
		dir   string
		image func(root string)
		args  []string
		read  bool // the directory is read
	}{
		{"create-symlinks over an entry", lib, func(root string) {
			must(t, os.Symlink("libcuda.so.0", root+lib+"/libcuda.so"))
		}, link, true},
		{"create-symlinks, link there already", lib, func(root string) {
			must(t, os.Symlink("libcuda.so.1", root+lib+"/libcuda.so"))
		}, link, true},
		{"create-symlinks, new link", lib, nil, link, false},
		{"enable-cuda-compat", "/etc/ld.so.conf.d", func(root string) {
			must(t, os.MkdirAll(root+"/usr/local/cuda/compat", 0o755))
			must(t, os.WriteFile(root+"/usr/local/cuda/compat/libcuda.so.590.1.1", compattest.NoteELF("", "", "", 4), 0o644))
		}, []string{"enable-cuda-compat", "--host-driver-version=580.65.06"}, true},
		{"update-ldcache --folder", "/etc", nil, []string{"update-ldcache", "--folder", lib}, true},
		{"update-application-profile", appprofile.Dir, func(root string) {
			must(t, os.MkdirAll(root+"/dev", 0o755))
			must(t, unix.Mknod(root+"/dev/nvidia0", unix.S_IFCHR|0o666, int(unix.Mkdev(195, 0))))
		}, []string{"update-application-profile"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			dir := filepath.Join(root, tc.dir)
			must(t, os.MkdirAll(dir, 0o755))
			if tc.image != nil {
				tc.image(root)
			}
			stale := []string{".x.conf.nctk-" + dead + "-0", ".libcuda.so.nctk-link-" + dead + "-1", ".libcuda.so.nctk-old-" + dead + "-0"}
			kept := ".x.conf.nctk-" + live + "-0"
			for _, n := range append(stale, kept) {
				must(t, os.WriteFile(filepath.Join(dir, n), nil, 0o644))
			}
			if r := execHook(t, stateFor(b), tc.args...); r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for _, n := range stale {
				if _, err := os.Lstat(filepath.Join(dir, n)); (err == nil) == tc.read {
					t.Errorf("%s: there %v, want removed %v", n, err == nil, tc.read)
				}
			}
			if _, err := os.Lstat(filepath.Join(dir, kept)); err != nil {
				t.Errorf("a live process's %s removed: %v", kept, err)
			}
		})
	}
}
