package ocistate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRunc lays out what RuncHookRoot reads for a hook whose parent is
// process 77 (named comm; initRest follows the name in its stat line),
// itself the child of 55 working in bundle, whose config.json says
// rootPath; it returns the proc directory.
type fakeRunc struct {
	selfStat, comm, initRest, cwd, spec string
}

func (f fakeRunc) make(t *testing.T) string {
	t.Helper()
	proc := t.TempDir()
	writeFile(t, proc, "self/stat", f.selfStat)
	writeFile(t, proc, "77/stat", "77 ("+f.comm+") "+f.initRest+"\n")
	if err := os.MkdirAll(filepath.Join(proc, "55"), 0o755); err != nil {
		t.Fatal(err)
	}
	if f.cwd != "" {
		if err := os.Symlink(f.cwd, filepath.Join(proc, "55/cwd")); err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

// writeFile writes data to dir/name, making its directory.
func writeFile(t *testing.T, dir, name, data string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRuncHookRoot: the root is found when the hook's parent is runc's
// init, the init's parent works in a bundle and that bundle's root.path
// is the hook's working directory; anything else is ErrNotRuncHook, and
// the hook reads the OCI state.
func TestRuncHookRoot(t *testing.T) {
	bundle := t.TempDir()
	root := filepath.Join(bundle, "rootfs")
	other := filepath.Join(bundle, "other")
	for _, d := range []string{root, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("rootfs", filepath.Join(bundle, "link")); err != nil {
		t.Fatal(err)
	}
	good := fakeRunc{
		selfStat: "4242 (nvidia-cdi-hook) S 77 4242 1 0 -1 4194560 0 0\n",
		comm:     "runc:[2:INIT]",
		initRest: "S 55 77 1 0 -1",
		cwd:      bundle,
		spec:     `{"root":{"path":"rootfs"}}`,
	}
	for _, tt := range []struct {
		name string
		edit func(f *fakeRunc)
		cwd  string
		want string // "" for ErrNotRuncHook; else its text must hold this
	}{
		{"runc's hook", func(*fakeRunc) {}, root, root},
		{"absolute root.path", func(f *fakeRunc) { f.spec = `{"root":{"path":"` + root + `"}}` }, root, root},
		{"root.path through a link to the working directory", func(f *fakeRunc) { f.spec = `{"root":{"path":"link"}}` }, root, filepath.Join(bundle, "link")},
		{"working directory elsewhere", func(*fakeRunc) {}, other, "the working directory is not"},
		{"parent not runc's init", func(f *fakeRunc) { f.comm = "crun" }, root, `the parent is "crun"`},
		{"parent named like it", func(f *fakeRunc) { f.comm = "runc:[2:INIT]x" }, root, "the parent is"},
		{"no bundle", func(f *fakeRunc) { f.cwd = "" }, root, "runc's working directory"},
		{"relative bundle", func(f *fakeRunc) { f.cwd = "bundle" }, root, "runc's working directory"},
		{"no config.json", func(f *fakeRunc) { f.cwd = root }, root, "config.json"},
		{"bad config.json", func(f *fakeRunc) { f.spec = `{"root":` }, root, "invalid OCI spec"},
		{"root.path missing", func(f *fakeRunc) { f.spec = `{"root":{"path":"gone"}}` }, root, "gone"},
		{"stat without a name", func(f *fakeRunc) { f.selfStat = "4242 S 77" }, root, "no command name"},
		{"init's parent not a number", func(f *fakeRunc) { f.initRest = "S x" }, root, `parent pid "x"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := good
			tt.edit(&f)
			if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(f.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			proc := f.make(t)
			got, err := RuncHookRoot(proc, tt.cwd, false)
			if strings.HasPrefix(tt.want, "/") {
				if err != nil || got != tt.want {
					t.Errorf("RuncHookRoot = %q, %v; want %q", got, err, tt.want)
				}
				// RuncHook also names the bundle and runc's pid.
				if h, err := RuncHook(proc, tt.cwd, false); err != nil || h != (RuntimeHook{Root: tt.want, Bundle: bundle, Runtime: 55}) {
					t.Errorf("RuncHook = %+v, %v; want root %q, bundle %q, runc 55", h, err, tt.want, bundle)
				}
				return
			}
			if !errors.Is(err, ErrNotRuncHook) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("RuncHookRoot = %q, %v; want ErrNotRuncHook saying %q", got, err, tt.want)
			}
		})
	}
	// keep writes the answer for the hooks after this one.
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(good.spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RuncHookRoot(good.make(t), root, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(bundle, memoName)); err != nil {
		t.Errorf("root path not kept with keep: %v", err)
	}
}

// TestPeekRootPath: config.json is read as far as its top-level root
// (what follows it is runc's to have checked); before it, the document must
// be an object; without a root.path it is an error naming the file.
func TestPeekRootPath(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ name, spec, want, err string }{
		{"root after process", `{"ociVersion":"1.2.0","process":{"env":["A=}"],"args":["{"]},"root":{"path":"rootfs"},"mounts":[]}`, "/b/rootfs", ""},
		{"what follows root not read", `{"root":{"path":"/r"},"mounts":[}`, "/r", ""},
		{"a nested root is not it", `{"process":{"root":{"path":"x"}},"root":{"path":"y"}}`, "/b/y", ""},
		{"no root", `{"process":{}}`, "", "root.path is not set"},
		{"root.path empty", `{"root":{}}`, "", "root.path is not set"},
		{"root not an object", `{"root":"rootfs"}`, "", "root"},
		{"not an object", `["root"]`, "", "not a JSON object"},
		{"cut before root", `{"process":{"env":[`, "", "invalid OCI spec"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".json")
			if err := os.WriteFile(file, []byte(tt.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := peekRootPath(file, "/b")
			if tt.err == "" {
				if err != nil || got != tt.want {
					t.Errorf("peekRootPath = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("peekRootPath = %q, %v; want an error naming %s and saying %q", got, err, file, tt.err)
			}
		})
	}
}

// TestParseStat: the command name is what lies between the first "(" and
// the last ")", the parent pid is read after it (a command name may hold
// spaces and parentheses).
func TestParseStat(t *testing.T) {
	for _, tt := range []struct {
		in   string
		comm string
		want int
		err  string
	}{
		{"1 (systemd) S 0 1 1", "", 0, "not a positive number"},
		{"4242 (nvidia-cdi-hook) S 77 4242 1 0\n", "nvidia-cdi-hook", 77, ""},
		{"77 (runc:[2:INIT]) S 55 77", "runc:[2:INIT]", 55, ""},
		{"9 (a) b) (c) R 12 9", "a) b) (c", 12, ""},
		{"9 (name with spaces) S 3", "name with spaces", 3, ""},
		{"9 name S 3", "", 0, "no command name"},
		{"9 ) name ( S 3", "", 0, "no command name"},
		{"9 (x) S", "", 0, "no parent pid"},
		{"9 (x) S -4", "", 0, "not a positive number"},
		{"9 (x) S 99999999999999999999", "", 0, "not a positive number"},
		{"", "", 0, "no command name"},
	} {
		comm, got, err := parseStat([]byte(tt.in))
		if tt.err == "" {
			if err != nil || got != tt.want || comm != tt.comm {
				t.Errorf("parseStat(%q) = %q, %d, %v; want %q, %d", tt.in, comm, got, err, tt.comm, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("parseStat(%q) = %q, %d, %v; want an error saying %q", tt.in, comm, got, err, tt.err)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	for _, s := range []string{"4242 (nvidia-cdi-hook) S 77 4242 1 0\n", "9 (a) b) (c) R 12 9", "9 (x) S", ")", ") ("} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		comm, ppid, err := parseStat(data)
		if err == nil && (ppid < 1 || !bytes.Contains(data, []byte("("+comm+")"))) {
			t.Fatalf("parseStat(%q) = %q, %d without an error", data, comm, ppid)
		}
	})
}

func FuzzPeekRootPath(f *testing.F) {
	for _, s := range []string{`{"process":{"env":["A"]},"root":{"path":"rootfs"},"mounts":[]}`, `{"root":{"path":"/r"}}`, `{"root":"x"}`, `[`, `{"a":1,"root":{}}`} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(dir, "config.json")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := peekRootPath(file, "/b")
		if err == nil && (!filepath.IsAbs(got) || filepath.Clean(got) != got) {
			t.Fatalf("peekRootPath(%q) = %q: not an absolute clean path", data, got)
		}
	})
}
