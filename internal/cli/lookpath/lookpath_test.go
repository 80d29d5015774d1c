package lookpath

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFind(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"exe": 0o755, "plain": 0o644} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	for _, tc := range []struct {
		name string
		dirs []string
		want string
	}{
		{"exe", []string{"", other, dir}, filepath.Join(dir, "exe")},
		{"plain", []string{dir}, ""},     // no execute bit
		{"sub", []string{dir}, ""},       // a directory
		{"missing", []string{dir}, ""},   // absent
		{"exe", []string{"", other}, ""}, // not in dirs
	} {
		got, ok := Find(tc.name, tc.dirs)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("Find(%q, %q) = %q, %v; want %q", tc.name, tc.dirs, got, ok, tc.want)
		}
	}
}
