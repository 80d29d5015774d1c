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

// TestLoadRootPathMemo: the root path is kept beside config.json and read
// back while config.json is the same file, unchanged; any change to it
// (even one that keeps its size and modification time) is a new answer;
// a kept answer that is not an absolute clean path is ignored; without
// keep nothing is written.
func TestLoadRootPathMemo(t *testing.T) {
	bundle := t.TempDir()
	spec := filepath.Join(bundle, "config.json")
	memo := filepath.Join(bundle, memoName)
	write := func(path string) {
		t.Helper()
		if err := os.WriteFile(spec, []byte(`{"root":{"path":"`+path+`"}}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load := func(keep bool, want string) {
		t.Helper()
		got, err := LoadRootPathMemo(spec, bundle, keep)
		if err != nil || got != want {
			t.Fatalf("LoadRootPathMemo = %q, %v; want %q", got, err, want)
		}
	}
	write("/r/aaaa")
	load(false, "/r/aaaa")
	if _, err := os.Stat(memo); !os.IsNotExist(err) {
		t.Fatalf("without keep a memo was written: %v", err)
	}
	load(true, "/r/aaaa")
	fi, err := os.Stat(memo)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("memo: %v, %v; want a 0600 file", fi, err)
	}
	// Read back: the memo's answer is what is returned while the key holds.
	data, _ := os.ReadFile(memo)
	key, _, _ := strings.Cut(string(data), "\n")
	if err := os.WriteFile(memo, []byte(key+"\n/from/memo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load(false, "/from/memo")
	// Not an absolute clean path, or a write cut short (no last
	// newline): ignored.
	for _, bad := range []string{"rel\n", "/a/../b\n", "\n", "/from/memo", "/from/memo\n\n"} {
		if err := os.WriteFile(memo, []byte(key+"\n"+bad), 0o600); err != nil {
			t.Fatal(err)
		}
		load(false, "/r/aaaa")
	}
	// The same size and modification time, another root: the change time
	// still tells.
	st, _ := os.Stat(spec)
	load(true, "/r/aaaa")
	write("/r/bbbb")
	if err := os.Chtimes(spec, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	load(true, "/r/bbbb")
	// Another bundle for the same file (a relative root.path): not the
	// kept answer.
	write("rootfs")
	load(true, filepath.Join(bundle, "rootfs"))
	if got, err := LoadRootPathMemo(spec, "/elsewhere", true); err != nil || got != "/elsewhere/rootfs" {
		t.Fatalf("another bundle: %q, %v", got, err)
	}
	// Errors are LoadRootPath's, and nothing is kept for them.
	os.Remove(memo)
	write(`","x`)
	if _, err := LoadRootPathMemo(spec, bundle, true); err == nil {
		t.Fatal("a config.json that is not JSON gave a root")
	}
	if _, err := os.Stat(memo); !os.IsNotExist(err) {
		t.Fatalf("a memo was kept for an error: %v", err)
	}
}

// BenchmarkLoadRootPath: config.json's root.path read whole (each of an
// NVIDIA-layout spec's hook processes did) against the kept answer.
func BenchmarkLoadRootPath(b *testing.B) {
	bundle := b.TempDir()
	spec := filepath.Join(bundle, "config.json")
	var mounts []string
	for i := range 40 {
		mounts = append(mounts, `{"destination":"/usr/lib/x86_64-linux-gnu/libnvidia-`+strings.Repeat("x", 20)+string(rune('a'+i%26))+`.so.535.261.03","type":"bind","source":"/usr/lib/x86_64-linux-gnu/libnvidia-x.so.535.261.03","options":["ro","nosuid","nodev","rbind","rprivate"]}`)
	}
	doc := `{"ociVersion":"1.2.0","root":{"path":"rootfs"},"mounts":[` + strings.Join(mounts, ",") + `]}`
	if err := os.WriteFile(spec, []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			if _, err := LoadRootPath(spec, bundle); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memo", func(b *testing.B) {
		for b.Loop() {
			if _, err := LoadRootPathMemo(spec, bundle, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzLoadRootPathMemo: whatever the kept file holds, the answer is the
// config.json's own root, or (only under config.json's exact key) an
// absolute clean path without a newline; never an error for a valid
// config.json.
func FuzzLoadRootPathMemo(f *testing.F) {
	f.Add([]byte(""), false)
	f.Add([]byte("x\n/r\n"), true)
	f.Add([]byte("\n\n\n"), true)
	f.Add([]byte("/a/../b\n"), true)
	f.Fuzz(func(t *testing.T, body []byte, withKey bool) {
		bundle := t.TempDir()
		spec := filepath.Join(bundle, "config.json")
		if err := os.WriteFile(spec, []byte(`{"root":{"path":"/real/root"}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		memo := filepath.Join(bundle, memoName)
		data := body
		if withKey {
			// The real key, then the fuzzed rest.
			if _, err := LoadRootPathMemo(spec, bundle, true); err != nil {
				t.Fatal(err)
			}
			kept, _ := os.ReadFile(memo)
			key, _, _ := strings.Cut(string(kept), "\n")
			data = append([]byte(key+"\n"), body...)
		}
		if err := os.WriteFile(memo, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LoadRootPathMemo(spec, bundle, false)
		if err != nil {
			t.Fatalf("LoadRootPathMemo: %v", err)
		}
		if got != "/real/root" && (!withKey || !filepath.IsAbs(got) || filepath.Clean(got) != got || strings.Contains(got, "\n")) {
			t.Fatalf("LoadRootPathMemo = %q from kept %q", got, data)
		}
	})
}
