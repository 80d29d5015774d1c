package ctk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
)

// fakeProc writes a proc root for one GPU (minor 0) with nvidia-uvm.
func fakeProc(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/devices": "Character devices:\n  1 mem\n195 nvidia\n237 nvidia-uvm\n\nBlock devices:\n  8 sd\n",
		"proc/driver/nvidia/gpus/0000:01:00.0/information": "Model: \t\t Tesla T4\nGPU UUID: \t GPU-11111111-2222-3333-4444-555555555555\n" +
			"Bus Location: \t 0000:01:00.0\nDevice Minor: \t 0\n",
	}
	for p, data := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCreateDeviceNodes(t *testing.T) {
	e2e.RequireRoot(t) // creating device nodes
	proc, devRoot := fakeProc(t), t.TempDir()
	stdout, stderr, code := run(t, nil, "system", "create-device-nodes", "--proc-root", proc, "--dev-root", devRoot, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would create: "+filepath.Join(devRoot, "dev", "nvidiactl")+" (195:255, mode 0666)") {
		t.Fatalf("dry run: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(devRoot, "dev")); err == nil {
		t.Fatal("dry run created /dev")
	}

	// Control devices only.
	stdout, stderr, code = run(t, []string{"NVIDIA_DEV_ROOT=" + devRoot}, "system", "create-device-nodes", "--proc-root", proc, "--control-devices")
	if code != 0 || strings.Count(stdout, "created: ") != 4 || strings.Contains(stdout, "nvidia0") {
		t.Fatalf("control: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	// Everything: the control nodes exist, nvidia0 is new.
	stdout, _, code = run(t, nil, "system", "create-device-nodes", "--proc-root", proc, "--dev-root", devRoot)
	if code != 0 || strings.Count(stdout, "exists: ") != 4 || !strings.Contains(stdout, "created: "+filepath.Join(devRoot, "dev", "nvidia0")) {
		t.Fatalf("all: exit %d stdout %q", code, stdout)
	}

	// A wrong entry fails the command, naming it.
	os.Remove(filepath.Join(devRoot, "dev", "nvidia0"))
	if err := os.WriteFile(filepath.Join(devRoot, "dev", "nvidia0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = run(t, nil, "--quiet", "system", "create-device-nodes", "--proc-root", proc, "--dev-root", devRoot)
	if code != 1 || !strings.Contains(stderr, "nvidia0: is a regular file") {
		t.Errorf("mismatch: exit %d stderr %q", code, stderr)
	}

	// No driver: a clear error.
	_, stderr, code = run(t, nil, "system", "create-device-nodes", "--proc-root", t.TempDir(), "--dev-root", devRoot)
	if code != 1 || !strings.Contains(stderr, "nvidia-ctk: ") || !strings.Contains(stderr, "proc/devices") {
		t.Errorf("no driver: exit %d stderr %q", code, stderr)
	}
}

func TestCreateDevCharSymlinks(t *testing.T) {
	e2e.RequireRoot(t) // creating device nodes
	proc, devRoot := fakeProc(t), t.TempDir()
	// Nothing exists yet: without --create-all there is nothing to link.
	stdout, stderr, code := run(t, nil, "system", "create-dev-char-symlinks", "--proc-root", proc, "--dev-root", devRoot)
	if code != 0 || stdout != "" {
		t.Fatalf("empty: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	// --create-all --dry-run lists every link the driver implies.
	stdout, _, code = run(t, nil, "system", "create-dev-char-symlinks", "--proc-root", proc, "--dev-root", devRoot, "--create-all", "--dry-run")
	if code != 0 || strings.Count(stdout, "would create: ") != 5 {
		t.Fatalf("create-all dry run: exit %d stdout %q", code, stdout)
	}
	// --create-device-nodes then links, into a custom directory.
	charDir := filepath.Join(t.TempDir(), "char")
	stdout, stderr, code = run(t, []string{"DEV_CHAR_PATH=" + charDir}, "system", "create-dev-char-symlinks", "--proc-root", proc, "--dev-root", devRoot, "--create-device-nodes")
	if code != 0 || strings.Count(stdout, "created: ") != 10 {
		t.Fatalf("create: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if fi, err := os.Stat(filepath.Join(charDir, "195:0")); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("%s/195:0 does not resolve to the node: %v", charDir, err)
	}
	// Idempotent.
	stdout, _, code = run(t, []string{"DEV_CHAR_PATH=" + charDir}, "system", "create-dev-char-symlinks", "--proc-root", proc, "--dev-root", devRoot)
	if code != 0 || strings.Count(stdout, "exists: ") != 5 {
		t.Errorf("second run: exit %d stdout %q", code, stdout)
	}
}

func TestLoadKernelModules(t *testing.T) {
	devRoot, dir := t.TempDir(), t.TempDir()
	// A modprobe that fails: reported as a warning, the command goes on
	// (and here fails because the fake /proc has no driver).
	if err := os.WriteFile(filepath.Join(dir, "modprobe"), []byte("#!/bin/sh\necho \"modprobe: FATAL: Module $1 not found\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, []string{"PATH=" + dir}, "system", "create-device-nodes", "--proc-root", t.TempDir(), "--dev-root", devRoot, "--load-kernel-modules")
	if code != 1 || strings.Count(stderr, "loading kernel module failed") != 3 || !strings.Contains(stderr, "Module nvidia-uvm not found") {
		t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	// A dry run only says what it would run.
	stdout, _, _ = run(t, []string{"PATH=" + dir}, "system", "create-device-nodes", "--proc-root", t.TempDir(), "--load-kernel-modules", "--dry-run")
	if !strings.Contains(stdout, "would run: "+filepath.Join(dir, "modprobe")+" nvidia-modeset") {
		t.Errorf("dry run stdout %q", stdout)
	}
}

// TestSystemDriverRoot: NVIDIA's --driver-root (and create-device-nodes'
// --root, $ROOT) is where modprobe runs chrooted, and create-device-nodes'
// default dev root.
func TestSystemDriverRoot(t *testing.T) {
	proc := fakeProc(t)
	for _, tc := range []struct {
		name    string
		environ []string
		args    []string
		want    []string // with DRIVER-ROOT replaced by the root
		notWant string
	}{
		{name: "root is the dev root", args: []string{"create-device-nodes", "--driver-root", "DRIVER-ROOT", "--control-devices"},
			want: []string{"would create: DRIVER-ROOT/dev/nvidiactl"}},
		{name: "--root alias and chrooted modprobe", args: []string{"create-device-nodes", "--root", "DRIVER-ROOT", "--load-kernel-modules", "--control-devices"},
			want: []string{"would run: chroot DRIVER-ROOT /usr/sbin/modprobe nvidia-uvm", "would create: DRIVER-ROOT/dev/nvidia-uvm"}},
		{name: "ROOT variable", environ: []string{"ROOT=DRIVER-ROOT"}, args: []string{"create-device-nodes", "--control-devices"},
			want: []string{"would create: DRIVER-ROOT/dev/nvidiactl"}},
		{name: "dev root given", args: []string{"create-device-nodes", "--driver-root", "DRIVER-ROOT", "--dev-root", "DEV-ROOT", "--control-devices"},
			want: []string{"would create: DEV-ROOT/dev/nvidiactl"}, notWant: "DRIVER-ROOT/dev"},
		{name: "dev-char-symlinks", args: []string{"create-dev-char-symlinks", "--driver-root", "DRIVER-ROOT", "--dev-root", "DEV-ROOT",
			"--load-kernel-modules", "--create-all"}, want: []string{"would run: chroot DRIVER-ROOT /usr/sbin/modprobe nvidia", "would create: DEV-ROOT/dev/char/195:255"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, devRoot := t.TempDir(), t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "usr", "sbin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "usr", "sbin", "modprobe"), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			r := strings.NewReplacer("DRIVER-ROOT", root, "DEV-ROOT", devRoot)
			var args, environ []string
			for _, a := range append([]string{"system"}, tc.args...) {
				args = append(args, r.Replace(a))
			}
			for _, v := range tc.environ {
				environ = append(environ, r.Replace(v))
			}
			args = append(args, "--proc-root", proc, "--dry-run")
			stdout, stderr, code := run(t, append(environ, "PATH=/nonexistent"), args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, r.Replace(w)) {
					t.Errorf("stdout %q lacks %q", stdout, r.Replace(w))
				}
			}
			if tc.notWant != "" && strings.Contains(stdout, r.Replace(tc.notWant)) {
				t.Errorf("stdout %q has %q", stdout, r.Replace(tc.notWant))
			}
		})
	}
}
