package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ldcache"
)

// hostSystemDirs probes the host ldconfig's built-in directories.
func hostSystemDirs(t testing.TB) (ldconfig string, dirs []string) {
	t.Helper()
	ldconfig = hostLdconfig(t)
	if _, err := os.Stat(ldconfig); err != nil {
		t.Skipf("no host ldconfig to compare with: %v", err)
	}
	dirs, err := ProbeSystemDirs(context.Background(), ldconfig)
	if err != nil {
		t.Fatalf("ProbeSystemDirs(%s): %v", ldconfig, err)
	}
	return ldconfig, dirs
}

func TestProbeSystemDirs(t *testing.T) {
	_, dirs := hostSystemDirs(t)
	// Every glibc ldconfig searches /lib and /usr/lib (or their lib64
	// siblings) on its own.
	if !slices.ContainsFunc(dirs, func(d string) bool { return strings.HasSuffix(d, "/lib") || strings.HasSuffix(d, "/lib64") }) {
		t.Errorf("ProbeSystemDirs = %q: no lib or lib64 directory", dirs)
	}
	if _, err := ProbeSystemDirs(context.Background(), "/bin/true"); err == nil {
		t.Error("ProbeSystemDirs(/bin/true): no error for a program that names no directory")
	}
	if _, err := ProbeSystemDirs(context.Background(), "sbin/ldconfig"); err == nil {
		t.Error("ProbeSystemDirs(relative): no error")
	}
	got := systemDirsFromProbe("ldconfig: Can't stat /lib64: No such file or directory\nnoise\n" +
		"ldconfig: Can't stat /usr/lib64: No such file or directory\nldconfig: Can't stat /lib64: x\n" +
		"ldconfig: Can't stat relative: x\nldconfig: Can't stat /a b: x\n")
	if want := []string{"/lib64", "/usr/lib64"}; !slices.Equal(got, want) {
		t.Errorf("systemDirsFromProbe = %q, want %q", got, want)
	}
}

// cacheLines renders a cache's entries for comparison.
func cacheLines(t *testing.T, data []byte) []string {
	t.Helper()
	c, err := ldcache.Parse(data)
	if err != nil {
		t.Fatalf("parse cache: %v", err)
	}
	var out []string
	for _, e := range c.Entries {
		out = append(out, fmt.Sprintf("%s => %s flags=%#x os=%#x hwcap=%#x", e.Key, e.Value, e.Flags, e.OSVersion, e.HWCap))
	}
	return append(out, fmt.Sprintf("hwcaps=%q", c.HWCaps))
}

