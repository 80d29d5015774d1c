package runtime

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nctk/nctk/internal/hookargs"
)

// TestAppliedSpecOwnHooks: a config.json to which the engine applied a CDI
// spec itself (the CDI library's InjectDevices, as Podman, Docker and
// containerd's CRI do) and then ran this runtime: the spec's hook, this
// installation's nvidia-cdi-hook, is done by the runtime (the links and
// ld.so.cache entries in the rootfs, the hook gone from config.json, the
// engine's hook before it kept first, every other field as the engine
// wrote it); a hook binary that is not its own leaves config.json byte for
// byte as it was.
func TestAppliedSpecOwnHooks(t *testing.T) {
	lib, name := hostLibz(t)
	self, link := ownHookLink(t)
	hookCmd := hookargs.Command(
		hookargs.CreateSymlinks{Links: []hookargs.Link{{Target: name, Path: "/usr/local/nvidia/lib64/libz.so.1"}}},
		hookargs.UpdateLdcache{Folders: []string{"/usr/local/nvidia/lib64"},
			Libs: []string{"/usr/local/nvidia/lib64/" + name, "/usr/local/nvidia/lib64/libz.so.1"}},
		hookargs.DisableDeviceNodeModification{},
	)
	for _, tc := range []struct {
		name string
		hook string
		lift bool
	}{
		{"own hook", link, true},
		{"a copy is not own", "COPY", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook := tc.hook
			if hook == "COPY" {
				hook = writeExecutable(t, filepath.Join(t.TempDir(), hookargs.Binary), "#!/bin/sh\nexit 0\n")
			}
			specDir := t.TempDir()
			mustWrite(t, filepath.Join(specDir, "nvidia.yaml"), ownSpecFor(lib, hook, hookCmd))
			// What the engine hands the runtime: the spec applied.
			var spec specs.Spec
			if err := json.Unmarshal([]byte(cdiBaseSpec), &spec); err != nil {
				t.Fatal(err)
			}
			cache, err := cdi.NewCache(cdi.WithSpecDirs(specDir), cdi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cache.InjectDevices(&spec, "nvidia.com/gpu=0"); err != nil {
				t.Fatal(err)
			}
			injected, err := json.Marshal(&spec)
			if err != nil {
				t.Fatal(err)
			}
			bundle := writeBundle(t, string(injected))
			h := cdiOwnHarness(t, self, t.TempDir(), false) // no spec of the runtime's own
			if code := h.run("create", "--bundle", bundle, "ctr"); code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			data := readFile(t, filepath.Join(bundle, "config.json"))
			root := filepath.Join(bundle, "rootfs")
			if !tc.lift {
				if !bytes.Equal(data, injected) {
					t.Errorf("config.json changed:\n%s\nwant\n%s", data, injected)
				}
				if _, err := os.Lstat(filepath.Join(root, "usr/local/nvidia/lib64/libz.so.1")); err == nil {
					t.Error("the runtime made the links of a hook that is not its own")
				}
				return
			}
			var got specs.Spec
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, hk := range got.Hooks.CreateContainer {
				paths = append(paths, hk.Path)
			}
			if !slices.Equal(paths, []string{"/usr/bin/other"}) {
				t.Errorf("createContainer hooks %q, want the engine's only", paths)
			}
			// Everything else as the engine wrote it.
			spec.Hooks.CreateContainer = spec.Hooks.CreateContainer[:1]
			want, _ := json.Marshal(&spec)
			gotJSON, _ := json.Marshal(&got)
			if !bytes.Equal(gotJSON, want) {
				t.Errorf("config.json:\n%s\nwant\n%s", gotJSON, want)
			}
			if target, err := os.Readlink(filepath.Join(root, "usr/local/nvidia/lib64/libz.so.1")); err != nil || target != name {
				t.Errorf("link: %q, %v", target, err)
			}
			if c, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache")); err != nil || !bytes.Contains(c, []byte("/usr/local/nvidia/lib64/libz.so.1")) {
				t.Errorf("ld.so.cache lacks the library (%v)", err)
			}
		})
	}
}
