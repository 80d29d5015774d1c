package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/fixture"
)

// featureRoot is a one-GPU fixture driver root with the feature-gated
// devices (fixture.FeatureNodes), the udev database and cuFile's
// configuration.
func featureRoot(t *testing.T) *fixture.Root {
	t.Helper()
	fx := fixture.Build(t, fixture.Spec{GPUs: 1, Features: true})
	if !fx.DeviceNodes {
		t.Skipf("fixture root without device nodes: %s", fx.NoDeviceNodesReason)
	}
	return fx
}

// createWith runs `create` on a bundle holding spec with the production
// planner over the driver root, config changed by mod; rootfs, when not nil,
// fills the bundle's rootfs first. It returns the bundle and the written
// config.json, decoded whole.
func createWith(t *testing.T, driverRoot, spec string, mod func(*config.Config), rootfs func(dir string)) (string, *specs.Spec) {
	t.Helper()
	bundle := writeBundle(t, spec)
	if rootfs != nil {
		rootfs(filepath.Join(bundle, "rootfs"))
	}
	h := newHarness(t)
	h.rt.planner = defaultPlanner()
	h.rt.LoadConfig = func(*app.Env) (*config.Config, error) {
		c := config.Default()
		c.Runtime.Runtimes = []string{h.runc}
		c.CLI.Root = driverRoot
		if mod != nil {
			mod(c)
		}
		return c, nil
	}
	if code := h.run("create", "--bundle", bundle, "ctr"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, h.stderr.String())
	}
	if !h.exec.called {
		t.Fatal("runc not exec'd")
	}
	var s specs.Spec
	if err := json.Unmarshal(readFile(t, filepath.Join(bundle, "config.json")), &s); err != nil {
		t.Fatal(err)
	}
	return bundle, &s
}

func devicePaths(s *specs.Spec) []string {
	var out []string
	if s.Linux != nil {
		for _, d := range s.Linux.Devices {
			out = append(out, d.Path)
		}
	}
	return out
}

func allowed(s *specs.Spec, major, minor uint32) bool {
	return s.Linux != nil && s.Linux.Resources != nil && slices.ContainsFunc(s.Linux.Resources.Devices, func(r specs.LinuxDeviceCgroup) bool {
		return r.Allow && r.Major != nil && *r.Major == int64(major) && r.Minor != nil && *r.Minor == int64(minor)
	})
}

