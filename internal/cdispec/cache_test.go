package cdispec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// cacheSpecs are specs of two directories (the second takes precedence)
// with a device defined in both (the second's wins) and one defined twice
// in the second (a conflict: the CDI library resolves neither).
var cacheSpecs = map[string]string{
	"low/acme.yaml": `cdiVersion: 0.5.0
kind: acme.io/x
containerEdits: {env: [LOW=1]}
devices:
- {name: a, containerEdits: {env: [A=low]}}
- {name: only-low, containerEdits: {deviceNodes: [{path: /dev/null}]}}
`,
	"high/acme.yaml": `cdiVersion: 0.5.0
kind: acme.io/x
containerEdits:
  env: [HIGH=1]
  mounts: [{hostPath: /etc/hosts, containerPath: /etc/acme, options: [ro, bind]}]
  hooks: [{hookName: createContainer, path: /usr/bin/acme, args: [acme, x], env: [E=1], timeout: 3}]
devices:
- {name: a, containerEdits: {env: [A=high], deviceNodes: [{path: /dev/acme, type: c, major: 240, minor: 1, fileMode: 0640, uid: 7, gid: 8}]}}
- {name: dup, containerEdits: {env: [D=1]}}
`,
	"high/acme2.yaml": `cdiVersion: 0.6.0
kind: acme.io/x
annotations: {acme.io/k: v}
devices:
- {name: dup, containerEdits: {env: [D=2]}}
`,
}

func writeCacheSpecs(t *testing.T) (root string, dirs []string) {
	t.Helper()
	root = t.TempDir()
	for name, content := range cacheSpecs {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, []string{filepath.Join(root, "low"), specDir(t), filepath.Join(root, "high"), filepath.Join(root, "absent")}
}

// sameResolution checks that ResolveCached gives what Resolve gives (edits,
// or the error) for each request.
func sameResolution(t *testing.T, dirs []string, cacheDir string, requests [][]string) {
	t.Helper()
	for _, names := range requests {
		want, _, werr := ResolveCached(names, dirs, "")
		got, _, gerr := ResolveCached(names, dirs, cacheDir)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
			t.Errorf("%q: error %v, want %v", names, gerr, werr)
			continue
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("%q: cached edits\n got %s\nwant %s", names, gj, wj)
		}
	}
}

var cacheRequests = [][]string{
	{"acme.io/x=a"},
	{"acme.io/x=only-low", "acme.io/x=a"},
	{"nvidia.com/gpu=0", "acme.io/x=a", "nvidia.com/gpu=all"},
	{"acme.io/x=dup"},
	{"acme.io/y=dup"},
	{"acme.io/x=nope", "nvidia.com/gpu=1"},
}

