package cdispec

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/selector"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const (
	synthVersion = "535.309.01"
	uuid0        = "GPU-11111111-2222-3333-4444-555555555555"
	uuid1        = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
	migUUID0     = "MIG-0a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e"
	migUUID1     = "MIG-5f5f5f5f-6a6a-7b7b-8c8c-9d9d9d9d9d9d"
)

// synthDriver is a discovery result of a driver under root (dev root the
// same) with two GPUs, the second in MIG mode with two MIG devices. It
// needs no files: Render only reads the result.
func synthDriver(root string) *discover.Driver {
	j := func(p string) string { return filepath.Join(root, p) }
	node := func(p string, major, minor uint32) discover.DeviceNode {
		return discover.DeviceNode{Path: p, HostPath: j(p), Major: major, Minor: minor, Mode: 0o666}
	}
	lib := func(dir, name, soname string, c caps.Capability, compat32 bool) discover.File {
		p := dir + "/" + name + ".so." + synthVersion
		return discover.File{Name: name + ".so", Capability: c, Path: p, HostPath: j(p), SONAME: soname, Compat32: compat32}
	}
	const l64, l32 = "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"
	file := func(name, p string, c caps.Capability) discover.File {
		return discover.File{Name: name, Capability: c, Path: p, HostPath: j(p)}
	}
	gpu0 := discover.GPU{Index: 0, Minor: 0, UUID: uuid0, BusID: "00000000:41:00.0", Model: "NVIDIA H100 80GB HBM3",
		Node: node("/dev/nvidia0", 195, 0), ProcDir: "/proc/driver/nvidia/gpus/00000000:41:00.0"}
	gpu1 := discover.GPU{Index: 1, Minor: 2, UUID: uuid1, BusID: "00000000:81:00.0", Model: "NVIDIA A100-SXM4-40GB",
		Node: node("/dev/nvidia2", 195, 2), ProcDir: "/proc/driver/nvidia/gpus/00000000:81:00.0",
		MIGCapable: true, MIGEnabled: true, MIGCapsDir: "/proc/driver/nvidia/capabilities/gpu2"}
	gpu1.MIGDevices = []discover.MIGDevice{
		{Index: 0, UUID: migUUID0, GI: 1, CI: 0,
			GIAccess: node("/dev/nvidia-caps/nvidia-cap21", 241, 21), CIAccess: node("/dev/nvidia-caps/nvidia-cap22", 241, 22),
			GIAccessProc: "/proc/driver/nvidia/capabilities/gpu2/mig/gi1/access",
			CIAccessProc: "/proc/driver/nvidia/capabilities/gpu2/mig/gi1/ci0/access"},
		{Index: 1, UUID: migUUID1, GI: 2, CI: 0,
			GIAccess: node("/dev/nvidia-caps/nvidia-cap30", 241, 30), CIAccess: node("/dev/nvidia-caps/nvidia-cap31", 241, 31),
			GIAccessProc: "/proc/driver/nvidia/capabilities/gpu2/mig/gi2/access",
			CIAccessProc: "/proc/driver/nvidia/capabilities/gpu2/mig/gi2/ci0/access"},
	}
	return &discover.Driver{
		Root: root, Version: synthVersion, LibraryVersion: synthVersion,
		Libraries: []discover.File{
			lib(l64, "libnvidia-ml", "libnvidia-ml.so.1", caps.Utility, false),
			lib(l64, "libcuda", "libcuda.so.1", caps.Compute, false),
			lib(l64, "libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1", caps.Compute, false),
			lib(l64, "libnvidia-encode", "libnvidia-encode.so.1", caps.Video, false),
			lib(l64, "libGLX_nvidia", "libGLX_nvidia.so.0", caps.Graphics, false),
			lib(l32, "libcuda", "libcuda.so.1", caps.Compute, true),
		},
		Binaries: []discover.File{
			file("nvidia-smi", "/usr/bin/nvidia-smi", caps.Utility),
			file("nvidia-cuda-mps-control", "/usr/lib/nvidia/current/nvidia-cuda-mps-control", caps.Compute),
		},
		IPCs: []discover.File{
			file("/var/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket", caps.Utility),
		},
		Firmware: []discover.File{
			file("gsp_ga10x.bin", "/lib/firmware/nvidia/"+synthVersion+"/gsp_ga10x.bin", caps.Compute),
		},
		ControlNodes: []discover.DeviceNode{
			node("/dev/nvidiactl", 195, 255), node("/dev/nvidia-uvm", 238, 0),
			node("/dev/nvidia-uvm-tools", 238, 1), node("/dev/nvidia-modeset", 195, 254),
		},
		GPUs: []discover.GPU{gpu0, gpu1},
		ProcFiles: []string{j("/proc/driver/nvidia/params"), j("/proc/driver/nvidia/version"),
			j("/proc/driver/nvidia/registry")},
		LibDirs: []string{l64, l32},
	}
}