// TestScanLdconfigHost: over the host's own root, what the in-process
// ldconfig would write is what the host's ldconfig writes (-X: no links,
// -C: to a temporary file; nothing of the host changes).
func TestScanLdconfigHost(t *testing.T) {
	ldconfig, sys := hostSystemDirs(t)
	r, err := Open("/")
	must(t, err)
	defer r.Close()
	sc := r.newLibScan()
	defer sc.close()
	libs, _, err := r.scanLdconfig(&sc, nil, RebuildOptions{SystemDirs: sys})
	if errors.Is(err, ErrRebuildUnsupported) {
		t.Skipf("this host's libraries are beyond the in-process ldconfig: %v", err)
	}
	must(t, err)
	got, err := ldconfigCache(libs)
	must(t, err)
	out := filepath.Join(t.TempDir(), "ld.so.cache")
	if b, err := exec.Command(ldconfig, "-X", "-i", "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig -X -C: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	must(t, err)
	g, w := cacheLines(t, got), cacheLines(t, want)
	if !slices.Equal(g, w) {
		t.Errorf("in-process cache differs from the host ldconfig's:\n%s", e2e.LineDiff(g, w))
	}
	t.Logf("%d libraries in %d entries compared (system directories %q)", len(libs), len(w)-1, sys)
}

// sameRoots fails t when the roots got and want differ in their
// ld.so.cache entries or in any other file (ldconfig's aux-cache left
// out).
func sameRoots(t *testing.T, got, want string) {
	t.Helper()
	gc, err := os.ReadFile(filepath.Join(got, "etc/ld.so.cache"))
	must(t, err)
	wc, err := os.ReadFile(filepath.Join(want, "etc/ld.so.cache"))
	must(t, err)
	if g, w := cacheLines(t, gc), cacheLines(t, wc); !slices.Equal(g, w) {
		t.Errorf("cache entries differ:\n%s", e2e.LineDiff(g, w))
	}
	skip := []string{"/etc/ld.so.cache", "/var/cache/ldconfig"}
	if d := e2e.TreeDiff(e2e.TreeState(t, got, skip...), e2e.TreeState(t, want, skip...)); len(d) > 0 {
		t.Errorf("trees differ:\n%s", strings.Join(d, "\n"))
	}
}

// ldconfigTestRoot builds a test image of the given kind at root from the
// host's libraries.
func ldconfigTestRoot(t testing.TB, root, kind string) {
	t.Helper()
	lib, soname := hostLib(t)
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		t.Skipf("no %s to build test images", libc)
	}
	w := func(p, content string) {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, p), []byte(content), 0o644))
	}
	ln := func(target, p string) {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must(t, os.Symlink(target, filepath.Join(root, p)))
	}
	base := filepath.Base(lib)
	switch kind {
	case "debian":
		w("etc/debian_version", "12.0\n")
		w("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n\ninclude\t/etc/ld.so.extra/[a-c]?.conf /etc/ld.so.extra/exact.conf /etc/missing/*.conf\n")
		w("etc/ld.so.extra/b1.conf", "/opt/b1\n")
		w("etc/ld.so.extra/d1.conf", "/opt/d1\n")
		w("etc/ld.so.extra/exact.conf", "/opt/exact/lib/\n")
		must(t, os.MkdirAll(filepath.Join(root, "etc/ld.so.conf.d/dir.conf"), 0o755))
		copyFile(t, lib, filepath.Join(root, "opt/b1", base))
		copyFile(t, lib, filepath.Join(root, "opt/d1", base))
		copyFile(t, lib, filepath.Join(root, "opt/exact/lib/libexact.so.7"))
		w("etc/ld.so.conf.d/x86_64-linux-gnu.conf", "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")
		w("etc/ld.so.conf.d/libc.conf", "# libc default configuration\n/usr/local/lib\n")
		w("etc/ld.so.conf.d/.hidden.conf", "/opt/hidden\n")
		w("etc/ld.so.conf.d/notconf", "/opt/notconf\n")
		ln("usr/lib", "lib")
		d := "usr/lib/x86_64-linux-gnu"
		copyFile(t, libc, filepath.Join(root, d, "libc.so.6"))
		copyFile(t, lib, filepath.Join(root, d, base)) // no SONAME link: ldconfig makes it
		ln(soname, filepath.Join(d, "libz.so"))        // dev link
		w(d+"/libc.so", "/* GNU ld script */\nGROUP ( /lib/x86_64-linux-gnu/libc.so.6 )\n")
		w(d+"/libbogus.so.1", "not an ELF file at all, but long enough to be read as one")
		ln("libgone.so.1.0", filepath.Join(d, "libgone.so.1"))
		// Chains that stay in the directory (answered there): two hops to
		// a library, and a loop (dangling to ldconfig).
		ln("libhop2.so", filepath.Join(d, "libhop.so"))
		ln(base, filepath.Join(d, "libhop2.so"))
		ln("libloop.so.5.0", filepath.Join(d, "libloop.so.5"))
		ln("libloop.so.5", filepath.Join(d, "libloop.so.5.0"))
		ln("/usr", filepath.Join(d, "libdir.so"))
		ln("/usr/lib/x86_64-linux-gnu/"+base, filepath.Join(d, "libabs.so.3"))
		// Leads to a host file the image lacks: dangling inside the root.
		ln(hostLdconfig(t), filepath.Join(d, "libhost.so.1"))
		ln("../../../../../../.."+hostLdconfig(t), filepath.Join(d, "libclimb.so"))
		must(t, os.MkdirAll(filepath.Join(root, d, "libnotalib.so.d"), 0o755))
		must(t, os.MkdirAll(filepath.Join(root, d, "gconv"), 0o755))
		copyFile(t, lib, filepath.Join(root, "opt/hidden", base))
		copyFile(t, lib, filepath.Join(root, "opt/notconf", base))
		// The driver's folder: libraries with links as a spec makes them,
		// one SONAME link stale, one SONAME path a regular file.
		must(t, os.MkdirAll(filepath.Join(root, "usr/local/nvidia/lib64"), 0o755))
		injectDriver(t, root, "usr/local/nvidia/lib64")
		nv := filepath.Join(root, "usr/local/nvidia/lib64")
		must(t, os.Remove(filepath.Join(nv, "libnvidia-ml.so.1")))
		must(t, os.Symlink("libnvidia-ml.so.400.1", filepath.Join(nv, "libnvidia-ml.so.1")))
		must(t, os.Remove(filepath.Join(nv, "libnvidia-ptxjitcompiler.so.1")))
		w("usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.1", "a stray file where the link goes")
		// A stale cache the rebuild replaces.
		w("etc/ld.so.cache", "garbage")
	case "rhel", "rhel-nodriver":
		w("etc/redhat-release", "Rocky Linux release 9\n")
		w("etc/ld.so.conf", "# comment\ninclude ld.so.conf.d/*.conf\n  /opt/app/lib/  # trailing slash and comment\n/opt/missing\n/usr/lib64\n")
		w("etc/ld.so.conf.d/app.conf", "/opt/app/lib\n/opt/app/lib64\n")
		copyFile(t, libc, filepath.Join(root, "usr/lib64/libc.so.6"))
		copyFile(t, lib, filepath.Join(root, "usr/lib64", base))
		ln(base, filepath.Join(root, "usr/lib64", soname)[len(root)+1:])
		ln("usr/lib64", "lib64")
		copyFile(t, lib, filepath.Join(root, "opt/app/lib/libapp.so.2.0"))
		ln("/opt/app/lib", "opt/app/lib64")
		if kind == "rhel" {
			injectDriver(t, root, "usr/lib64")
		}
	case "hostile":
		// Paths that lead out of the root, or into /proc, /sys and /dev
		// (empty in the sandbox).
		ln("../../../../../../../../etc/ld.so.conf.real", "etc/ld.so.conf")
		w("etc/other.conf", "include /proc/self/root/etc/ld.so.conf.d/*.conf\n/proc/self/root/usr/lib/x86_64-linux-gnu\n/sys/x\n/dev/shm\n/opt/esc\n/opt/lib\n")
		ln("/etc/other.conf", "etc/ld.so.conf.real")
		ln("../../../../../../../../usr/lib/x86_64-linux-gnu", "opt/esc")
		copyFile(t, lib, filepath.Join(root, "opt/lib", base))
		ln("/proc/self/root/usr/lib/x86_64-linux-gnu/"+base, "opt/lib/libproc.so.1")
		ln("/dev/null", "opt/lib/libnull.so.1")
		injectDriver(t, root, "opt/lib")
	case "bare":
		copyFile(t, lib, filepath.Join(root, "lib", base))
		injectDriver(t, root, "lib")
	default:
		t.Fatalf("unknown kind %q", kind)
	}
}

