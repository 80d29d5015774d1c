package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// runcCase is one container started through nvidia-container-runtime with
// runc.
type runcCase struct {
	t      *testing.T
	host   *gpuHost
	rt     *e2e.Runc
	rootfs string
	bundle string
	id     string
}

// newRuncCase makes a bundle running the probe over a copy of image, with
// env added to the process environment (nil: no NVIDIA variable at all),
// and a runtime driver for nvidia-container-runtime configured for host.
func newRuncCase(t *testing.T, host *gpuHost, image string, layout e2e.Layout, env ...string) *runcCase {
	t.Helper()
	c := &runcCase{t: t, host: host, rootfs: copyRootfs(t, image)}
	c.bundle = e2e.MakeBundle(t, c.rootfs, "/bin/sh", "-c", probeScript(layout.LibDir()))
	e2e.EditSpec(t, c.bundle, func(s *specs.Spec) {
		s.Process.Env = append(s.Process.Env, env...)
		s.Mounts = append(s.Mounts, specs.Mount{Destination: probeLdconfig, Type: "bind", Source: hostLdconfig,
			Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	})
	c.rt = e2e.NewRuntime(t, tool(t, "nvidia-container-runtime"))
	c.rt.Env = append(c.rt.Env, host.Env...)
	c.id = "nctk-" + filepath.Base(c.bundle)
	return c
}

func (c *runcCase) spec() []byte { return readFile(c.t, filepath.Join(c.bundle, "config.json")) }

// createContainerHooks are the createContainer hooks of the case's
// config.json.
func (c *runcCase) createContainerHooks() []specs.Hook {
	c.t.Helper()
	var spec specs.Spec
	if err := json.Unmarshal(c.spec(), &spec); err != nil {
		c.t.Fatal(err)
	}
	if spec.Hooks == nil {
		return nil
	}
	return spec.Hooks.CreateContainer
}

// run runs the container with `nvidia-container-runtime run`.
func (c *runcCase) run() string {
	c.t.Helper()
	res := c.rt.Run(c.bundle, c.id)
	if !res.OK() {
		c.t.Fatalf("nvidia-container-runtime run: %s", res)
	}
	return res.Combined()
}

// mustFailCreate runs create, which must fail before anything is modified:
// the bundle and the image are as they were and runc made no container.
// It returns the runtime's messages.
func (c *runcCase) mustFailCreate() string {
	t := c.t
	t.Helper()
	before, beforeRoot := snapshot(t, c.bundle), snapshot(t, c.rootfs)
	beforeSpec := c.spec()
	res := c.rt.Create(c.bundle, c.id)
	if res.OK() {
		t.Fatalf("create succeeded, want an error")
	}
	msg := res.Combined()
	if !strings.Contains(msg, "nvidia-container-runtime") {
		t.Errorf("the error does not say which tool failed:\n%s", msg)
	}
	if !bytes.Equal(c.spec(), beforeSpec) || snapshot(t, c.bundle) != before {
		t.Errorf("a failed create modified the bundle")
	}
	if snapshot(t, c.rootfs) != beforeRoot {
		t.Errorf("a failed create modified the image")
	}
	if st, err := c.rt.State(c.id); err == nil {
		t.Errorf("a failed create left a container (%s)", st.Status)
	}
	return msg
}

// runcFixture is shared by the runc tests of one driver layout.
type runcFixture struct {
	host  *gpuHost
	image string
}

func newRuncFixture(t *testing.T, spec fixture.Spec, img e2e.RootfsOptions) runcFixture {
	t.Helper()
	skipShort(t)
	e2e.RequireRoot(t)
	e2e.RequireTool(t, "runc")
	return runcFixture{host: newHost(t, spec), image: e2e.BuildRootfs(t, img)}
}

// TestRuncGPU runs GPU containers through nvidia-container-runtime with the
// host's runc over a 4-GPU fixture driver (Debian multiarch layout) and a
// Debian-layout busybox+glibc image.
func TestRuncGPU(t *testing.T) {
	f := newRuncFixture(t, fixture.Spec{Layout: "multiarch", GPUs: 4}, e2e.RootfsOptions{})
	libDir := e2e.LayoutDebian.LibDir()

	t.Run("create-start/devices=1,3", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=1,3")
		before := c.spec()
		w := want{host: f.host, GPUs: []int{1, 3}, LibDir: libDir}
		if res := c.rt.Create(c.bundle, c.id); !res.OK() {
			t.Fatalf("nvidia-container-runtime create: %s\n%s", res, c.rt.Output(c.id))
		}
		checkSpecEdit(t, before, c.spec(), w)
		if res := c.rt.Start(c.id); !res.OK() {
			t.Fatalf("start: %s", res)
		}
		if err := c.rt.WaitStopped(c.id, time.Minute); err != nil {
			t.Fatal(err)
		}
		checkGPU(t, c.rt.Output(c.id), w)
	})
	t.Run("run/all", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=all")
		checkGPU(t, c.run(), want{host: f.host, GPUs: []int{0, 1, 2, 3}, LibDir: libDir})
	})
	t.Run("run/uuid-and-bus-id", func(t *testing.T) {
		t.Parallel()
		g0, g2 := f.host.gpu(t, 0), f.host.gpu(t, 2)
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES="+g2.UUID+","+g0.BusID)
		checkGPU(t, c.run(), want{host: f.host, GPUs: []int{0, 2}, LibDir: libDir})
	})
	t.Run("run/none", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=none")
		out := c.run()
		p := parseProbe(out)
		if got := p.section(t, "cudaprobe"); !strings.Contains(got, fmt.Sprintf("cuDriverGetVersion: %d\n", cudaVersion535)) {
			t.Errorf("none: cudaprobe does not get the driver's libraries:\n%s", got)
		}
		for path := range p.devices(t) {
			if gpuNode(path) {
				t.Errorf("none: GPU device node %s in the container", path)
			}
		}
		for _, r := range p.cgroupRules(t) {
			if f := strings.Fields(r); len(f) == 3 && strings.HasPrefix(f[1], "195:") && f[1] != "195:255" && f[1] != "195:254" {
				t.Errorf("none: the device cgroup allows a GPU: %q", r)
			}
		}
		if t.Failed() {
			t.Logf("container output:\n%s", out)
		}
	})
	for _, env := range [][]string{nil, {"NVIDIA_VISIBLE_DEVICES=void"}, {"NVIDIA_VISIBLE_DEVICES="}} {
		name := "untouched/unset"
		if env != nil {
			name = "untouched/" + env[0]
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, env...)
			before := c.spec()
			if res := c.rt.Create(c.bundle, c.id); !res.OK() {
				t.Fatalf("create: %s\n%s", res, c.rt.Output(c.id))
			}
			if after := c.spec(); !bytes.Equal(before, after) {
				t.Errorf("config.json changed for a container that asked for no GPU:\nbefore %s\nafter  %s", before, after)
			}
			if res := c.rt.Start(c.id); !res.OK() {
				t.Fatalf("start: %s", res)
			}
			if err := c.rt.WaitStopped(c.id, time.Minute); err != nil {
				t.Fatal(err)
			}
			checkNoGPU(t, c.rt.Output(c.id))
		})
	}
	t.Run("capabilities=utility", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility")
		out := c.run()
		p := parseProbe(out)
		if got := p.section(t, "cudaprobe"); !strings.Contains(got, e2e.CudaprobeNoDriver) {
			t.Errorf("utility only: libcuda (a compute library) reached the container:\n%s", got)
		}
		if got := p.section(t, "smi"); !strings.Contains(got, "couldn't communicate with the NVIDIA driver") {
			t.Errorf("utility only: nvidia-smi does not reach NVML:\n%s", got)
		}
		if _, ok := p.devices(t)["/dev/nvidia-uvm"]; ok {
			t.Errorf("utility only: /dev/nvidia-uvm (compute) in the container")
		}
	})

	t.Run("requirement/disabled", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=2",
			"NVIDIA_REQUIRE_CUDA=cuda>=13.1", "NVIDIA_DISABLE_REQUIRE=true")
		checkGPU(t, c.run(), want{host: f.host, GPUs: []int{2}, LibDir: libDir})
	})
	t.Run("requirement/met", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=2",
			"NVIDIA_REQUIRE_CUDA=cuda>=12.0 driver>=535")
		checkGPU(t, c.run(), want{host: f.host, GPUs: []int{2}, LibDir: libDir})
	})
	// A legacy CUDA image (CUDA_VERSION, no NVIDIA_VISIBLE_DEVICES) gets
	// every GPU and every capability.
	t.Run("legacy/CUDA_VERSION=12.0", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "CUDA_VERSION=12.0.1")
		checkGPU(t, c.run(), want{host: f.host, GPUs: []int{0, 1, 2, 3}, LibDir: libDir, Display: true})
	})

	// Errors: a clear message, nothing modified, no container.
	t.Run("error/legacy-CUDA_VERSION=13.1", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "CUDA_VERSION=13.1.0")
		msg := c.mustFailCreate()
		for _, s := range []string{"13.1", "12.2", f.host.Root.Version} {
			if !strings.Contains(msg, s) {
				t.Errorf("the legacy requirement error does not mention %q:\n%s", s, msg)
			}
		}
	})
	t.Run("error/requirement", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=13.1")
		msg := c.mustFailCreate()
		checkRequirementMessage(t, msg, f.host)
	})
	for _, tc := range []struct{ name, env, mention string }{
		{"device-out-of-range", "NVIDIA_VISIBLE_DEVICES=7", "7"},
		{"device-malformed", "NVIDIA_VISIBLE_DEVICES=1,x", "x"},
		{"requirement-malformed", "NVIDIA_REQUIRE_CUDA=cuda>>12", "cuda>>12"},
		{"capability-unknown", "NVIDIA_DRIVER_CAPABILITIES=compute,warp", "warp"},
	} {
		t.Run("error/"+tc.name, func(t *testing.T) {
			t.Parallel()
			env := []string{tc.env}
			if !strings.HasPrefix(tc.env, "NVIDIA_VISIBLE_DEVICES=") {
				env = append(env, "NVIDIA_VISIBLE_DEVICES=all")
			}
			c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, env...)
			msg := c.mustFailCreate()
			if !strings.Contains(msg, tc.mention) {
				t.Errorf("the error does not name %q:\n%s", tc.mention, msg)
			}
		})
	}
	t.Run("error/malformed-config.json", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=all")
		spec := c.spec()
		bad := spec[:len(spec)/2] // cut in the middle of the document
		if err := os.WriteFile(filepath.Join(c.bundle, "config.json"), bad, 0o644); err != nil {
			t.Fatal(err)
		}
		msg := c.mustFailCreate()
		if !strings.Contains(msg, filepath.Join(c.bundle, "config.json")) {
			t.Errorf("the error does not name the file:\n%s", msg)
		}
	})
	t.Run("error/config.json-wrong-type", func(t *testing.T) {
		t.Parallel()
		c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=all")
		var doc map[string]any
		if err := json.Unmarshal(c.spec(), &doc); err != nil {
			t.Fatal(err)
		}
		doc["process"].(map[string]any)["env"] = "NVIDIA_VISIBLE_DEVICES=all"
		data, _ := json.Marshal(doc)
		if err := os.WriteFile(filepath.Join(c.bundle, "config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		msg := c.mustFailCreate()
		if !strings.Contains(msg, "env") {
			t.Errorf("the error does not name the field:\n%s", msg)
		}
	})
}

// checkRequirementMessage asserts that a failed CUDA requirement names the
// condition, the host's CUDA version and its driver version.
func checkRequirementMessage(t *testing.T, msg string, h *gpuHost) {
	t.Helper()
	for _, s := range []string{"cuda>=13.1", "12.2", h.Root.Version} {
		if !strings.Contains(strings.ToLower(msg), s) {
			t.Errorf("the requirement error does not mention %q:\n%s", s, msg)
		}
	}
}

// gpuNode reports whether path is a GPU's node (/dev/nvidiaN).
func gpuNode(path string) bool {
	n, ok := strings.CutPrefix(path, "/dev/nvidia")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// checkSpecEdit checks what create wrote into config.json: the selected
// nodes as linux.devices with an allow rule each, every new mount a
// read-only, nosuid, nodev, rprivate bind, and hooks that inherit nothing
// from the container's environment.
func checkSpecEdit(t *testing.T, before, after []byte, w want) {
	t.Helper()
	var b, a specs.Spec
	if err := json.Unmarshal(before, &b); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(after, &a); err != nil {
		t.Fatalf("config.json after create: %v", err)
	}
	wantDevs := w.devices(t)
	got := map[string]devNode{}
	for _, d := range a.Linux.Devices {
		if d.Type != "c" {
			t.Errorf("linux.devices %s has type %q", d.Path, d.Type)
		}
		got[d.Path] = devNode{uint32(d.Major), uint32(d.Minor)}
	}
	if !mapsEqual(got, wantDevs) {
		t.Errorf("linux.devices:\n got  %v\n want %v", sortedDevs(got), sortedDevs(wantDevs))
	}
	allowed := map[string]bool{}
	if a.Linux.Resources != nil {
		for _, r := range a.Linux.Resources.Devices {
			if r.Allow && r.Type == "c" && r.Major != nil && r.Minor != nil {
				allowed[fmt.Sprintf("%d:%d", *r.Major, *r.Minor)] = strings.Contains(r.Access, "r") && strings.Contains(r.Access, "w")
			}
		}
	}
	for p, d := range wantDevs {
		if !allowed[d.String()] {
			t.Errorf("linux.resources.devices has no rw allow rule for %s (%s)", p, d)
		}
	}
	old := map[string]bool{}
	for _, m := range b.Mounts {
		old[m.Destination] = true
	}
	added := 0
	for _, m := range a.Mounts {
		if old[m.Destination] {
			continue
		}
		added++
		if strings.HasSuffix(m.Destination, "/socket") {
			continue
		}
		for _, o := range []string{"ro", "nosuid", "nodev", "rprivate"} {
			if !slices.Contains(m.Options, o) {
				t.Errorf("mount %s (%s) lacks %s: %v", m.Destination, m.Source, o, m.Options)
			}
		}
	}
	if added == 0 {
		t.Errorf("create added no mount")
	}
	// The symlinks and ld.so.cache are done by the wrapper in the rootfs
	// before runc runs; a createContainer hook is left only for the
	// /proc/driver/nvidia view, and only where the kernel shows the driver
	// (checkProcHook). Without a driver, no hook at all (checkGPU then
	// shows libcuda.so.1 resolved through the cache and ldconfig -p).
	_, procErr := os.Stat("/proc/driver/nvidia")
	var subs []string
	for _, seg := range hookSegments(a) {
		subs = append(subs, seg[0])
	}
	switch {
	case procErr != nil && (a.Hooks != nil && len(a.Hooks.CreateContainer) > 0):
		t.Errorf("create added createContainer hooks %q on a host without a driver in procfs: want none", subs)
	case procErr == nil && !slices.Equal(subs, []string{"mount-proc-driver"}):
		t.Errorf("createContainer hook subcommands %q, want only mount-proc-driver", subs)
	}
	if a.Hooks != nil {
		keys := map[string]bool{}
		for _, e := range b.Process.Env {
			k, _, _ := strings.Cut(e, "=")
			keys[k] = true
		}
		for _, h := range a.Hooks.CreateContainer {
			if len(h.Env) == 0 {
				t.Errorf("hook %v has no explicit environment", h.Args)
			}
			for _, e := range h.Env {
				if k, _, _ := strings.Cut(e, "="); keys[k] && k != "PATH" {
					t.Errorf("hook %v gets the container's %s", h.Args, k)
				}
			}
		}
	}
	checkProcHook(t, a, w)
	if t.Failed() {
		t.Logf("config.json after create:\n%s", after)
	}
}

// hookSegments returns the nvidia-cdi-hook invocations of the spec's
// createContainer hooks: each hook's arguments after the program name, split
// at ";" (one hook process may run several subcommands in a chain).
func hookSegments(s specs.Spec) [][]string {
	var segs [][]string
	if s.Hooks == nil {
		return nil
	}
	for _, h := range s.Hooks.CreateContainer {
		if len(h.Args) < 2 {
			continue
		}
		var cur []string
		for _, a := range append(h.Args[1:], ";") {
			if a != ";" {
				cur = append(cur, a)
				continue
			}
			if len(cur) > 0 {
				segs = append(segs, cur)
			}
			cur = nil
		}
	}
	return segs
}

// checkProcHook asserts that the spec's mount-proc-driver hook exposes
// exactly the selected GPUs' /proc/driver/nvidia/gpus directories; on a host
// whose kernel shows no /proc/driver/nvidia (neither will the container's
// procfs) there must be no such hook.
func checkProcHook(t *testing.T, s specs.Spec, w want) {
	t.Helper()
	if _, err := os.Stat("/proc/driver/nvidia"); err != nil {
		for _, seg := range hookSegments(s) {
			if seg[0] == "mount-proc-driver" {
				t.Errorf("mount-proc-driver hook %q on a host without /proc/driver/nvidia: want none", seg)
			}
		}
		return
	}
	var gpus []string
	found := false
	for _, seg := range hookSegments(s) {
		if seg[0] != "mount-proc-driver" {
			continue
		}
		found = true
		for i, a := range seg {
			if v, ok := strings.CutPrefix(a, "--gpu="); ok {
				gpus = append(gpus, v)
			} else if a == "--gpu" && i+1 < len(seg) {
				gpus = append(gpus, seg[i+1])
			}
		}
	}
	if !found {
		t.Errorf("no mount-proc-driver hook: the container's /proc/driver/nvidia would show every GPU")
		return
	}
	var want []string
	for _, i := range w.GPUs {
		want = append(want, strings.ToLower(w.host.gpu(t, i).PCIAddress))
	}
	var got []string
	for _, g := range gpus {
		g = strings.ToLower(g)
		if len(g) == len("00000000:18:00.0") {
			g = g[4:] // NVML's 8-digit domain -> the kernel's 4 digits
		}
		got = append(got, g)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("mount-proc-driver exposes GPUs %q, want %q", got, want)
	}
}

// TestRuncGKELayout: the host keeps its driver in /usr/local/nvidia (GKE's
// layout); the files still land in the image's lib dir and /usr/bin, and
// cudaprobe and nvidia-smi work without LD_LIBRARY_PATH or PATH changes.
func TestRuncGKELayout(t *testing.T) {
	f := newRuncFixture(t, fixture.Spec{Layout: "gke", GPUs: 2}, e2e.RootfsOptions{})
	c := newRuncCase(t, f.host, f.image, e2e.LayoutDebian, "NVIDIA_VISIBLE_DEVICES=all")
	out := c.run()
	if env := parseProbe(out).section(t, "env"); strings.Contains(env, "LD_LIBRARY_PATH") || strings.Contains(env, "/usr/local/nvidia") {
		t.Errorf("the container's environment was changed to find the driver:\n%s", env)
	}
	checkGPU(t, out, want{host: f.host, GPUs: []int{0, 1}, LibDir: e2e.LayoutDebian.LibDir()})
}

// TestRuncLib64Image: a RHEL-like image (libraries in /usr/lib64, no
// /etc/debian_version) gets the driver there.
func TestRuncLib64Image(t *testing.T) {
	f := newRuncFixture(t, fixture.Spec{Layout: "multiarch", GPUs: 2}, e2e.RootfsOptions{Layout: e2e.LayoutLib64})
	c := newRuncCase(t, f.host, f.image, e2e.LayoutLib64, "NVIDIA_VISIBLE_DEVICES=1")
	checkGPU(t, c.run(), want{host: f.host, GPUs: []int{1}, LibDir: e2e.LayoutLib64.LibDir()})
}