// TestRuntimeFeatures: NVIDIA_GDS, NVIDIA_MOFED, NVIDIA_GDRCOPY and
// NVIDIA_NVSWITCH set to "enabled" give the container those nodes (device
// entries and cgroup rules) and, for GDS, the udev and cuFile mounts; the
// process gets the groups of the nodes that are not world read-writable,
// unless features.no-additional-gids-for-device-nodes is set.
func TestRuntimeFeatures(t *testing.T) {
	fx := featureRoot(t)
	tests := []struct {
		name   string
		env    []string
		noGIDs bool
		nodes  []string
		mounts []string
		gids   []uint32
	}{
		{name: "none asked", env: []string{"NVIDIA_VISIBLE_DEVICES=0"}},
		{name: "gds", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled"},
			nodes: []string{"/dev/nvidia-fs0"}, mounts: []string{"/run/udev", "/etc/cufile.json"}},
		{name: "mofed", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MOFED=enabled"},
			nodes: []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"}, gids: []uint32{4242}},
		{name: "gdrcopy", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDRCOPY=enabled"},
			nodes: []string{"/dev/gdrdrv"}, gids: []uint32{4343}},
		{name: "nvswitch (root's group: no gid)", env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_NVSWITCH=enabled"},
			nodes: []string{"/dev/nvidia-nvswitch0", "/dev/nvidia-nvswitchctl"}},
		{name: "all four", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled", "NVIDIA_MOFED=enabled", "NVIDIA_GDRCOPY=enabled", "NVIDIA_NVSWITCH=enabled"},
			nodes:  []string{"/dev/nvidia-fs0", "/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0", "/dev/gdrdrv", "/dev/nvidia-nvswitch0", "/dev/nvidia-nvswitchctl"},
			mounts: []string{"/run/udev", "/etc/cufile.json"}, gids: []uint32{4242, 4343}},
		{name: "opt-out of additional gids", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MOFED=enabled", "NVIDIA_GDRCOPY=enabled"}, noGIDs: true,
			nodes: []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0", "/dev/gdrdrv"}},
		{name: "not enabled", env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=true", "NVIDIA_MOFED=disabled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, s := createWith(t, fx.Path, envSpec(t, tt.env...), func(c *config.Config) {
				c.Features.NoAdditionalGIDsForDeviceNodes = tt.noGIDs
			}, nil)
			var got []string
			for _, p := range devicePaths(s) {
				if slices.ContainsFunc(fixture.FeatureNodes(), func(n fixture.FeatureNode) bool { return n.Path == p }) {
					got = append(got, p)
				}
			}
			if !reflect.DeepEqual(got, tt.nodes) {
				t.Errorf("feature nodes %q, want %q", got, tt.nodes)
			}
			for _, n := range fixture.FeatureNodes() {
				if slices.Contains(tt.nodes, n.Path) != allowed(s, n.Major, n.Minor) {
					t.Errorf("%s: cgroup rule %v, want %v", n.Path, !slices.Contains(tt.nodes, n.Path), slices.Contains(tt.nodes, n.Path))
				}
			}
			var mounts []string
			for _, m := range s.Mounts {
				if m.Destination == "/run/udev" || m.Destination == "/etc/cufile.json" {
					mounts = append(mounts, m.Destination)
					if m.Source != filepath.Join(fx.Path, m.Destination) || !slices.Contains(m.Options, "ro") {
						t.Errorf("mount %+v", m)
					}
				}
			}
			if !reflect.DeepEqual(mounts, tt.mounts) {
				t.Errorf("feature mounts %q, want %q", mounts, tt.mounts)
			}
			if g := s.Process.User.AdditionalGids; !reflect.DeepEqual(g, tt.gids) {
				t.Errorf("additionalGids %v, want %v", g, tt.gids)
			}
		})
	}
}

// TestRuntimeMusl: a musl image (Alpine: /lib/ld-musl-x86_64.so.1) gets
// the directory of the injected libraries in /etc/ld-musl-x86_64.path,
// before musl's default path; a glibc image gets no such file.
func TestRuntimeMusl(t *testing.T) {
	fx := fixture.Build(t, fixture.Spec{GPUs: 1})
	spec := envSpec(t, "NVIDIA_VISIBLE_DEVICES=0")
	alpine := func(dir string) {
		for p, content := range map[string]string{"lib/ld-musl-x86_64.so.1": "elf", "etc/alpine-release": "3.20.3\n"} {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	bundle, s := createWith(t, fx.Path, spec, nil, alpine)
	var libDir string
	for _, m := range s.Mounts {
		if strings.HasPrefix(filepath.Base(m.Destination), "libcuda.so.") {
			libDir = filepath.Dir(m.Destination)
		}
	}
	if libDir == "" {
		t.Fatal("no libcuda mount")
	}
	got, err := os.ReadFile(filepath.Join(bundle, "rootfs/etc/ld-musl-x86_64.path"))
	if err != nil {
		t.Fatal(err)
	}
	if want := libDir + "\n/lib\n/usr/local/lib\n/usr/lib\n"; string(got) != want {
		t.Errorf("ld-musl-x86_64.path = %q, want %q", got, want)
	}

	bundle, _ = createWith(t, fx.Path, spec, nil, nil)
	if m, _ := filepath.Glob(filepath.Join(bundle, "rootfs/etc/ld-musl-*")); len(m) != 0 {
		t.Errorf("glibc image got %v", m)
	}
}

// kindSpecs are CDI specs for TestRuntimeKinds: the GPU Operator's
// management kind and nvidia.com/gpu, each device with its own node.
var kindSpecs = map[string]string{
	"management.yaml": `cdiVersion: 0.5.0
kind: management.nvidia.com/gpu
devices:
- name: all
  containerEdits:
    deviceNodes:
    - {path: /dev/mgmt-all, type: c, major: 250, minor: 1}
`,
	"gpu.yaml": `cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - {path: /dev/cdi-gpu0, type: c, major: 250, minor: 10}
- name: all
  containerEdits:
    deviceNodes:
    - {path: /dev/cdi-gpu-all, type: c, major: 250, minor: 11}
`,
}

// TestRuntimeKinds: in cdi mode NVIDIA_VISIBLE_DEVICES=all is a device of
// modes.cdi.default-kind (the GPU Operator's management.nvidia.com/gpu);
// runtime.nvidia.com/gpu=<id> is planned by the runtime itself, with no
// spec file; CDI names given as volume mounts under
// /var/run/nvidia-container-devices/cdi are injected like the variable's.
func TestRuntimeKinds(t *testing.T) {
	fx := fixture.Build(t, fixture.Spec{GPUs: 1})
	if !fx.DeviceNodes {
		t.Skipf("fixture root without device nodes: %s", fx.NoDeviceNodesReason)
	}
	gpuNode := "/dev/nvidia" + strconv.Itoa(fx.GPUs[0].Minor)
	specDir := t.TempDir()
	for name, content := range kindSpecs {
		if err := os.WriteFile(filepath.Join(specDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cdiMode := func(kind string) func(*config.Config) {
		return func(c *config.Config) {
			c.Runtime.Mode = config.ModeCDI
			c.Runtime.Modes.CDI.SpecDirs = []string{specDir}
			if kind != "" {
				c.Runtime.Modes.CDI.DefaultKind = kind
			}
		}
	}
	volumeMounts := func(c *config.Config) {
		c.Runtime.Modes.CDI.SpecDirs = []string{specDir}
		c.AcceptDeviceListAsVolumeMounts = true
	}
	devMount := func(dst string) string {
		return `"mounts": [{"source": "/dev/null", "destination": "` + dst + `", "type": "bind", "options": ["bind", "ro"]}],`
	}
	withMount := func(env, dst string) string {
		return strings.Replace(envSpec(t, env), `"root":`, devMount(dst)+` "root":`, 1)
	}
	tests := []struct {
		name    string
		spec    string
		mod     func(*config.Config)
		want    []string // devices that must be there
		notWant []string
	}{
		{name: "cdi mode, management kind", spec: envSpec(t, "NVIDIA_VISIBLE_DEVICES=all"), mod: cdiMode("management.nvidia.com/gpu"),
			want: []string{"/dev/mgmt-all"}, notWant: []string{gpuNode, "/dev/cdi-gpu-all"}},
		{name: "cdi mode, default kind nvidia.com/gpu", spec: envSpec(t, "NVIDIA_VISIBLE_DEVICES=0"), mod: cdiMode(""),
			want: []string{"/dev/cdi-gpu0"}, notWant: []string{gpuNode}},
		{name: "auto mode: plain ids are the runtime's", spec: envSpec(t, "NVIDIA_VISIBLE_DEVICES=0"), mod: func(c *config.Config) { c.Runtime.Modes.CDI.SpecDirs = []string{specDir} },
			want: []string{gpuNode}, notWant: []string{"/dev/cdi-gpu0"}},
		{name: "runtime.nvidia.com/gpu", spec: envSpec(t, "NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=0"), mod: cdiMode(""),
			want: []string{gpuNode, "/dev/nvidiactl"}, notWant: []string{"/dev/cdi-gpu0"}},
		{name: "runtime.nvidia.com/gpu as default kind", spec: envSpec(t, "NVIDIA_VISIBLE_DEVICES=all"), mod: cdiMode("runtime.nvidia.com/gpu"),
			want: []string{gpuNode}, notWant: []string{"/dev/cdi-gpu-all", "/dev/mgmt-all"}},
		{name: "volume mount of a CDI name", spec: withMount("NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0"),
			mod: volumeMounts, want: []string{"/dev/cdi-gpu0"}, notWant: []string{gpuNode}},
		{name: "volume mount of a CDI name, = form", spec: withMount("NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=all"),
			mod: volumeMounts, want: []string{"/dev/cdi-gpu-all"}},
		{name: "volume mount of a runtime.nvidia.com name", spec: withMount("NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices", "/var/run/nvidia-container-devices/cdi/runtime.nvidia.com/gpu/0"),
			mod: volumeMounts, want: []string{gpuNode}, notWant: []string{"/dev/cdi-gpu0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, s := createWith(t, fx.Path, tt.spec, tt.mod, nil)
			got := devicePaths(s)
			for _, p := range tt.want {
				if !slices.Contains(got, p) {
					t.Errorf("no %s in %q", p, got)
				}
			}
			for _, p := range tt.notWant {
				if slices.Contains(got, p) {
					t.Errorf("%s in %q", p, got)
				}
			}
		})
	}

	// Mixing the runtime's kind with CDI devices fails before runc runs.
	bundle := writeBundle(t, envSpec(t, "NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=0,nvidia.com/gpu=0"))
	h := newHarness(t)
	h.rt.planner = defaultPlanner()
	h.rt.LoadConfig = func(*app.Env) (*config.Config, error) {
		c := config.Default()
		c.Runtime.Runtimes = []string{h.runc}
		c.CLI.Root = fx.Path
		cdiMode("")(c)
		return c, nil
	}
	if code := h.run("create", "--bundle", bundle, "ctr"); code != 1 || h.exec.called || !strings.Contains(h.stderr.String(), "cannot be requested together") {
		t.Errorf("mixed kinds: exit %d, exec %v, stderr %q", code, h.exec.called, h.stderr.String())
	}
}
