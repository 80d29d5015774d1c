package containercli

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// run runs nvidia-container-cli in-process with an isolated probe cache.
func run(t testing.TB, cacheDir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &app.Env{
		Args:    append([]string{"nvidia-container-cli"}, args...),
		Stdout:  &out,
		Stderr:  &errb,
		Environ: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NCTK_PROBE_CACHE_DIR=" + cacheDir},
	}
	code = Main(e)
	return code, out.String(), errb.String()
}

// TestFixtureInfo: info and info --csv on a 4-GPU root built from the 535
// packages: versions and GPU fields from the fixture, the CUDA version from
// the packaged libcuda, architecture and brand Unknown without a GPU (with
// the reason on stderr).
func TestFixtureInfo(t *testing.T) {
	r := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 4})
	if r.CUDAVersion == "" {
		t.Skip("the fixture has no measured CUDA version")
	}
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("this host has an NVIDIA driver: the output would carry real architectures")
	}
	cache := t.TempDir()
	code, out, errOut := run(t, cache, "--root="+r.Path, "info")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var want strings.Builder
	fmt.Fprintf(&want, "NVRM version:   %s\nCUDA version:   %s\n", r.Version, r.CUDAVersion)
	for _, g := range r.GPUs {
		fmt.Fprintf(&want, "\nDevice Index:   %d\nDevice Minor:   %d\nModel:          %s\nBrand:          Unknown\n"+
			"GPU UUID:       %s\nBus Location:   %s\nArchitecture:   Unknown\n", g.Index, g.Minor, g.Model, g.UUID, g.BusID)
	}
	if out != want.String() {
		t.Errorf("info:\n%s\nwant:\n%s", out, want.String())
	}
	if !strings.Contains(errOut, "nvidia-container-cli: warning: architecture unknown for GPU "+r.GPUs[0].BusID) {
		t.Errorf("stderr does not say why the architecture is unknown:\n%s", errOut)
	}

	code, out, errOut = run(t, cache, "-r", r.Path, "info", "--csv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want.Reset()
	fmt.Fprintf(&want, "NVRM version,CUDA version\n%s,%s\n\nDevice Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n", r.Version, r.CUDAVersion)
	for _, g := range r.GPUs {
		fmt.Fprintf(&want, "%d,%d,%s,Unknown,%s,%s,Unknown\n", g.Index, g.Minor, g.Model, g.UUID, g.BusID)
	}
	if out != want.String() {
		t.Errorf("info --csv:\n%s\nwant:\n%s", out, want.String())
	}
}

