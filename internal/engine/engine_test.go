package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t testing.TB, path, data string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}

func TestLookup(t *testing.T) {
	for in, want := range map[string]Engine{"docker": Docker, "Containerd": Containerd, "crio": CRIO, "cri-o": CRIO, " CRI-O ": CRIO} {
		if got, err := Lookup(in); err != nil || got.Name() != want {
			t.Errorf("Lookup(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := Lookup("podman"); err == nil || !strings.Contains(err.Error(), "podman") {
		t.Errorf("Lookup(podman) error = %v", err)
	}
}

func TestPlanDockerFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "docker", "daemon.json")

	// Missing file: created with 0644 and parent directories.
	res, err := Plan(Request{Engine: Docker, ConfigPath: cfg, Options: Options{RuntimePath: testRuntimePath}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 1 || !res.Files[0].Changed || res.Files[0].Existed {
		t.Fatalf("files = %+v", res.Files)
	}
	if _, err := os.Stat(cfg); !os.IsNotExist(err) {
		t.Fatalf("Plan wrote the file (stat: %v)", err)
	}
	if err := res.Apply(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(cfg)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("new file: %v, mode %v", err, st.Mode())
	}

	// Existing file with mode 0600 behind a symlink: mode kept, link kept.
	real := filepath.Join(dir, "real.json")
	writeFile(t, real, `{"debug": true}`, 0o600)
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("real.json", link); err != nil {
		t.Fatal(err)
	}
	res, err = Plan(Request{Engine: Docker, ConfigPath: link, Options: Options{RuntimePath: testRuntimePath, SetAsDefault: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Apply(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlink replaced: %v %v", fi.Mode(), err)
	}
	st, _ = os.Stat(real)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(real)
	if !strings.Contains(string(data), `"default-runtime": "nvidia"`) || !strings.Contains(string(data), `"debug": true`) {
		t.Errorf("content:\n%s", data)
	}
	// Second plan: nothing to change.
	res, err = Plan(Request{Engine: Docker, ConfigPath: link, Options: Options{RuntimePath: testRuntimePath, SetAsDefault: true}})
	if err != nil || res.Changed() {
		t.Errorf("second plan: changed=%v err=%v", res != nil && res.Changed(), err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestPlanMalformedWritesNothing(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		engine  Engine
		content string
	}{
		{Docker, `{"runtimes": `},
		{Containerd, "version = 2\n[plugins\n"},
		{CRIO, "[crio.runtime\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.engine), func(t *testing.T) {
			cfg := filepath.Join(dir, string(tt.engine)+".conf")
			writeFile(t, cfg, tt.content, 0o644)
			dropIn := ""
			if tt.engine != Docker {
				dropIn = filepath.Join(dir, string(tt.engine)+".d", "99-nvidia.toml")
			}
			_, err := Plan(Request{Engine: tt.engine, ConfigPath: cfg, DropInPath: dropIn, Options: Options{RuntimePath: testRuntimePath}})
			if err == nil || !strings.Contains(err.Error(), cfg) {
				t.Errorf("error = %v, want it to name %s", err, cfg)
			}
			data, _ := os.ReadFile(cfg)
			if string(data) != tt.content {
				t.Errorf("file changed")
			}
			if dropIn != "" {
				if _, err := os.Stat(dropIn); !os.IsNotExist(err) {
					t.Errorf("drop-in written")
				}
			}
		})
	}
}

func TestPlanContainerdDropIn(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	sample, err := os.ReadFile("testdata/containerd-v2.toml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg, string(sample), 0o640)
	dropIn := filepath.Join(dir, "conf.d", "99-nvidia.toml")
	req := Request{Engine: Containerd, ConfigPath: cfg, DropInPath: dropIn, Options: Options{RuntimePath: testRuntimePath, EnableCDI: true}}
	res, err := Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 2 || res.Files[0].Path != dropIn || res.Files[1].Path != cfg {
		t.Fatalf("files = %+v", res.Files)
	}
	if err := res.Apply(); err != nil {
		t.Fatal(err)
	}
	main, _ := os.ReadFile(cfg)
	if !bytes.HasPrefix(main, []byte("# containerd 1.x config, version 2\nimports = [")) || !bytes.Contains(main, sample[bytes.IndexByte(sample, '\n')+1:]) {
		t.Errorf("main file not kept apart from the imports line:\n%s", main)
	}
	if st, _ := os.Stat(cfg); st.Mode().Perm() != 0o640 {
		t.Errorf("main mode = %v", st.Mode().Perm())
	}
	res, err = Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed() {
		t.Errorf("second run changes files: %+v", res.Files)
	}
}

func TestPlanCRIODropIn(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "crio.conf")
	sample, err := os.ReadFile("testdata/crio.conf")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg, string(sample), 0o644)
	dropIn := filepath.Join(dir, "crio.conf.d", "99-nvidia.toml")
	res, err := Plan(Request{Engine: CRIO, ConfigPath: cfg, DropInPath: dropIn, Options: Options{RuntimePath: testRuntimePath, EnableCDI: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 1 || res.Files[0].Path != dropIn || len(res.Notes) != 1 {
		t.Fatalf("files = %+v notes = %v", res.Files, res.Notes)
	}
	if err := res.Apply(); err != nil {
		t.Fatal(err)
	}
	main, _ := os.ReadFile(cfg)
	if !bytes.Equal(main, sample) {
		t.Errorf("main crio.conf changed in drop-in mode")
	}
}