// TestRebuildLdCacheMatchesLdconfig: on the same images, the in-process
// rebuild gives the tree (configuration files, SONAME links, every other
// file) and the cache entries that the host's ldconfig run in its sandbox
// gives.
func TestRebuildLdCacheMatchesLdconfig(t *testing.T) {
	requireRoot(t)
	ldconfig, sys := hostSystemDirs(t)
	for _, tc := range []struct {
		kind string
		dirs []string
	}{
		{"debian", []string{"/usr/local/nvidia/lib64"}},
		{"rhel", []string{"/usr/lib64"}},
		{"bare", []string{"/lib"}},
		{"bare", nil},
		{"hostile", []string{"/opt/lib", "/proc/self/root/lib"}},
	} {
		t.Run(tc.kind+fmt.Sprint(len(tc.dirs)), func(t *testing.T) {
			want, got := t.TempDir(), t.TempDir()
			ldconfigTestRoot(t, want, tc.kind)
			ldconfigTestRoot(t, got, tc.kind)
			// Twice: a run makes SONAME links that a link seen before them
			// leads to only in the next run, for ldconfig as for the
			// rebuild.
			for range 2 {
				if err := RunLdconfig(context.Background(), want, tc.dirs, LdconfigOptions{Ldconfig: ldconfig, ConfDropIn: true}); err != nil {
					t.Fatalf("RunLdconfig: %v", err)
				}
				r, err := Open(got)
				must(t, err)
				err = r.RebuildLdCache(tc.dirs, RebuildOptions{SystemDirs: sys}, nil)
				r.Commit()
				r.Close()
				if err != nil {
					t.Fatalf("RebuildLdCache: %v", err)
				}
				sameRoots(t, got, want)
			}
		})
	}
}

