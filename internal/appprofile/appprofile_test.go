package appprofile

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nctk/nctk/internal/rootfs"
)

func TestIsGPUNode(t *testing.T) {
	for name, want := range map[string]bool{
		"nvidia0": true, "nvidia12": true, "nvidia": false, "nvidiactl": false,
		"nvidia-uvm": false, "nvidia-modeset": false, "nvidia+1": false, "nvidia1a": false, "xnvidia0": false,
	} {
		if got := IsGPUNode(name); got != want {
			t.Errorf("IsGPUNode(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	r, err := rootfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := Write(r, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc")); !os.IsNotExist(err) {
		t.Fatalf("no GPU: %s written (%v)", "/etc", err)
	}
	if err := Write(r, 0b101); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x5]}],"rules":[{"pattern":[],"profile":"_container_"}]}`
	if string(data) != want {
		t.Errorf("profile = %s, want %s", data, want)
	}
	for p, mode := range map[string]os.FileMode{File: 0o444, Dir: 0o555} {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", p, st.Mode().Perm(), mode)
		}
	}
}

func TestMaskAdd(t *testing.T) {
	var m Mask
	for _, n := range []struct {
		name  string
		minor int64
	}{{"nvidia3", 3}, {"nvidiactl", 255}, {"nvidia-uvm", 0}, {"nvidia70", 70}, {"nvidia0", 0}, {"nvidia9", -1}} {
		m.Add(n.name, n.minor, slog.New(slog.DiscardHandler))
	}
	if m != 0b1001 {
		t.Errorf("mask %#x, want 0x9 (GPUs 0 and 3; control nodes and minors out of range left out)", uint64(m))
	}
}