// TestFixtureList checks list's output on every layout against the
// fixture's description of the root.
func TestFixtureList(t *testing.T) {
	for _, layout := range fixture.Layouts() {
		t.Run(string(layout), func(t *testing.T) {
			r := fixture.Build(t, fixture.Spec{Layout: layout, GPUs: 3, Compat32: true, IPC: true, Firmware: true, MIG: true})
			if !r.DeviceNodes {
				t.Skipf("no device nodes: %s", r.NoDeviceNodesReason)
			}
			d, err := discover.Discover(discover.Options{Root: r.Path})
			if err != nil {
				t.Fatal(err)
			}
			code, out, errOut := run(t, t.TempDir(), "--root", r.Path, "list")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var want []string
			for _, n := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"} {
				if _, err := os.Lstat(r.HostPath(n)); err == nil {
					want = append(want, r.HostPath(n))
				}
			}
			for _, g := range r.GPUs {
				want = append(want, r.HostPath(g.DevicePath))
			}
			for _, g := range r.GPUs {
				for _, m := range g.MIG {
					want = append(want, r.HostPath(m.GIAccess), r.HostPath(m.CIAccess),
						r.HostPath(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m.GIMinor)), r.HostPath(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", m.CIMinor)))
				}
			}
			for _, c := range []caps.Capability{caps.Utility, caps.Compute} {
				for _, b := range caps.Binaries(c) {
					if p, ok := r.BinaryFiles[b]; ok {
						want = append(want, r.HostPath(p))
					}
				}
			}
			for _, f := range d.Libraries {
				want = append(want, r.HostPath(f.Path))
			}
			for _, f := range d.Graphics { // list's default: every capability
				want = append(want, f.HostPath)
			}
			for _, p := range r.IPC {
				real, err := securejoin.SecureJoin(r.Path, p)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, real)
			}
			// Firmware: the file the container's mount reads (the
			// driver-root path resolved, /lib being a link to usr/lib).
			for _, f := range d.Firmware {
				real, err := securejoin.SecureJoin(r.Path, f.Path)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, real)
			}
			got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if !slices.Equal(got, dedupe(want)) {
				t.Errorf("list:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(dedupe(want), "\n  "))
			}
			n32 := 0
			for _, f := range d.Libraries {
				if f.Compat32 {
					n32++
				}
			}
			if n32 == 0 {
				t.Error("no 32-bit libraries listed with compat32")
			}

			// One GPU by UUID, compute only: nvidiactl, uvm, that GPU,
			// compute binaries and 64-bit compute libraries.
			g := r.GPUs[2]
			code, out, errOut = run(t, t.TempDir(), "--root="+r.Path, "list", "--device="+g.UUID, "-l", "-b", "--compute")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			want = []string{r.HostPath("/dev/nvidiactl"), r.HostPath("/dev/nvidia-uvm"), r.HostPath("/dev/nvidia-uvm-tools"), r.HostPath(g.DevicePath)}
			for _, b := range caps.Binaries(caps.Compute) {
				if p, ok := r.BinaryFiles[b]; ok {
					want = append(want, r.HostPath(p))
				}
			}
			for _, f := range d.Libraries {
				if f.Capability == caps.Compute && !f.Compat32 {
					want = append(want, r.HostPath(f.Path))
				}
			}
			if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !slices.Equal(got, want) {
				t.Errorf("list --device=%s -l -b --compute:\n  %s\nwant:\n  %s", g.UUID, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

func dedupe(in []string) []string {
	var out []string
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// TestFixtureErrors: each broken layout's message, phase and exit status.
func TestFixtureErrors(t *testing.T) {
	tests := []struct {
		broken fixture.Breakage
		args   []string
		want   func(r *fixture.Root) string
	}{
		{fixture.NoDriver, []string{"info"}, func(r *fixture.Root) string {
			return fmt.Sprintf("nvidia-container-cli: initialization error: no NVIDIA driver found under root %s: %s/proc/driver/nvidia/version: "+
				"no such file (is the nvidia kernel module loaded? is --root right?)\n", r.Path, r.Path)
		}},
		{fixture.VersionMismatch, []string{"list"}, func(r *fixture.Root) string {
			return fmt.Sprintf("nvidia-container-cli: initialization error: driver/library version mismatch: kernel module is %s (%s/proc/driver/nvidia/version) but the driver libraries are %s (",
				r.Version, r.Path, r.LibVersion)
		}},
		{fixture.NoLDCache, []string{"list"}, func(r *fixture.Root) string {
			return fmt.Sprintf("nvidia-container-cli: detection error: cannot use the dynamic linker cache %s/etc/ld.so.cache: no such file (run ldconfig -r %s to regenerate it)\n", r.Path, r.Path)
		}},
		{fixture.TruncatedLDCache, []string{"info"}, func(r *fixture.Root) string {
			return fmt.Sprintf("nvidia-container-cli: detection error: cannot use the dynamic linker cache %s/etc/ld.so.cache: truncated: ", r.Path)
		}},
		{fixture.NoDeviceNodes, []string{"list", "-d", "0"}, func(r *fixture.Root) string {
			return fmt.Sprintf("nvidia-container-cli: device error: missing device node /dev/nvidiactl: expected character device 195:255 at %s/dev/nvidiactl", r.Path)
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.broken), func(t *testing.T) {
			r := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 2, Broken: tt.broken})
			code, out, errOut := run(t, t.TempDir(), append([]string{"--root=" + r.Path}, tt.args...)...)
			if code != 1 || out != "" || !strings.HasPrefix(errOut, tt.want(r)) {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and stderr starting:\n%s", code, out, errOut, tt.want(r))
			}
		})
	}
	// Without device nodes, info still works (it needs no node).
	r := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 2, Broken: fixture.NoDeviceNodes})
	if code, _, errOut := run(t, t.TempDir(), "--root="+r.Path, "info", "--csv"); code != 0 {
		t.Errorf("info without device nodes: exit %d: %s", code, errOut)
	}
}

// TestFixtureLdcacheAndDebug: --ldcache names another cache inside the
// root; --debug writes NVIDIA-style log lines, missing items as warnings.
func TestFixtureLdcacheAndDebug(t *testing.T) {
	r := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 1})
	if err := os.Rename(r.HostPath(r.LDCache), r.HostPath("/etc/ld.so.cache.moved")); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "debug.log")
	code, out, errOut := run(t, t.TempDir(), "--root="+r.Path, "--ldcache=/etc/ld.so.cache.moved", "--debug="+log, "list", "--libraries")
	if code != 0 || !strings.Contains(out, "libcuda.so."+r.LibVersion) {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	logData, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"-- WARNING, the following logs are for debugging purposes only --", "] missing library libnvidia-tileiras.so", "] selecting library path="} {
		if !strings.Contains(string(logData), s) {
			t.Errorf("debug log lacks %q:\n%s", s, logData)
		}
	}
	if code, _, errOut := run(t, t.TempDir(), "--root="+r.Path, "list"); code != 1 || !strings.Contains(errOut, "detection error: cannot use the dynamic linker cache") {
		t.Errorf("default cache gone: exit %d %s", code, errOut)
	}
}

