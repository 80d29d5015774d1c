package discover

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ldcache"
)

// expectedLibraries computes, independently of this package's cache
// reader, resolver and ELF reader, the libraries NVIDIA's rules select in
// a root: glibc's own `ldconfig -p` lists the cache, filepath-securejoin
// resolves the paths inside the root, and debug/elf reads SONAMEs and the
// libnvidia-tls ABI note. Per class and capability group, each library
// name yields the first cache entry (in the cache's order) whose real file
// is named *.so.<version>. The result is "<group> <32|64> <path> <soname>"
// lines in NVIDIA's order.
func expectedLibraries(t *testing.T, root, cache, version string) []string {
	t.Helper()
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		for _, p := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig"} {
			if _, err := os.Stat(p); err == nil {
				ldconfig = p
			}
		}
	}
	if ldconfig == "" {
		t.Skip("ldconfig not found: cannot compute the expected library set independently")
	}
	out, err := exec.Command(ldconfig, "-p", "-C", root+cache).Output()
	if err != nil {
		t.Fatalf("ldconfig -p -C %s: %v", root+cache, err)
	}
	type hit struct{ key, value, class string }
	var hits []hit
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1"
		line := strings.TrimSpace(sc.Text())
		key, rest, ok := strings.Cut(line, " (")
		if !ok {
			continue
		}
		flags, value, ok := strings.Cut(rest, ") => ")
		if !ok {
			continue
		}
		class := ""
		switch {
		case strings.HasPrefix(flags, "libc6,x86-64"):
			class = "64"
		case flags == "libc6" || strings.HasPrefix(flags, "libc6, OS ABI"):
			class = "32"
		default:
			continue
		}
		hits = append(hits, hit{key, value, class})
	}
	var want []string
	for _, class := range []string{"64", "32"} {
		for _, g := range caps.LibraryGroupOrder() {
			for _, name := range caps.Libraries(g) {
				for _, h := range hits {
					if h.class != class || !strings.HasPrefix(h.key, name) {
						continue
					}
					real, err := securejoin.SecureJoin(root, h.value)
					if err != nil {
						continue
					}
					fi, err := os.Stat(real)
					if err != nil || !fi.Mode().IsRegular() || !strings.HasSuffix(real, ".so."+version) {
						continue
					}
					ef, err := elf.Open(real)
					if err != nil {
						t.Fatalf("%s: %v", real, err)
					}
					sonames, _ := ef.DynString(elf.DT_SONAME)
					tlsOK := true
					if name == "libnvidia-tls.so" {
						tlsOK = false
						if sec := ef.Section(".note.ABI-tag"); sec != nil {
							d, _ := sec.Data()
							tlsOK = len(d) >= 32 && ef.ByteOrder.Uint32(d[20:])<<16|ef.ByteOrder.Uint32(d[24:])<<8|ef.ByteOrder.Uint32(d[28:]) >= 2<<16|3<<8|99
						}
					}
					ef.Close()
					if !tlsOK {
						continue
					}
					soname := ""
					if len(sonames) > 0 {
						soname = sonames[0]
					}
					want = append(want, fmt.Sprintf("%s %s %s %s", g, class, strings.TrimPrefix(real, root), soname))
					break
				}
			}
		}
	}
	return want
}

func gotLibraries(d *Driver) []string {
	var got []string
	for _, f := range d.Libraries {
		class := "64"
		if f.Compat32 {
			class = "32"
		}
		got = append(got, fmt.Sprintf("%s %s %s %s", f.Capability, class, f.Path, f.SONAME))
	}
	return got
}

// TestFixtureLayouts checks discovery on every layout built from real
// driver packages, with and without compat32.
func TestFixtureLayouts(t *testing.T) {
	for _, layout := range fixture.Layouts() {
		for _, compat32 := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/compat32=%v", layout, compat32), func(t *testing.T) {
				r := fixture.Build(t, fixture.Spec{Layout: layout, Compat32: compat32, IPC: true, Firmware: true, MIG: true})
				d, err := Discover(Options{Root: r.Path})
				if err != nil {
					t.Fatal(err)
				}
				checkFixture(t, r, d, compat32)
			})
		}
	}
}

