package discover

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/ldcache"
)

func TestMain(m *testing.M) {
	if driverprobe.MaybeRunChild(os.Args) {
		return
	}
	os.Exit(m.Run())
}

// fakeLibcuda builds driverprobe's fake driver (libcuda and NVML in one
// object: two GPUs, 41 with MIG devices GI 1 and 2) at p inside the root.
func (m *miniRoot) fakeLibcuda(p string, defines ...string) {
	m.t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		m.t.Skipf("gcc not found (%v): cannot build the fake driver library", err)
	}
	m.mkdir(p[:strings.LastIndexByte(p, '/')])
	args := []string{"-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", m.path(p), "../driverprobe/testdata/fakedriver.c"}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		m.t.Fatalf("gcc: %v\n%s", err, out)
	}
}

func TestProbeFillsDriverFacts(t *testing.T) {
	const v = "535.309.01"
	m := newMiniRoot(t)
	m.driver(v)
	dir := "/usr/lib/x86_64-linux-gnu"
	m.fakeLibcuda(dir + "/libcuda.so." + v)
	m.symlink(dir+"/libcuda.so.1", "libcuda.so."+v)
	m.fakeLibcuda(dir + "/libnvidia-ml.so." + v) // the fake also answers NVML calls
	m.symlink(dir+"/libnvidia-ml.so.1", "libnvidia-ml.so."+v)
	m.cache = append(m.cache,
		ldcache.Entry{Key: "libcuda.so.1", Value: dir + "/libcuda.so.1", Flags: flags64},
		ldcache.Entry{Key: "libnvidia-ml.so.1", Value: dir + "/libnvidia-ml.so.1", Flags: flags64})
	m.writeCache()
	m.gpu("0000:41:00.0", 0, "GPU-00000000-0000-0000-0000-000000000041")
	m.gpu("0000:01:00.0", 1, "GPU-00000000-0000-0000-0000-000000000001")
	for _, f := range []string{"gi1/access", "gi1/ci0/access", "gi2/access", "gi2/ci0/access"} {
		m.file("/proc/driver/nvidia/capabilities/gpu0/mig/"+f, "DeviceFileMinor: 1\n", 0o444)
	}
	cache := t.TempDir()
	d, err := m.discover(func(o *Options) { o.Probe = true; o.ProbeConfig.CacheDir = cache })
	if err != nil {
		t.Fatal(err)
	}
	if d.CUDAVersion != "12.2" || d.CUDADriverVersion != 12020 || d.CUDAVersionSource != SourceLibcuda {
		t.Errorf("CUDA %q %d from %q", d.CUDAVersion, d.CUDADriverVersion, d.CUDAVersionSource)
	}
	g01, g41 := d.GPUs[0], d.GPUs[1]
	if g01.Arch != "8.9" || g01.ArchSource != SourceLibcuda || g01.Brand != "GeForce" || g01.BrandSource != SourceNVML || g01.MIGCapable {
		t.Errorf("GPU 01: %+v", g01)
	}
	if g41.Arch != "9.0" || g41.Brand != "Tesla" || !g41.MIGEnabled || len(g41.MIGDevices) != 2 ||
		g41.MIGDevices[0].UUID != "MIG-0000000b-0000-0000-0000-000000000000" || g41.MIGDevices[1].UUID != "MIG-0000000c-0000-0000-0000-000000000000" {
		t.Errorf("GPU 41: %+v", g41)
	}
	for _, w := range d.Warnings {
		if strings.Contains(w, "unknown") || strings.Contains(w, "UUID") || strings.Contains(w, "NVML") {
			t.Errorf("probe warning: %s", w)
		}
	}

	// Without MIG devices (only GPU 01 left) a second discovery is served
	// from the cache.
	if err := os.RemoveAll(m.path("/proc/driver/nvidia/gpus/0000:41:00.0")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if d, err = m.discover(func(o *Options) { o.Probe = true; o.ProbeConfig.CacheDir = cache }); err != nil {
			t.Fatal(err)
		}
	}
	if d.CUDAVersionSource != SourceCache || d.GPUs[0].ArchSource != SourceCache || d.GPUs[0].BrandSource != SourceCache || d.GPUs[0].Arch != "8.9" {
		t.Errorf("cached discovery: CUDA from %q, GPU %+v", d.CUDAVersionSource, d.GPUs[0])
	}
}

// TestProbeWithoutGPU is the test machine's situation with a real driver
// library: the CUDA version is known, architecture and brand are not, and
// the warnings say why.
func TestProbeWithoutGPU(t *testing.T) {
	const v = "535.309.01"
	m := newMiniRoot(t)
	m.driver(v)
	dir := "/usr/lib/x86_64-linux-gnu"
	m.fakeLibcuda(dir+"/libcuda.so."+v, "FAKE_NOGPU")
	m.symlink(dir+"/libcuda.so.1", "libcuda.so."+v)
	m.cache = append(m.cache, ldcache.Entry{Key: "libcuda.so.1", Value: dir + "/libcuda.so.1", Flags: flags64})
	m.writeCache()
	m.gpu("0000:41:00.0", 0, "GPU-00000000-0000-0000-0000-000000000041")
	d, err := m.discover(func(o *Options) { o.Probe = true; o.ProbeConfig.NoCache = true })
	if err != nil {
		t.Fatal(err)
	}
	if d.CUDAVersion != "12.2" || d.GPUs[0].Arch != "" || d.GPUs[0].Brand != "" {
		t.Errorf("CUDA %q arch %q brand %q", d.CUDAVersion, d.GPUs[0].Arch, d.GPUs[0].Brand)
	}
	w := strings.Join(d.Warnings, "\n")
	if !strings.Contains(w, "architecture unknown for GPU 00000000:41:00.0: cuInit: CUDA_ERROR_NO_DEVICE (100)") {
		t.Errorf("warnings %q do not say why the architecture is unknown", d.Warnings)
	}
}