func selectAll(t testing.TB, d *discover.Driver) selector.Selection {
	t.Helper()
	sel, err := selector.Resolve(d, []string{"all"})
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n%s", p, lineDiff(string(want), string(got)))
	}
}

// lineDiff shows the first differing lines.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n want: " + a + "\n  got: " + b
		}
	}
	return "(same lines)"
}

func TestRenderGoldenSynthetic(t *testing.T) {
	d := synthDriver("/run/nvidia/driver")
	spec, err := Render(d, selectAll(t, d), Options{Hook: ocispec.HookConfig{Path: "/usr/bin/nvidia-cdi-hook"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Format{FormatYAML, FormatJSON} {
		data, err := Marshal(spec, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		golden(t, "synthetic.golden."+string(f), data)
	}
}

func names(s *cdi.Spec) []string {
	var out []string
	for _, d := range s.Devices {
		out = append(out, d.Name)
	}
	return out
}

func TestDeviceNames(t *testing.T) {
	d := synthDriver("/")
	tests := []struct {
		name       string
		strategies []NameStrategy
		devices    []string
		noAll      bool
		want       []string
	}{
		{name: "default", want: []string{"0", uuid0, "1:0", migUUID0, "1:1", migUUID1, "all"}},
		{name: "index", strategies: []NameStrategy{NameIndex}, want: []string{"0", "1:0", "1:1", "all"}},
		{name: "uuid", strategies: []NameStrategy{NameUUID}, want: []string{uuid0, migUUID0, migUUID1, "all"}},
		{name: "type-index", strategies: []NameStrategy{NameTypeIndex}, want: []string{"gpu0", "mig1:0", "mig1:1", "all"}},
		{name: "every strategy, repeated", strategies: []NameStrategy{NameTypeIndex, NameIndex, NameTypeIndex},
			want: []string{"gpu0", "0", "mig1:0", "1:0", "mig1:1", "1:1", "all"}},
		{name: "no all device", strategies: []NameStrategy{NameIndex}, noAll: true, want: []string{"0", "1:0", "1:1"}},
		{name: "one GPU by UUID", strategies: []NameStrategy{NameIndex}, devices: []string{uuid0}, want: []string{"0", "all"}},
		{name: "one MIG device", strategies: []NameStrategy{NameIndex}, devices: []string{"1:1"}, want: []string{"1:1", "all"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs := tt.devices
			if devs == nil {
				devs = []string{"all"}
			}
			sel, err := selector.Resolve(d, devs)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := Render(d, sel, Options{NameStrategies: tt.strategies, NoAllDevice: tt.noAll})
			if err != nil {
				t.Fatal(err)
			}
			if got := names(spec); !slices.Equal(got, tt.want) {
				t.Errorf("devices %q, want %q", got, tt.want)
			}
		})
	}
}

func findDevice(s *cdi.Spec, name string) *cdi.Device {
	for i := range s.Devices {
		if s.Devices[i].Name == name {
			return &s.Devices[i]
		}
	}
	return nil
}

func nodePaths(e cdi.ContainerEdits) []string {
	var out []string
	for _, n := range e.DeviceNodes {
		out = append(out, n.Path)
	}
	return out
}

func TestEdits(t *testing.T) {
	d := synthDriver("/run/nvidia/driver")
	spec, err := Render(d, selectAll(t, d), Options{SeparateHooks: true,
		Hook: ocispec.HookConfig{Path: "/opt/nctk/nvidia-cdi-hook", LdconfigPath: "/sbin/ldconfig"}})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "nvidia.com/gpu" || spec.Version != "0.5.0" {
		t.Errorf("kind %q version %q, want nvidia.com/gpu 0.5.0 (hostPath on nodes)", spec.Kind, spec.Version)
	}
	wantNodes := map[string][]string{
		"0":   {"/dev/nvidia0"},
		"1:0": {"/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"},
		"1:1": {"/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"},
		"all": {"/dev/nvidia0", "/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22",
			"/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"},
	}
	for name, want := range wantNodes {
		dev := findDevice(spec, name)
		if dev == nil {
			t.Fatalf("no device %q", name)
		}
		if got := nodePaths(dev.ContainerEdits); !slices.Equal(got, want) {
			t.Errorf("device %s nodes %q, want %q", name, got, want)
		}
		if len(dev.ContainerEdits.Mounts)+len(dev.ContainerEdits.Hooks)+len(dev.ContainerEdits.Env) != 0 {
			t.Errorf("device %s has edits beyond its nodes: %+v", name, dev.ContainerEdits)
		}
	}
	n := findDevice(spec, "0").ContainerEdits.DeviceNodes[0]
	if n.HostPath != "/run/nvidia/driver/dev/nvidia0" || n.Type != "c" || n.Major != 195 || n.Minor != 0 ||
		n.Permissions != "rw" || n.FileMode == nil || *n.FileMode != 0o666 || n.GID != nil || n.UID != nil {
		t.Errorf("GPU node %+v", n)
	}

	ce := spec.ContainerEdits
	if got, want := nodePaths(ce), []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}; !slices.Equal(got, want) {
		t.Errorf("control nodes %q, want %q", got, want)
	}
	if want := []string{VoidEnv, "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu:/usr/lib/i386-linux-gnu"}; !slices.Equal(ce.Env, want) {
		t.Errorf("env %q, want %q", ce.Env, want)
	}
	var dsts []string
	for _, m := range ce.Mounts {
		dsts = append(dsts, m.ContainerPath)
		if !strings.HasPrefix(m.HostPath, "/run/nvidia/driver/") {
			t.Errorf("mount %s: host path %s not under the driver root", m.ContainerPath, m.HostPath)
		}
	}
	wantDsts := []string{
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so." + synthVersion,
		"/usr/lib/x86_64-linux-gnu/libcuda.so." + synthVersion,
		"/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so." + synthVersion,
		"/usr/lib/x86_64-linux-gnu/libnvidia-encode.so." + synthVersion,
		"/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so." + synthVersion,
		"/usr/lib/i386-linux-gnu/libcuda.so." + synthVersion,
		"/usr/bin/nvidia-smi",
		"/usr/bin/nvidia-cuda-mps-control",
		"/run/nvidia-persistenced/socket",
		"/lib/firmware/nvidia/" + synthVersion + "/gsp_ga10x.bin",
	}
	if !slices.Equal(dsts, wantDsts) {
		t.Errorf("mounts\n got %q\nwant %q", dsts, wantDsts)
	}
	var subs []string
	for _, h := range ce.Hooks {
		if h.HookName != "createContainer" || h.Path != "/opt/nctk/nvidia-cdi-hook" || h.Args[0] != "nvidia-cdi-hook" {
			t.Errorf("hook %+v", h)
		}
		if !slices.Equal(h.Env, hookargs.Env()) {
			t.Errorf("hook %s env %q, want %q", h.Args[1], h.Env, hookargs.Env())
		}
		subs = append(subs, h.Args[1])
	}
	if want := []string{"create-symlinks", "enable-cuda-compat", "update-ldcache", "disable-device-node-modification"}; !slices.Equal(subs, want) {
		t.Errorf("hooks %q, want %q", subs, want)
	}
	if compat := strings.Join(ce.Hooks[1].Args, " "); compat != "nvidia-cdi-hook enable-cuda-compat --host-driver-version="+synthVersion {
		t.Errorf("compat hook %q", compat)
	}
	ld := strings.Join(ce.Hooks[2].Args, " ")
	if want := "nvidia-cdi-hook update-ldcache --ldconfig-path /sbin/ldconfig --folder /usr/lib/x86_64-linux-gnu --folder /usr/lib/i386-linux-gnu"; ld != want {
		t.Errorf("ldcache hook %q, want %q", ld, want)
	}
	if links := strings.Join(ce.Hooks[0].Args, " "); !strings.Contains(links, "--link libcuda.so."+synthVersion+"::/usr/lib/x86_64-linux-gnu/libcuda.so.1") ||
		!strings.Contains(links, "--link libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so") {
		t.Errorf("symlink hook %q lacks libcuda's links", links)
	}
}

// TestChainedHook checks the default hook layout: one createContainer hook
// whose chain is NVIDIA's separate hooks, in their order, with the
// libraries and their links passed to update-ldcache (--lib) so that it
// writes ld.so.cache in-process.
func TestChainedHook(t *testing.T) {
	d := synthDriver("/run/nvidia/driver")
	hc := ocispec.HookConfig{Path: "/opt/nctk/nvidia-cdi-hook", LdconfigPath: "/sbin/ldconfig"}
	sep, err := Render(d, selectAll(t, d), Options{Hook: hc, SeparateHooks: true})
	if err != nil {
		t.Fatal(err)
	}
	one, err := Render(d, selectAll(t, d), Options{Hook: hc})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.ContainerEdits.Hooks) != 1 {
		t.Fatalf("%d spec-level hooks, want 1", len(one.ContainerEdits.Hooks))
	}
	h := one.ContainerEdits.Hooks[0]
	if h.HookName != "createContainer" || h.Path != hc.Path || h.Args[0] != hookargs.Binary || !slices.Equal(h.Env, hookargs.Env()) {
		t.Errorf("hook %+v", h)
	}
	for _, dev := range one.Devices {
		if len(dev.ContainerEdits.Hooks) != 0 {
			t.Errorf("device %s has hooks", dev.Name)
		}
	}
	segs := hookargs.SplitChain(h.Args[1:])
	if len(segs) != len(sep.ContainerEdits.Hooks) {
		t.Fatalf("chain of %d hooks, want %d (the separate ones)", len(segs), len(sep.ContainerEdits.Hooks))
	}
	common, err := plan.Build(d, plan.Options{Caps: caps.Full(), Target: plan.Target{BinDir: BinDir}})
	if err != nil {
		t.Fatal(err)
	}
	for i, seg := range segs {
		got, err := hookargs.Parse(seg)
		if err != nil {
			t.Fatalf("chain part %q: %v", seg, err)
		}
		want, err := hookargs.Parse(sep.ContainerEdits.Hooks[i].Args[1:])
		if err != nil {
			t.Fatal(err)
		}
		if u, ok := want.(hookargs.UpdateLdcache); ok {
			u.Libs = common.LdcacheLibs()
			if len(u.Libs) == 0 {
				t.Fatal("the plan has no libraries for ld.so.cache")
			}
			want = u
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("chain part %d\n got %+v\nwant %+v", i, got, want)
		}
	}
}

func TestCapabilitySelection(t *testing.T) {
	d := synthDriver("/")
	spec, err := Render(d, selectAll(t, d), Options{Caps: caps.Set{caps.Utility: true}, NameStrategies: []NameStrategy{NameIndex}})
	if err != nil {
		t.Fatal(err)
	}
	var dsts []string
	for _, m := range spec.ContainerEdits.Mounts {
		dsts = append(dsts, m.ContainerPath)
	}
	want := []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so." + synthVersion, "/usr/bin/nvidia-smi",
		"/run/nvidia-persistenced/socket", "/lib/firmware/nvidia/" + synthVersion + "/gsp_ga10x.bin"}
	if !slices.Equal(dsts, want) {
		t.Errorf("utility mounts %q, want %q", dsts, want)
	}
	if got := nodePaths(spec.ContainerEdits); !slices.Equal(got, []string{"/dev/nvidiactl"}) {
		t.Errorf("utility control nodes %q, want only nvidiactl", got)
	}
	if slices.Contains(spec.ContainerEdits.Env, "NVIDIA_CTK_LIBCUDA_DIR") {
		t.Errorf("env %q names libcuda without compute", spec.ContainerEdits.Env)
	}
}

// TestHostRootVersion: on the host (dev root /) no node needs hostPath, so
// a spec without names starting with a digit needs only CDI 0.3.0.
func TestHostRootVersion(t *testing.T) {
	d := synthDriver("/")
	spec, err := Render(d, selectAll(t, d), Options{NameStrategies: []NameStrategy{NameTypeIndex, NameUUID}})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Version != "0.3.0" {
		t.Errorf("cdiVersion %q, want 0.3.0", spec.Version)
	}
	if n := findDevice(spec, "gpu0").ContainerEdits.DeviceNodes[0]; n.HostPath != "" {
		t.Errorf("hostPath %q written though it equals the path", n.HostPath)
	}
}

func TestNvidiaCtkHookPath(t *testing.T) {
	d := synthDriver("/")
	spec, err := Render(d, selectAll(t, d), Options{Hook: ocispec.HookConfig{Path: "/usr/bin/nvidia-ctk"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range spec.ContainerEdits.Hooks {
		if h.Args[0] != "nvidia-ctk" || h.Args[1] != "hook" {
			t.Errorf("hook args %q, want nvidia-ctk hook …", h.Args)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	d := synthDriver("/")
	tests := []struct {
		name string
		sel  selector.Selection
		o    Options
		want string
	}{
		{name: "no device", sel: selector.Selection{}, want: "no device selected"},
		{name: "bad vendor", sel: selectAll(t, d), o: Options{Vendor: "-bad"}, want: `vendor "-bad"`},
		{name: "bad class", sel: selectAll(t, d), o: Options{Class: "a/b"}, want: `class "a/b"`},
		{name: "bad strategy", sel: selectAll(t, d), o: Options{NameStrategies: []NameStrategy{"serial"}}, want: `strategy "serial"`},
		{name: "relative hook", sel: selectAll(t, d), o: Options{Hook: ocispec.HookConfig{Path: "nvidia-cdi-hook"}}, want: "want an absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render(d, tt.sel, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := Render(nil, selector.Selection{}, Options{}); err == nil {
		t.Error("nil driver: no error")
	}
}

// TestLoadThroughCache writes generated specs (YAML and JSON, custom
// vendor and class) into a spec directory and loads them with the CDI
// library's cache, as an engine does.
func TestLoadThroughCache(t *testing.T) {
	d := synthDriver("/run/nvidia/driver")
	dir := t.TempDir()
	var want []string
	for _, tc := range []struct {
		vendor, class string
		f             Format
	}{{"nvidia.com", "gpu", FormatYAML}, {"example.com", "accel", FormatJSON}} {
		spec, err := Render(d, selectAll(t, d), Options{Vendor: tc.vendor, Class: tc.class})
		if err != nil {
			t.Fatal(err)
		}
		data, err := Marshal(spec, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(filepath.Join(dir, tc.vendor+"."+string(tc.f)), data); err != nil {
			t.Fatal(err)
		}
		for _, n := range names(spec) {
			want = append(want, tc.vendor+"/"+tc.class+"="+n)
		}
	}
	c, err := pkgcdi.NewCache(pkgcdi.WithSpecDirs(dir), pkgcdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.GetErrors(); len(errs) > 0 {
		t.Fatalf("cache errors: %v", errs)
	}
	got := c.ListDevices()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("cache devices\n got %q\nwant %q", got, want)
	}
}

// TestMarshalRoundTrip: the YAML writer's output parses back, with the CDI
// library's strict parser, to the spec it was written from.
func TestMarshalRoundTrip(t *testing.T) {
	d := synthDriver("/run/nvidia/driver")
	spec, err := Render(d, selectAll(t, d), Options{NameStrategies: []NameStrategy{NameIndex, NameUUID, NameTypeIndex}})
	if err != nil {
		t.Fatal(err)
	}
	timeout := 5
	uid := uint32(0)
	spec.Annotations = map[string]string{"b": "yes", "a": "0"}
	spec.Devices[0].Annotations = map[string]string{"k": "v: w"}
	spec.ContainerEdits.Hooks[0].Timeout = &timeout
	spec.ContainerEdits.DeviceNodes[0].UID = &uid
	spec.ContainerEdits.Mounts[0].Type = "bind"
	spec.ContainerEdits.AdditionalGIDs = []uint32{44}
	spec.ContainerEdits.Env = append(spec.ContainerEdits.Env, "Q=\"quoted\" 'x' #c", "EMPTY=", "NL=a\nb", "U=ünï\u2028", "on", "1:2", "~", "- x", "a: b", "{x}", "[y]", "*z", "&a", "!t", "%p", "@q", "`r", "|s", ">t", "?u", "'")
	data, err := Marshal(spec, FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	back, err := pkgcdi.ParseSpec(data)
	if err != nil {
		t.Fatalf("parse:\n%s\n%v", data, err)
	}
	if !reflect.DeepEqual(back, spec) {
		t.Errorf("round trip differs:\n%s", data)
	}
	// Podman 4.3's CDI library (v0.5) reads specs with sigs.k8s.io/yaml
	// (YAML 1.1).
	var old cdi.Spec
	if err := yaml.UnmarshalStrict(data, &old); err != nil {
		t.Fatalf("YAML 1.1 parse: %v", err)
	}
	if !reflect.DeepEqual(&old, spec) {
		t.Errorf("YAML 1.1 round trip differs:\n%s", data)
	}
}

// TestMarshalEveryField: every field of the CDI spec types, filled in
// (pointers, lists of two, a map entry, every string distinct), reads back
// from the YAML writer's output with both parsers. A field a newer CDI
// library adds that the writer does not write fails here, not in a spec
// that lost it; an empty intelRdt keeps its {}.
func TestMarshalEveryField(t *testing.T) {
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		case reflect.Struct:
			for i := range v.NumField() {
				fill(v.Field(i))
			}
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			for i := range 2 {
				fill(v.Index(i))
			}
		case reflect.Map:
			m := reflect.MakeMap(v.Type())
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k)
			fill(e)
			m.SetMapIndex(k, e)
			v.Set(m)
		case reflect.String:
			n++
			v.SetString(fmt.Sprintf("s%d", n))
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int32, reflect.Int64:
			n++
			v.SetInt(int64(n))
		case reflect.Uint32, reflect.Uint64:
			n++
			v.SetUint(uint64(n))
		default:
			t.Fatalf("CDI spec field of kind %v: teach this test (and the YAML writer) about it", v.Kind())
		}
	}
	full := &cdi.Spec{}
	fill(reflect.ValueOf(full).Elem())
	emptyRdt := &cdi.Spec{Version: "0.7.0", Kind: "a.b/c", Devices: []cdi.Device{{Name: "d"}},
		ContainerEdits: cdi.ContainerEdits{IntelRdt: &cdi.IntelRdt{}}}
	for name, spec := range map[string]*cdi.Spec{"every field": full, "empty intelRdt": emptyRdt} {
		data, err := Marshal(spec, FormatYAML)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, err := pkgcdi.ParseSpec(data)
		if err != nil {
			t.Fatalf("%s: parse:\n%s\n%v", name, data, err)
		}
		if !reflect.DeepEqual(back, spec) {
			t.Errorf("%s: round trip differs:\n%s", name, data)
		}
		var old cdi.Spec
		if err := yaml.UnmarshalStrict(data, &old); err != nil {
			t.Fatalf("%s: YAML 1.1 parse:\n%s\n%v", name, data, err)
		}
		if !reflect.DeepEqual(&old, spec) {
			t.Errorf("%s: YAML 1.1 round trip differs:\n%s", name, data)
		}
	}
}

func FuzzMarshalYAML(f *testing.F) {
	for _, s := range []string{"plain", "0", "1:0", "yes", "a: b", "- x", "\"q\"", "\n", "ü", "", "#", "PATH=/a:/b", "/dev/nvidia0"} {
		f.Add(s, s, int64(195))
	}
	f.Fuzz(func(t *testing.T, a, b string, n int64) {
		spec := &cdi.Spec{Version: "0.5.0", Kind: "nvidia.com/gpu",
			Devices: []cdi.Device{{Name: a, ContainerEdits: cdi.ContainerEdits{
				Env:         []string{a, b},
				DeviceNodes: []*cdi.DeviceNode{{Path: b, Major: n, Permissions: a}},
			}}},
			ContainerEdits: cdi.ContainerEdits{Mounts: []*cdi.Mount{{HostPath: a, ContainerPath: b, Options: []string{a, b}}},
				Hooks: []*cdi.Hook{{HookName: a, Path: b, Args: []string{b, a}}}},
		}
		data, err := Marshal(spec, FormatYAML)
		if err != nil {
			return // invalid UTF-8
		}
		back, err := pkgcdi.ParseSpec(data)
		if err != nil {
			t.Fatalf("parse:\n%s\n%v", data, err)
		}
		if !reflect.DeepEqual(back, spec) {
			t.Fatalf("round trip differs:\n%s", data)
		}
		var old cdi.Spec
		if err := yaml.UnmarshalStrict(data, &old); err != nil {
			t.Fatalf("YAML 1.1 parse:\n%s\n%v", data, err)
		}
		if !reflect.DeepEqual(&old, spec) {
			t.Fatalf("YAML 1.1 round trip differs:\n%s", data)
		}
	})
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Format
		ok   bool
	}{{"yaml", FormatYAML, true}, {"YAML", FormatYAML, true}, {"yml", FormatYAML, true}, {"json", FormatJSON, true}, {"toml", "", false}} {
		got, err := ParseFormat(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseFormat(%q) = %q, %v", tc.in, got, err)
		}
	}
	for name, want := range map[string]Format{"a.json": FormatJSON, "a.JSON": FormatJSON, "a.yaml": FormatYAML, "a": FormatYAML} {
		if got := FormatOf(name); got != want {
			t.Errorf("FormatOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestWriteFile(t *testing.T) {
	d := synthDriver("/")
	spec, err := Render(d, selectAll(t, d), Options{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := Marshal(spec, FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	name := filepath.Join(dir, "nvidia.yaml")
	if err := os.WriteFile(name, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(name, data); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(name)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v; want 0644", fi.Mode(), err)
	}
	if got, _ := os.ReadFile(name); !bytes.Equal(got, data) {
		t.Error("the file does not hold the data")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := WriteFile(dir, data); err == nil {
		t.Error("a directory as the output: no error")
	}
	// On a fresh host /etc/cdi does not exist: it is created.
	nested := filepath.Join(dir, "etc", "cdi", "nvidia.yaml")
	if err := WriteFile(nested, data); err != nil {
		t.Fatalf("missing directories: %v", err)
	}
	if fi, err := os.Stat(filepath.Dir(nested)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("created directory: %v, %v; want 0755", fi, err)
	}
	if got, _ := os.ReadFile(nested); !bytes.Equal(got, data) {
		t.Error("the nested file does not hold the data")
	}
	if err := WriteFile(filepath.Join(name, "under-a-file.yaml"), data); err == nil {
		t.Error("a file as a parent directory: no error")
	}
}

// manyGPUs is the synthetic driver with n full GPUs (no MIG).
func manyGPUs(n int) *discover.Driver {
	d := synthDriver("/run/nvidia/driver")
	proto := d.GPUs[0]
	d.GPUs = nil
	for i := range n {
		g := proto
		g.Index, g.Minor = i, i
		g.UUID = fmt.Sprintf("GPU-%08x-2222-3333-4444-555555555555", i)
		g.BusID = fmt.Sprintf("00000000:%02x:00.0", i+1)
		g.Node.Path = fmt.Sprintf("/dev/nvidia%d", i)
		g.Node.HostPath = "/run/nvidia/driver" + g.Node.Path
		g.Node.Minor = uint32(i)
		d.GPUs = append(d.GPUs, g)
	}
	return d
}

// BenchmarkRender is spec building alone (plans, names, edits, minimum
// version) for 1 and 8 GPUs.
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) {
			d := manyGPUs(n)
			sel := selectAll(b, d)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Render(d, sel, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMarshal encodes an 8-GPU spec.
func BenchmarkMarshal(b *testing.B) {
	d := manyGPUs(8)
	spec, err := Render(d, selectAll(b, d), Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range []Format{FormatYAML, FormatJSON} {
		b.Run(string(f), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Marshal(spec, f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkValidate is the CDI library's check of an encoded 8-GPU spec.
func BenchmarkValidate(b *testing.B) {
	d := manyGPUs(8)
	spec, err := Render(d, selectAll(b, d), Options{})
	if err != nil {
		b.Fatal(err)
	}
	data, err := Marshal(spec, FormatYAML)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestNeedsMIGUUIDs(t *testing.T) {
	d := synthDriver("/")
	withUUIDs := selectAll(t, d)
	noUUIDs := selectAll(t, d)
	noUUIDs.MIG = slices.Clone(noUUIDs.MIG)
	for i := range noUUIDs.MIG {
		noUUIDs.MIG[i].MIG.UUID = ""
	}
	gpuOnly, err := selector.Resolve(d, []string{"0"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		sel  selector.Selection
		o    Options
		want bool
	}{
		{name: "MIG UUIDs known", sel: withUUIDs, want: false},
		{name: "MIG UUIDs unknown, default names", sel: noUUIDs, want: true},
		{name: "MIG UUIDs unknown, index names", sel: noUUIDs, o: Options{NameStrategies: []NameStrategy{NameIndex, NameTypeIndex}}, want: false},
		{name: "no MIG device selected", sel: gpuOnly, want: false},
	}
	for _, tt := range tests {
		if got := needsMIGUUIDs(tt.sel, tt.o); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	// Without UUIDs the MIG devices keep their index names.
	spec, err := Render(d, noUUIDs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(spec), []string{"0", uuid0, "1:0", "1:1", "all"}; !slices.Equal(got, want) {
		t.Errorf("devices %q, want %q", got, want)
	}
}

// TestCheck: Check (the library's validators on the value) and Validate
// (the library parsing the encoded file) agree, on the generated spec and
// on broken variants of it.
func TestCheck(t *testing.T) {
	d := synthDriver("/run/nvidia/driver")
	fresh := func() *cdi.Spec {
		s, err := Render(d, selectAll(t, d), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name    string
		breakIt func(s *cdi.Spec)
		ok      bool
	}{
		{name: "generated", breakIt: func(*cdi.Spec) {}, ok: true},
		{name: "version too low", breakIt: func(s *cdi.Spec) { s.Version = "0.3.0" }},
		{name: "unknown version", breakIt: func(s *cdi.Spec) { s.Version = "9.9.9" }},
		{name: "bad vendor", breakIt: func(s *cdi.Spec) { s.Kind = "-nvidia.com/gpu" }},
		{name: "bad device name", breakIt: func(s *cdi.Spec) { s.Devices[0].Name = "a/b" }},
		{name: "duplicate device", breakIt: func(s *cdi.Spec) { s.Devices[1].Name = s.Devices[0].Name }},
		{name: "no devices", breakIt: func(s *cdi.Spec) { s.Devices = nil }},
		{name: "empty device edits", breakIt: func(s *cdi.Spec) { s.Devices[0].ContainerEdits = cdi.ContainerEdits{} }},
		{name: "bad hook name", breakIt: func(s *cdi.Spec) { s.ContainerEdits.Hooks[0].HookName = "preStart" }},
		{name: "bad env", breakIt: func(s *cdi.Spec) { s.ContainerEdits.Env = append(s.ContainerEdits.Env, "NOVALUE") }},
		{name: "bad device node type", breakIt: func(s *cdi.Spec) { s.Devices[0].ContainerEdits.DeviceNodes[0].Type = "x" }},
		{name: "bad permissions", breakIt: func(s *cdi.Spec) { s.ContainerEdits.DeviceNodes[0].Permissions = "rwx" }},
		{name: "empty mount", breakIt: func(s *cdi.Spec) { s.ContainerEdits.Mounts[0].HostPath = "" }},
		{name: "annotations", breakIt: func(s *cdi.Spec) { s.Annotations = map[string]string{"a": "b"}; s.Version = "0.6.0" }, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fresh()
			tt.breakIt(s)
			checkErr := Check(s)
			data, err := Marshal(s, FormatYAML)
			if err != nil {
				t.Fatal(err)
			}
			validateErr := Validate(data)
			if (checkErr == nil) != tt.ok || (validateErr == nil) != tt.ok {
				t.Errorf("Check: %v; Validate: %v; want ok=%v", checkErr, validateErr, tt.ok)
			}
			if _, err := Encode(s, FormatJSON); (err == nil) != tt.ok {
				t.Errorf("Encode: %v, want ok=%v", err, tt.ok)
			}
		})
	}
	if err := Check(nil); err == nil {
		t.Error("nil spec: no error")
	}
}
