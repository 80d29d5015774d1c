package ocistate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRootPath: root.path relative to the bundle or absolute, made
// clean; bad input named, with where it is wrong (ocispec's TestRootPath
// checks that a whole-document parse agrees).
func TestLoadRootPath(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ name, spec, bundle, want, err string }{
		{"relative", `{"ociVersion":"1.2.0","root":{"path":"rootfs"},"mounts":[]}`, "/b", "/b/rootfs", ""},
		{"absolute", `{"root":{"path":"/x/./y/","readonly":true}}`, "/b", "/x/y", ""},
		{"dot-dot", `{"root":{"path":"../r"}}`, "/b/c", "/b/r", ""},
		{"unset", `{"root":{}}`, "/b", "", "root.path is not set"},
		{"syntax", `{"root":{"path":"r"},}`, dir, "", "malformed JSON at line 1, column 22"},
		{"root type", `{"root":"rootfs"}`, dir, "", "field root: JSON string cannot be a"},
		{"not JSON", "ociVersion: 1", dir, "", "malformed JSON"},
		{"not an object", `[]`, dir, "", "field (top level): JSON array"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".json")
			if err := os.WriteFile(file, []byte(tt.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := LoadRootPath(file, tt.bundle)
			if tt.err == "" {
				if err != nil || got != tt.want {
					t.Errorf("LoadRootPath = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "invalid OCI spec "+file) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("LoadRootPath error %v, want one naming %s and saying %q", err, file, tt.err)
			}
		})
	}
	if _, err := LoadRootPath(filepath.Join(dir, "missing.json"), dir); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}
