package ocistate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadCreateContainerHooks: the createContainer hooks in order, none
// without hooks; a document that is not one JSON object, or hooks of the
// wrong shape, is an error naming the file.
func TestLoadCreateContainerHooks(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name, spec string
		want       []string // each hook's path and args, space-joined
		err        string
	}{
		{"two hooks", `{"hooks":{"prestart":[{"path":"/p"}],"createContainer":[{"path":"/a","args":["a","x"]},{"path":"/b","timeout":3}]}}`,
			[]string{"/a a x", "/b"}, ""},
		{"no hooks", `{"root":{"path":"r"}}`, nil, ""},
		{"no createContainer", `{"hooks":{"poststart":[{"path":"/p"}]}}`, nil, ""},
		{"hooks not an object", `{"hooks":[]}`, nil, "hooks"},
		{"args not strings", `{"hooks":{"createContainer":[{"path":"/a","args":[1]}]}}`, nil, "createContainer"},
		{"cut short", `{"hooks":{"createContainer":[`, nil, "invalid OCI spec"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "config.json")
			if err := os.WriteFile(p, []byte(tt.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			hooks, err := LoadCreateContainerHooks(p)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), p) {
					t.Errorf("err = %v, want one naming %s and saying %q", err, p, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hooks {
				got = append(got, strings.Join(append([]string{h.Path}, h.Args...), " "))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("hooks = %q, want %q", got, tt.want)
			}
		})
	}
}

// FuzzParseCreateContainerHooks: any document gives hooks or an error,
// never a panic.
func FuzzParseCreateContainerHooks(f *testing.F) {
	f.Add([]byte(`{"hooks":{"createContainer":[{"path":"/a","args":["a"],"env":["X=1"],"timeout":1}]}}`))
	f.Add([]byte(`{"hooks":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		hooks, err := parseCreateContainerHooks(data)
		if err != nil && hooks != nil {
			t.Errorf("hooks %v with error %v", hooks, err)
		}
	})
}
