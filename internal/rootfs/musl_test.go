package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestUpdateMuslPath: a musl image (its loader /lib/ld-musl-<arch>.so.1)
// gets the library directories in /etc/ld-musl-<arch>.path: a new file
// lists them before musl's default path, an existing one keeps its entries
// and gets the missing directories after them; a glibc image gets no such
// file; a created file is removed by Rollback.
func TestUpdateMuslPath(t *testing.T) {
	dirs := []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib"}
	tests := []struct {
		name     string
		files    map[string]string // path → content; a "->" prefix makes a symlink
		pathFile string            // the .path file to check, "" for none expected
		want     string
	}{
		{name: "glibc image", files: map[string]string{"/lib/ld-linux-x86-64.so.2": "elf"}},
		{name: "no /lib", files: map[string]string{"/etc/os-release": "ID=scratch\n"}},
		{name: "alpine, no path file", files: map[string]string{"/lib/ld-musl-x86_64.so.1": "elf", "/etc/alpine-release": "3.20.0\n"},
			pathFile: "/etc/ld-musl-x86_64.path", want: "/usr/lib/x86_64-linux-gnu\n/usr/lib\n/lib\n/usr/local/lib\n"},
		{name: "aarch64 loader names the file", files: map[string]string{"/lib/ld-musl-aarch64.so.1": "elf"},
			pathFile: "/etc/ld-musl-aarch64.path", want: "/usr/lib/x86_64-linux-gnu\n/usr/lib\n/lib\n/usr/local/lib\n"},
		{name: "existing path file kept, colon or newline separated", files: map[string]string{"/lib/ld-musl-x86_64.so.1": "elf",
			"/etc/ld-musl-x86_64.path": "/opt/lib:/usr/lib\n/lib\n"},
			pathFile: "/etc/ld-musl-x86_64.path", want: "/opt/lib\n/usr/lib\n/lib\n/usr/lib/x86_64-linux-gnu\n"},
		{name: "merged /usr: /lib is a link", files: map[string]string{"/usr/lib/ld-musl-x86_64.so.1": "elf", "/lib": "->usr/lib"},
			pathFile: "/etc/ld-musl-x86_64.path", want: "/usr/lib/x86_64-linux-gnu\n/usr/lib\n/lib\n/usr/local/lib\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for p, content := range tt.files {
				host := filepath.Join(dir, p)
				if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
					t.Fatal(err)
				}
				var err error
				if target, ok := cutLink(content); ok {
					err = os.Symlink(target, host)
				} else {
					err = os.WriteFile(host, []byte(content), 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadFile(filepath.Join(dir, tt.pathFile))
			r, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := r.UpdateLdCacheFor(nil, dirs, nil); err != nil {
				t.Fatal(err)
			}
			matches, _ := filepath.Glob(filepath.Join(dir, "etc/ld-musl-*.path"))
			if tt.pathFile == "" {
				if len(matches) != 0 {
					t.Fatalf("glibc image got %v", matches)
				}
				return
			}
			got, err := os.ReadFile(filepath.Join(dir, tt.pathFile))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("%s = %q, want %q", tt.pathFile, got, tt.want)
			}
			// Again (a restarted container): nothing added twice.
			if err := r.UpdateLdCacheFor(nil, dirs, nil); err != nil {
				t.Fatal(err)
			}
			if again, _ := os.ReadFile(filepath.Join(dir, tt.pathFile)); string(again) != tt.want {
				t.Errorf("second update: %q", again)
			}
			if err := r.Rollback(); err != nil {
				t.Fatal(err)
			}
			after, err := os.ReadFile(filepath.Join(dir, tt.pathFile))
			if before == nil && !os.IsNotExist(err) {
				t.Errorf("rollback left %s (%v)", tt.pathFile, err)
			}
			if before != nil && string(after) != string(before) {
				t.Errorf("an existing file is restored by rollback, as ld.so.cache: after rollback %q, want %q", after, before)
			}
		})
	}
}

func cutLink(s string) (string, bool) {
	if len(s) > 2 && s[:2] == "->" {
		return s[2:], true
	}
	return "", false
}

// TestRunLdconfigMusl: the host ldconfig path (nvidia-cdi-hook
// update-ldcache for specs without --lib) writes the musl path file too.
func TestRunLdconfigMusl(t *testing.T) {
	requireRoot(t)
	lib, _ := hostLib(t)
	e := newEnv(t)
	copyFile(t, lib, filepath.Join(e.root, "/usr/local/nvidia/lib64", filepath.Base(lib)))
	must(t, os.MkdirAll(filepath.Join(e.root, "lib"), 0o755))
	must(t, os.WriteFile(filepath.Join(e.root, "lib/ld-musl-x86_64.so.1"), []byte("elf"), 0o755))
	err := RunLdconfig(context.Background(), e.root, []string{"/usr/local/nvidia/lib64"}, LdconfigOptions{Ldconfig: hostLdconfig(t), ConfDropIn: true, NoPivot: true})
	must(t, err)
	got, err := os.ReadFile(filepath.Join(e.root, "etc/ld-musl-x86_64.path"))
	if want := "/usr/local/nvidia/lib64\n/lib\n/usr/local/lib\n/usr/lib\n"; err != nil || string(got) != want {
		t.Errorf("ld-musl-x86_64.path = %q (%v), want %q", got, err, want)
	}
	e.checkHost(t)
}
