package cdihook

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/cudacompat"
	"github.com/nctk/nctk/internal/cudacompat/compattest"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/ldcache"
)

// compatRoot is a bundle whose image has files (container path -> content)
// and returns the bundle and its root.
func compatRoot(t *testing.T, files map[string][]byte) (string, string) {
	t.Helper()
	b, root := bundle(t)
	for p, data := range files {
		must(t, os.MkdirAll(filepath.Dir(root+p), 0o755))
		must(t, os.WriteFile(root+p, data, 0o755))
	}
	return b, root
}

// TestEnableCudaCompat: the drop-in is written exactly when the image's
// compat library is to be used, and only inside the root.
func TestEnableCudaCompat(t *testing.T) {
	withNote := compattest.NoteELF(compattest.Section, compattest.Owner, compattest.CUDA13, 4)
	noNote := compattest.NoteELF("", "", "", 4)
	const compat = "/usr/local/cuda/compat/"
	tests := []struct {
		name  string
		files map[string][]byte
		args  []string
		dir   string // the drop-in's directory; "" for none
	}{
		{"note, host branch listed", map[string][]byte{compat + "libcuda.so.590.44.01": withNote}, []string{"--host-driver-version=580.65.06"}, "/usr/local/cuda/compat"},
		{"note, host branch not listed", map[string][]byte{compat + "libcuda.so.590.44.01": withNote}, []string{"--host-driver-version=470.256.02"}, ""},
		{"note, host CUDA older", map[string][]byte{compat + "libcuda.so.590.44.01": withNote}, []string{"--host-cuda-version=12.8"}, "/usr/local/cuda/compat"},
		{"no note, newer major", map[string][]byte{compat + "libcuda.so.590.44.01": noNote}, []string{"--host-driver-version=580.65.06"}, "/usr/local/cuda/compat"},
		{"no note, same major", map[string][]byte{compat + "libcuda.so.580.95.05": noNote}, []string{"--host-driver-version=580.65.06"}, ""},
		{"no versions given", map[string][]byte{compat + "libcuda.so.590.44.01": noNote}, nil, ""},
		{"no compat directory", map[string][]byte{"/usr/bin/x": nil}, []string{"--host-driver-version=580.65.06"}, ""},
		{"two compat libraries", map[string][]byte{compat + "libcuda.so.590.44.01": noNote, compat + "libcuda.so.600.1.1": noNote},
			[]string{"--host-driver-version=580.65.06"}, ""},
		{"Orin directory", map[string][]byte{"/usr/local/cuda/compat_orin/libcuda.so.590.44.01": noNote},
			[]string{"--host-driver-version=580.65.06", "--cuda-compat-container-root", "/usr/local/cuda/compat_orin"}, "/usr/local/cuda/compat_orin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, root := compatRoot(t, tc.files)
			r := run(stateFor(b), nil, append([]string{"enable-cuda-compat"}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			data, err := os.ReadFile(root + cudacompat.Conf)
			switch {
			case tc.dir == "" && err == nil:
				t.Errorf("drop-in written: %q", data)
			case tc.dir != "" && string(data) != tc.dir+"\n":
				t.Errorf("drop-in = %q, %v; want %q", data, err, tc.dir+"\n")
			}
			if tc.dir == "" {
				return
			}
			if st, _ := os.Stat(root + cudacompat.Conf); st.Mode().Perm() != 0o644 {
				t.Errorf("drop-in mode %v, want 0644", st.Mode())
			}
			if conf, _ := os.ReadFile(root + "/etc/ld.so.conf"); !strings.Contains(string(conf), "include /etc/ld.so.conf.d/*.conf") {
				t.Errorf("/etc/ld.so.conf = %q", conf)
			}
		})
	}
}

// TestEnableCudaCompatHostile: the compat directory, the library and
// /etc/ld.so.conf.d are resolved inside the root; a FIFO or an oversized
// library is refused with an error naming it; nothing on the host changes.
func TestEnableCudaCompatHostile(t *testing.T) {
	host := t.TempDir()
	must(t, os.WriteFile(host+"/libcuda.so.999.1.1", compattest.NoteELF("", "", "", 4), 0o644))
	t.Run("compat directory links to a host directory", func(t *testing.T) {
		b, root := bundle(t)
		must(t, os.MkdirAll(root+"/usr/local/cuda", 0o755))
		must(t, os.Symlink(host, root+"/usr/local/cuda/compat"))
		if r := run(stateFor(b), nil, "enable-cuda-compat", "--host-driver-version=580.65.06"); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if _, err := os.Lstat(root + cudacompat.Conf); err == nil {
			t.Error("the host's library was used")
		}
	})
	t.Run("ld.so.conf.d links to a host directory", func(t *testing.T) {
		b, root := compatRoot(t, map[string][]byte{"/usr/local/cuda/compat/libcuda.so.590.1.1": compattest.NoteELF("", "", "", 4)})
		must(t, os.MkdirAll(root+"/etc", 0o755))
		must(t, os.Symlink(host, root+"/etc/ld.so.conf.d"))
		// Dangling inside the root: refused, naming it.
		r := run(stateFor(b), nil, "enable-cuda-compat", "--host-driver-version=580.65.06")
		if r.code != 1 || !strings.Contains(r.stderr, "/etc/ld.so.conf.d") || !strings.Contains(r.stderr, "symlink") {
			t.Errorf("exit %d, %q", r.code, r.stderr)
		}
		// Its target present inside the root: written there.
		must(t, os.MkdirAll(filepath.Join(root, host), 0o755))
		if r := run(stateFor(b), nil, "enable-cuda-compat", "--host-driver-version=580.65.06"); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(root, host, filepath.Base(cudacompat.Conf))); err != nil {
			t.Errorf("drop-in not written inside the root: %v", err)
		}
	})
	t.Run("FIFO", func(t *testing.T) {
		b, root := bundle(t)
		must(t, os.MkdirAll(root+"/usr/local/cuda/compat", 0o755))
		must(t, unix.Mkfifo(root+"/usr/local/cuda/compat/libcuda.so.999.1.1", 0o644))
		r := run(stateFor(b), nil, "enable-cuda-compat", "--host-driver-version=580.65.06")
		if r.code != 1 || !strings.Contains(r.stderr, "libcuda.so.999.1.1") || !strings.Contains(r.stderr, "not a regular file") {
			t.Errorf("exit %d, %q", r.code, r.stderr)
		}
	})
	t.Run("oversized library", func(t *testing.T) {
		b, root := bundle(t)
		must(t, os.MkdirAll(root+"/usr/local/cuda/compat", 0o755))
		f, err := os.Create(root + "/usr/local/cuda/compat/libcuda.so.999.1.1")
		must(t, err)
		must(t, f.Truncate(3<<30)) // sparse
		f.Close()
		r := run(stateFor(b), nil, "enable-cuda-compat", "--host-driver-version=580.65.06")
		if r.code != 1 || !strings.Contains(r.stderr, "libcuda.so.999.1.1") || !strings.Contains(r.stderr, "too large") {
			t.Errorf("exit %d, %q", r.code, r.stderr)
		}
		if _, err := os.Lstat(root + cudacompat.Conf); err == nil {
			t.Error("drop-in written")
		}
	})
	if ents, _ := os.ReadDir(host); len(ents) != 1 {
		t.Errorf("the host directory changed: %v", ents)
	}
}

