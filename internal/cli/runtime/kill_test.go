package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// killRig runs the runtime as its own process (this test binary, with the
// production planner over a fixture driver root and /bin/true as the
// low-level runtime) on fresh bundles of one image.
type killRig struct {
	t      *testing.T
	bin    string
	cfg    string
	proc   string
	image  func(dir string)
	spec   string
	runDir string
	root   string // the fixture driver root
	// sameSpec, when set, compares config.json after a kill and a create
	// with a clean create's (nil: byte for byte).
	sameSpec func(got, want []byte) bool
}

// newSeparateHooksKillRig is newKillRig for the runtime's CDI mode with a
// spec in NVIDIA's layout whose hooks are the runtime's own (a link to the
// test binary): a driver library mounted into a folder the image lacks,
// create-symlinks, enable-cuda-compat and update-ldcache --folder, all
// done by the runtime (the ld.so.cache rebuilt before the mounts exist).
func newSeparateHooksKillRig(t *testing.T) *killRig {
	t.Helper()
	k := newKillRig(t)
	libs, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	_, link := ownHookLink(t)
	specDir := t.TempDir()
	const folder = "/usr/local/nvidia/lib64"
	hook := func(args ...string) string {
		return fmt.Sprintf("  - hookName: createContainer\n    path: %s\n    args: [nvidia-cdi-hook, %s]\n    env: [NVIDIA_CTK_DEBUG=false]\n", link, strings.Join(args, ", "))
	}
	spec := "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  mounts:\n" +
		fmt.Sprintf("  - {hostPath: %s, containerPath: %s/%s, options: [ro, nosuid, nodev, rbind, rprivate]}\n", libs[0], folder, filepath.Base(libs[0])) +
		"  hooks:\n" + hook("create-symlinks", "--link", "libz.so.1::"+folder+"/libz.so") +
		hook("enable-cuda-compat", "--host-driver-version=580.65.06") + hook("update-ldcache", "--folder", folder) +
		"devices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - {path: /dev/null}\n"
	if err := os.WriteFile(filepath.Join(specDir, "nvidia.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf("[nvidia-container-runtime]\nmode = \"cdi\"\nruntimes = [\"/bin/true\"]\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [%q]\n", specDir)
	if err := os.WriteFile(k.cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	k.spec = envSpec(t, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0")
	// A create killed after it saved config.json leaves it injected; the
	// next create applies the spec again, and the CDI library's editor
	// appends the device's cgroup rule once more, as it does in every
	// engine (its mounts, nodes and hooks it replaces). The same rule
	// twice in a row allows nothing more: compared without repeats.
	k.sameSpec = func(got, want []byte) bool {
		norm := func(b []byte) string {
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			if l, ok := v["linux"].(map[string]any); ok {
				if r, ok := l["resources"].(map[string]any); ok {
					if d, ok := r["devices"].([]any); ok {
						r["devices"] = slices.CompactFunc(d, func(a, b any) bool { return reflect.DeepEqual(a, b) })
					}
				}
			}
			out, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			return string(out)
		}
		return norm(got) == norm(want)
	}
	return k
}

func newKillRig(t *testing.T) *killRig {
	t.Helper()
	fx := fixture.Build(t, fixture.Spec{GPUs: 1})
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	k := &killRig{t: t, bin: bin, cfg: filepath.Join(dir, "config.toml"), proc: t.TempDir(), runDir: t.TempDir(), root: fx.Path,
		spec: envSpec(t, "NVIDIA_VISIBLE_DEVICES=all")}
	toml := fmt.Sprintf("[nvidia-container-cli]\nroot = %q\n[nvidia-container-runtime]\nruntimes = [\"/bin/true\"]\n", fx.Path)
	if err := os.WriteFile(k.cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	// A small ELF library standing in for a CUDA compat libcuda of a
	// newer branch than the fixture driver's (named by its version: no
	// ELF note, so the major decides), hard-linked into each image.
	libs, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	if len(libs) == 0 {
		t.Skip("no host libz.so.1.* to stand in for a compat libcuda")
	}
	compatLib := filepath.Join(t.TempDir(), "libcuda.so.999.1.1")
	if err := os.WriteFile(compatLib, readFile(t, libs[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	// A Debian-like image with an ld.so.cache of its own, a driver link
	// name that is a symlink to something else, and CUDA compat libraries.
	k.image = func(root string) {
		compat := filepath.Join(root, "usr/local/cuda/compat")
		if err := os.MkdirAll(compat, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(compatLib, filepath.Join(compat, filepath.Base(compatLib))); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Base(compatLib), filepath.Join(compat, "libcuda.so.1")); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"etc/ld.so.conf.d", "usr/lib/x86_64-linux-gnu", "lib"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for p, c := range map[string]string{"etc/debian_version": "12.5\n", "etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
			"etc/ld.so.conf.d/x86_64-linux-gnu.conf": "/usr/lib/x86_64-linux-gnu\n"} {
			if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return k
}

// bundle makes a fresh bundle holding the image.
func (k *killRig) bundle() string {
	b := writeBundle(k.t, k.spec)
	k.image(filepath.Join(b, "rootfs"))
	return b
}

func (k *killRig) command(bundle string) *exec.Cmd {
	cmd := exec.Command(k.bin, "create", "--bundle", bundle, "ctr")
	cmd.Args[0] = "nvidia-container-runtime"
	cmd.Dir = k.runDir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", childEnv + "=1", childRealEnv + "=1",
		childHookEnv + "=/usr/local/bin/nvidia-cdi-hook", childProcEnv + "=" + k.proc,
		"NVIDIA_CTK_CONFIG_FILE_PATH=" + k.cfg}
	return cmd
}

// create runs a create to its end and fails the test unless it succeeds.
func (k *killRig) create(bundle string) {
	k.t.Helper()
	var out bytes.Buffer
	cmd := k.command(bundle)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		k.t.Fatalf("create %s: %v: %s", bundle, err, out.String())
	}
}

// TestKillThenRetry replays issue 13: a create SIGKILLed at a random point
// used to leave the rootfs half edited (some links, the ld.so.conf.d
// drop-in, no ld.so.cache) and nctk temp files behind. After a kill at any
// point, the next create must give exactly the rootfs and config.json of a
// create that was never interrupted: no temp file, every link, the same
// ld.so.cache bytes.
func TestKillThenRetry(t *testing.T) {
	t.Run("legacy", func(t *testing.T) { killThenRetry(t, newKillRig(t)) })
	t.Run("nvidia-layout", func(t *testing.T) { killThenRetry(t, newSeparateHooksKillRig(t)) })
}

func killThenRetry(t *testing.T, k *killRig) {
	clean := k.bundle()
	pristine := e2e.TreeState(t, filepath.Join(clean, "rootfs"))
	start := time.Now()
	k.create(clean)
	span := time.Since(start)
	want := e2e.TreeState(t, filepath.Join(clean, "rootfs"))
	wantSpec := readFile(t, filepath.Join(clean, "config.json"))
	if _, ok := want["/etc/ld.so.cache"]; !ok {
		t.Fatalf("a clean create wrote no ld.so.cache: %v", e2e.TreeDiff(want, pristine))
	}
	if _, ok := want["/etc/ld.so.conf.d/00-compat-nctk.conf"]; !ok {
		t.Fatalf("a clean create did not enable the image's CUDA compat libraries: %v", e2e.TreeDiff(want, pristine))
	}
	if len(e2e.TreeDiff(want, pristine)) < 3 {
		t.Fatalf("a clean create changed too little to test: %v", e2e.TreeDiff(want, pristine))
	}

	budget := 20 * time.Second
	if testing.Short() {
		budget = 3 * time.Second
	}
	var runs, partial, temps int
	for deadline := time.Now().Add(budget); time.Now().Before(deadline); runs++ {
		b := k.bundle()
		cmd := k.command(b)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rand.Int64N(int64(span) + 1)))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		mid := e2e.TreeState(t, filepath.Join(b, "rootfs"))
		if len(e2e.TreeDiff(mid, pristine)) > 0 && len(e2e.TreeDiff(mid, want)) > 0 {
			partial++
		}
		for p := range mid {
			if strings.Contains(filepath.Base(p), ".nctk-") {
				temps++
				break
			}
		}
		k.create(b)
		if d := e2e.TreeDiff(e2e.TreeState(t, filepath.Join(b, "rootfs")), want); len(d) > 0 {
			t.Fatalf("run %d: the create after a kill differs from a clean create: %v", runs, d)
		}
		if got := readFile(t, filepath.Join(b, "config.json")); !bytes.Equal(got, wantSpec) && (k.sameSpec == nil || !k.sameSpec(got, wantSpec)) {
			t.Fatalf("run %d: config.json after a kill and a create differs from a clean create's:\n%s\nwant\n%s", runs, got, wantSpec)
		}
	}
	t.Logf("%d kills within %v of the start; %d left the rootfs partly edited, %d left temp files; every retry matched a clean create", runs, span, partial, temps)
}

// TestUnwritableBundleLeavesRootfs replays issue 13: a create whose
// config.json cannot be written (an immutable bundle directory) had
// already rewritten the image's ld.so.cache and left it so. It must fail
// with the bundle and the rootfs exactly as they were, and exec nothing.
func TestUnwritableBundleLeavesRootfs(t *testing.T) {
	k := newKillRig(t)
	images := map[string]func(root string){
		"no ld.so.cache": k.image,
		"own ld.so.cache": func(root string) {
			k.image(root)
			if err := os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), []byte("not a cache nctk can parse"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("libcuda.so.0", filepath.Join(root, "usr/lib/x86_64-linux-gnu/libcuda.so")); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, image := range images {
		t.Run(name, func(t *testing.T) {
			bundle := writeBundle(t, k.spec)
			image(filepath.Join(bundle, "rootfs"))
			before := e2e.TreeState(t, bundle)
			if out, err := exec.Command("chattr", "+i", bundle).CombinedOutput(); err != nil {
				t.Skipf("chattr +i: %v: %s", err, out)
			}
			t.Cleanup(func() { exec.Command("chattr", "-i", bundle).Run() })
			var out bytes.Buffer
			cmd := k.command(bundle)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err == nil {
				t.Fatalf("create succeeded with an immutable bundle: %s", out.String())
			}
			if !strings.Contains(out.String(), "config.json") {
				t.Errorf("error does not name config.json: %s", out.String())
			}
			if d := e2e.TreeDiff(e2e.TreeState(t, bundle), before); len(d) > 0 {
				t.Errorf("bundle or rootfs changed by a failed create: %v", d)
			}
		})
	}
}
