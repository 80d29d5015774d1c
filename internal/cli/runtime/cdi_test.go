package runtime

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/config"
)

// cdiSpecs are hand-written CDI specs of several vendors that together use
// every field of CDI 0.5 to 1.1: device nodes with and without type,
// numbers, permissions, mode and owner (host nodes to stat where they leave
// them out), mounts with no options, with a type (tmpfs, not a bind) and
// with options, hooks of every stage with their own env and timeout,
// spec-level and device-level edits, annotations, additionalGids, intelRdt
// and netDevices.
var cdiSpecs = map[string]string{
	// 0.5.0: hostPath, names starting with a digit.
	"fpga.yaml": `cdiVersion: 0.5.0
kind: example.com/fpga
containerEdits:
  env: [FPGA_RUNTIME=1, PATH=/fpga/bin]
  hooks:
  - hookName: prestart
    path: /usr/libexec/fpga-prestart
  - hookName: poststop
    path: /usr/libexec/fpga-cleanup
    args: [fpga-cleanup, --all]
    timeout: 5
devices:
- name: 0fpga
  containerEdits:
    deviceNodes:
    - path: /dev/fpga0
      hostPath: /dev/null
      permissions: r
    - path: /dev/fpga-mgmt
      type: c
      major: 240
      minor: 3
      permissions: rw
      fileMode: 0640
      uid: 1000
      gid: 44
    mounts:
    - hostPath: /opt/fpga/lib
      containerPath: /usr/lib/fpga
    - hostPath: tmpfs
      containerPath: /var/fpga/scratch
      type: tmpfs
      options: [nosuid, size=64m]
    hooks:
    - hookName: createContainer
      path: /usr/bin/fpga-hook
      args: [fpga-hook, setup]
      env: [FPGA_DEBUG=0]
      timeout: 10
- name: fpga1
  containerEdits:
    deviceNodes:
    - path: /dev/fpga1
      type: b
      major: 259
      minor: 7
`,
	// 0.6.0: annotations, a dot in the class.
	"acc.json": `{"cdiVersion": "0.6.0", "kind": "vendor.org/acc.v2",
 "annotations": {"vendor.org/spec": "yes"},
 "containerEdits": {"mounts": [{"hostPath": "/etc/acc", "containerPath": "/etc/acc", "options": ["ro", "bind"]}]},
 "devices": [
  {"name": "a", "annotations": {"vendor.org/dev": "a"},
   "containerEdits": {"deviceNodes": [{"path": "/dev/acc-a", "type": "c", "major": 241, "minor": 0, "permissions": "rwm"}],
     "env": ["ACC=a"],
     "hooks": [{"hookName": "createRuntime", "path": "/usr/bin/acc", "args": ["acc", "create-runtime"]},
               {"hookName": "startContainer", "path": "/usr/bin/acc", "args": ["acc", "start"]},
               {"hookName": "poststart", "path": "/usr/bin/acc", "args": ["acc", "poststart"]}]}},
  {"name": "b",
   "containerEdits": {"deviceNodes": [{"path": "/dev/acc-b", "hostPath": "/dev/zero", "fileMode": 384}],
     "env": ["ACC=b"], "mounts": [{"hostPath": "/srv/acc/b", "containerPath": "/data"}]}}]}
`,
	// 0.7.0: additionalGids and intelRdt, at spec and device level.
	"net.yaml": `cdiVersion: 0.7.0
kind: acme.io/nic
containerEdits:
  additionalGids: [44, 0, 1001]
devices:
- name: vf0
  containerEdits:
    additionalGids: [2001]
    intelRdt:
      closID: nic
      l3CacheSchema: "L3:0=ff"
      memBwSchema: "MB:0=50"
    deviceNodes:
    - path: /dev/vfio/7
      type: c
      major: 243
      minor: 7
      permissions: ""
`,
	// 1.1.0: netDevices, intelRdt schemata and monitoring.
	"rdma.yaml": `cdiVersion: 1.1.0
kind: nets.example/rdma
devices:
- name: port1
  containerEdits:
    netDevices:
    - hostInterfaceName: ib0
      name: net1
    intelRdt:
      closID: rdma
      schemata: ["L3:0=f0"]
      enableMonitoring: true
    env: [RDMA_PORT=1]
`,
}

