package runcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpen(t *testing.T) {
	good := t.TempDir()
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, note string
	}{
		{"usable", good, ""},
		{"created", filepath.Join(good, "sub"), ""},
		{"none", "", "no cache directory"},
		{"writable by others", open, "not writable by others"},
		{"a file", file, "unusable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, note := Open(tc.dir)
			if tc.note == "" && (d == nil || note != "") {
				t.Errorf("Open(%q) = %v, %q; want usable", tc.dir, d, note)
			}
			if tc.note != "" && (d != nil || !strings.Contains(note, tc.note)) {
				t.Errorf("Open(%q) = %v, %q; want refused with %q", tc.dir, d, note, tc.note)
			}
		})
	}
}

func TestKeyOf(t *testing.T) {
	a, b := KeyOf("mig-minors module 580 minors 1 2"), KeyOf("mig-minors module 580 minors 1 3")
	if a == b || a != KeyOf("mig-minors module 580 minors 1 2") || len(a) != 64 {
		t.Errorf("KeyOf: %q, %q: want distinct, stable, 64 hex digits", a, b)
	}
	d, note := Open(t.TempDir())
	if d == nil {
		t.Fatal(note)
	}
	if err := d.Store("kind", a, 7); err != nil {
		t.Fatal(err)
	}
	var v int
	if !d.Load("kind", a, &v) || v != 7 || d.Load("kind", b, &v) {
		t.Errorf("Load under KeyOf keys: %d", v)
	}
}

func TestStoreLoad(t *testing.T) {
	d, note := Open(t.TempDir())
	if d == nil {
		t.Fatal(note)
	}
	k1, err := Key(map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := Key(map[string]int{"a": 2})
	if k1 == k2 {
		t.Fatal("different inputs, same key")
	}
	if err := d.Store("kind", k1, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	if !d.Load("kind", k1, &got) || strings.Join(got, ",") != "x,y" {
		t.Errorf("Load = %q", got)
	}
	if d.Load("kind", k2, &got) || d.Load("other", k1, &got) {
		t.Error("a value found under another key or kind")
	}
	// An entry whose stored key differs (a truncated-name collision, a
	// hand edit) is not trusted.
	name := d.file("kind", k1)
	data, _ := os.ReadFile(name)
	if err := os.WriteFile(name, []byte(strings.Replace(string(data), k1, k2, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if d.Load("kind", k1, &got) {
		t.Error("entry with a foreign key used")
	}
	if err := os.WriteFile(name, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d.Load("kind", k1, &got) {
		t.Error("corrupt entry used")
	}
}
