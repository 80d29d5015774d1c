package engine

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	seen := map[string]Engine{}
	for _, k := range kinds() {
		for _, n := range append([]string{string(k.Name())}, k.Aliases()...) {
			if other, dup := seen[n]; dup {
				t.Errorf("%q names both %s and %s", n, other, k.Name())
			}
			seen[n] = k.Name()
			got, err := Lookup(strings.ToUpper(n))
			if err != nil || got.Name() != k.Name() {
				t.Errorf("Lookup(%q) = %v, %v; want %s", n, got, err, k.Name())
			}
		}
		if p := k.DefaultConfigPath(); !filepath.IsAbs(p) {
			t.Errorf("%s: default config path %q is not absolute", k.Name(), p)
		}
		if p := k.DefaultDropInPath(); p != "" && !filepath.IsAbs(p) {
			t.Errorf("%s: default drop-in path %q is not absolute", k.Name(), p)
		}
		if k.Daemon() == "" {
			t.Errorf("%s: no daemon to restart", k.Name())
		}
		for _, argv := range k.ConfigCommands(k.DefaultConfigPath()) {
			if len(argv) == 0 {
				t.Errorf("%s: empty config command", k.Name())
			}
		}
	}
}

func TestUnknownEngine(t *testing.T) {
	const want = `unknown runtime "podman" (want docker, containerd or crio)`
	if k, err := Lookup("podman"); err == nil || err.Error() != want {
		t.Errorf("Lookup(podman) = %v, %v; want error %q", k, err, want)
	}
	for _, name := range []Engine{"podman", "", "crio2"} {
		_, err := Plan(Request{Engine: name, ConfigPath: filepath.Join(t.TempDir(), "x"), Options: Options{RuntimePath: testRuntimePath}})
		if err == nil {
			t.Errorf("Plan(%q): no error", name)
			continue
		}
		for _, k := range kinds() {
			if !strings.Contains(err.Error(), string(k.Name())) {
				t.Errorf("Plan(%q) error %q does not name %s", name, err, k.Name())
			}
		}
	}
}

// TestEnginesRoundTrip plans, applies and plans again for every registered
// engine, with and (where the engine has them) without a drop-in file: the
// files written parse in the engine's format and name the runtime, the
// second plan changes nothing, and editing the written configuration again
// gives the same bytes.
func TestEnginesRoundTrip(t *testing.T) {
	opts := Options{RuntimePath: testRuntimePath, SetAsDefault: true, EnableCDI: true}
	for _, k := range kinds() {
		for _, dropIn := range []bool{false, true} {
			if dropIn && k.DefaultDropInPath() == "" {
				continue
			}
			name := string(k.Name())
			if dropIn {
				name += "/drop-in"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				req := Request{Engine: k.Name(), ConfigPath: filepath.Join(dir, filepath.Base(k.DefaultConfigPath())), Options: opts}
				if dropIn {
					req.DropInPath = filepath.Join(dir, "conf.d", filepath.Base(k.DefaultDropInPath()))
				}
				res, err := Plan(req)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Files) == 0 || !res.Changed() {
					t.Fatalf("nothing to write: %+v", res.Files)
				}
				if want := req.ConfigPath; dropIn {
					want = req.DropInPath
					if res.Files[0].Path != want {
						t.Errorf("Files[0] is %s, want the drop-in %s", res.Files[0].Path, want)
					}
				} else if res.Files[0].Path != want {
					t.Errorf("Files[0] is %s, want %s", res.Files[0].Path, want)
				}
				if !bytes.Contains(res.Files[0].Data, []byte(testRuntimePath)) {
					t.Errorf("%s does not name the runtime:\n%s", res.Files[0].Path, res.Files[0].Data)
				}
				if err := res.Apply(); err != nil {
					t.Fatal(err)
				}
				for _, f := range res.Files {
					got, err := os.ReadFile(f.Path)
					if err != nil || !bytes.Equal(got, f.Data) {
						t.Errorf("%s on disk differs from the plan (%v)", f.Path, err)
					}
					if strings.HasSuffix(f.Path, ".json") {
						if !json.Valid(got) {
							t.Errorf("%s is not JSON:\n%s", f.Path, got)
						}
					} else if _, err := parseTOML(got); err != nil {
						t.Errorf("%s is not TOML: %v\n%s", f.Path, err, got)
					}
				}

				again, err := Plan(req)
				if err != nil {
					t.Fatal(err)
				}
				if again.Changed() {
					t.Errorf("second plan changes files: %+v", again.Files)
				}
				// Kind.Edit on the written configuration renders it unchanged.
				c := Config{Main: ConfigFile{Path: req.ConfigPath}}
				if dropIn {
					c.DropIn.Path = req.DropInPath
				}
				if err := c.Main.read(); err != nil {
					t.Fatal(err)
				}
				if dropIn {
					if err := c.DropIn.read(); err != nil {
						t.Fatal(err)
					}
				}
				edited, err := k.Edit(c, opts.withDefaults())
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range edited.Files {
					if f.Changed {
						t.Errorf("Edit of the written configuration changes %s:\n%s", f.Path, f.Data)
					}
				}
			})
		}
	}
}

// TestPlanIgnoresWhatTheEngineLacks: a drop-in path and a configuration
// source given for an engine without them are ignored, each with a note.
func TestPlanIgnoresWhatTheEngineLacks(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "daemon.json")
	dropIn := filepath.Join(dir, "conf.d", "99-nvidia.json")
	res, err := Plan(Request{Engine: Docker, ConfigPath: cfg, DropInPath: dropIn, Source: []byte(`{"x": 1}`), Options: Options{RuntimePath: testRuntimePath}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 1 || res.Files[0].Path != cfg {
		t.Errorf("files = %+v, want only %s", res.Files, cfg)
	}
	if bytes.Contains(res.Files[0].Data, []byte(`"x"`)) {
		t.Errorf("the configuration source was used:\n%s", res.Files[0].Data)
	}
	if len(res.Notes) != 2 || !strings.Contains(res.Notes[0], "no drop-in") || !strings.Contains(res.Notes[1], "configuration source") {
		t.Errorf("notes = %q", res.Notes)
	}
}
