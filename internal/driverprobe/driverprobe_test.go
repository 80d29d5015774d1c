package driverprobe

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if MaybeRunChild(os.Args) {
		return
	}
	os.Exit(m.Run())
}

// fakeDriver compiles testdata/fakedriver.c with the given -D flags into a
// shared object and returns its path.
func fakeDriver(t testing.TB, name string, defines ...string) string {
	t.Helper()
	if !haveCgo {
		t.Skip("built without cgo: the probe child cannot load libraries")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("gcc not found (%v): cannot build the fake driver library", err)
	}
	out := filepath.Join(t.TempDir(), name)
	args := []string{"-shared", "-fPIC", "-o", out, "testdata/fakedriver.c"}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

func TestProbeFakeDriver(t *testing.T) {
	lib := fakeDriver(t, "libcuda.so.535.0")
	cacheDir := filepath.Join(t.TempDir(), "cache")
	req := Request{Libcuda: lib, NVML: lib, BusIDs: []string{"0000:01:00.0", "00000000:41:00.0"}, ModuleVersion: "535.0"}
	cfg := Config{CacheDir: cacheDir}

	res, err := Probe(context.Background(), req, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != SourceLibcuda {
		t.Errorf("first probe: source %q, want %q", res.Source, SourceLibcuda)
	}
	check := func(res *Result) {
		t.Helper()
		if res.CUDADriverVersion != 12020 || res.CUDAVersion() != "12.2" {
			t.Errorf("CUDA version %d (%q), want 12020 (12.2)", res.CUDADriverVersion, res.CUDAVersion())
		}
		for bus, want := range map[string][2]string{"00000000:41:00.0": {"9.0", "Tesla"}, "0000:01:00.0": {"8.9", "GeForce"}} {
			if a, ok := res.Arch(bus); !ok || a != want[0] {
				t.Errorf("Arch(%s) = %q, %v; want %q", bus, a, ok, want[0])
			}
			if b, ok := res.Brand(bus); !ok || b != want[1] {
				t.Errorf("Brand(%s) = %q, %v; want %q", bus, b, ok, want[1])
			}
		}
		if res.DeviceError != "" || res.NVMLError != "" || res.CUDAError != "" {
			t.Errorf("unexpected errors: %+v", res)
		}
	}
	check(res)
	wantMIG := map[string]MIGInfo{"00000000:41:00.0": {Enabled: true, Devices: []MIGDevice{
		{GI: 1, CI: 0, UUID: "MIG-0000000b-0000-0000-0000-000000000000"},
		{GI: 2, CI: 0, UUID: "MIG-0000000c-0000-0000-0000-000000000000"},
	}}}
	if fmt.Sprint(res.MIG) != fmt.Sprint(wantMIG) {
		t.Errorf("MIG %+v, want %+v", res.MIG, wantMIG)
	}
	if res.CacheNote != "not cached: MIG devices exist (their UUIDs change when instances are recreated)" {
		t.Errorf("cache note %q", res.CacheNote)
	}
	if req.BusIDs[0] != "0000:01:00.0" {
		t.Errorf("Probe modified the caller's request: %v", req.BusIDs)
	}

	if res, err = Probe(context.Background(), req, cfg); err != nil || res.Source != SourceLibcuda {
		t.Errorf("second probe with MIG devices: source %q err %v, want a fresh probe", res.Source, err)
	}

	// Without MIG devices the result is cached.
	req = Request{Libcuda: lib, NVML: lib, BusIDs: []string{"0000:01:00.0"}, ModuleVersion: "535.0"}
	if res, err = Probe(context.Background(), req, cfg); err != nil || res.Source != SourceLibcuda || res.CacheNote != "" {
		t.Fatalf("probe of GPU 01: %+v %v", res, err)
	}
	res, err = Probe(context.Background(), req, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != SourceCache {
		t.Errorf("second probe: source %q, want %q", res.Source, SourceCache)
	}
	if a, _ := res.Arch("00000000:01:00.0"); a != "8.9" || res.CUDAVersion() != "12.2" {
		t.Errorf("cached result %+v", res)
	}
	// A MIG layout in the request is never served from the cache.
	reqMIG := req
	reqMIG.MIGLayout = []string{"00000000:01:00.0/gi1/ci0"}
	if res, err = Probe(context.Background(), reqMIG, cfg); err != nil || res.Source != SourceLibcuda {
		t.Errorf("MIG layout: source %q err %v, want a fresh probe", res.Source, err)
	}

	// Another set of GPUs is another key.
	req2 := req
	req2.BusIDs = []string{"00000000:01:00.0", "00000000:41:00.0"}
	if res, err = Probe(context.Background(), req2, cfg); err != nil || res.Source != SourceLibcuda {
		t.Errorf("other GPUs: source %q err %v, want a fresh probe", res.Source, err)
	}
	// A changed library (new mtime) is probed again.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(lib, later, later); err != nil {
		t.Fatal(err)
	}
	if res, err = Probe(context.Background(), req, cfg); err != nil || res.Source != SourceLibcuda {
		t.Errorf("after touching libcuda: source %q err %v, want a fresh probe", res.Source, err)
	}
	// NoCache never reads the cache.
	if res, err = Probe(context.Background(), req, Config{CacheDir: cacheDir, NoCache: true}); err != nil || res.Source != SourceLibcuda {
		t.Errorf("NoCache: source %q err %v", res.Source, err)
	}
}

func TestProbeNoGPU(t *testing.T) {
	lib := fakeDriver(t, "libcuda.so.1", "FAKE_NOGPU")
	req := Request{Libcuda: lib, NVML: lib, BusIDs: []string{"00000000:41:00.0"}}
	cacheDir := t.TempDir()
	res, err := Probe(context.Background(), req, Config{CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	if res.CUDAVersion() != "12.2" {
		t.Errorf("CUDA version %q, want 12.2 (cuDriverGetVersion works without a GPU)", res.CUDAVersion())
	}
	if !strings.Contains(res.DeviceError, "cuInit: CUDA_ERROR_NO_DEVICE (100)") {
		t.Errorf("DeviceError %q, want the cuInit failure named", res.DeviceError)
	}
	if !strings.Contains(res.NVMLError, "Driver Not Loaded") {
		t.Errorf("NVMLError %q, want NVML's reason", res.NVMLError)
	}
	if _, ok := res.Arch("00000000:41:00.0"); ok {
		t.Error("arch reported without a working cuInit")
	}
	if !strings.Contains(res.CacheNote, "not cached") {
		t.Errorf("incomplete result cached (note %q)", res.CacheNote)
	}
	if ents, _ := os.ReadDir(cacheDir); len(ents) != 0 {
		t.Errorf("cache dir holds %d files after an incomplete probe", len(ents))
	}
}

func TestProbeFailures(t *testing.T) {
	crash := fakeDriver(t, "libcuda-crash.so", "FAKE_CRASH")
	hang := fakeDriver(t, "libcuda-hang.so", "FAKE_HANG")
	tests := []struct {
		name    string
		req     Request
		cfg     Config
		wantErr string
		check   func(*Result) string
	}{
		{name: "crash", req: Request{Libcuda: crash}, cfg: Config{NoCache: true},
			wantErr: "child process failed: exit status 2; stderr: SIGSEGV: segmentation violation"},
		{name: "hang", req: Request{Libcuda: hang}, cfg: Config{NoCache: true, Timeout: 300 * time.Millisecond},
			wantErr: "timed out after 300ms"},
		{name: "missing library", req: Request{Libcuda: "/nonexistent/libcuda.so.1"}, cfg: Config{NoCache: true},
			check: func(r *Result) string {
				if !strings.Contains(r.CUDAError, "dlopen /nonexistent/libcuda.so.1") {
					return "CUDAError " + r.CUDAError
				}
				return ""
			}},
		{name: "not a library", req: Request{Libcuda: "testdata/fakedriver.c"}, cfg: Config{NoCache: true},
			check: func(r *Result) string {
				if !strings.Contains(r.CUDAError, "dlopen testdata/fakedriver.c") || r.CUDADriverVersion != 0 {
					return "CUDAError " + r.CUDAError
				}
				return ""
			}},
		{name: "no libcuda", req: Request{}, wantErr: "no libcuda path"},
		{name: "bad executable", req: Request{Libcuda: crash}, cfg: Config{NoCache: true, Executable: "/nonexistent/nctk"},
			wantErr: "start /nonexistent/nctk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res, err := Probe(context.Background(), tt.req, tt.cfg)
			if time.Since(start) > 3*time.Second {
				t.Errorf("probe took %s", time.Since(start))
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(res); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func TestCacheDirMustBePrivate(t *testing.T) {
	lib := fakeDriver(t, "libcuda.so.1")
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	res, err := Probe(context.Background(), Request{Libcuda: lib}, Config{CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.CacheNote, "not writable by others") {
		t.Errorf("CacheNote %q, want the world-writable directory refused", res.CacheNote)
	}
	// A corrupt cache file is ignored, not trusted.
	good := t.TempDir()
	c, note := openCache(Config{CacheDir: good}, Request{Libcuda: lib})
	if c == nil {
		t.Fatal(note)
	}
	entries, _ := filepath.Glob(filepath.Join(good, "*"))
	if err := c.store(&Result{CUDADriverVersion: 99999}); err != nil {
		t.Fatal(err)
	}
	written, _ := filepath.Glob(filepath.Join(good, cacheKind+"-*.json"))
	if len(written) != len(entries)+1 {
		t.Fatalf("cache files %q", written)
	}
	data, err := os.ReadFile(written[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(written[0], []byte(strings.Replace(string(data), c.key, "other", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err = Probe(context.Background(), Request{Libcuda: lib}, Config{CacheDir: good}); err != nil || res.Source != SourceLibcuda || res.CUDADriverVersion != 12020 {
		t.Errorf("entry with a foreign key used: %+v %v", res, err)
	}
}

func TestFormatCUDAVersion(t *testing.T) {
	for in, want := range map[int]string{12020: "12.2", 13000: "13.0", 11080: "11.8", 12040: "12.4", 10010: "10.1", 0: "", -1: ""} {
		if got := FormatCUDAVersion(in); got != want {
			t.Errorf("FormatCUDAVersion(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestBrandName(t *testing.T) {
	for in, want := range map[int]string{0: "Unknown", 2: "Tesla", 5: "GeForce", 14: "Nvidia", 16: "TitanRTX", 17: "Unknown", -3: "Unknown"} {
		if got := BrandName(in); got != want {
			t.Errorf("BrandName(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"0000:41:00.0":      "00000000:41:00.0",
		"00000000:41:00.0":  "00000000:41:00.0",
		"0000:C1:00.0":      "00000000:c1:00.0",
		"41:00.0":           "00000000:41:00.0",
		"0001:02:1f.0":      "00000001:02:1f.0",
		"garbage":           "garbage",
		" 0000:41:00.0\n":   "00000000:41:00.0",
		"10000:00:00.0":     "00010000:00:00.0",
		"00000000:41:00.0x": "00000000:41:00.0",
	} {
		if got := normalizeBusID(in); got != want {
			t.Errorf("normalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkProbe measures one probe through a child process (the dlopen and
// driver calls plus a fork/exec of the test binary) and one served from the
// cache.
func BenchmarkProbe(b *testing.B) {
	lib := fakeDriver(b, "libcuda.so.1")
	req := Request{Libcuda: lib, NVML: lib, BusIDs: []string{"00000000:01:00.0"}} // the GPU without MIG: cacheable
	b.Run("child", func(b *testing.B) {
		for b.Loop() {
			if _, err := Probe(context.Background(), req, Config{NoCache: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		cfg := Config{CacheDir: b.TempDir()}
		if _, err := Probe(context.Background(), req, cfg); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			res, err := Probe(context.Background(), req, cfg)
			if err != nil || res.Source != SourceCache {
				b.Fatalf("%v %+v", err, res)
			}
		}
	})
}

// TestProbeAsOtherUser: with Config.Credential the child runs as that user
// (privilege separation, like NVIDIA's --user for its NVML process).
func TestProbeAsOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	// The test binary's build directory is private: run a copy.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pub := t.TempDir()
	for _, d := range []string{pub, filepath.Dir(pub)} { // t.TempDir's parent is private too
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	copyExe := filepath.Join(pub, "driverprobe.test")
	if err := os.WriteFile(copyExe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	lib := fakeDriver(t, "libcuda.so.1")
	if err := os.Chmod(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{NoCache: true, Executable: copyExe, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	res, err := Probe(context.Background(), Request{Libcuda: lib}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.CUDADriverVersion != 12020 {
		t.Errorf("probe as nobody: %+v", res)
	}
	// The child really ran as nobody: it cannot read a root-only library.
	private := filepath.Join(t.TempDir(), "libcuda.so.1")
	libData, _ := os.ReadFile(lib)
	if err := os.WriteFile(private, libData, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(private), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err = Probe(context.Background(), Request{Libcuda: private}, cfg)
	if err != nil || !strings.Contains(res.CUDAError, "Permission denied") {
		t.Errorf("root-only library loaded as nobody: %+v %v", res, err)
	}
}