func checkFixture(t *testing.T, r *fixture.Root, d *Driver, compat32 bool) {
	t.Helper()
	if d.Version != r.Version || d.LibraryVersion != r.LibVersion {
		t.Errorf("versions %q/%q, want %q/%q", d.Version, d.LibraryVersion, r.Version, r.LibVersion)
	}

	// Libraries: exactly the independently computed set, in order.
	want := expectedLibraries(t, r.Path, r.LDCache, r.LibVersion)
	if got := gotLibraries(d); !slices.Equal(got, want) {
		t.Errorf("libraries differ\n got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	n32 := 0
	for _, f := range d.Libraries {
		if f.Compat32 {
			n32++
		}
		if f.HostPath != r.HostPath(f.Path) || !strings.HasSuffix(f.Path, "."+r.LibVersion) {
			t.Errorf("%s: host path %s", f.Path, f.HostPath)
		}
		if fl, ok := r.Library(f.Name, f.Compat32); ok && fl.Path == f.Path && fl.SONAME != f.SONAME {
			t.Errorf("%s: SONAME %q, fixture says %q", f.Path, f.SONAME, fl.SONAME)
		}
	}
	if compat32 != (n32 > 0) {
		t.Errorf("%d 32-bit libraries with compat32=%v", n32, compat32)
	}
	// Every library the fixture installed that the cache reaches is found:
	// cross-check the core ones by name.
	for _, name := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"} {
		if !slices.ContainsFunc(d.Libraries, func(f File) bool { return f.Name == name && !f.Compat32 }) {
			t.Errorf("no 64-bit %s", name)
		}
		if compat32 && !slices.ContainsFunc(d.Libraries, func(f File) bool { return f.Name == name && f.Compat32 }) {
			t.Errorf("no 32-bit %s", name)
		}
	}
	for _, dir := range append(append([]string{}, r.LibDirs...), r.LibDirs32...) {
		if !slices.Contains(d.LibDirs, dir) && slices.ContainsFunc(d.Libraries, func(f File) bool { return path.Dir(f.Path) == dir }) {
			t.Errorf("LibDirs %q lack %s", d.LibDirs, dir)
		}
	}

	// GPUs.
	if len(d.GPUs) != len(r.GPUs) {
		t.Fatalf("%d GPUs, want %d", len(d.GPUs), len(r.GPUs))
	}
	for i, fg := range r.GPUs {
		g := d.GPUs[i]
		if g.Index != fg.Index || g.Minor != fg.Minor || g.UUID != fg.UUID || g.BusID != fg.BusID || g.Model != fg.Model ||
			g.ProcDir != fg.ProcDir || g.MIGCapsDir != fg.MIGCapsDir {
			t.Errorf("GPU %d:\n got %+v\nwant %+v", i, g, fg)
		}
		if r.DeviceNodes && (g.Node.Path != fg.DevicePath || g.Node.Major != r.Majors.GPU || g.Node.Minor != uint32(fg.Minor) ||
			g.Node.HostPath != r.HostPath(fg.DevicePath)) {
			t.Errorf("GPU %d node %+v, want %s %d:%d", i, g.Node, fg.DevicePath, r.Majors.GPU, fg.Minor)
		}
		if g.MIGEnabled != fg.MIGEnabled || len(g.MIGDevices) != len(fg.MIG) {
			t.Errorf("GPU %d MIG enabled %v with %d devices, want %v with %d", i, g.MIGEnabled, len(g.MIGDevices), fg.MIGEnabled, len(fg.MIG))
			continue
		}
		for j, fm := range fg.MIG {
			m := g.MIGDevices[j]
			if m.Index != fm.Index || m.GI != fm.GI || m.CI != fm.CI || m.GIAccessProc != fm.GIAccess || m.CIAccessProc != fm.CIAccess {
				t.Errorf("GPU %d MIG device %d: %+v, want %+v", i, j, m, fm)
			}
			if r.DeviceNodes && (m.GIAccess.Minor != uint32(fm.GIMinor) || m.CIAccess.Minor != uint32(fm.CIMinor) || m.GIAccess.Major != r.Majors.Caps) {
				t.Errorf("GPU %d MIG device %d nodes %+v %+v, want minors %d %d", i, j, m.GIAccess, m.CIAccess, fm.GIMinor, fm.CIMinor)
			}
		}
	}

	// Driver-wide device nodes with the real numbers.
	if r.DeviceNodes {
		want := []string{
			fmt.Sprintf("/dev/nvidiactl %d:255", r.Majors.GPU),
			fmt.Sprintf("/dev/nvidia-uvm %d:0", r.Majors.UVM),
			fmt.Sprintf("/dev/nvidia-uvm-tools %d:1", r.Majors.UVM),
		}
		if _, err := os.Lstat(r.HostPath("/dev/nvidia-modeset")); err == nil {
			want = append(want, fmt.Sprintf("/dev/nvidia-modeset %d:254", r.Majors.GPU))
		}
		var got []string
		for _, n := range d.ControlNodes {
			got = append(got, fmt.Sprintf("%s %d:%d", n.Path, n.Major, n.Minor))
		}
		if !slices.Equal(got, want) {
			t.Errorf("control nodes %q, want %q", got, want)
		}
		if d.MIGConfig.Path == "" || d.MIGConfig.Major != r.Majors.Caps || d.MIGMonitor.Path == "" {
			t.Errorf("MIG config/monitor nodes %+v %+v", d.MIGConfig, d.MIGMonitor)
		}
	}

	// Binaries: the real executables, never the wrapper scripts.
	gotBins := map[string]string{}
	for _, f := range d.Binaries {
		gotBins[f.Name] = f.Path
	}
	for name, p := range r.BinaryFiles {
		if !slices.Contains(caps.Binaries(caps.Utility), name) && !slices.Contains(caps.Binaries(caps.Compute), name) {
			continue
		}
		if gotBins[name] != p {
			t.Errorf("binary %s: %q, want %q", name, gotBins[name], p)
		}
	}
	if len(gotBins) > len(r.BinaryFiles) {
		t.Errorf("binaries %v, fixture has only %v", gotBins, r.BinaryFiles)
	}

	// IPCs, resolved inside the root.
	var gotIPC, wantIPC []string
	for _, f := range d.IPCs {
		gotIPC = append(gotIPC, f.HostPath)
	}
	for _, p := range r.IPC {
		real, err := securejoin.SecureJoin(r.Path, p)
		if err != nil {
			t.Fatal(err)
		}
		wantIPC = append(wantIPC, real)
	}
	slices.Sort(gotIPC)
	slices.Sort(wantIPC)
	if !slices.Equal(gotIPC, wantIPC) {
		t.Errorf("IPCs %q, want %q", gotIPC, wantIPC)
	}

	// Firmware.
	// Firmware: Path keeps NVIDIA's unresolved form under a firmware
	// directory, HostPath is the real file.
	var gotFW, wantFW []string
	for _, f := range d.Firmware {
		gotFW = append(gotFW, f.HostPath)
		if !strings.HasPrefix(f.Path, "/lib/firmware/nvidia/"+r.Version+"/") && !strings.HasPrefix(f.Path, "/usr/local/nvidia/firmware/nvidia/"+r.Version+"/") {
			t.Errorf("firmware path %s", f.Path)
		}
	}
	for _, f := range r.Firmware {
		real, err := securejoin.SecureJoin(r.Path, path.Join(r.FirmwareDir, path.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		wantFW = append(wantFW, real)
	}
	slices.Sort(wantFW)
	if !slices.Equal(gotFW, wantFW) {
		t.Errorf("firmware %q, want %q", gotFW, wantFW)
	}
	if len(d.ProcFiles) < 2 {
		t.Errorf("proc files %q", d.ProcFiles)
	}
}

// TestFixtureCapabilitySets: what each capability set selects is exactly
// its groups' libraries (video implies compute, display implies graphics),
// 32-bit ones only with compat32.
func TestFixtureCapabilitySets(t *testing.T) {
	r := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 1, Compat32: true})
	d, err := Discover(Options{Root: r.Path})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		caps   string
		groups []caps.Capability
		c32    bool
	}{
		{"utility", []caps.Capability{caps.Utility}, false},
		{"compute,utility", []caps.Capability{caps.Utility, caps.Compute}, false},
		{"video", []caps.Capability{caps.Compute, caps.Video}, false},
		{"display", []caps.Capability{caps.Graphics}, false},
		{"ngx,compat32", []caps.Capability{caps.NGX}, true},
		{"all", []caps.Capability{caps.Utility, caps.Compute, caps.NGX, caps.Video, caps.Graphics}, true},
	}
	for _, tt := range tests {
		set, err := caps.Parse(tt.caps)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, f := range d.Libraries {
			if slices.Contains(tt.groups, f.Capability) && (!f.Compat32 || tt.c32) {
				want = append(want, f.Path)
			}
		}
		var got []string
		for _, f := range d.LibrariesFor(set) {
			got = append(got, f.Path)
		}
		if !slices.Equal(got, want) || len(got) == 0 {
			t.Errorf("%s: %q, want %q", tt.caps, got, want)
		}

		// Discovery limited to the set (Options.Caps, the container-create
		// path) selects the same files and reads no other library than
		// libnvidia-ml and libcuda.
		lim, err := Discover(Options{Root: r.Path, Caps: set})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(lim.LibrariesFor(set), d.LibrariesFor(set)) || !reflect.DeepEqual(lim.BinariesFor(set), d.BinariesFor(set)) ||
			!reflect.DeepEqual(lim.IPCsFor(set), d.IPCsFor(set)) || lim.LibraryVersion != d.LibraryVersion {
			t.Errorf("%s: limited discovery selects %+v, full discovery %+v", tt.caps, lim.LibrariesFor(set), d.LibrariesFor(set))
		}
		for _, f := range lim.Libraries {
			inSet := slices.Contains(tt.groups, f.Capability) && (!f.Compat32 || tt.c32)
			core := !f.Compat32 && (f.Name == "libnvidia-ml.so" || f.Name == "libcuda.so")
			if !inSet && !core {
				t.Errorf("%s: limited discovery looked up %s (%s)", tt.caps, f.Path, f.Capability)
			}
		}
		for _, f := range lim.Binaries {
			if !set.Has(f.Capability) {
				t.Errorf("%s: limited discovery looked up binary %s", tt.caps, f.Path)
			}
		}
	}
}

