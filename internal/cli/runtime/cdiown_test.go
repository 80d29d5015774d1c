package runtime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/appprofile"
	"github.com/nctk/nctk/internal/buildid"
	"github.com/nctk/nctk/internal/cli/cdihook"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocispec"
)

// ownSpec is a CDI spec shaped as `nvidia-ctk cdi generate` writes it by
// default (one chained createContainer hook, update-ldcache with --lib)
// for a driver library at HOSTLIB, the hook at HOOK.
const ownSpec = `cdiVersion: 0.5.0
kind: nvidia.com/gpu
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
  mounts:
  - {hostPath: HOSTLIB, containerPath: /usr/local/nvidia/lib64/LIBNAME, options: [ro, nosuid, nodev, rbind, rprivate]}
  hooks:
  - hookName: createContainer
    path: HOOK
    args: [ARGS]
    env: [PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, NVIDIA_CTK_DEBUG=false]
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - {path: /dev/null}
`

// hostLibz is the host's libz.so.1.* and its name, standing in for a
// driver library (the test is skipped without one).
func hostLibz(t *testing.T) (lib, name string) {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	if len(matches) == 0 {
		t.Skip("no host libz.so.1.* to stand in for a driver library")
	}
	return matches[0], filepath.Base(matches[0])
}

