package devnodes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/discover"
)

const procDevices = `Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia
238 nvidia-uvm
241 nvidia-caps
242 nvidia-caps-imex-channels

Block devices:
  8 sd
`

// gpuInformation renders a gpus/<bus>/information file.
func gpuInformation(bus string, minor int) string {
	return fmt.Sprintf("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 35\n"+
		"GPU UUID: \t GPU-0c6e6a2c-1f4e-1b2a-8a3d-8d9e1c2b3a%02x\nVideo BIOS: \t 96.00.99.00.01\n"+
		"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"+
		"Bus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n", minor, bus, minor)
}

// fakeProc builds a proc root with two GPUs (minors 0 and 3).
func fakeProc(t testing.TB, params string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/devices": procDevices,
		"proc/driver/nvidia/gpus/0000:41:00.0/information": gpuInformation("0000:41:00.0", 0),
		"proc/driver/nvidia/gpus/0000:c1:00.0/information": gpuInformation("0000:c1:00.0", 3),
		"proc/driver/nvidia-caps/mig-minors":               "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n",
		"proc/driver/nvidia/capabilities/mig/config":       "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
		"proc/driver/nvidia/capabilities/mig/monitor":      "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
	}
	if params != "" {
		files["proc/driver/nvidia/params"] = params
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

func paths(nodes []discover.DeviceNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Path+"="+n.ID())
	}
	return out
}

func TestExpected(t *testing.T) {
	proc := fakeProc(t, "")
	tests := []struct {
		name string
		set  Set
		want []string
	}{
		{"control", Set{Control: true}, []string{"/dev/nvidia-modeset=195:254", "/dev/nvidia-uvm=238:0", "/dev/nvidia-uvm-tools=238:1", "/dev/nvidiactl=195:255"}},
		{"gpus", Set{GPUs: true}, []string{"/dev/nvidia0=195:0", "/dev/nvidia3=195:3"}},
		{"caps", Set{Caps: true}, []string{"/dev/nvidia-caps/nvidia-cap1=241:1", "/dev/nvidia-caps/nvidia-cap2=241:2"}},
		{"none", Set{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes, err := Expected(proc, tt.set)
			if err != nil {
				t.Fatal(err)
			}
			if got := paths(nodes); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Expected = %v, want %v", got, tt.want)
			}
		})
	}
	all, err := Expected(proc, All())
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]uint32{}
	for _, n := range all {
		modes[n.Path] = n.Mode
		if n.HostPath != "" {
			t.Errorf("%s: host path %q for a node only expected", n.Path, n.HostPath)
		}
	}
	if modes["/dev/nvidiactl"] != 0o666 || modes["/dev/nvidia-caps/nvidia-cap1"] != 0o400 || modes["/dev/nvidia-caps/nvidia-cap2"] != 0o444 {
		t.Errorf("modes = %v", modes)
	}
}

