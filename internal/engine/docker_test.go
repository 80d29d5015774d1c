package engine

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const testRuntimePath = "/usr/local/bin/nvidia-container-runtime"

func decodeJSON(t testing.TB, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("output is not valid JSON: %v\n%s", err, data)
	}
	return m
}

// topLevelKeys returns the keys of a JSON object in file order.
func topLevelKeys(t testing.TB, data []byte) []string {
	t.Helper()
	o, err := parseJSONObject(data)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return o.keys
}

func TestEditDocker(t *testing.T) {
	sample, err := os.ReadFile("testdata/daemon.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   string
		opts Options
		// want: keys that must hold these values in the output.
		wantDefault string
		wantCDI     bool
	}{
		{name: "empty", in: ""},
		{name: "empty object", in: "{}"},
		{name: "whitespace", in: " \n\t"},
		{name: "sample", in: string(sample)},
		{name: "sample default", in: string(sample), opts: Options{SetAsDefault: true}, wantDefault: "nvidia"},
		{name: "sample cdi", in: string(sample), opts: Options{EnableCDI: true}, wantCDI: true},
		{name: "sample all", in: string(sample), opts: Options{SetAsDefault: true, EnableCDI: true}, wantDefault: "nvidia", wantCDI: true},
		{name: "existing default kept", in: `{"default-runtime": "runc"}`, wantDefault: "runc"},
		{name: "existing default replaced", in: `{"default-runtime": "runc"}`, opts: Options{SetAsDefault: true}, wantDefault: "nvidia"},
		{name: "features kept", in: `{"features": {"buildkit": true}}`, opts: Options{EnableCDI: true}, wantCDI: true},
		{name: "null runtimes", in: `{"runtimes": null}`},
		{name: "existing nvidia entry", in: `{"runtimes": {"nvidia": {"path": "/old/path", "runtimeArgs": ["--x"]}}}`},
		{name: "custom name", in: `{}`, opts: Options{RuntimeName: "nvidia-experimental"}},
		{name: "relative path", in: `{}`, opts: Options{RuntimePath: "nvidia-container-runtime"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			if o.RuntimePath == "" {
				o.RuntimePath = testRuntimePath
			}
			name := o.RuntimeName
			if name == "" {
				name = "nvidia"
			}
			out, err := EditDocker([]byte(tt.in), o)
			if err != nil {
				t.Fatalf("EditDocker: %v", err)
			}
			got := decodeJSON(t, out)
			entry, _ := got["runtimes"].(map[string]any)[name].(map[string]any)
			if entry["path"] != o.RuntimePath {
				t.Errorf("runtimes.%s.path = %v, want %s\n%s", name, entry["path"], o.RuntimePath, out)
			}
			if args, ok := entry["args"].([]any); !ok || len(args) != 0 || len(entry) != 2 {
				t.Errorf("runtimes.%s = %v, want exactly path and empty args\n%s", name, entry, out)
			}
			if d, _ := got["default-runtime"].(string); d != tt.wantDefault {
				t.Errorf("default-runtime = %q, want %q", d, tt.wantDefault)
			}
			if f, _ := got["features"].(map[string]any); (f["cdi"] == true) != tt.wantCDI {
				t.Errorf("features.cdi = %v, want %v", f["cdi"], tt.wantCDI)
			}
			if !strings.HasSuffix(string(out), "}\n") || !strings.Contains(string(out), "\n  \"runtimes\"") {
				t.Errorf("output is not two-space indented with a final newline:\n%s", out)
			}

			// Idempotent: configuring the output again changes nothing.
			again, err := EditDocker(out, o)
			if err != nil {
				t.Fatalf("second EditDocker: %v", err)
			}
			if !bytes.Equal(again, out) {
				t.Errorf("not idempotent:\nfirst:\n%s\nsecond:\n%s", out, again)
			}

			// Everything else is kept, in order.
			if strings.TrimSpace(tt.in) == "" {
				return
			}
			orig := decodeJSON(t, []byte(tt.in))
			stripDockerEdits(got, orig, name, o)
			if !reflect.DeepEqual(got, orig) {
				t.Errorf("unrelated settings changed:\n got %v\nwant %v", got, orig)
			}
			inKeys, outKeys := topLevelKeys(t, []byte(tt.in)), topLevelKeys(t, out)
			if !slices.Equal(outKeys[:len(inKeys)], inKeys) {
				t.Errorf("key order changed: %v -> %v", inKeys, outKeys)
			}
		})
	}
}