// TestRebuildLdCacheUnsupported: what the in-process ldconfig does not
// reproduce is refused before any library link or the cache is written,
// and Rollback leaves the image as it was.
func TestRebuildLdCacheUnsupported(t *testing.T) {
	requireRoot(t)
	for name, setup := range map[string]func(root string){
		"hwcap line": func(root string) {
			must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("hwcap 1 foo\n"), 0o644))
		},
		"relative directory": func(root string) {
			must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("opt/lib\n"), 0o644))
		},
		"library type": func(root string) {
			must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("/opt/lib=libc6\n"), 0o644))
		},
		"pattern in a directory name": func(root string) {
			must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("include /etc/*/x.conf\n"), 0o644))
		},
		"include loop": func(root string) {
			must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("include /etc/ld.so.conf\n"), 0o644))
		},
		"glibc-hwcaps": func(root string) {
			must(t, os.MkdirAll(filepath.Join(root, "lib/glibc-hwcaps/x86-64-v3"), 0o755))
		},
		"legacy tls": func(root string) {
			must(t, os.MkdirAll(filepath.Join(root, "lib/tls"), 0o755))
		},
		"too many configuration files": func(root string) {
			must(t, os.WriteFile(filepath.Join(root, "etc/empty.conf"), nil, 0o644))
			must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte(strings.Repeat("include /etc/empty.conf\n", maxConfFiles)), 0o644))
		},
		"a library needing x86-64-v3": func(root string) {
			gcc, err := exec.LookPath("gcc")
			if err != nil {
				t.Skipf("no gcc to build a marked library: %v", err)
			}
			src := filepath.Join(t.TempDir(), "f.c")
			must(t, os.WriteFile(src, []byte("int f(void) { return 1; }\n"), 0o644))
			out := filepath.Join(root, "lib/libv3.so.1")
			if b, err := exec.Command(gcc, "-shared", "-nostdlib", "-o", out, "-Wl,-soname,libv3.so.1", "-Wl,-z,x86-64-v3", src).CombinedOutput(); err != nil {
				t.Skipf("gcc: %v\n%s", err, b)
			}
		},
		"a SONAME that is a path": func(root string) {
			gcc, err := exec.LookPath("gcc")
			if err != nil {
				t.Skipf("no gcc to build the library: %v", err)
			}
			src := filepath.Join(t.TempDir(), "f.c")
			must(t, os.WriteFile(src, []byte("int f(void) { return 1; }\n"), 0o644))
			out := filepath.Join(root, "lib/libesc.so.1.0")
			if b, err := exec.Command(gcc, "-shared", "-nostdlib", "-o", out, "-Wl,-soname,../../../../tmp/libesc.so.1", src).CombinedOutput(); err != nil {
				t.Skipf("gcc: %v\n%s", err, b)
			}
		},
		"too many directories": func(root string) {
			var conf strings.Builder
			for i := range maxScanDirs + 1 {
				d := fmt.Sprintf("/opt/d%d", i)
				must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
				conf.WriteString(d + "\n")
			}
			must(t, os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte(conf.String()), 0o644))
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			ldconfigTestRoot(t, root, "bare")
			must(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
			setup(root)
			before := e2e.TreeState(t, root)
			r, err := Open(root)
			must(t, err)
			defer r.Close()
			err = r.RebuildLdCache([]string{"/lib"}, RebuildOptions{SystemDirs: []string{"/lib", "/usr/lib"}}, nil)
			if !errors.Is(err, ErrRebuildUnsupported) {
				t.Fatalf("RebuildLdCache: %v, want ErrRebuildUnsupported", err)
			}
			if _, err := os.Lstat(filepath.Join(root, "etc/ld.so.cache")); err == nil {
				t.Error("a cache was written")
			}
			must(t, r.Rollback())
			if d := e2e.TreeDiff(e2e.TreeState(t, root), before); len(d) > 0 {
				t.Errorf("Rollback left changes:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// BenchmarkRebuildLdCache: the in-process rebuild over the debian test
// image (BenchmarkRunLdconfig is the host's ldconfig in its sandbox over a
// smaller one).
func BenchmarkRebuildLdCache(b *testing.B) {
	requireRoot(b)
	_, sys := hostSystemDirs(b)
	root := b.TempDir()
	ldconfigTestRoot(b, root, "debian")
	dirs := []string{"/usr/local/nvidia/lib64"}
	for b.Loop() {
		r, err := Open(root)
		must(b, err)
		must(b, r.RebuildLdCache(dirs, RebuildOptions{SystemDirs: sys}, nil))
		r.Commit()
		r.Close()
	}
}

// BenchmarkRunLdconfigDebian: the host's ldconfig in its sandbox over the
// same image as BenchmarkRebuildLdCache.
func BenchmarkRunLdconfigDebian(b *testing.B) {
	requireRoot(b)
	ldconfig, _ := hostSystemDirs(b)
	root := b.TempDir()
	ldconfigTestRoot(b, root, "debian")
	dirs := []string{"/usr/local/nvidia/lib64"}
	for b.Loop() {
		must(b, RunLdconfig(context.Background(), root, dirs, LdconfigOptions{Ldconfig: ldconfig, ConfDropIn: true}))
	}
}

// pendingDriver is the fixture's 64-bit driver as a CDI spec in NVIDIA's
// layout gives it to libDir: the library files as mounts of the host's
// files, and the links create-symlinks makes (not the SONAME links, which
// ldconfig makes); apply makes them in a root (copies, not mounts).
func pendingDriver(t testing.TB, libDir string) (p Pending, apply func(root string)) {
	t.Helper()
	fx := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 1})
	for _, l := range fx.Libraries {
		if l.Is32 {
			continue
		}
		base := filepath.Base(l.Path)
		p.Files = append(p.Files, PendingFile{Path: libDir + "/" + base, Source: filepath.Join(fx.Path, l.Path)})
		switch l.Name {
		case "libcuda.so", "libnvidia-opticalflow.so":
			p.Links = append(p.Links, PendingLink{Path: libDir + "/" + l.Name, Target: l.SONAME})
		case "libGLX_nvidia.so":
			p.Links = append(p.Links, PendingLink{Path: libDir + "/libGLX_indirect.so.0", Target: base})
		}
	}
	return p, func(root string) {
		for _, f := range p.Files {
			copyFile(t, f.Source, filepath.Join(root, f.Path))
		}
		for _, l := range p.Links {
			must(t, os.Symlink(l.Target, filepath.Join(root, l.Path)))
		}
	}
}

// TestRebuildLdCachePending: rebuilt before the driver's files are there
// (as the runtime does before runc mounts them), the cache and links are
// what the host's ldconfig makes once they are; and what other mounts
// would cover is refused.
func TestRebuildLdCachePending(t *testing.T) {
	requireRoot(t)
	ldconfig, sys := hostSystemDirs(t)
	for _, tc := range []struct{ name, kind, dir string }{
		{"debian, a folder of the image", "debian", "/usr/lib/x86_64-linux-gnu"},
		{"debian, a folder the mounts make", "debian", "/usr/local/nvidia/lib"},
		{"rhel", "rhel-nodriver", "/usr/lib64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, apply := pendingDriver(t, tc.dir)
			want, got := t.TempDir(), t.TempDir()
			ldconfigTestRoot(t, want, tc.kind)
			ldconfigTestRoot(t, got, tc.kind)
			apply(want)
			dirs := []string{tc.dir}
			if err := RunLdconfig(context.Background(), want, dirs, LdconfigOptions{Ldconfig: ldconfig, ConfDropIn: true}); err != nil {
				t.Fatalf("RunLdconfig: %v", err)
			}
			// The links create-symlinks makes exist before the rebuild
			// (the runtime makes them first); the files do not.
			for _, l := range p.Links {
				must(t, os.MkdirAll(filepath.Join(got, filepath.Dir(l.Path)), 0o755))
				must(t, os.Symlink(l.Target, filepath.Join(got, l.Path)))
			}
			r, err := Open(got)
			must(t, err)
			err = r.RebuildLdCache(dirs, RebuildOptions{SystemDirs: sys, Pending: p, Mounts: []string{"/etc/hosts", "/proc", "/dev/shm", "/lib/firmware/nvidia/535/gsp.bin", "/usr/lib64/firmware", "/usr/bin/nvidia-smi"}}, nil)
			r.Commit()
			r.Close()
			if err != nil {
				t.Fatalf("RebuildLdCache: %v", err)
			}
			for _, f := range p.Files {
				copyFile(t, f.Source, filepath.Join(got, f.Path))
			}
			sameRoots(t, got, want)
		})
	}
	for _, mount := range []string{"/usr/lib64", "/usr", "/usr/lib64/libextra.so.1", "/etc/ld.so.conf.d", "/etc/ld.so.conf.d/x.conf", "/etc"} {
		t.Run("mount "+mount, func(t *testing.T) {
			root := t.TempDir()
			ldconfigTestRoot(t, root, "rhel")
			r, err := Open(root)
			must(t, err)
			defer r.Close()
			err = r.RebuildLdCache([]string{"/usr/lib64"}, RebuildOptions{SystemDirs: sys, Mounts: []string{mount}}, nil)
			if !errors.Is(err, ErrRebuildUnsupported) {
				t.Fatalf("RebuildLdCache with a mount at %s: %v, want ErrRebuildUnsupported", mount, err)
			}
			must(t, r.Rollback())
		})
	}
}

func FuzzSystemDirsFromProbe(f *testing.F) {
	f.Add("ldconfig: Can't stat /lib/x86_64-linux-gnu: No such file or directory\nldconfig: Can't stat /usr/lib: No such file or directory\n")
	f.Add("ldconfig: Can't stat : x\nCan't stat /a/../b: y\n")
	f.Fuzz(func(t *testing.T, out string) {
		dirs := systemDirsFromProbe(out)
		for i, d := range dirs {
			if !path.IsAbs(d) || path.Clean(d) != d || d == "/" || strings.ContainsAny(d, " \t\n") {
				t.Fatalf("bad directory %q", d)
			}
			if slices.Contains(dirs[:i], d) {
				t.Fatalf("directory %q twice", d)
			}
		}
	})
}
