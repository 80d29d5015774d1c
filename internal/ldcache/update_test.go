package ldcache

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/fixture"
)

func TestLibCmp(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int // sign
	}{
		{"libfoo.so.9", "libfoo.so.10", -1},
		{"libfoo.so.10", "libfoo.so.9", 1},
		{"libfoo.so.1", "libfoo.so.01", 0},
		{"libfoo.so", "libfoo.so.1", -1},
		{"libfoo.so.1", "libfoo.so", 1},
		{"libfoo.so.a", "libfoo.so.1", -1}, // a digit sorts after a non-digit
		{"libcuda.so.1", "libcuda.so.1", 0},
		{"", "", 0},
		{"", "a", -1},
		{"libA", "liba", -1},
		{"libz3.so.4", "libz.so.1", 1},
		// Numbers wrap at 32 bits as in glibc, but values 2^31 and more
		// apart still compare antisymmetrically (glibc's difference
		// overflows there: the fuzz input of FuzzEncode/23e1450e4488b807).
		{"2000000000000000000000000000000", "0", -1},
		{"0", "2000000000000000000000000000000", 1},
		{"libx.so.2147483647", "libx.so.2147483648", 1},
		{"libx.so.2147483648", "libx.so.2147483647", -1},
	} {
		if got := sign(LibCmp(tc.a, tc.b)); got != tc.want {
			t.Errorf("LibCmp(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// scanDir lists dir (a container directory below root) as ldconfig sees it.
func scanDir(t testing.TB, root, dir string) []DirEntry {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []DirEntry
	for _, de := range des {
		if !IsLibraryName(de.Name()) {
			continue
		}
		p := filepath.Join(root, dir, de.Name())
		f, err := os.Open(p)
		if err != nil {
			continue // dangling link
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			continue
		}
		lib, err := Inspect(f, st.Size())
		f.Close()
		if errors.Is(err, ErrNotLibrary) {
			continue
		}
		if err != nil {
			t.Fatalf("Inspect %s: %v", p, err)
		}
		out = append(out, DirEntry{Dir: dir, Name: de.Name(), IsLink: de.Type()&os.ModeSymlink != 0, Lib: lib})
	}
	return out
}

// driverRoot copies the fixture's 535 libraries (64-bit and i386) into
// root's /opt/nv/lib64 and /opt/nv/lib32 with the links nctk's plan
// creates (SONAME links, libcuda.so, libnvidia-opticalflow.so,
// libGLX_indirect.so.0), and a few host libraries into the trusted
// directory /usr/lib/x86_64-linux-gnu, plus an image-side libcuda.so.1 there
// (a second library of the same name).
func driverRoot(t *testing.T) (root string, nvDirs []string) {
	t.Helper()
	fx := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 1, Compat32: true})
	root = t.TempDir()
	nvDirs = []string{"/opt/nv/lib64", "/opt/nv/lib32"}
	for _, l := range fx.Libraries {
		dir := nvDirs[0]
		if l.Is32 {
			dir = nvDirs[1]
		}
		base := path.Base(l.Path)
		copyFile(t, filepath.Join(fx.Path, l.Path), filepath.Join(root, dir, base))
		links := map[string]string{}
		if l.SONAME != "" && l.SONAME != base {
			links[l.SONAME] = base
		}
		switch l.Name {
		case "libcuda.so", "libnvidia-opticalflow.so":
			links[l.Name] = l.SONAME
		case "libGLX_nvidia.so":
			links["libGLX_indirect.so.0"] = base
		}
		for link, target := range links {
			if err := os.Symlink(target, filepath.Join(root, dir, link)); err != nil {
				t.Fatal(err)
			}
		}
	}
	hostDir := "/usr/lib/x86_64-linux-gnu"
	for _, lib := range []string{"libc.so.6", "libm.so.6", "libz.so.1", "libgcc_s.so.1"} {
		src, err := filepath.EvalSymlinks(filepath.Join(hostDir, lib))
		if err != nil {
			t.Logf("host library %s: %v", lib, err)
			continue
		}
		copyFile(t, src, filepath.Join(root, hostDir, filepath.Base(src)))
		if filepath.Base(src) != lib {
			if err := os.Symlink(filepath.Base(src), filepath.Join(root, hostDir, lib)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An image-side libcuda.so.1 (a copy of the driver's) in a trusted
	// directory: ldconfig keeps both; the command-line directory's comes
	// first.
	cuda := slices.IndexFunc(fx.Libraries, func(l fixture.Library) bool { return l.Name == "libcuda.so" && !l.Is32 })
	copyFile(t, filepath.Join(fx.Path, fx.Libraries[cuda].Path), filepath.Join(root, hostDir, "libcuda.so.1"))
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return root, nvDirs
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func runLdconfig(t *testing.T, ldconfig string, args ...string) {
	t.Helper()
	if b, err := exec.Command(ldconfig, args...).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig %q: %v\n%s", args, err, b)
	}
}

// printCache returns `ldconfig -p -C file` without its header and
// generator lines.
func printCache(t *testing.T, ldconfig, file string) []string {
	t.Helper()
	b, err := exec.Command(ldconfig, "-p", "-C", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ldconfig -p -C %s: %v\n%s", file, err, b)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, "\t") {
			out = append(out, l)
		}
	}
	return out
}

// TestUpdateMatchesLdconfig has the host's ldconfig write a cache for an
// image (host libraries only) and one for the image with the driver
// libraries added (the directories on the command line, as the
// update-ldcache hook runs it); Update on the first with EntriesFor of the
// driver directories must give exactly the second's entries, in the same
// order, and `ldconfig -p` must print the same.
func TestUpdateMatchesLdconfig(t *testing.T) {
	ldconfig := findLdconfig(t)
	if os.Geteuid() != 0 {
		t.Skip("ldconfig -r needs root (chroot)")
	}
	root, nvDirs := driverRoot(t)
	runLdconfig(t, ldconfig, "-r", root, "-X", "-f", "/etc/ld.so.conf", "-C", "/etc/base.cache")
	runLdconfig(t, ldconfig, append([]string{"-r", root, "-X", "-f", "/etc/ld.so.conf", "-C", "/etc/full.cache"}, nvDirs...)...)
	base, err := Load(filepath.Join(root, "etc/base.cache"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Load(filepath.Join(root, "etc/full.cache"))
	if err != nil {
		t.Fatal(err)
	}
	var names []DirEntry
	for _, d := range nvDirs {
		names = append(names, scanDir(t, root, d)...)
	}
	got := base.Update(EntriesFor(names))
	t.Logf("image cache: %d entries; with the driver: %d (ldconfig: %d)", len(base.Entries), len(got.Entries), len(want.Entries))
	if !slices.Equal(got.Entries, want.Entries) {
		t.Errorf("Update entries differ from ldconfig's:\n got %s\nwant %s", fmtEntries(got.Entries), fmtEntries(want.Entries))
	}
	data, err := Encode(got)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "etc/nctk.cache")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if g, w := printCache(t, ldconfig, file), printCache(t, ldconfig, filepath.Join(root, "etc/full.cache")); !slices.Equal(g, w) {
		t.Errorf("ldconfig -p of the written cache:\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
	// The whole cache from scratch: every directory scanned like ldconfig.
	var all []DirEntry
	for _, d := range append(slices.Clone(nvDirs), "/usr/lib/x86_64-linux-gnu") {
		all = append(all, scanDir(t, root, d)...)
	}
	fresh := (*Cache)(nil).Update(EntriesFor(all))
	if !slices.Equal(fresh.Entries, want.Entries) {
		t.Errorf("EntriesFor(all dirs) differs from ldconfig's:\n got %s\nwant %s", fmtEntries(fresh.Entries), fmtEntries(want.Entries))
	}
}

func fmtEntries(es []Entry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n  %s %s 0x%04x %x %d", e.Key, e.Value, e.Flags, e.HWCap, e.OSVersion)
	}
	return b.String()
}

// TestEncodeGoldenHWCaps re-encodes caches Debian 12's ldconfig wrote (with
// a glibc-hwcaps entry): the entries and hwcaps names survive, and
// `ldconfig -p` prints the same (it resolves the hwcaps names through the
// extension).
func TestEncodeGoldenHWCaps(t *testing.T) {
	for _, name := range []string{"debian12-new.cache", "debian12-compat.cache"} {
		c, err := Load(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.HWCaps, []string{"x86-64-v3"}) {
			t.Fatalf("%s: HWCaps = %q, want [x86-64-v3]", name, c.HWCaps)
		}
		if !IsSorted(c.Entries, c.HWCaps) {
			t.Errorf("%s: ldconfig's cache is not in SortEntries order", name)
		}
		data, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(back.Entries, c.Entries) || !slices.Equal(back.HWCaps, c.HWCaps) {
			t.Errorf("%s: round trip changed the cache", name)
		}
		if name != "debian12-new.cache" {
			// ldconfig -p prints the hwcaps names of a compat-format
			// file relative to the wrong base (hwcap: ""); the loader
			// and Parse read them relative to the new header.
			continue
		}
		ldconfig, err := exec.LookPath("ldconfig")
		if err != nil {
			if ldconfig, err = exec.LookPath("/sbin/ldconfig"); err != nil {
				continue
			}
		}
		file := filepath.Join(t.TempDir(), "c")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if g, w := printCache(t, ldconfig, file), printCache(t, ldconfig, filepath.Join("testdata", name)); !slices.Equal(g, w) {
			t.Errorf("%s: ldconfig -p of the re-encoded cache:\n%s\nwant\n%s", name, strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
	}
}

func FuzzEncode(f *testing.F) {
	f.Add("libcuda.so.1", "/usr/lib/libcuda.so.1", int32(0x303), uint64(0), "libcuda.so", "x86-64-v3")
	f.Add("libfoo.so.10", "/a/libfoo.so.10", int32(3), uint64(1)<<62, "libfoo.so.9", "")
	f.Add("libz.so.1", "/l/libz.so.1", int32(0x303), uint64(0x8000), "libz3.so.4", "x86-64-v2")
	f.Fuzz(func(t *testing.T, k1, v1 string, flags int32, hwcap uint64, k2, hw string) {
		if strings.ContainsRune(k1+v1+k2+hw, 0) {
			return // C strings
		}
		c := &Cache{Entries: []Entry{
			{Key: k1, Value: v1, Flags: flags, HWCap: hwcap},
			{Key: k2, Value: v1, Flags: flags ^ 0x300},
			{Key: k1, Value: v1 + "/x", Flags: flags, HWCap: hwcap &^ (1 << 62), OSVersion: 7},
		}}
		if hw != "" {
			c.HWCaps = []string{hw}
		}
		up := (&Cache{HWCaps: c.HWCaps}).Update(c.Entries)
		if !IsSorted(up.Entries, up.HWCaps) {
			t.Fatalf("Update result not sorted: %s", fmtEntries(up.Entries))
		}
		for i := 1; i < len(up.Entries); i++ {
			if LibCmp(up.Entries[i-1].Key, up.Entries[i].Key) < 0 {
				t.Fatalf("keys not descending: %q before %q", up.Entries[i-1].Key, up.Entries[i].Key)
			}
		}
		data, err := Encode(up)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data)
		if err != nil {
			t.Fatalf("Encode output does not parse: %v", err)
		}
		if !slices.Equal(back.Entries, up.Entries) || !slices.Equal(back.HWCaps, up.HWCaps) {
			t.Fatalf("round trip: got %s %q, want %s %q", fmtEntries(back.Entries), back.HWCaps, fmtEntries(up.Entries), up.HWCaps)
		}
		// Updating again with the same entries changes nothing.
		again := back.Update(c.Entries)
		if !slices.Equal(again.Entries, up.Entries) {
			t.Fatalf("Update is not idempotent: %s vs %s", fmtEntries(again.Entries), fmtEntries(up.Entries))
		}
	})
}

func FuzzInspect(f *testing.F) {
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libz.so.1"} {
		if data, err := os.ReadFile(p); err == nil && len(data) < 4<<20 {
			f.Add(data)
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lib, err := Inspect(strings.NewReader(string(data)), int64(len(data)))
		if err == nil && strings.IndexByte(lib.SONAME, 0) >= 0 {
			t.Fatalf("SONAME with NUL: %q", lib.SONAME)
		}
		if v, err := ABITag(strings.NewReader(string(data)), int64(len(data))); err == nil && v > 0xffffff {
			t.Fatalf("ABI tag %#x out of range", v)
		}
	})
}