// stripDockerEdits removes from got what EditDocker added to orig.
func stripDockerEdits(got, orig map[string]any, name string, o Options) {
	rts := got["runtimes"].(map[string]any)
	origRts, _ := orig["runtimes"].(map[string]any)
	if origEntry, ok := origRts[name]; ok {
		rts[name] = origEntry // replaced whole
	} else {
		delete(rts, name)
	}
	if _, ok := orig["runtimes"]; !ok {
		delete(got, "runtimes")
	} else if orig["runtimes"] == nil && len(rts) == 0 {
		got["runtimes"] = nil
	}
	if o.SetAsDefault {
		if v, ok := orig["default-runtime"]; ok {
			got["default-runtime"] = v
		} else {
			delete(got, "default-runtime")
		}
	}
	if o.EnableCDI {
		f := got["features"].(map[string]any)
		origF, ok := orig["features"].(map[string]any)
		if !ok {
			delete(got, "features")
		} else if v, ok := origF["cdi"]; ok {
			f["cdi"] = v
		} else {
			delete(f, "cdi")
		}
	}
}

func TestEditDockerKeepsValuesVerbatim(t *testing.T) {
	in := `{"a": 1.50, "b": "x<y>&z", "c": 1e3, "runtimes": {"runc": {"path": "runc"}}}`
	out, err := EditDocker([]byte(in), Options{RuntimePath: testRuntimePath})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"a": 1.50`, `"b": "x<y>&z"`, `"c": 1e3`, `"runc": {`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	runtimes := topLevelKeys(t, mustRaw(t, out, "runtimes"))
	if !reflect.DeepEqual(runtimes, []string{"runc", "nvidia"}) {
		t.Errorf("runtimes order = %v, want [runc nvidia]", runtimes)
	}
}

func mustRaw(t testing.TB, data []byte, key string) []byte {
	t.Helper()
	o, err := parseJSONObject(data)
	if err != nil {
		t.Fatal(err)
	}
	return o.vals[key]
}

func TestEditDockerUnchangedKeepsBytes(t *testing.T) {
	in := "{\n    \"runtimes\": {\"nvidia\": {\"path\": \"" + testRuntimePath + "\", \"args\": []}},\n    \"default-runtime\": \"nvidia\"\n}\n"
	out, err := EditDocker([]byte(in), Options{RuntimePath: testRuntimePath, SetAsDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("an already configured file was rewritten:\n%s", out)
	}
}

func TestEditDockerErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
		opts           Options
	}{
		{"truncated", `{"runtimes": {`, "parsing JSON", Options{}},
		{"array", `[]`, "want a JSON object", Options{}},
		{"string", `"x"`, "want a JSON object", Options{}},
		{"trailing", `{} {}`, "after the object", Options{}},
		{"runtimes array", `{"runtimes": []}`, `"runtimes"`, Options{}},
		{"features array", `{"features": [1]}`, `"features"`, Options{EnableCDI: true}},
		{"bad name", `{}`, "invalid runtime name", Options{RuntimeName: " x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EditDocker([]byte(tt.in), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("EditDocker(%q) error = %v, want it to mention %q", tt.in, err, tt.want)
			}
		})
	}
}

func FuzzEditDocker(f *testing.F) {
	sample, err := os.ReadFile("testdata/daemon.json")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "{}", string(sample), `{"runtimes":{"nvidia":{"path":"x"}}}`, `{"features":null}`, `[`, `{"a":1}{`} {
		f.Add([]byte(s), false, false)
	}
	f.Add(sample, true, true)
	f.Fuzz(func(t *testing.T, data []byte, def, cdi bool) {
		o := Options{RuntimePath: testRuntimePath, SetAsDefault: def, EnableCDI: cdi}
		out, err := EditDocker(data, o)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON output for %q:\n%s", data, out)
		}
		again, err := EditDocker(out, o)
		if err != nil {
			t.Fatalf("output does not edit again: %v\n%s", err, out)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent for %q:\n%s\n---\n%s", data, out, again)
		}
	})
}

func BenchmarkEditDocker(b *testing.B) {
	sample, err := os.ReadFile("testdata/daemon.json")
	if err != nil {
		b.Fatal(err)
	}
	o := Options{RuntimePath: testRuntimePath, SetAsDefault: true, EnableCDI: true}
	for b.Loop() {
		if _, err := EditDocker(sample, o); err != nil {
			b.Fatal(err)
		}
	}
}
