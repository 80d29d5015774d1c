package cdispec

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/ldcache"
)

// copyHostLib copies the host's shared library src to dst, skipping the
// test when the host has none there.
func copyHostLib(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("no host library to copy: %v", err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func inspectFile(t *testing.T, p string) ldcache.Library {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	lib, err := ldcache.Inspect(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// TestPlanForLibs: PlanFor gives the runtime what ld.so.cache records
// about the libraries a spec mounts (what reading them gives), from the
// resolved-spec cache while the files are unchanged, read again (and the
// cache rewritten) after a file changed, and read directly without a
// cache; files that are no library, or missing, are left to the runtime.
func TestPlanForLibs(t *testing.T) {
	host := t.TempDir()
	lib := filepath.Join(host, "libacme.so.1")
	copyHostLib(t, "/lib/x86_64-linux-gnu/libz.so.1", lib)
	notLib := filepath.Join(host, "libnot.so.1")
	if err := os.WriteFile(notLib, []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs := t.TempDir()
	spec := "cdiVersion: 0.5.0\nkind: acme.io/lib\ncontainerEdits:\n  mounts:\n" +
		"  - {hostPath: " + lib + ", containerPath: /usr/lib/libacme.so.1, options: [ro, bind]}\n" +
		"  - {hostPath: " + notLib + ", containerPath: /usr/lib/libnot.so.1, options: [ro, bind]}\n" +
		"  - {hostPath: " + filepath.Join(host, "libgone.so.1") + ", containerPath: /usr/lib/libgone.so.1, options: [ro, bind]}\n" +
		"  - {hostPath: " + host + ", containerPath: /opt/acme, options: [ro, bind]}\n" +
		"devices:\n- {name: a, containerEdits: {env: [A=1]}}\n"
	if err := os.WriteFile(filepath.Join(specs, "acme.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	dirs := []string{specs}
	cacheDir := filepath.Join(t.TempDir(), "cdi")
	names := []string{"acme.io/lib=a"}
	libsOf := func(cacheDir string) map[string]ldcache.Library {
		t.Helper()
		p, err := PlanFor(names, dirs, cacheDir)
		if err != nil {
			t.Fatal(err)
		}
		return p.CDILibs
	}

	want := map[string]ldcache.Library{lib: inspectFile(t, lib)}
	if got := libsOf(""); !reflect.DeepEqual(got, want) {
		t.Errorf("without a cache: %v, want %v", got, want)
	}
	if got := libsOf(cacheDir); !reflect.DeepEqual(got, want) {
		t.Errorf("cache written: %v, want %v", got, want)
	}
	files, _ := filepath.Glob(filepath.Join(cacheDir, "cdi-*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache files %q, want one", files)
	}
	past := time.Unix(1_000_000, 0)
	if err := os.Chtimes(files[0], past, past); err != nil {
		t.Fatal(err)
	}
	idx := loadIndex(cacheDir, dirs, mustKey(t, dirs))
	if idx == nil || len(idx.Libs) != 2 || !idx.Libs[notLib].NotLib || idx.Libs[lib].SONAME != want[lib].SONAME {
		t.Fatalf("cached libraries: %+v", idx)
	}
	if got := libsOf(cacheDir); !reflect.DeepEqual(got, want) {
		t.Errorf("cache read: %v, want %v", got, want)
	}
	if fi, _ := os.Stat(files[0]); !fi.ModTime().Equal(past) {
		t.Error("cache rewritten although no library changed")
	}

	// Another library written over the file: read again, cache rewritten.
	copyHostLib(t, "/lib/x86_64-linux-gnu/libm.so.6", lib)
	want = map[string]ldcache.Library{lib: inspectFile(t, lib)}
	if want[lib].SONAME == "" {
		t.Fatal("libm has no SONAME")
	}
	if got := libsOf(cacheDir); !reflect.DeepEqual(got, want) {
		t.Errorf("after the library changed: %v, want %v", got, want)
	}
	if fi, _ := os.Stat(files[0]); fi.ModTime().Equal(past) {
		t.Error("cache not rewritten after a library changed")
	}
	if got := libsOf(cacheDir); !reflect.DeepEqual(got, want) {
		t.Errorf("cache read after the change: %v, want %v", got, want)
	}
	// A file only touched (same content, new ctime) is not trusted either.
	if err := os.Chtimes(lib, past, past); err != nil {
		t.Fatal(err)
	}
	idx = loadIndex(cacheDir, dirs, mustKey(t, dirs))
	p, err := PlanFor(names, dirs, "")
	if err != nil {
		t.Fatal(err)
	}
	if known, stale := idx.verifiedLibs(p.CDI); len(known) != 0 || !reflect.DeepEqual(stale, []string{lib, filepath.Join(host, "libgone.so.1")}) {
		t.Errorf("touched file: known %v, stale %q", known, stale)
	}
}

func mustKey(t *testing.T, dirs []string) string {
	t.Helper()
	k, err := specDirsKey(dirs)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// FuzzLoadIndex: whatever a trusted cache file holds, loading it and
// resolving against it returns edits or an error, never a panic.
func FuzzLoadIndex(f *testing.F) {
	f.Add([]byte(`{"version":2,"key":"K","specs":[{"env":["A=1"],"mounts":[{"hostPath":"/nonexistent/libx.so.1","containerPath":"/l/libx.so.1"}]}],` +
		`"devices":{"acme.io/x=a":{"spec":0,"edits":{"env":["B=1"]}}},"libs":{"/nonexistent/libx.so.1":{"dev":1,"ino":2,"size":3,"mtime":4,"ctime":5,"soname":"libx.so.1","flags":771}}}`))
	f.Add([]byte(`{"version":2,"key":"K","specs":[],"devices":{"acme.io/x=a":{"spec":7,"edits":null}}}`))
	f.Add([]byte(`{"version":2,"key":"K","devices":{},"libs":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cacheDir := filepath.Join(t.TempDir(), "cdi")
		dirs := []string{"/nonexistent/cdi"}
		if err := os.Mkdir(cacheDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(specCachePath(cacheDir, dirs), data, 0o600); err != nil {
			t.Fatal(err)
		}
		idx := loadIndex(cacheDir, dirs, "K")
		if idx == nil {
			return
		}
		e, err := idx.resolve([]string{"acme.io/x=a"}, dirs)
		if err != nil {
			return
		}
		idx.verifiedLibs(e)
	})
}