func TestExpectedParams(t *testing.T) {
	proc := fakeProc(t, "ResmanDebugLevel: 4294967295\nDeviceFileUID: 0\nDeviceFileGID: 44\nDeviceFileMode: 432\nModifyDeviceFiles: 1\n")
	nodes, err := Expected(proc, Set{Control: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Mode != 0o660 || n.GID != 44 || n.UID != 0 {
			t.Errorf("%s: mode %o owner %d:%d, want 0660 0:44", n.Path, n.Mode, n.UID, n.GID)
		}
	}
}

func TestExpectedErrors(t *testing.T) {
	tests := []struct {
		name, file, data, want string
	}{
		{"no driver", "proc/devices", "Character devices:\n  1 mem\n", "is the NVIDIA driver loaded"},
		{"bad devices", "proc/devices", "garbage\n", "proc/devices"},
		{"bad minor", "proc/driver/nvidia/gpus/0000:41:00.0/information", gpuInformation("0000:41:00.0", 255), "collides"},
		{"modeset minor", "proc/driver/nvidia/gpus/0000:41:00.0/information", gpuInformation("0000:41:00.0", 254), "collides"},
		{"dup minor", "proc/driver/nvidia/gpus/0000:c1:00.0/information", gpuInformation("0000:c1:00.0", 0), "also that of"},
		{"bad mode", "proc/driver/nvidia/params", "DeviceFileMode: 4096\n", "not a permission mode"},
		{"cap minor", "proc/driver/nvidia/capabilities/mig/config", "DeviceFileMinor: 7\n", "mig-minors says 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := fakeProc(t, "")
			if err := os.WriteFile(filepath.Join(proc, tt.file), []byte(tt.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Expected(proc, All())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if _, err := Expected(t.TempDir(), All()); err == nil || !strings.Contains(err.Error(), "devices") {
		t.Errorf("missing /proc/devices: error = %v", err)
	}
}

func requireMknod(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("creating device nodes needs root (euid %d)", os.Geteuid())
	}
}

func TestCreateNodes(t *testing.T) {
	requireMknod(t)
	proc := fakeProc(t, "")
	devRoot := t.TempDir()
	nodes, err := Expected(proc, All())
	if err != nil {
		t.Fatal(err)
	}
	old := unix.Umask(0o077) // the exact mode must not depend on the umask
	defer unix.Umask(old)

	// Dry run creates nothing.
	res, err := CreateNodes(devRoot, nodes, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != WouldCreate {
			t.Errorf("%s: %v, want would create", r.Path, r.Status)
		}
	}
	if _, err := os.Stat(filepath.Join(devRoot, "dev")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dry run created /dev")
	}

	res, err = CreateNodes(devRoot, nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != Created {
			t.Errorf("%s: %v", r.Path, r.Status)
		}
		var st unix.Stat_t
		if err := unix.Lstat(r.Path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || uint64(st.Rdev) != r.Node.Dev() || st.Mode&0o777 != r.Node.Mode {
			t.Errorf("%s: mode %o rdev %d:%d, want char %s mode %o", r.Path, st.Mode, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), r.Node.ID(), r.Node.Mode)
		}
	}

	// Idempotent; a changed mode is kept and noted.
	if err := os.Chmod(filepath.Join(devRoot, "dev", "nvidia0"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err = CreateNodes(devRoot, nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != Exists {
			t.Errorf("second run %s: %v", r.Path, r.Status)
		}
		if r.Node.Path == "/dev/nvidia0" && !strings.Contains(r.Detail, "mode 0600") {
			t.Errorf("nvidia0 detail = %q", r.Detail)
		}
	}
	scanned, err := Scan(devRoot)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(scanned), paths(nodes); !reflect.DeepEqual(got, want) {
		t.Errorf("Scan = %v, want %v", got, want)
	}
	for _, n := range scanned {
		if want := filepath.Join(devRoot, n.Path); n.HostPath != want {
			t.Errorf("Scan: %s: host path %q, want %q", n.Path, n.HostPath, want)
		}
	}

	// Wrong entries are reported and left alone.
	dev := filepath.Join(devRoot, "dev")
	os.Remove(filepath.Join(dev, "nvidiactl"))
	if err := os.WriteFile(filepath.Join(dev, "nvidiactl"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dev, "nvidia3"))
	if err := unix.Mknod(filepath.Join(dev, "nvidia3"), unix.S_IFCHR|0o666, int(unix.Mkdev(195, 7))); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dev, "nvidia-uvm"))
	res, err = CreateNodes(devRoot, nodes, false)
	var me *MismatchError
	if !errors.As(err, &me) || len(me.Results) != 2 {
		t.Fatalf("error = %v, want 2 mismatches", err)
	}
	for _, want := range []string{"nvidiactl: is a regular file", "nvidia3: is character device 195:7, want 195:3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	created := 0
	for _, r := range res {
		if r.Status == Created {
			created++
		}
	}
	if created != 1 || len(res) != len(nodes) {
		t.Errorf("created %d of %d results, want the missing nvidia-uvm only", created, len(res))
	}
	if data, _ := os.ReadFile(filepath.Join(dev, "nvidiactl")); string(data) != "x" {
		t.Errorf("a mismatching file was replaced")
	}
}

// TestNodePathOutsideDev: a node whose path is not below /dev is refused
// before anything is created.
func TestNodePathOutsideDev(t *testing.T) {
	devRoot := t.TempDir()
	for _, p := range []string{"/etc/shadow", "/dev/../etc/shadow", "nvidia0", "/dev/"} {
		nodes := []discover.DeviceNode{{Path: p, Major: 195, Minor: 0, Mode: 0o666}}
		if _, err := CreateNodes(devRoot, nodes, false); err == nil || !strings.Contains(err.Error(), "not below /dev") {
			t.Errorf("CreateNodes(%q) = %v, want a not-below-/dev error", p, err)
		}
		if _, err := CreateCharSymlinks(devRoot, filepath.Join(devRoot, "char"), nodes, false); err == nil || !strings.Contains(err.Error(), "not below /dev") {
			t.Errorf("CreateCharSymlinks(%q) = %v, want a not-below-/dev error", p, err)
		}
	}
	if entries, _ := os.ReadDir(devRoot); len(entries) != 0 {
		t.Errorf("dev root has %d entries, want none", len(entries))
	}
}

func TestCreateCharSymlinks(t *testing.T) {
	requireMknod(t)
	proc := fakeProc(t, "")
	devRoot := t.TempDir()
	nodes, err := Expected(proc, All())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateNodes(devRoot, nodes, false); err != nil {
		t.Fatal(err)
	}
	charDir := filepath.Join(devRoot, "dev", "char")
	res, err := CreateCharSymlinks(devRoot, charDir, nodes, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(charDir); !errors.Is(err, fs.ErrNotExist) || len(res) != len(nodes) || res[0].Status != WouldCreate {
		t.Fatalf("dry run: %v %+v", err, res)
	}
	res, err = CreateCharSymlinks(devRoot, charDir, nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != Created {
			t.Errorf("%s: %v", r.Link, r.Status)
		}
		var st unix.Stat_t
		if err := unix.Stat(r.Link, &st); err != nil || uint64(st.Rdev) != r.Node.Dev() {
			t.Errorf("%s does not resolve to %s: %v", r.Link, r.Node.ID(), err)
		}
	}
	if target, _ := os.Readlink(filepath.Join(charDir, "195:0")); target != "../nvidia0" {
		t.Errorf("195:0 -> %q, want ../nvidia0", target)
	}
	if target, _ := os.Readlink(filepath.Join(charDir, "241:1")); target != "../nvidia-caps/nvidia-cap1" {
		t.Errorf("241:1 -> %q", target)
	}

	// Idempotent; an alias of the same device is accepted; a wrong link is reported.
	os.Remove(filepath.Join(charDir, "195:0"))
	if err := os.Symlink(filepath.Join(devRoot, "dev", "nvidia0"), filepath.Join(charDir, "195:0")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(charDir, "195:3"))
	if err := os.Symlink("../null", filepath.Join(charDir, "195:3")); err != nil {
		t.Fatal(err)
	}
	res, err = CreateCharSymlinks(devRoot, charDir, nodes, false)
	var me *MismatchError
	if !errors.As(err, &me) || len(me.Results) != 1 || !strings.Contains(err.Error(), "195:3: points to ../null") {
		t.Fatalf("error = %v", err)
	}
	for _, r := range res {
		if r.Node.ID() != "195:3" && r.Status != Exists {
			t.Errorf("%s: %v", r.Link, r.Status)
		}
	}
}

func FuzzExpected(f *testing.F) {
	f.Add([]byte(procDevices), []byte(gpuInformation("0000:41:00.0", 2)), []byte("config 1\nmonitor 2\n"))
	f.Add([]byte("Character devices:\n195 nvidia-frontend\n"), []byte(""), []byte(""))
	f.Fuzz(func(t *testing.T, devices, info, migMinors []byte) {
		root := t.TempDir()
		for p, data := range map[string][]byte{
			"proc/devices": devices,
			"proc/driver/nvidia/gpus/0000:41:00.0/information": info,
			"proc/driver/nvidia-caps/mig-minors":               migMinors,
		} {
			full := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		nodes, err := Expected(root, All())
		if err != nil {
			return
		}
		for _, n := range nodes {
			if rel, ok := strings.CutPrefix(n.Path, "/dev/"); !ok || !filepath.IsLocal(rel) || n.Mode&^uint32(fs.ModePerm) != 0 {
				t.Fatalf("bad node %+v", n)
			}
		}
	})
}

func BenchmarkExpected(b *testing.B) {
	proc := fakeProc(b, "DeviceFileMode: 438\n")
	for b.Loop() {
		if _, err := Expected(proc, All()); err != nil {
			b.Fatal(err)
		}
	}
}