// TestResolveCached: the cache gives Resolve's result (priority between
// directories, conflicts, every edit field, errors), is written once and
// then read (not rewritten), and is not used stale after a spec file is
// changed, added or removed.
func TestResolveCached(t *testing.T) {
	root, dirs := writeCacheSpecs(t)
	cacheDir := filepath.Join(t.TempDir(), "cdi")

	if e, _, err := ResolveCached([]string{"acme.io/x=a"}, dirs, ""); err != nil || !reflect.DeepEqual(e.Env, []string{"HIGH=1", "A=high"}) {
		t.Fatalf("the later directory does not win: %+v, %v", e, err)
	}
	var ue *UnresolvedError
	if _, _, err := ResolveCached([]string{"acme.io/x=dup"}, dirs, ""); !errors.As(err, &ue) {
		t.Fatalf("a conflicting device resolves: %v", err)
	}

	sameResolution(t, dirs, cacheDir, cacheRequests) // writes the cache
	files, _ := filepath.Glob(filepath.Join(cacheDir, "cdi-*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache files %q, want one", files)
	}
	cacheFile := files[0]
	fi, err := os.Stat(cacheFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v, want 0600", fi.Mode())
	}
	if di, _ := os.Stat(cacheDir); di.Mode().Perm() != 0o700 {
		t.Errorf("cache dir mode %v, want 0700", di.Mode())
	}
	before, _ := os.ReadFile(cacheFile)
	past := time.Unix(1_000_000, 0)
	if err := os.Chtimes(cacheFile, past, past); err != nil {
		t.Fatal(err)
	}
	sameResolution(t, dirs, cacheDir, cacheRequests) // reads it
	if fi, _ := os.Stat(cacheFile); !fi.ModTime().Equal(past) {
		t.Error("cache rewritten although nothing changed")
	}

	change := []struct {
		name string
		do   func() error
		want func(t *testing.T)
	}{
		{"same-size edit", func() error {
			p := filepath.Join(root, "high/acme.yaml")
			return os.WriteFile(p, []byte(strings.Replace(cacheSpecs["high/acme.yaml"], "A=high", "A=HIGH", 1)), 0o644)
		}, func(t *testing.T) {
			if e, _, err := ResolveCached([]string{"acme.io/x=a"}, dirs, cacheDir); err != nil || !reflect.DeepEqual(e.Env, []string{"HIGH=1", "A=HIGH"}) {
				t.Errorf("stale after an edit: %+v, %v", e, err)
			}
		}},
		{"file added", func() error {
			return os.WriteFile(filepath.Join(root, "low/new.yaml"), []byte("cdiVersion: 0.5.0\nkind: acme.io/z\ndevices:\n- {name: n, containerEdits: {env: [N=1]}}\n"), 0o644)
		}, func(t *testing.T) {
			if _, _, err := ResolveCached([]string{"acme.io/z=n"}, dirs, cacheDir); err != nil {
				t.Errorf("added spec not seen: %v", err)
			}
		}},
		{"file removed", func() error { return os.Remove(filepath.Join(root, "high/acme2.yaml")) }, func(t *testing.T) {
			if e, _, err := ResolveCached([]string{"acme.io/x=dup"}, dirs, cacheDir); err != nil || !reflect.DeepEqual(e.Env, []string{"HIGH=1", "D=1"}) {
				t.Errorf("conflict still there after a removal: %+v, %v", e, err)
			}
		}},
		{"directory created", func() error {
			return os.Mkdir(filepath.Join(root, "absent"), 0o755)
		}, func(t *testing.T) {}},
	}
	for _, c := range change {
		t.Run(c.name, func(t *testing.T) {
			if err := c.do(); err != nil {
				t.Fatal(err)
			}
			c.want(t)
			sameResolution(t, dirs, cacheDir, cacheRequests)
			if now, _ := os.ReadFile(cacheFile); string(now) == string(before) {
				t.Error("cache not rewritten after the change")
			}
			before, _ = os.ReadFile(cacheFile)
		})
	}
}

// TestResolveCachedTrust: a cache file or directory that another user
// could have written (group/other permissions, a symlink) is not read.
func TestResolveCachedTrust(t *testing.T) {
	_, dirs := writeCacheSpecs(t)
	cacheDir := filepath.Join(t.TempDir(), "cdi")
	names := []string{"acme.io/x=a"}
	if _, _, err := ResolveCached(names, dirs, cacheDir); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(cacheDir, "cdi-*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache files %q", files)
	}
	cacheFile := files[0]
	good, _ := os.ReadFile(cacheFile)
	poisoned := []byte(strings.ReplaceAll(string(good), "A=high", "A=evil"))
	if string(poisoned) == string(good) {
		t.Fatal("cache file does not hold the device's env")
	}
	evil := func(t *testing.T) bool {
		e, _, err := ResolveCached(names, dirs, cacheDir)
		if err != nil {
			t.Fatal(err)
		}
		return reflect.DeepEqual(e.Env, []string{"HIGH=1", "A=evil"})
	}
	// Trusted (0600, owner): the cache is what is used — so it must be
	// protected.
	if err := os.WriteFile(cacheFile, poisoned, 0o600); err != nil {
		t.Fatal(err)
	}
	if !evil(t) {
		t.Fatal("a trusted cache file is not used")
	}
	for _, tc := range []struct {
		name  string
		setup func() error
	}{
		{"file readable by others", func() error {
			if err := os.WriteFile(cacheFile, poisoned, 0o600); err != nil {
				return err
			}
			return os.Chmod(cacheFile, 0o644)
		}},
		{"directory open to others", func() error {
			if err := os.WriteFile(cacheFile, poisoned, 0o600); err != nil {
				return err
			}
			return os.Chmod(cacheDir, 0o755)
		}},
		{"file is a symlink", func() error {
			other := filepath.Join(t.TempDir(), "x.json")
			if err := os.WriteFile(other, poisoned, 0o600); err != nil {
				return err
			}
			os.Remove(cacheFile)
			return os.Symlink(other, cacheFile)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.Chmod(cacheDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.setup(); err != nil {
				t.Fatal(err)
			}
			if evil(t) {
				t.Error("untrusted cache used")
			}
		})
	}
}
