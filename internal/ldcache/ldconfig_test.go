package ldcache

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.cache from the host's ldconfig")

// libSpec is a shared object to place in a test root.
type libSpec struct {
	dir, file, soname string
	gccArgs           []string // -m32, -mx32; nil for the host's 64-bit
	needsLibc         bool     // link against a stub libc.so.6 so ldconfig tags it libc6
}

// testRootLibs mirrors a driver install: 64-bit and i386 NVIDIA libraries
// in separate directories, an x32 library, and a glibc-hwcaps subdirectory
// (which makes ldconfig write hwcap-extension entries).
func testRootLibs() []libSpec {
	return []libSpec{
		{"/opt/nv/lib64", "libcuda.so.580.159.04", "libcuda.so.1", nil, true},
		{"/opt/nv/lib64", "libnvidia-ml.so.580.159.04", "libnvidia-ml.so.1", nil, true},
		{"/opt/nv/lib32", "libcuda.so.580.159.04", "libcuda.so.1", []string{"-m32"}, true},
		{"/opt/nv/lib32", "libnvidia-ml.so.580.159.04", "libnvidia-ml.so.1", []string{"-m32"}, false},
		{"/opt/x32", "libx32only.so.2.0", "libx32only.so.2", []string{"-mx32"}, true},
		{"/usr/lib/x86_64-linux-gnu", "libhw.so.1.0", "libhw.so.1", nil, true},
		{"/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3", "libhw.so.1.0", "libhw.so.1", nil, true},
	}
}

