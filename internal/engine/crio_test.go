package engine

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestEditCRIO(t *testing.T) {
	sample, err := os.ReadFile("testdata/crio.conf")
	if err != nil {
		t.Fatal(err)
	}
	rt := []string{"crio", "runtime", "runtimes", "nvidia"}
	tests := []struct {
		name        string
		data, base  []byte
		opts        Options
		wantMonitor any // monitor_path copied from the default runtime
		wantDefault any
	}{
		{name: "empty", wantDefault: nil},
		{name: "main file", data: sample, wantMonitor: "/usr/libexec/crio/conmon", wantDefault: "crun"},
		{name: "main file default", data: sample, opts: Options{SetAsDefault: true}, wantMonitor: "/usr/libexec/crio/conmon", wantDefault: "nvidia"},
		{name: "drop-in", base: sample, wantMonitor: "/usr/libexec/crio/conmon"},
		{name: "drop-in default", base: sample, opts: Options{SetAsDefault: true}, wantMonitor: "/usr/libexec/crio/conmon", wantDefault: "nvidia"},
		{name: "cdi is a no-op", data: sample, opts: Options{EnableCDI: true}, wantMonitor: "/usr/libexec/crio/conmon", wantDefault: "crun"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.RuntimePath = testRuntimePath
			out, err := EditCRIO(tt.data, tt.base, o)
			if err != nil {
				t.Fatalf("EditCRIO: %v", err)
			}
			m := mustTOML(t, out)
			if got := lookup(m, append(rt, "runtime_path")...); got != testRuntimePath {
				t.Errorf("runtime_path = %v\n%s", got, out)
			}
			if got := lookup(m, append(rt, "runtime_type")...); got != "oci" {
				t.Errorf("runtime_type = %v", got)
			}
			if got := lookup(m, append(rt, "monitor_path")...); got != tt.wantMonitor {
				t.Errorf("monitor_path = %v, want %v", got, tt.wantMonitor)
			}
			if got := lookup(m, "crio", "runtime", "default_runtime"); got != tt.wantDefault {
				t.Errorf("default_runtime = %v, want %v", got, tt.wantDefault)
			}
			again, err := EditCRIO(out, tt.base, o)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, out) {
				t.Errorf("not idempotent:\n%s\n---\n%s", out, again)
			}
			if tt.data == nil {
				return
			}
			// Unrelated settings are kept.
			orig := mustTOML(t, tt.data)
			delete(lookup(m, "crio", "runtime", "runtimes").(map[string]any), "nvidia")
			if o.SetAsDefault {
				lookup(m, "crio", "runtime").(map[string]any)["default_runtime"] = lookup(orig, "crio", "runtime", "default_runtime")
			}
			if !reflect.DeepEqual(m, orig) {
				t.Errorf("unrelated settings changed:\n got %v\nwant %v", m, orig)
			}
		})
	}
}

func TestEditCRIOErrors(t *testing.T) {
	tests := []struct{ name, data, base, want string }{
		{"bad toml", "[crio", "", "parsing TOML"},
		{"bad base", "", "[crio", "base configuration: parsing TOML"},
		{"runtimes scalar", "[crio.runtime]\nruntimes = 1\n", "", "crio.runtime.runtimes is a integer"},
		{"runtime scalar", "[crio.runtime.runtimes]\nnvidia = \"x\"\n", "", "crio.runtime.runtimes.nvidia is a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EditCRIO([]byte(tt.data), []byte(tt.base), Options{RuntimePath: testRuntimePath})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func FuzzEditCRIO(f *testing.F) {
	sample, err := os.ReadFile("testdata/crio.conf")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sample, []byte(nil))
	f.Add([]byte(nil), sample)
	f.Add([]byte("[crio.runtime.runtimes.nvidia]\nruntime_path = \"/x\"\n"), []byte("[crio.runtime]\ndefault_runtime = \"nvidia\"\n"))
	f.Fuzz(func(t *testing.T, data, base []byte) {
		o := Options{RuntimePath: testRuntimePath, SetAsDefault: true}
		out, err := EditCRIO(data, base, o)
		if err != nil {
			return
		}
		again, err := EditCRIO(out, base, o)
		if err != nil {
			t.Fatalf("output does not edit again: %v\n%s", err, out)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n%s\n---\n%s", out, again)
		}
	})
}