// ownSpecFor is ownSpec for the library lib, its hook at hook running cmd.
func ownSpecFor(lib, hook string, cmd []string) string {
	quoted := make([]string, len(cmd))
	for i, a := range cmd {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	return strings.NewReplacer("HOSTLIB", lib, "LIBNAME", filepath.Base(lib), "HOOK", hook, "ARGS", strings.Join(quoted, ", ")).Replace(ownSpec)
}

// TestCDIModeOwnHooks: with a spec whose hook is this installation's
// nvidia-cdi-hook (the runtime's own executable, through a link), the
// runtime makes the hook's links and ld.so.cache entries in the rootfs
// itself, byte for byte what the hook makes when it runs after the mounts,
// and config.json keeps no create-symlinks or update-ldcache hook;
// disable-device-node-modification stays a hook only when the host kernel
// shows /proc/driver/nvidia. A hook binary that is a copy (another file)
// is left to run as a hook.
func TestCDIModeOwnHooks(t *testing.T) {
	lib, name := hostLibz(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	link := filepath.Join(bin, hookargs.Binary)
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	hookCmd := hookargs.Command(
		hookargs.CreateSymlinks{Links: []hookargs.Link{{Target: name, Path: "/usr/local/nvidia/lib64/libz.so.1"}, {Target: "libz.so.1", Path: "/usr/local/nvidia/lib64/libz.so"}}},
		hookargs.UpdateLdcache{Folders: []string{"/usr/local/nvidia/lib64"},
			Libs: []string{"/usr/local/nvidia/lib64/" + name, "/usr/local/nvidia/lib64/libz.so.1", "/usr/local/nvidia/lib64/libz.so"}},
		hookargs.DisableDeviceNodeModification{},
	)
	specFor := func(hook string) string { return ownSpecFor(lib, hook, hookCmd) }

	for _, tc := range []struct {
		name      string
		hook      string // the spec's hook path
		hostProc  bool
		wantLift  bool
		wantHooks []string // createContainer hooks' args after the program name
	}{
		{name: "own hook, driver in host procfs", hook: link, hostProc: true, wantLift: true,
			wantHooks: []string{hookargs.NameDisableDeviceNodeModification}},
		{name: "own hook, no driver in host procfs", hook: link, wantLift: true},
		{name: "a copy is not own", hook: "COPY", hostProc: true,
			wantHooks: []string{strings.Join(hookCmd[1:], " ")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook := tc.hook
			if hook == "COPY" {
				hook = writeExecutable(t, filepath.Join(t.TempDir(), hookargs.Binary), "#!/bin/sh\nexit 0\n")
			}
			specDir := t.TempDir()
			mustWrite(t, filepath.Join(specDir, "nvidia.yaml"), specFor(hook))
			base := strings.Replace(cdiBaseSpec, `"example.com/keep": "yes"`, `"example.com/keep": "yes", "cdi.k8s.io/test": "nvidia.com/gpu=0"`, 1)
			bundle := writeBundle(t, base)
			// The image has a cache of its own, kept with the new entries.
			hostCache, err := os.ReadFile("/etc/ld.so.cache")
			if err != nil {
				t.Skip("no host ld.so.cache to stand in for the image's")
			}
			mustWrite(t, filepath.Join(bundle, "rootfs/etc/ld.so.cache"), string(hostCache))

			h := cdiOwnHarness(t, self, specDir, tc.hostProc)
			if code := h.run("create", "--bundle", bundle, "ctr"); code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			doc, err := ocispec.Load(filepath.Join(bundle, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, hk := range doc.Spec().Hooks.CreateContainer {
				if hk.Path == "/usr/bin/other" {
					continue // the engine's own hook, kept
				}
				if hk.Path != hook {
					t.Errorf("hook path %s, want %s", hk.Path, hook)
				}
				got = append(got, strings.Join(hk.Args[1:], " "))
			}
			if !slices.Equal(got, tc.wantHooks) {
				t.Errorf("createContainer hooks %q, want %q", got, tc.wantHooks)
			}
			root := filepath.Join(bundle, "rootfs")
			if !tc.wantLift {
				if _, err := os.Lstat(filepath.Join(root, "usr/local/nvidia/lib64/libz.so.1")); err == nil {
					t.Error("the runtime made the links of a hook that is not its own")
				}
				return
			}

			// What the hook makes: a second root as the image was, with the
			// library where the mount puts it, the hook run on it.
			ref := writeBundle(t, base)
			refRoot := filepath.Join(ref, "rootfs")
			mustWrite(t, filepath.Join(refRoot, "etc/ld.so.cache"), string(hostCache))
			data, err := os.ReadFile(lib)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, filepath.Join(refRoot, "usr/local/nvidia/lib64", name), string(data))
			var stderr bytes.Buffer
			state := fmt.Sprintf(`{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":%q}`, ref)
			e := &app.Env{Args: hookCmd[:len(hookCmd)-2], Stdin: strings.NewReader(state), Stdout: &stderr, Stderr: &stderr}
			if code := cdihook.Main(e); code != 0 {
				t.Fatalf("hook: exit %d: %s", code, stderr.String())
			}
			if strings.Contains(stderr.String(), "running ldconfig") {
				t.Fatalf("the hook fell back to ldconfig: %s", stderr.String())
			}
			for _, l := range []string{"libz.so.1", "libz.so"} {
				p := "usr/local/nvidia/lib64/" + l
				g, gerr := os.Readlink(filepath.Join(root, p))
				w, werr := os.Readlink(filepath.Join(refRoot, p))
				if gerr != nil || werr != nil || g != w {
					t.Errorf("link %s: runtime %q (%v), hook %q (%v)", p, g, gerr, w, werr)
				}
			}
			for _, f := range []string{"etc/ld.so.cache", "etc/ld.so.conf.d/00-nctk.conf"} {
				g, gerr := os.ReadFile(filepath.Join(root, f))
				w, werr := os.ReadFile(filepath.Join(refRoot, f))
				if gerr != nil || werr != nil || !bytes.Equal(g, w) {
					t.Errorf("%s: runtime's (%d bytes, %v) differs from the hook's (%d bytes, %v)", f, len(g), gerr, len(w), werr)
				}
			}
			if g, _ := os.ReadFile(filepath.Join(root, "etc/ld.so.cache")); !bytes.Contains(g, []byte("/usr/local/nvidia/lib64/libz.so.1")) || bytes.Equal(g, hostCache) {
				t.Error("ld.so.cache lacks the library")
			}
		})
	}
}

// TestCDIModeOwnAppProfile: update-application-profile of the runtime's own
// hook is done by the runtime from the device nodes config.json gives the
// container (its /dev holds exactly those) and leaves config.json; the
// profile is the hook's for the same nodes. It stays a hook when the
// container's /dev holds more (a bind mount there), and when an earlier
// part of the chain stays in the container.
func TestCDIModeOwnAppProfile(t *testing.T) {
	self, link := ownHookLink(t)
	const spec = `cdiVersion: 0.5.0
kind: nvidia.com/gpu
containerEdits:
  deviceNodes:
  - {path: /dev/nvidiactl, type: c, major: 195, minor: 255}
  hooks:
  - hookName: createContainer
    path: HOOK
    args: [nvidia-cdi-hook, CHAIN]
    env: [NVIDIA_CTK_DEBUG=false]
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia3, type: c, major: 195, minor: 3}
- name: "1"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia5, type: c, major: 195, minor: 5}
`
	const ddnm, uap = hookargs.NameDisableDeviceNodeModification, hookargs.NameUpdateApplicationProfile
	for _, tc := range []struct {
		name      string
		chain     []string
		devices   string
		hostProc  bool
		devMount  bool            // config.json bind-mounts a node into /dev
		wantMask  appprofile.Mask // 0: no profile written by the runtime
		wantHooks []string
	}{
		{name: "lifted, one GPU", chain: []string{uap}, devices: "nvidia.com/gpu=0", wantMask: 1 << 3},
		{name: "lifted, two GPUs", chain: []string{ddnm, uap}, devices: "nvidia.com/gpu=0,nvidia.com/gpu=1", wantMask: 1<<3 | 1<<5},
		{name: "after the proc hook: stays", chain: []string{ddnm, uap}, devices: "nvidia.com/gpu=0", hostProc: true,
			wantHooks: []string{ddnm + " ; " + uap}},
		{name: "a bind mount in /dev: stays", chain: []string{uap}, devices: "nvidia.com/gpu=0", devMount: true,
			wantHooks: []string{uap}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specDir := t.TempDir()
			quoted := strings.Join(tc.chain, `, ";", `)
			mustWrite(t, filepath.Join(specDir, "nvidia.yaml"), strings.NewReplacer("HOOK", link, "CHAIN", quoted).Replace(spec))
			base := strings.Replace(cdiBaseSpec, `"example.com/keep": "yes"`, `"example.com/keep": "yes", "cdi.k8s.io/test": "`+tc.devices+`"`, 1)
			if tc.devMount {
				base = strings.Replace(base, `"mounts": [`, `"mounts": [{"destination": "/dev/nvidia7", "type": "bind", "source": "/dev/null", "options": ["rbind"]},`, 1)
			}
			bundle := writeBundle(t, base)
			h := cdiOwnHarness(t, self, specDir, tc.hostProc)
			if code := h.run("create", "--bundle", bundle, "ctr"); code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			if got := ownHooksLeft(t, bundle); !slices.Equal(got, tc.wantHooks) {
				t.Errorf("createContainer hooks %q, want %q", got, tc.wantHooks)
			}
			data, err := os.ReadFile(filepath.Join(bundle, "rootfs", appprofile.File))
			switch {
			case tc.wantMask == 0 && err == nil:
				t.Errorf("the runtime wrote the profile a hook writes: %s", data)
			case tc.wantMask != 0 && err != nil:
				t.Errorf("no profile: %v", err)
			case tc.wantMask != 0 && string(data) != string(appprofile.Content(tc.wantMask)):
				t.Errorf("profile %s, want %s", data, appprofile.Content(tc.wantMask))
			}
		})
	}
}

// cdiOwnHarness is a harness whose runtime runs in CDI mode over the specs
// in specDir with the production planner, self as its own executable (so
// that hooks linked to it are its own); without hostProc the host shows no
// /proc/driver/nvidia.
func cdiOwnHarness(t *testing.T, self, specDir string, hostProc bool) *harness {
	t.Helper()
	h := newHarness(t)
	h.rt.Self = self
	h.rt.planner = defaultPlanner()
	if !hostProc {
		h.rt.ProcDriverDir = filepath.Join(t.TempDir(), "nope")
	}
	h.rt.LoadConfig = func(*app.Env) (*config.Config, error) {
		c := config.Default()
		c.Runtime.Runtimes = []string{h.runc}
		c.Runtime.Modes.CDI.SpecDirs = []string{specDir}
		return c, nil
	}
	return h
}

// ownHooksLeft returns the args (after the program name) of the
// createContainer hooks in bundle's config.json, the engine's own
// (/usr/bin/other) left out.
func ownHooksLeft(t *testing.T, bundle string) []string {
	t.Helper()
	doc, err := ocispec.Load(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, hk := range doc.Spec().Hooks.CreateContainer {
		if hk.Path != "/usr/bin/other" {
			got = append(got, strings.Join(hk.Args[1:], " "))
		}
	}
	return got
}

// ownHookLink returns the test binary (the runtime's own executable in the
// tests) and a link to it named nvidia-cdi-hook: a hook path the runtime
// takes for its own.
func ownHookLink(t *testing.T) (self, link string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link = filepath.Join(t.TempDir(), hookargs.Binary)
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	return self, link
}

// TestOwnHookBuildID: a hook binary is the runtime's own when it is its
// executable or the nctk beside it (by identity: a spec's `nvidia-ctk
// hook …`), or a regular executable whose Go build ID is the runtime's
// HookBuildID (the nvidia-cdi-hook built with it); a copy of another build,
// a file that is not executable, a script or a relative path is not.
func TestOwnHookBuildID(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	selfID, err := buildid.Read(self)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hook := filepath.Join(dir, hookargs.Binary)
	mustWriteMode(t, hook, data, 0o755)
	noExec := filepath.Join(dir, "noexec")
	mustWriteMode(t, noExec, data, 0o644)
	script := filepath.Join(dir, "script")
	mustWriteMode(t, script, []byte("#!/bin/sh\nexit 0\n"), 0o755)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(hook, link); err != nil {
		t.Fatal(err)
	}
	ctk := filepath.Join(dir, "nvidia-ctk")
	if err := os.Symlink(self, ctk); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name              string
		self, nctk, build string
		path              string
		want              bool
	}{
		{"the build's hook binary", "", "", selfID, hook, true},
		{"a link to it", "", "", selfID, link, true},
		{"another build", "", "", "other/build/id", hook, false},
		{"no build ID known", "", "", "", hook, false},
		{"not executable", "", "", selfID, noExec, false},
		{"a script", "", "", selfID, script, false},
		{"relative", "", "", selfID, hookargs.Binary, false},
		{"the runtime itself", self, "", "", self, true},
		{"a copy of the runtime, by identity only", self, "", "", hook, false},
		{"nctk beside the runtime, as nvidia-ctk", "", self, "", ctk, true},
		{"a copy of nctk, by identity only", "", self, "", hook, false},
		{"no nctk beside the runtime", "", filepath.Join(dir, "nctk"), "", ctk, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runtime{Self: tc.self, Nctk: tc.nctk, HookBuildID: tc.build}
			own := r.ownHook()
			for range 2 { // the second answer is the memoized one
				if got := own(tc.path); got != tc.want {
					t.Fatalf("own(%s) = %v, want %v", tc.path, got, tc.want)
				}
			}
		})
	}
}

func mustWriteMode(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
