package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/cdihook"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/cudacompat"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
)

// Container paths of the CUDA compat tests.
const (
	compatTestDir = "/usr/local/cuda/compat"
	compatTestLib = "/usr/lib/x86_64-linux-gnu"
)

// compatLibs returns the fixture packages' real libcuda files: the 535
// one (the image's compat library, newer) and the 470 one (the host
// driver's), or skips.
func compatLibs(t *testing.T) (newer, older string) {
	t.Helper()
	n, _ := filepath.Glob("/var/cache/nctk/pkgroot/535-amd64/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.*")
	o, _ := filepath.Glob("/var/cache/nctk/pkgroot/470-amd64/usr/lib/x86_64-linux-gnu/nvidia/tesla-470/libcuda.so.470.*")
	if len(n) != 1 || len(o) != 1 {
		t.Skip("fixture driver packages 535-amd64 and 470-amd64 not unpacked in /var/cache/nctk (make fixtures)")
	}
	return n[0], o[0]
}

// putCompat puts the library file src into the image root as
// compatTestDir/name with its libcuda.so.1 link.
func putCompat(t *testing.T, root, src, name string) {
	t.Helper()
	mustWrite(t, filepath.Join(root, compatTestDir, name), string(readFile(t, src)))
	if err := os.Symlink(name, filepath.Join(root, compatTestDir, "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
}

// libcudaEntries returns the values of the libcuda.so.1 entries of the
// root's ld.so.cache, in cache order (the loader takes the first).
func libcudaEntries(t *testing.T, root string) []string {
	t.Helper()
	cacheData, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ldcache.Parse(cacheData)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range c.Entries {
		if e.Key == "libcuda.so.1" {
			out = append(out, e.Value)
		}
	}
	return out
}

// TestLegacyCudaCompat: on the legacy path, with compat handling on
// (config.toml's default cuda-compat-mode = "ldconfig") and the image
// holding a compat libcuda of a newer branch than the host driver, the
// runtime puts it first in ld.so.cache and lists its directory in
// 00-compat-nctk.conf; disabled, older, a link out of the root or a
// directory a spec mount covers leave the driver's first; a FIFO fails the
// create with the image unchanged.
func TestLegacyCudaCompat(t *testing.T) {
	newer, older := compatLibs(t)
	drvName := filepath.Base(older)
	tests := []struct {
		name    string
		image   func(t *testing.T, root string)
		mode    string // cuda-compat-mode; "" the default
		mount   string // a spec bind mount destination
		first   string // the first libcuda.so.1 entry
		wantErr string
	}{
		{name: "newer compat", image: func(t *testing.T, root string) { putCompat(t, root, newer, filepath.Base(newer)) },
			first: compatTestDir + "/libcuda.so.1"},
		{name: "newer compat, mount mode", mode: "mount", image: func(t *testing.T, root string) { putCompat(t, root, newer, filepath.Base(newer)) },
			first: compatTestDir + "/libcuda.so.1"},
		{name: "newer compat, hook mode", mode: "hook", image: func(t *testing.T, root string) { putCompat(t, root, newer, filepath.Base(newer)) },
			first: compatTestDir + "/libcuda.so.1"},
		{name: "compat disabled", mode: "disabled", image: func(t *testing.T, root string) { putCompat(t, root, newer, filepath.Base(newer)) },
			first: compatTestLib + "/libcuda.so.1"},
		{name: "older compat", image: func(t *testing.T, root string) { putCompat(t, root, newer, "libcuda.so.460.1.1") },
			first: compatTestLib + "/libcuda.so.1"},
		{name: "compat directory under a spec mount", mount: "/usr/local/cuda", image: func(t *testing.T, root string) { putCompat(t, root, newer, filepath.Base(newer)) },
			first: compatTestLib + "/libcuda.so.1"},
		{name: "compat library a link out of the root", image: func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, compatTestDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(newer, filepath.Join(root, compatTestDir, filepath.Base(newer))); err != nil {
				t.Fatal(err)
			}
		}, first: compatTestLib + "/libcuda.so.1"},
		{name: "compat library a FIFO", image: func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, compatTestDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(filepath.Join(root, compatTestDir, filepath.Base(newer)), 0o644); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "not a regular file"},
		// The last step fails (a directory where the drop-in goes): the
		// links, the cache and the driver drop-in made before it are
		// rolled back.
		{name: "compat drop-in path a directory", image: func(t *testing.T, root string) {
			putCompat(t, root, newer, filepath.Base(newer))
			if err := os.MkdirAll(filepath.Join(root, cudacompat.Conf, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, wantErr: cudacompat.Conf},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.rt.planner = preparerFunc(func(context.Context, input) (*plan.Plan, error) {
				return &plan.Plan{
					Mounts: []plan.Mount{{Source: older, Destination: compatTestLib + "/" + drvName, Kind: plan.KindFile,
						Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}}},
					Symlinks:      []plan.Symlink{{Link: compatTestLib + "/libcuda.so.1", Target: drvName}},
					LdconfigDirs:  []string{compatTestLib},
					DriverVersion: "470.256.02",
				}, nil
			})
			h.rt.LoadConfig = func(*app.Env) (*config.Config, error) {
				c := config.Default()
				c.Runtime.Runtimes = []string{h.runc}
				if tc.mode != "" {
					c.Runtime.Modes.Legacy.CUDACompatMode = tc.mode
				}
				return c, nil
			}
			spec := gpuSpec
			if tc.mount != "" {
				spec = strings.Replace(spec, `"root": {"path": "rootfs"},`,
					fmt.Sprintf(`"root": {"path": "rootfs"}, "mounts": [{"destination": %q, "type": "tmpfs", "source": "tmpfs"}],`, tc.mount), 1)
			}
			bundle := writeBundle(t, spec)
			root := filepath.Join(bundle, "rootfs")
			tc.image(t, root)
			code := h.run("create", "--bundle", bundle, "ctr")
			if tc.wantErr != "" {
				if code == 0 || !strings.Contains(h.stderr.String(), tc.wantErr) || !strings.Contains(h.stderr.String(), compatTestDir) {
					t.Fatalf("exit %d, %q; want a failure naming %s: %s", code, h.stderr.String(), compatTestDir, tc.wantErr)
				}
				for _, p := range []string{"etc/ld.so.cache", "etc/ld.so.conf", "usr/lib/x86_64-linux-gnu/libcuda.so.1", "etc/ld.so.conf.d/00-nctk.conf"} {
					if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
						t.Errorf("%s left in the image by a failed create", p)
					}
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			got := libcudaEntries(t, root)
			if len(got) == 0 || got[0] != tc.first {
				t.Errorf("libcuda.so.1 entries %q, want %s first", got, tc.first)
			}
			conf, err := os.ReadFile(filepath.Join(root, cudacompat.Conf))
			if used := tc.first == compatTestDir+"/libcuda.so.1"; used != (err == nil) || used && string(conf) != compatTestDir+"\n" {
				t.Errorf("%s = %q, %v (compat used: %v)", cudacompat.Conf, conf, err, used)
			}
			if doc, err := ocispec.Load(filepath.Join(bundle, "config.json")); err != nil {
				t.Fatal(err)
			} else if hs := doc.Spec().Hooks; hs != nil {
				for _, hk := range hs.CreateContainer {
					if strings.Contains(strings.Join(hk.Args, " "), hookargs.NameEnableCudaCompat) {
						t.Errorf("a compat hook in config.json: %q", hk.Args)
					}
				}
			}
		})
	}
}

// TestCDIModeOwnCompat: the chained hook of nctk's generated spec with
// enable-cuda-compat (create-symlinks ; enable-cuda-compat ;
// update-ldcache --lib), run by the runtime in process, leaves the image's
// ld.so.cache and ld.so.conf.d byte for byte as nvidia-cdi-hook running
// the chain after the mounts does, with the compat libcuda.so.1 first and
// no hook left in config.json.
func TestCDIModeOwnCompat(t *testing.T) {
	newer, older := compatLibs(t)
	name := filepath.Base(older)
	self, link := ownHookLink(t)
	const dir = "/usr/local/nvidia/lib64"
	hookCmd := hookargs.Command(
		hookargs.CreateSymlinks{Links: []hookargs.Link{{Target: name, Path: dir + "/libcuda.so.1"}}},
		hookargs.EnableCudaCompat{HostDriverVersion: "470.256.02"},
		hookargs.UpdateLdcache{Folders: []string{dir}, Libs: []string{dir + "/" + name, dir + "/libcuda.so.1"}},
	)
	quoted := make([]string, len(hookCmd))
	for i, a := range hookCmd {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	specDir := t.TempDir()
	mustWrite(t, filepath.Join(specDir, "nvidia.yaml"),
		strings.NewReplacer("HOSTLIB", older, "LIBNAME", name, "HOOK", link, "ARGS", strings.Join(quoted, ", ")).Replace(ownSpec))
	base := strings.Replace(cdiBaseSpec, `"example.com/keep": "yes"`, `"example.com/keep": "yes", "cdi.k8s.io/test": "nvidia.com/gpu=0"`, 1)
	hostCache, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Skip("no host ld.so.cache to stand in for the image's")
	}

	bundle := writeBundle(t, base)
	root := filepath.Join(bundle, "rootfs")
	mustWrite(t, filepath.Join(root, "etc/ld.so.cache"), string(hostCache))
	putCompat(t, root, newer, filepath.Base(newer))
	h := cdiOwnHarness(t, self, specDir, true)
	if code := h.run("create", "--bundle", bundle, "ctr"); code != 0 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	doc, err := ocispec.Load(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, hk := range doc.Spec().Hooks.CreateContainer {
		if hk.Path != "/usr/bin/other" {
			t.Errorf("hook left in config.json: %q", hk.Args)
		}
	}

	// What the hook makes, run after the mounts on a second copy of the
	// image.
	ref := writeBundle(t, base)
	refRoot := filepath.Join(ref, "rootfs")
	mustWrite(t, filepath.Join(refRoot, "etc/ld.so.cache"), string(hostCache))
	putCompat(t, refRoot, newer, filepath.Base(newer))
	mustWrite(t, filepath.Join(refRoot, dir, name), string(readFile(t, older)))
	var out bytes.Buffer
	state := fmt.Sprintf(`{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":%q}`, ref)
	e := &app.Env{Args: hookCmd, Stdin: strings.NewReader(state), Stdout: &out, Stderr: &out}
	if code := cdihook.Main(e); code != 0 {
		t.Fatalf("hook: exit %d: %s", code, out.String())
	}
	for _, f := range []string{"etc/ld.so.cache", "etc/ld.so.conf.d/00-nctk.conf", strings.TrimPrefix(cudacompat.Conf, "/")} {
		g, gerr := os.ReadFile(filepath.Join(root, f))
		w, werr := os.ReadFile(filepath.Join(refRoot, f))
		if gerr != nil || werr != nil || !bytes.Equal(g, w) {
			t.Errorf("%s: runtime's (%d bytes, %v) differs from the hook's (%d bytes, %v)", f, len(g), gerr, len(w), werr)
		}
	}
	if got := libcudaEntries(t, root); len(got) < 2 || got[0] != compatTestDir+"/libcuda.so.1" {
		t.Errorf("libcuda.so.1 entries %q, want the compat one first", got)
	}
}