// makeRoot builds a root with compiled stub libraries (gcc, no C library
// needed) and an etc/ld.so.conf naming their directories. It returns false
// when the toolchain cannot build them.
func makeRoot(t *testing.T) (string, bool) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Logf("gcc not installed (%v): 32-bit ldconfig entries come from Build only", err)
		return "", false
	}
	root := t.TempDir()
	src := filepath.Join(t.TempDir(), "f.c")
	if err := os.WriteFile(src, []byte("int nctk_stub(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := func(out string, args ...string) bool {
		args = append([]string{"-shared", "-nostdlib", "-o", out, src}, args...)
		if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Logf("gcc %q: %v\n%s", args, err, b)
			return false
		}
		return true
	}
	stubs := t.TempDir()
	var conf []string
	for _, l := range testRootLibs() {
		dir := filepath.Join(root, l.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		args := append(slices.Clone(l.gccArgs), "-Wl,-soname,"+l.soname)
		if l.needsLibc {
			// A stub libc.so.6 of the same ABI as DT_NEEDED, as real
			// driver libraries have.
			abi := filepath.Join(stubs, "abi"+strings.Join(l.gccArgs, ""))
			libc := filepath.Join(abi, "libc.so.6")
			if _, err := os.Stat(libc); err != nil {
				if err := os.MkdirAll(abi, 0o755); err != nil {
					t.Fatal(err)
				}
				if !cc(libc, append(slices.Clone(l.gccArgs), "-Wl,-soname,libc.so.6")...) {
					return "", false
				}
			}
			args = append(args, "-Wl,--no-as-needed", libc)
		}
		if !cc(filepath.Join(dir, l.file), args...) {
			return "", false
		}
		if !slices.Contains(conf, l.dir) && filepath.Base(filepath.Dir(l.dir)) != "glibc-hwcaps" {
			conf = append(conf, l.dir)
		}
	}
	if err := os.Symlink("libcuda.so.1", filepath.Join(root, "opt/nv/lib64/libcuda.so")); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, d := range conf {
		b.WriteString(d + "\n")
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, true
}

// TestLdconfigWrittenCaches has the host's ldconfig write caches in every
// format over a test root and checks Parse against `ldconfig -p`.
func TestLdconfigWrittenCaches(t *testing.T) {
	ldconfig := findLdconfig(t)
	root, ok := makeRoot(t)
	if !ok {
		t.Skip("cannot compile stub libraries; covered by Build-based tests")
	}
	run := func(args ...string) {
		t.Helper()
		if b, err := exec.Command(ldconfig, args...).CombinedOutput(); err != nil {
			t.Fatalf("ldconfig %q: %v\n%s", args, err, b)
		}
	}
	// -N only creates the SONAME links (so libcuda.so -> libcuda.so.1
	// resolves); -r then writes <root>/etc/ld.so.cache (new format), and the
	// other formats go to -C paths, which -r also prefixes.
	run("-r", root, "-N")
	run("-r", root)
	run("-r", root, "-c", "compat", "-C", "/etc/compat.cache")
	run("-r", root, "-c", "old", "-C", "/etc/old.cache")

	type want struct {
		class Class
		value string
	}
	for _, tc := range []struct{ name, file, golden string }{
		{"new", "etc/ld.so.cache", "debian12-new.cache"},
		{"compat", "etc/compat.cache", "debian12-compat.cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(root, tc.file)
			c := compareWithLdconfig(t, ldconfig, file)
			for _, w := range []want{
				{Class64, "/opt/nv/lib64/libcuda.so.1"},
				{Class32, "/opt/nv/lib32/libcuda.so.1"},
			} {
				got := c.Lookup(w.class, "libcuda.so")
				if len(got) == 0 || got[0].Value != w.value {
					t.Errorf("Lookup(%v, libcuda.so) = %+v, want first %s", w.class, got, w.value)
				}
			}
			if got := c.Lookup(Class32, "libcuda.so"); len(got) != 1 || got[0].Flags != FlagELFLibc6|ArchI386 {
				t.Errorf("i386 libcuda entry = %+v, want one with flags libc6|i386", got)
			}
			if got := c.Lookup(Class32, "libnvidia-ml"); len(got) != 1 || got[0].Flags != FlagELF|ArchI386 {
				t.Errorf("i386 libnvidia-ml (no libc) entry = %+v, want one with flags ELF|i386", got)
			}
			if got := c.Lookup(ClassOther, "libx32only"); len(got) != 1 || got[0].Arch() != ArchX32 {
				t.Errorf("x32 entry = %+v", got)
			}
			if got := c.Lookup(Class64, "libhw.so.1"); len(got) != 2 || !got[0].HWCapsSubdir() || got[1].HWCapsSubdir() {
				t.Errorf("hwcaps entries = %+v, want the glibc-hwcaps one first", got)
			}
			if *update {
				data, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join("testdata", tc.golden), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	t.Run("old", func(t *testing.T) {
		file := filepath.Join(root, "etc/old.cache")
		_, err := Load(file)
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("old-format cache: err = %v, want %v", err, ErrUnsupported)
		}
		if *update {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile("testdata/debian12-old.cache", data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestGoldenCaches parses caches written by Debian 12's ldconfig (committed
// in testdata; regenerate with -update) without needing ldconfig.
func TestGoldenCaches(t *testing.T) {
	want := []string{
		"libx32only.so.2\t/opt/x32/libx32only.so.2\tother",
		"libnvidia-ml.so.1\t/opt/nv/lib64/libnvidia-ml.so.1\t64-bit",
		"libnvidia-ml.so.1\t/opt/nv/lib32/libnvidia-ml.so.1\t32-bit",
		"libhw.so.1\t/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libhw.so.1.0\t64-bit",
		"libhw.so.1\t/usr/lib/x86_64-linux-gnu/libhw.so.1\t64-bit",
		"libcuda.so.1\t/opt/nv/lib64/libcuda.so.1\t64-bit",
		"libcuda.so.1\t/opt/nv/lib32/libcuda.so.1\t32-bit",
		"libcuda.so\t/opt/nv/lib64/libcuda.so\t64-bit",
	}
	for _, name := range []string{"debian12-new.cache", "debian12-compat.cache"} {
		c, err := Load(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		got := entryLines(c)
		if !slices.Equal(got, want) {
			t.Errorf("%s: got\n%q\nwant\n%q", name, got, want)
		}
	}
	if _, err := Load("testdata/debian12-old.cache"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("old cache: err = %v", err)
	}
}