// TestFixtureBroken: every broken layout gives its own error.
func TestFixtureBroken(t *testing.T) {
	tests := []struct {
		broken fixture.Breakage
		check  func(t *testing.T, r *fixture.Root, d *Driver, err error)
	}{
		{fixture.NoDriver, func(t *testing.T, r *fixture.Root, d *Driver, err error) {
			var e *NoDriverError
			if !errors.As(err, &e) || e.Path != r.HostPath("/proc/driver/nvidia/version") || !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("error %v (%T), want *NoDriverError for the version file", err, err)
			}
		}},
		{fixture.NoLDCache, func(t *testing.T, r *fixture.Root, d *Driver, err error) {
			var e *LdCacheError
			if !errors.As(err, &e) || e.Path != r.HostPath("/etc/ld.so.cache") || !errors.Is(err, os.ErrNotExist) ||
				!strings.Contains(err.Error(), "ldconfig -r "+r.Path) {
				t.Fatalf("error %v (%T), want *LdCacheError for a missing cache", err, err)
			}
		}},
		{fixture.TruncatedLDCache, func(t *testing.T, r *fixture.Root, d *Driver, err error) {
			var e *LdCacheError
			if !errors.As(err, &e) || !errors.Is(err, ldcache.ErrTruncated) {
				t.Fatalf("error %v (%T), want *LdCacheError wrapping ErrTruncated", err, err)
			}
		}},
		{fixture.VersionMismatch, func(t *testing.T, r *fixture.Root, d *Driver, err error) {
			var e *VersionMismatchError
			if !errors.As(err, &e) || e.Module != r.Version || e.Library != r.LibVersion ||
				!strings.HasPrefix(e.LibraryPath, r.Path) || !strings.HasSuffix(e.LibraryPath, "."+r.LibVersion) {
				t.Fatalf("error %v (%T), want *VersionMismatchError %s vs %s", err, err, r.Version, r.LibVersion)
			}
		}},
		{fixture.NoDeviceNodes, func(t *testing.T, r *fixture.Root, d *Driver, err error) {
			if err != nil {
				t.Fatalf("discovery failed without device nodes: %v", err)
			}
			err = d.CheckDevices(d.GPUs)
			var e *DeviceNodeError
			if !errors.As(err, &e) || !e.Missing {
				t.Fatalf("CheckDevices: %v, want missing *DeviceNodeError", err)
			}
			for _, g := range r.GPUs {
				if !strings.Contains(err.Error(), fmt.Sprintf("missing device node %s: expected character device 195:%d", g.DevicePath, g.Minor)) {
					t.Errorf("CheckDevices error lacks %s: %v", g.DevicePath, err)
				}
			}
			if !strings.Contains(strings.Join(d.Warnings, "\n"), "missing device /dev/nvidiactl") {
				t.Errorf("warnings %q", d.Warnings)
			}
		}},
	}
	for _, layout := range fixture.Layouts() {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%s", layout, tt.broken), func(t *testing.T) {
				r := fixture.Build(t, fixture.Spec{Layout: layout, GPUs: 2, Broken: tt.broken})
				d, err := Discover(Options{Root: r.Path})
				tt.check(t, r, d, err)
			})
		}
	}
}

