package hostfacts

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLdconfigSystemDirs(t *testing.T) {
	cacheDir := filepath.Join(t.TempDir(), "cdi")
	bin := filepath.Join(t.TempDir(), "ldconfig")
	if err := os.WriteFile(bin, []byte("one"), 0o755); err != nil {
		t.Fatal(err)
	}
	probes := 0
	probe := func(dirs ...string) func() ([]string, error) {
		return func() ([]string, error) { probes++; return dirs, nil }
	}
	for i, want := range [][]string{{"/lib", "/usr/lib"}, {"/lib", "/usr/lib"}} {
		got, err := ldconfigSystemDirs(cacheDir, bin, probe("/lib", "/usr/lib"))
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("call %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if probes != 1 {
		t.Errorf("%d probes for two calls on one file, want 1", probes)
	}
	// Another file at the path (an updated ldconfig): probed again, and
	// both are kept.
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("two!"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := ldconfigSystemDirs(cacheDir, bin, probe("/lib64"))
	if err != nil || !slices.Equal(got, []string{"/lib64"}) || probes != 2 {
		t.Fatalf("after the update: %q, %v, %d probes", got, err, probes)
	}
	data, err := os.ReadFile(filepath.Join(cacheDir, ldconfigDirsFile))
	if err != nil || strings.Count(string(data), "\n") != 3 {
		t.Fatalf("cache file %q, %v: want the magic and two lines", data, err)
	}
	// A cache directory whose parent is missing too (/run/nctk after a
	// boot on a host where no nctk runtime ran yet: an engine applies the
	// specs): both are made, and the second call reads the first's answer.
	fresh := filepath.Join(t.TempDir(), "run", "nctk", "cdi")
	probes = 0
	for i := range 2 {
		if got, err := ldconfigSystemDirs(fresh, bin, probe("/lib64")); err != nil || !slices.Equal(got, []string{"/lib64"}) {
			t.Fatalf("fresh cache, call %d: %q, %v", i, got, err)
		}
	}
	if probes != 1 {
		t.Errorf("%d probes for two calls with a cache directory whose parent was missing, want 1", probes)
	}
	// A probe that fails is an error, and nothing is kept.
	boom := errors.New("boom")
	if _, err := ldconfigSystemDirs(t.TempDir(), bin, func() ([]string, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("failing probe: %v", err)
	}
	// A broken or untrusted file is no cache.
	for _, content := range []string{"garbage\n", ldconfigDirsMagic + "\n1:2:3:4:5 relative\n"} {
		if err := os.WriteFile(filepath.Join(cacheDir, ldconfigDirsFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		before := probes
		if got, err := ldconfigSystemDirs(cacheDir, bin, probe("/lib64")); err != nil || !slices.Equal(got, []string{"/lib64"}) || probes != before+1 {
			t.Errorf("cache %q: %q, %v, probed %d", content, got, err, probes-before)
		}
	}
	if err := os.Chmod(filepath.Join(cacheDir, ldconfigDirsFile), 0o644); err != nil {
		t.Fatal(err)
	}
	before := probes
	if _, err := ldconfigSystemDirs(cacheDir, bin, probe("/lib64")); err != nil || probes != before+1 {
		t.Errorf("group-readable cache file used (%d probes, %v)", probes-before, err)
	}
	if _, err := ldconfigSystemDirs(cacheDir, filepath.Join(cacheDir, "missing"), probe("/lib")); err == nil {
		t.Error("missing ldconfig: no error")
	}
}

func FuzzParseLdconfigDirs(f *testing.F) {
	f.Add(ldconfigDirsMagic+"\n1:2:3:4:5 /lib /usr/lib\n", "1:2:3:4:5")
	f.Add(ldconfigDirsMagic+"\n1:2:3:4:5 /lib\n9:9:9:9:-1 /lib64\n", "9:9:9:9:-1")
	f.Add("x", "")
	f.Fuzz(func(t *testing.T, data, id string) {
		dirs, others, err := parseLdconfigDirs(data, id)
		if err != nil {
			return
		}
		for _, d := range dirs {
			if !strings.HasPrefix(d, "/") || strings.ContainsAny(d, " \n") {
				t.Fatalf("bad directory %q", d)
			}
		}
		for _, l := range others {
			if strings.Contains(l, "\n") {
				t.Fatalf("line with a newline %q", l)
			}
		}
	})
}