// TestCudaCompatFirstInCache: with real driver libraries (the fixture
// packages), enable-cuda-compat then update-ldcache (in-process, and with
// ldconfig) leave the compat libcuda.so.1 ahead of the driver's in the
// container's ld.so.cache, whichever order the hooks run in; with --folder
// only, rebuilt in-process, or by ldconfig when the image holds what the
// rebuild does not reproduce (a legacy hwcap subdirectory).
func TestCudaCompatFirstInCache(t *testing.T) {
	newer, _ := filepath.Glob("/var/cache/nctk/pkgroot/535-amd64/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.*")
	older, _ := filepath.Glob("/var/cache/nctk/pkgroot/470-amd64/usr/lib/x86_64-linux-gnu/nvidia/tesla-470/libcuda.so.470.*")
	if len(newer) != 1 || len(older) != 1 {
		t.Skip("fixture driver packages 535-amd64 and 470-amd64 not unpacked in /var/cache/nctk")
	}
	read := func(p string) []byte {
		data, err := os.ReadFile(p)
		must(t, err)
		return data
	}
	const drv, compat = "/usr/lib/x86_64-linux-gnu", "/usr/local/cuda/compat"
	compatLib := compat + "/" + filepath.Base(newer[0])
	drvLib := drv + "/" + filepath.Base(older[0])
	enable := []string{"enable-cuda-compat", "--host-driver-version=470.256.02"}
	inProcess := []string{"update-ldcache", "--folder", drv, "--lib", drvLib, "--lib", drv + "/libcuda.so.1"}
	folders := []string{"update-ldcache", "--folder", drv}
	tests := []struct {
		name  string
		chain [][]string
	}{
		{"compat then in-process update", [][]string{enable, inProcess}},
		{"in-process update then compat", [][]string{inProcess, enable}},
		{"compat then in-process rebuild", [][]string{enable, folders}},
		{"compat then ldconfig", [][]string{enable, folders}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, root := compatRoot(t, map[string][]byte{compatLib: read(newer[0]), drvLib: read(older[0])})
			must(t, os.Symlink(filepath.Base(compatLib), root+compat+"/libcuda.so.1"))
			must(t, os.Symlink(filepath.Base(drvLib), root+drv+"/libcuda.so.1"))
			if strings.HasSuffix(tc.name, "ldconfig") {
				must(t, os.MkdirAll(root+drv+"/tls", 0o755))
			}
			var args []string
			for i, h := range tc.chain {
				if i > 0 {
					args = append(args, ";")
				}
				args = append(args, h...)
			}
			if strings.Contains(tc.name, "ldconfig") {
				if _, err := os.Stat("/sbin/ldconfig"); err != nil {
					t.Skip("no host ldconfig")
				}
			}
			r := run(stateFor(b), nil, append([]string{"--debug"}, args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if ran, want := strings.Contains(r.stderr, "running ldconfig"), strings.HasSuffix(tc.name, "ldconfig"); ran != want {
				t.Errorf("ran ldconfig: %v, want %v: %s", ran, want, r.stderr)
			}
			cacheData, err := os.ReadFile(root + "/etc/ld.so.cache")
			if err != nil {
				t.Fatal(err)
			}
			c, err := ldcache.Parse(cacheData)
			must(t, err)
			var found []string
			for _, e := range c.Entries {
				if e.Key == "libcuda.so.1" {
					found = append(found, e.Value)
				}
			}
			if len(found) < 2 || found[0] != compat+"/libcuda.so.1" || !slices.Contains(found, drv+"/libcuda.so.1") {
				t.Errorf("libcuda.so.1 entries in cache order: %q; want the compat one first, the driver's after", found)
			}
		})
	}
}