// cdiBaseSpec is a container's config.json as an engine writes it (with a
// mount at a destination one spec mounts over, a device one spec replaces,
// a user, and fields runtime-spec does not know).
const cdiBaseSpec = `{
  "ociVersion": "1.2.0",
  "process": {"cwd": "/", "args": ["sh"], "user": {"uid": 1000, "gid": 1000, "additionalGids": [5]},
    "env": ["PATH=/usr/bin:/bin", "ACC=old"], "x-future": 1},
  "root": {"path": "rootfs"},
  "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
             {"destination": "/data", "type": "bind", "source": "/var/old", "options": ["rbind"], "x-keep": true},
             {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]}],
  "hooks": {"createContainer": [{"path": "/usr/bin/other", "args": ["other"]}]},
  "linux": {"devices": [{"path": "/dev/acc-a", "type": "c", "major": 1, "minor": 1}],
    "resources": {"devices": [{"allow": false, "access": "rwm"}]},
    "namespaces": [{"type": "mount"}, {"type": "pid"}],
    "x-vendor": {"a": [1, 2]}},
  "annotations": {"example.com/keep": "yes"}
}
`

// TestCDIModeMatchesCDILibrary is the differential test of the runtime's
// CDI mode: for every request over the hand-written specs, the config.json
// the runtime writes (through its production planner) equals what the CDI
// library's own InjectDevices makes of the same config.json, and keeps the
// fields runtime-spec does not know.
func TestCDIModeMatchesCDILibrary(t *testing.T) {
	specDir := t.TempDir()
	for name, content := range cdiSpecs {
		if err := os.WriteFile(filepath.Join(specDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := pkgcdi.NewCache(pkgcdi.WithSpecDirs(specDir), pkgcdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("hand-written specs do not load: %v", errs)
	}
	tests := []struct {
		name string
		// devices are requested through a cdi.k8s.io/ annotation, or with
		// env through NVIDIA_VISIBLE_DEVICES.
		devices []string
		env     bool
		userns  bool
	}{
		{name: "fpga device nodes, mounts, hooks", devices: []string{"example.com/fpga=0fpga"}},
		{name: "block device", devices: []string{"example.com/fpga=fpga1"}},
		{name: "two devices of one spec", devices: []string{"example.com/fpga=fpga1", "example.com/fpga=0fpga"}},
		{name: "annotations and every hook stage", devices: []string{"vendor.org/acc.v2=a"}},
		{name: "replaced mount and env", devices: []string{"vendor.org/acc.v2=b", "vendor.org/acc.v2=a"}},
		{name: "additionalGids and intelRdt", devices: []string{"acme.io/nic=vf0"}},
		{name: "netDevices", devices: []string{"nets.example/rdma=port1"}},
		{name: "four vendors", devices: []string{"nets.example/rdma=port1", "acme.io/nic=vf0", "vendor.org/acc.v2=b", "example.com/fpga=0fpga"}},
		{name: "names in NVIDIA_VISIBLE_DEVICES", devices: []string{"example.com/fpga=0fpga", "acme.io/nic=vf0"}, env: true},
		{name: "user namespace: idmapped bind mounts", devices: []string{"vendor.org/acc.v2=b", "example.com/fpga=0fpga"}, userns: true},
	}
	// Each request twice: without the resolved-spec cache, then with one
	// (written by the first request, read by the others).
	cacheDir := filepath.Join(t.TempDir(), "cdi")
	for i := range 2 * len(tests) {
		tc, cached := tests[i%len(tests)], i >= len(tests)
		t.Run(fmt.Sprintf("%s/cached=%v", tc.name, cached), func(t *testing.T) {
			base := cdiBaseSpec
			switch {
			case tc.env:
				base = strings.Replace(base, `"ACC=old"`, `"ACC=old", "NVIDIA_VISIBLE_DEVICES=`+strings.Join(tc.devices, ",")+`"`, 1)
			default:
				base = strings.Replace(base, `"example.com/keep": "yes"`, `"example.com/keep": "yes", "cdi.k8s.io/test": "`+strings.Join(tc.devices, ",")+`"`, 1)
			}
			if tc.userns {
				base = strings.Replace(base, `{"type": "pid"}`, `{"type": "pid"}, {"type": "user"}`, 1)
			}
			bundle := writeBundle(t, base)
			h := newHarness(t)
			h.rt.planner = defaultPlanner()
			if cached {
				h.rt.CDICacheDir = cacheDir
			}
			h.rt.LoadConfig = func(*app.Env) (*config.Config, error) {
				c := config.Default()
				c.Runtime.Runtimes = []string{h.runc}
				c.Runtime.Modes.CDI.SpecDirs = []string{specDir}
				c.AcceptEnvvarUnprivileged = true
				return c, nil
			}
			if code := h.run("create", "--bundle", bundle, "ctr"); code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			if files, _ := filepath.Glob(filepath.Join(cacheDir, "cdi-*.bin")); cached && len(files) != 1 {
				t.Errorf("resolved-spec cache files %q, want one", files)
			}
			written := readFile(t, filepath.Join(bundle, "config.json"))

			var want specs.Spec
			if err := json.Unmarshal([]byte(base), &want); err != nil {
				t.Fatal(err)
			}
			if _, err := cache.InjectDevices(&want, tc.devices...); err != nil {
				t.Fatal(err)
			}
			var got specs.Spec
			if err := json.Unmarshal(written, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(canonical(t, &got), canonical(t, &want)) {
				g, _ := json.MarshalIndent(&got, "", " ")
				w, _ := json.MarshalIndent(&want, "", " ")
				t.Errorf("config.json differs from the CDI library's InjectDevices\n got %s\nwant %s", g, w)
			}
			keep := []string{`"x-future"`, `"x-vendor"`}
			if !slices.Contains(tc.devices, "vendor.org/acc.v2=b") { // b mounts over /data
				keep = append(keep, `"x-keep"`)
			}
			for _, k := range keep {
				if !strings.Contains(string(written), k) {
					t.Errorf("field %s runtime-spec does not know was dropped: %s", k, written)
				}
			}
		})
	}
}

// canonical is s encoded and decoded as a generic value, so that nil and
// empty lists compare equal as their encodings do.
func canonical(t *testing.T, s *specs.Spec) any {
	t.Helper()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// BenchmarkCDIMode is the runtime's whole create in process (config.toml
// given, exec stubbed) for a container that asks for 8 GPUs by CDI name
// from a spec shaped like NVIDIA's for an 8-GPU host: per device a node,
// spec-wide 4 control nodes, 29 read-only bind mounts, 3 createContainer
// hooks and an env entry; without and with the resolved-spec cache
// (cache=true: every create but the first reads the cache file).
func BenchmarkCDIMode(b *testing.B) {
	var spec strings.Builder
	spec.WriteString("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  env: [NVIDIA_VISIBLE_DEVICES=void]\n  deviceNodes:\n")
	for i, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
		fmt.Fprintf(&spec, "  - {path: /dev/%s, type: c, major: 195, minor: %d}\n", n, 250+i)
	}
	spec.WriteString("  mounts:\n")
	for i := range 29 {
		fmt.Fprintf(&spec, "  - {hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-%d.so.580.95.05, containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-%d.so.580.95.05, options: [ro, nosuid, nodev, rbind, rprivate]}\n", i, i)
	}
	spec.WriteString("  hooks:\n")
	for _, h := range []string{"create-symlinks --link libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so", "update-ldcache --folder /usr/lib/x86_64-linux-gnu", "disable-device-node-modification"} {
		fmt.Fprintf(&spec, "  - {hookName: createContainer, path: /usr/bin/nvidia-cdi-hook, args: [nvidia-cdi-hook, %s], env: [NVIDIA_CTK_DEBUG=false]}\n", strings.ReplaceAll(h, " ", ", "))
	}
	spec.WriteString("devices:\n")
	var names []string
	for i := range 8 {
		fmt.Fprintf(&spec, "- name: \"%d\"\n  containerEdits:\n    deviceNodes:\n    - {path: /dev/nvidia%d, type: c, major: 195, minor: %d}\n", i, i, i)
		names = append(names, fmt.Sprintf("nvidia.com/gpu=%d", i))
	}
	specDir := b.TempDir()
	if err := os.WriteFile(filepath.Join(specDir, "nvidia.yaml"), []byte(spec.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	base := strings.Replace(cdiBaseSpec, `"example.com/keep": "yes"`, `"example.com/keep": "yes", "cdi.k8s.io/test": "`+strings.Join(names, ",")+`"`, 1)
	bundle := b.TempDir()
	if err := os.Mkdir(filepath.Join(bundle, "rootfs"), 0o755); err != nil {
		b.Fatal(err)
	}
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("cache=%v", cached), func(b *testing.B) {
			rt := &Runtime{
				planner: defaultPlanner(),
				LoadConfig: func(*app.Env) (*config.Config, error) {
					c := config.Default()
					c.Runtime.Runtimes = []string{"/bin/true"}
					c.Runtime.Modes.CDI.SpecDirs = []string{specDir}
					return c, nil
				},
				Exec:    func(string, []string, []string) error { return nil },
				Version: "bench",
			}
			if cached {
				rt.CDICacheDir = filepath.Join(b.TempDir(), "cdi")
			}
			e := &app.Env{Args: []string{"nvidia-container-runtime", "create", "--bundle", bundle, "ctr"},
				Stdout: io.Discard, Stderr: io.Discard, Environ: []string{"PATH=/usr/bin:/bin"}}
			cfgPath := filepath.Join(bundle, "config.json")
			for b.Loop() {
				if err := os.WriteFile(cfgPath, []byte(base), 0o644); err != nil {
					b.Fatal(err)
				}
				if code := rt.Run(e); code != 0 {
					b.Fatalf("exit %d", code)
				}
			}
		})
	}
}