// BenchmarkProcess runs the nvidia-container-cli binary as a separate
// process, as the runtime hook and scripts do. Root: multiarch, 8 GPUs,
// compat32 (real 535 packages). cpu-ns/op is the process's user+system
// time, its probe child included.
//
//   - version: the floor, starting the binary and printing its version;
//   - list: discovery only;
//   - info-real-libcuda: info with the driver probe loading the packaged
//     libcuda; without a GPU cuInit fails, so the result is never cached
//     and every call pays the probe;
//   - info-fake-driver-uncached / -cached: a one-GPU root whose libcuda
//     and NVML are driverprobe's fake driver, which answers every question
//     (as a real driver with a GPU does): the probe's cost when it runs,
//     and the hot path when its result comes from the cache.
func BenchmarkProcess(b *testing.B) {
	r := fixture.Build(b, fixture.Spec{Layout: fixture.Multiarch, GPUs: 8, Compat32: true, IPC: true, Firmware: true})
	cli := filepath.Join(e2e.MustBuildNctk(b), "nvidia-container-cli")
	fake := fakeDriverRoot(b)
	cache := b.TempDir()
	for _, bc := range []struct {
		name string
		args []string
		env  []string
	}{
		{"version", []string{"--version"}, nil},
		{"list", []string{"--root=" + r.Path, "list"}, nil},
		{"info-real-libcuda", []string{"--root=" + r.Path, "info"}, []string{"NCTK_PROBE_CACHE_DIR=" + cache}},
		{"info-fake-driver-uncached", []string{"--root=" + fake.Path, "info"}, []string{"NCTK_PROBE_CACHE=off"}},
		{"info-fake-driver-cached", []string{"--root=" + fake.Path, "info"}, []string{"NCTK_PROBE_CACHE_DIR=" + cache}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				cmd := exec.Command(cli, bc.args...)
				cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, bc.env...)
				var out bytes.Buffer
				cmd.Stdout = &out
				if err := cmd.Run(); err != nil {
					b.Fatalf("%v: %v", bc.args, err)
				}
				if out.Len() == 0 {
					b.Fatal("no output")
				}
				cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// fakeDriverRoot is a one-GPU fixture root whose GPU has the bus id of the
// fake driver's (driverprobe/testdata/fakedriver.c) GPU without MIG and whose
// libcuda and libnvidia-ml are that fake, so that every probe question
// is answered.
func fakeDriverRoot(tb testing.TB) *fixture.Root {
	tb.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		tb.Skipf("gcc not found: %v", err)
	}
	r := fixture.Build(tb, fixture.Spec{Layout: fixture.Multiarch, GPUs: 1})
	g := r.GPUs[0]
	info, err := os.ReadFile(r.HostPath(g.ProcDir + "/information"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.RemoveAll(r.HostPath(g.ProcDir)); err != nil {
		tb.Fatal(err)
	}
	dir := r.HostPath("/proc/driver/nvidia/gpus/0000:01:00.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	info = bytes.ReplaceAll(info, []byte(g.PCIAddress), []byte("0000:01:00.0"))
	if err := os.WriteFile(dir+"/information", info, 0o444); err != nil {
		tb.Fatal(err)
	}
	for _, name := range []string{"libcuda.so", "libnvidia-ml.so"} {
		lib, ok := r.Library(name, false)
		if !ok {
			tb.Fatalf("fixture has no %s", name)
		}
		tmp := r.HostPath(lib.Path) + ".fake"
		out, err := exec.Command(gcc, "-shared", "-fPIC", "-Wl,-soname,"+lib.SONAME, "-o", tmp, "../../driverprobe/testdata/fakedriver.c").CombinedOutput()
		if err != nil {
			tb.Fatalf("gcc: %v\n%s", err, out)
		}
		if err := os.Rename(tmp, r.HostPath(lib.Path)); err != nil { // replaces the hard link, not the template
			tb.Fatal(err)
		}
	}
	return r
}

// TestFixtureLoadKmods: on a root whose /dev lacks the nodes, --load-kmods
// creates them from the driver's proc files (the modules cannot be loaded
// here; that failure is only logged, as in NVIDIA's CLI), so that list
// with a device works.
func TestFixtureLoadKmods(t *testing.T) {
	e2e.RequireRoot(t) // creating device nodes
	r := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 2, Broken: fixture.NoDeviceNodes})
	if code, _, _ := run(t, t.TempDir(), "--root="+r.Path, "list", "-d", "1"); code != 1 {
		t.Fatalf("list without nodes: exit %d, want 1", code)
	}
	log := filepath.Join(t.TempDir(), "debug.log")
	code, out, errOut := run(t, t.TempDir(), "--root="+r.Path, "-k", "--debug="+log, "list", "-d", "1")
	if code != 0 {
		data, _ := os.ReadFile(log)
		t.Fatalf("exit %d: %s\n%s", code, errOut, data)
	}
	g := r.GPUs[1]
	if !strings.Contains(out, r.HostPath("/dev/nvidiactl")+"\n") || !strings.Contains(out, r.HostPath(g.DevicePath)+"\n") {
		t.Errorf("list after --load-kmods:\n%s", out)
	}
	fi, err := os.Stat(r.HostPath(g.DevicePath))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("%s: %v %v", g.DevicePath, fi, err)
	}
}

// TestStaticBinaryProbesThroughHelper: nctk as built (static, no cgo) asks
// the driver through the nctk-driverprobe helper beside it: `info` on the
// fake driver's root shows what only the driver knows (CUDA version,
// architecture, brand), and without the helper it warns naming it and
// prints those as unknown.
func TestStaticBinaryProbesThroughHelper(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nctk")
	}
	fake := fakeDriverRoot(t)
	dir := e2e.MustBuildNctk(t)
	f, err := elf.Open(filepath.Join(dir, "nctk"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("nctk is dynamically linked (PT_INTERP): it must be built with CGO_ENABLED=0")
		}
	}
	f.Close()
	info := func() (string, string, error) {
		cmd := exec.Command(filepath.Join(dir, "nvidia-container-cli"), "--root="+fake.Path, "info")
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "NCTK_PROBE_CACHE=off"}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	out, errOut, err := info()
	if err != nil {
		t.Fatalf("info: %v\n%s", err, errOut)
	}
	for _, want := range []string{"CUDA version:   12.2", "Architecture:   8.9", "Brand:          GeForce"} {
		if !strings.Contains(out, want) {
			t.Errorf("info output lacks %q:\n%s", want, out)
		}
	}
	helper := filepath.Join(dir, "nctk-driverprobe")
	saved := filepath.Join(t.TempDir(), "nctk-driverprobe")
	if err := os.Rename(helper, saved); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = info()
	if err != nil || !strings.Contains(errOut, "nctk-driverprobe, which is missing") || !strings.Contains(out, "Architecture:   Unknown") {
		t.Errorf("info without the helper: %v, stdout %q, stderr %q; want unknown facts and a warning naming nctk-driverprobe", err, out, errOut)
	}

	// A container that requires a CUDA version is refused when the CUDA
	// version cannot be learnt (the check fails closed, bundle untouched),
	// and created once the helper is back.
	bundle := t.TempDir()
	for _, d := range []string{"rootfs/usr/lib/x86_64-linux-gnu", "rootfs/usr/bin", "rootfs/etc"} {
		if err := os.MkdirAll(filepath.Join(bundle, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := []byte(`{"ociVersion":"1.2.0","root":{"path":"rootfs"},"process":{"args":["/bin/true"],"cwd":"/",` +
		`"env":["NVIDIA_VISIBLE_DEVICES=all","NVIDIA_REQUIRE_CUDA=cuda>=11.0"]}}`)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "[nvidia-container-cli]\nroot = %q\n[nvidia-container-runtime]\nruntimes = [\"/bin/true\"]\n", fake.Path), 0o644); err != nil {
		t.Fatal(err)
	}
	create := func() (string, error) {
		cmd := exec.Command(filepath.Join(dir, "nvidia-container-runtime"), "create", "--bundle", bundle, "c")
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH=" + cfg}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err = create()
	if err == nil || !strings.Contains(out, "CUDA version of the host driver") || !strings.Contains(out, "nctk-driverprobe") {
		t.Errorf("create with cuda>=11.0 and no way to learn the CUDA version: %v\n%s\nwant a requirement error naming nctk-driverprobe", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(bundle, "config.json")); !bytes.Equal(got, spec) {
		t.Errorf("failed create changed config.json:\n%s", got)
	}
	if err := os.Rename(saved, helper); err != nil {
		t.Fatal(err)
	}
	if out, err := create(); err != nil {
		t.Errorf("create with cuda>=11.0 and the helper back: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(bundle, "config.json")); bytes.Equal(got, spec) {
		t.Error("create did not inject the GPUs")
	}
}