// TestFixtureProbe loads the packaged libcuda: the CUDA version is what
// the driver reports, compute capability and brand stay unknown without
// a kernel driver, and the warnings say why.
func TestFixtureProbe(t *testing.T) {
	for _, layout := range []fixture.Layout{fixture.Debian, fixture.Tesla470} {
		t.Run(string(layout), func(t *testing.T) {
			r := fixture.Build(t, fixture.Spec{Layout: layout, GPUs: 1})
			if r.CUDAVersion == "" {
				t.Skip("the fixture has no measured CUDA version (no C compiler when the packages were fetched)")
			}
			cache := t.TempDir()
			d, err := Discover(Options{Root: r.Path, Probe: true, ProbeConfig: proberConfig(cache)})
			if err != nil {
				t.Fatal(err)
			}
			if d.CUDAVersion != r.CUDAVersion || d.CUDADriverVersion != r.CUDADriverVersion || d.CUDAVersionSource != SourceLibcuda {
				t.Errorf("CUDA %q (%d) from %q, want %q (%d) from libcuda", d.CUDAVersion, d.CUDADriverVersion, d.CUDAVersionSource,
					r.CUDAVersion, r.CUDADriverVersion)
			}
			if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
				t.Skip("this host has an NVIDIA driver: architecture checks belong to scripts/check-real-host.sh")
			}
			g := d.GPUs[0]
			if g.Arch != "" || g.Brand != "" {
				t.Errorf("arch %q brand %q invented without a driver", g.Arch, g.Brand)
			}
			if !strings.Contains(strings.Join(d.Warnings, "\n"), "architecture unknown for GPU "+g.BusID+": cuInit: ") {
				t.Errorf("warnings %q do not say why the architecture is unknown", d.Warnings)
			}
		})
	}
}

func proberConfig(cacheDir string) driverprobe.Config {
	return driverprobe.Config{CacheDir: cacheDir}
}
