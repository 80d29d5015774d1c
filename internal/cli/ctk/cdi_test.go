package ctk

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/ldcache"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata")

const (
	cdiTestVersion = "535.309.01"
	cdiTestUUID0   = "GPU-aaaaaaaa-0000-1111-2222-333333333333"
	cdiTestUUID1   = "GPU-bbbbbbbb-4444-5555-6666-777777777777"
)

// cdiTestRoot is a small hand-made driver root: two GPUs, their nodes and
// the control nodes, libcuda and libnvidia-ml (a tiny real ELF file with a
// SONAME, from discover's testdata) in the ld.so.cache, and nvidia-smi. It
// skips the test without CAP_MKNOD.
func cdiTestRoot(t testing.TB) string {
	t.Helper()
	return makeCDIRoot(t, cdiTestVersion, func(string) string { return "../../discover/testdata/libsoname64.so" })
}

// makeCDIRoot builds the root of cdiTestRoot for driver version, with
// libcuda and libnvidia-ml copied from libSource(name).
func makeCDIRoot(t testing.TB, version string, libSource func(name string) string) string {
	t.Helper()
	root := t.TempDir()
	write := func(p, content string, mode os.FileMode) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+version+
		"  Thu Oct  2 10:00:00 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", 0o444)
	write("/proc/driver/nvidia/params", "ModifyDeviceFiles: 1\n", 0o444)
	write("/proc/devices", "Character devices:\n  1 mem\n195 nvidia\n238 nvidia-uvm\n\nBlock devices:\n  8 sd\n", 0o444)
	for i, uuid := range []string{cdiTestUUID0, cdiTestUUID1} {
		bus := fmt.Sprintf("00000000:%02x:00.0", 0x41+i*0x40)
		write("/proc/driver/nvidia/gpus/"+bus+"/information", fmt.Sprintf(
			"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ: \t\t 35\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\n"+
				"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
			uuid, bus, i), 0o444)
	}
	for _, n := range []struct {
		name         string
		major, minor uint32
	}{{"nvidia0", 195, 0}, {"nvidia1", 195, 1}, {"nvidiactl", 195, 255}, {"nvidia-uvm", 238, 0}, {"nvidia-uvm-tools", 238, 1}} {
		p := filepath.Join(root, "dev", n.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, syscall.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			if errors.Is(err, unix.EPERM) {
				t.Skipf("cannot create device nodes (%v): needs CAP_MKNOD", err)
			}
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	const lib = "/usr/lib/x86_64-linux-gnu"
	var entries []ldcache.Entry
	for _, name := range []string{"libcuda", "libnvidia-ml"} {
		elf, err := os.ReadFile(libSource(name))
		if err != nil {
			t.Fatal(err)
		}
		real := lib + "/" + name + ".so." + version
		write(real, string(elf), 0o755)
		link := lib + "/" + name + ".so.1"
		if err := os.Symlink(filepath.Base(real), filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, ldcache.Entry{Key: name + ".so.1", Value: link, Flags: ldcache.FlagELFLibc6 | ldcache.ArchX8664})
	}
	write("/etc/ld.so.cache", string(encodeCache(entries)), 0o644)
	write("/usr/bin/nvidia-smi", "#!/bin/sh\n", 0o755)
	return root
}

// cdiRun runs nvidia-ctk with a private, empty XDG_CONFIG_HOME, so that
// the host's config.toml does not change the result (defaults apply).
func cdiRun(t *testing.T, environ []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return run(t, append([]string{"XDG_CONFIG_HOME=" + t.TempDir()}, environ...), args...)
}

func parseSpecOut(t *testing.T, data []byte) *cdi.Spec {
	t.Helper()
	s, err := pkgcdi.ParseSpec(data)
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, data)
	}
	return s
}

func deviceNames(s *cdi.Spec) []string {
	var out []string
	for _, d := range s.Devices {
		out = append(out, d.Name)
	}
	return out
}

// TestCDIGenerateHookLayout: by default the spec has one createContainer
// hook chaining the steps; --separate-hooks (or its variable) gives one per
// step, without nctk's --lib and ";".
func TestCDIGenerateHookLayout(t *testing.T) {
	root := cdiTestRoot(t)
	for _, tc := range []struct {
		name    string
		environ []string
		args    []string
		want    []string
	}{
		{name: "default", want: []string{"create-symlinks ; enable-cuda-compat ; update-ldcache ; disable-device-node-modification"}},
		{name: "flag", args: []string{"--separate-hooks"}, want: []string{"create-symlinks", "enable-cuda-compat", "update-ldcache", "disable-device-node-modification"}},
		{name: "variable", environ: []string{"NVIDIA_CTK_CDI_GENERATE_SEPARATE_HOOKS=true"},
			want: []string{"create-symlinks", "enable-cuda-compat", "update-ldcache", "disable-device-node-modification"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"cdi", "generate", "--driver-root", root, "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook"}, tc.args...)
			stdout, stderr, code := cdiRun(t, tc.environ, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var got []string
			for _, h := range parseSpecOut(t, []byte(stdout)).ContainerEdits.Hooks {
				var subs []string
				for _, a := range h.Args[1:] {
					if a == ";" || !strings.HasPrefix(a, "-") && !strings.Contains(a, "/") {
						subs = append(subs, a)
					}
				}
				got = append(got, strings.Join(subs, " "))
				if lib := slices.Contains(h.Args, "--lib"); lib != (len(tc.args)+len(tc.environ) == 0) {
					t.Errorf("hook %q: --lib present %v", h.Args[1], lib)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("hooks %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCDIGenerateGolden: the spec of the hand-made root, the temporary
// root replaced with a placeholder.
func TestCDIGenerateGolden(t *testing.T) {
	root := cdiTestRoot(t)
	stdout, stderr, code := cdiRun(t, nil, "cdi", "generate", "--driver-root", root, "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := bytes.ReplaceAll([]byte(stdout), []byte(root), []byte("/DRIVER-ROOT"))
	p := filepath.Join("testdata", "cdi-generate.golden.yaml")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (go test -run TestCDIGenerateGolden -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("generated spec differs from %s (-update rewrites it):\n%s", p, got)
	}
	s := parseSpecOut(t, []byte(stdout))
	if want := []string{"0", cdiTestUUID0, "1", cdiTestUUID1, "all"}; !slices.Equal(deviceNames(s), want) {
		t.Errorf("devices %q, want %q", deviceNames(s), want)
	}
	if s.Version != "0.5.0" {
		t.Errorf("cdiVersion %s, want 0.5.0", s.Version)
	}
}

func TestCDIGenerateFlags(t *testing.T) {
	root := cdiTestRoot(t)
	dir := t.TempDir()
	tests := []struct {
		name    string
		env     []string
		args    []string
		file    string // the file written ("" = stdout)
		json    bool
		devices []string
		kind    string
	}{
		{name: "yaml file", args: []string{"--output", filepath.Join(dir, "a.yaml")}, file: "a.yaml"},
		{name: "extension appended", args: []string{"--output", filepath.Join(dir, "b")}, file: "b.yaml"},
		{name: "missing directories created", args: []string{"--output", filepath.Join(dir, "etc", "cdi", "nvidia.yaml")}, file: "etc/cdi/nvidia.yaml"},
		{name: "json by extension", args: []string{"--output", filepath.Join(dir, "c.json")}, file: "c.json", json: true},
		{name: "json by flag", args: []string{"--format", "json", "--output", filepath.Join(dir, "d")}, file: "d.json", json: true},
		{name: "json stdout", args: []string{"--format=json"}, json: true},
		{name: "env twins", env: []string{"NVIDIA_CTK_DRIVER_ROOT=" + root, "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=" + filepath.Join(dir, "e.yaml")},
			file: "e.yaml"},
		{name: "type-index, one device, no all", args: []string{"--device-name-strategy", "type-index", "--device-id", "1", "--no-all-device"},
			devices: []string{"gpu1"}},
		{name: "repeated strategies and ids", args: []string{"--device-name-strategy=uuid", "--device-name-strategy=index", "--device-id", cdiTestUUID1 + ",0"},
			devices: []string{cdiTestUUID0, "0", cdiTestUUID1, "1", "all"}},
		{name: "vendor and class", args: []string{"--vendor", "example.com", "--cdi-class", "accel"}, kind: "example.com/accel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"cdi", "generate"}, tt.args...)
			if !slices.ContainsFunc(tt.env, func(s string) bool { return strings.HasPrefix(s, "NVIDIA_CTK_DRIVER_ROOT=") }) {
				args = append(args, "--driver-root", root)
			}
			stdout, stderr, code := cdiRun(t, tt.env, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			data := []byte(stdout)
			if tt.file != "" {
				p := filepath.Join(dir, tt.file)
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatalf("%s not written: %v (stderr %s)", tt.file, err, stderr)
				}
				if fi.Mode().Perm() != 0o644 {
					t.Errorf("%s mode %v, want 0644", p, fi.Mode())
				}
				if stdout != "" {
					t.Errorf("stdout %q with --output", stdout)
				}
				data, _ = os.ReadFile(p)
			}
			if isJSON := json.Valid(data); isJSON != tt.json {
				t.Errorf("JSON %v, want %v:\n%.200s", isJSON, tt.json, data)
			}
			s := parseSpecOut(t, data)
			if tt.devices != nil && !slices.Equal(deviceNames(s), tt.devices) {
				t.Errorf("devices %q, want %q", deviceNames(s), tt.devices)
			}
			if tt.kind != "" && s.Kind != tt.kind {
				t.Errorf("kind %q, want %q", s.Kind, tt.kind)
			}
		})
	}
}

// TestCDIGenerateLdconfig: the update-ldcache hook's --ldconfig-path is
// nvidia-container-cli.ldconfig read as the runtime reads it: a container
// path (no "@") is refused unless features.allow-ldconfig-from-container
// accepts it, and then the hook is given no path (its default host
// ldconfig), never the container path as if it were a host one.
func TestCDIGenerateLdconfig(t *testing.T) {
	root := cdiTestRoot(t)
	tests := []struct {
		name   string
		config string
		args   []string
		want   []string // --ldconfig-path and its value; nil: none
		err    string
	}{
		{name: "host path", config: "[nvidia-container-cli]\nldconfig = \"@/opt/ld/ldconfig\"\n", want: []string{"--ldconfig-path", "/opt/ld/ldconfig"}},
		{name: "container path refused", config: "[nvidia-container-cli]\nldconfig = \"/usr/sbin/ldconfig\"\n",
			err: `nvidia-container-cli.ldconfig = "/usr/sbin/ldconfig" is a container path (no "@"), refused unless features.allow-ldconfig-from-container = true`},
		{name: "container path accepted: the hook's default", config: "[nvidia-container-cli]\nldconfig = \"/usr/sbin/ldconfig\"\n[features]\nallow-ldconfig-from-container = true\n"},
		{name: "flag over config", config: "[nvidia-container-cli]\nldconfig = \"/usr/sbin/ldconfig\"\n[features]\nallow-ldconfig-from-container = true\n",
			args: []string{"--ldconfig-path", "/opt/ld/ldconfig"}, want: []string{"--ldconfig-path", "/opt/ld/ldconfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(cfg, []byte(tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"cdi", "generate", "--driver-root", root}, tt.args...)
			stdout, stderr, code := cdiRun(t, []string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + cfg}, args...)
			if tt.err != "" {
				if code == 0 || !strings.Contains(stderr, tt.err) {
					t.Fatalf("exit %d, stderr %q; want an error containing %q", code, stderr, tt.err)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var update []string
			for _, h := range parseSpecOut(t, []byte(stdout)).ContainerEdits.Hooks {
				if slices.Contains(h.Args, "update-ldcache") {
					update = h.Args
				}
			}
			if update == nil {
				t.Fatal("no update-ldcache hook")
			}
			i := slices.Index(update, "--ldconfig-path")
			var got []string
			if i >= 0 && i+1 < len(update) {
				got = update[i : i+2]
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("update-ldcache args %q: --ldconfig-path %q, want %q", update, got, tt.want)
			}
		})
	}
}

func TestCDIGenerateCapabilities(t *testing.T) {
	root := cdiTestRoot(t)
	stdout, stderr, code := cdiRun(t, nil, "cdi", "generate", "--driver-root", root, "--driver-capabilities", "utility")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	s := parseSpecOut(t, []byte(stdout))
	var dsts []string
	for _, m := range s.ContainerEdits.Mounts {
		dsts = append(dsts, m.ContainerPath)
	}
	want := []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so." + cdiTestVersion, "/usr/bin/nvidia-smi"}
	if !slices.Equal(dsts, want) {
		t.Errorf("mounts %q, want %q", dsts, want)
	}
}

func TestCDIGenerateErrors(t *testing.T) {
	root := cdiTestRoot(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "bad strategy", args: []string{"--device-name-strategy", "serial"}, want: `device name strategy "serial"`},
		{name: "bad format", args: []string{"--format", "toml"}, want: `format "toml"`},
		{name: "none", args: []string{"--device-id", "none"}, want: "at least one device"},
		{name: "unknown device", args: []string{"--device-id", "7"}, want: "7"},
		{name: "csv mode", args: []string{"--mode", "csv"}, want: `mode "csv" is not supported yet`},
		{name: "wsl mode", args: []string{"--mode", "WSL"}, want: `mode "wsl" is not supported yet`},
		{name: "unknown mode", args: []string{"--mode", "tegra"}, want: `unknown mode "tegra"`},
		{name: "enable all hooks", args: []string{"--enable-hooks", "all"}, want: "enabling all hooks is not supported"},
		{name: "unknown hook", args: []string{"--disable-hook", "warp"}, want: `unknown hook "warp"`},
		{name: "imex without channels", args: []string{"--mode", "imex"}, want: "no IMEX channel node found"},
		{name: "gds without nodes", args: []string{"--mode", "gds"}, want: "no gds device node found"},
		{name: "bad imex channel", args: []string{"--mode", "imex", "--device-ids", "x"}, want: `IMEX channel "x"`},
		{name: "bad caps", args: []string{"--driver-capabilities", "warp"}, want: "warp"},
		{name: "bad vendor", args: []string{"--vendor", "-x"}, want: `vendor "-x"`},
		{name: "relative ldconfig", args: []string{"--ldconfig-path", "sbin/ldconfig"}, want: "absolute"},
		{name: "relative config search path", args: []string{"--config-search-path", "usr/share"}, want: `--config-search-path "usr/share": want an absolute host directory`},
		{name: "output parent is a file", args: []string{"--output", filepath.Join(root, "etc", "ld.so.cache", "x.yaml")}, want: "not a directory"},
		{name: "no driver", args: []string{"--driver-root", t.TempDir()}, want: "no NVIDIA driver found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"cdi", "generate", "--driver-root", root}, tt.args...)
			stdout, stderr, code := cdiRun(t, nil, args...)
			if code == 0 {
				t.Fatalf("exit 0 (stdout %.100q)", stdout)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q lacks %q", stderr, tt.want)
			}
		})
	}
}

func TestCDIList(t *testing.T) {
	root := cdiTestRoot(t)
	dir := t.TempDir()
	if _, stderr, code := cdiRun(t, nil, "cdi", "generate", "--driver-root", root, "--output", filepath.Join(dir, "nvidia.yaml")); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=" + cdiTestUUID0, "nvidia.com/gpu=" + cdiTestUUID1, "nvidia.com/gpu=all"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{name: "flag", args: []string{"--spec-dir", dir, "--spec-dir", filepath.Join(dir, "missing")}},
		{name: "env", env: []string{"NVIDIA_CTK_CDI_SPEC_DIRS=" + dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := cdiRun(t, tc.env, append([]string{"cdi", "list"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if got := strings.Fields(stdout); !slices.Equal(got, want) {
				t.Errorf("devices %q, want %q", got, want)
			}
			if !strings.Contains(stderr, "broken.json") || !strings.Contains(stderr, "level=WARN") {
				t.Errorf("no warning about broken.json: %q", stderr)
			}
		})
	}
}

// encodeCache is an ld.so.cache holding entries in the given order, as
// ldcache's writer encodes it.
func encodeCache(entries []ldcache.Entry) []byte {
	data, err := ldcache.Encode(&ldcache.Cache{Entries: entries})
	if err != nil {
		panic(err)
	}
	return data
}

// addNode creates the character device p (a path in root) or skips the test.
func addNode(t *testing.T, root, p string, major, minor uint32) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(full, syscall.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		t.Skipf("mknod %s: %v", p, err)
	}
	if err := os.Chmod(full, 0o666); err != nil {
		t.Fatal(err)
	}
}

// TestCDIGenerateModes: each --mode gives its kind, devices and edits.
func TestCDIGenerateModes(t *testing.T) {
	root := cdiTestRoot(t)
	addNode(t, root, "/dev/nvidia-caps-imex-channels/channel0", 242, 0)
	addNode(t, root, "/dev/nvidia-caps-imex-channels/channel3", 242, 3)
	addNode(t, root, "/dev/nvidia-caps/nvidia-cap1", 241, 1)
	addNode(t, root, "/dev/nvidia-fs0", 246, 0)
	addNode(t, root, "/dev/gdrdrv", 247, 0)
	if err := os.WriteFile(filepath.Join(root, "etc", "cufile.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := func(e cdi.ContainerEdits) []string {
		var out []string
		for _, n := range e.DeviceNodes {
			out = append(out, n.Path)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		args       []string
		kind       string
		devices    []string
		allNodes   []string // the last device's nodes
		mounts     bool     // spec-level mounts (driver files)
		hookSubstr string   // "" for no spec-level hooks
		noHook     string   // a hook the spec must not run
		allMounts  []string // the last device's mounts (container paths)
	}{
		{name: "management", args: []string{"--mode", "management"}, kind: "management.nvidia.com/gpu", devices: []string{"all"},
			allNodes: []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-caps-imex-channels/channel0",
				"/dev/nvidia-caps-imex-channels/channel3", "/dev/nvidia-caps/nvidia-cap1"},
			mounts: true, hookSubstr: "create-symlinks", noHook: "disable-device-node-modification"},
		{name: "management vendor given", args: []string{"--mode", "management", "--vendor", "example.com"}, kind: "example.com/gpu",
			devices: []string{"all"}, allNodes: []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-caps-imex-channels/channel0",
				"/dev/nvidia-caps-imex-channels/channel3", "/dev/nvidia-caps/nvidia-cap1"}, mounts: true, hookSubstr: "create-symlinks"},
		{name: "imex", args: []string{"--mode", "imex"}, kind: "nvidia.com/imex-channel", devices: []string{"0", "3", "all"},
			allNodes: []string{"/dev/nvidia-caps-imex-channels/channel0", "/dev/nvidia-caps-imex-channels/channel3"}},
		{name: "imex one channel", args: []string{"--mode", "imex", "--device-ids", "channel3"}, kind: "nvidia.com/imex-channel",
			devices: []string{"3", "all"}, allNodes: []string{"/dev/nvidia-caps-imex-channels/channel3"}},
		{name: "gds", args: []string{"--mode", "gds"}, kind: "nvidia.com/gds", devices: []string{"all"}, allNodes: []string{"/dev/nvidia-fs0"},
			allMounts: []string{"/etc/cufile.json"}},
		{name: "gdrcopy", args: []string{"--mode", "GDRCOPY"}, kind: "nvidia.com/gdrcopy", devices: []string{"all"}, allNodes: []string{"/dev/gdrdrv"}},
		{name: "nvml", args: []string{"--discovery-mode", "nvml"}, kind: "nvidia.com/gpu", devices: []string{"0", cdiTestUUID0, "1", cdiTestUUID1, "all"},
			allNodes: []string{"/dev/nvidia0", "/dev/nvidia1"}, mounts: true, hookSubstr: "disable-device-node-modification"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"cdi", "generate", "--driver-root", root, "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook"}, tc.args...)
			stdout, stderr, code := cdiRun(t, nil, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			s := parseSpecOut(t, []byte(stdout))
			if s.Kind != tc.kind {
				t.Errorf("kind %s, want %s", s.Kind, tc.kind)
			}
			if !slices.Equal(deviceNames(s), tc.devices) {
				t.Fatalf("devices %q, want %q", deviceNames(s), tc.devices)
			}
			if got := nodes(s.Devices[len(s.Devices)-1].ContainerEdits); !slices.Equal(got, tc.allNodes) {
				t.Errorf("nodes of %s: %q, want %q", s.Devices[len(s.Devices)-1].Name, got, tc.allNodes)
			}
			var mounts []string
			for _, m := range s.Devices[len(s.Devices)-1].ContainerEdits.Mounts {
				mounts = append(mounts, m.ContainerPath)
			}
			if !slices.Equal(mounts, tc.allMounts) {
				t.Errorf("mounts of %s: %q, want %q", s.Devices[len(s.Devices)-1].Name, mounts, tc.allMounts)
			}
			if got := len(s.ContainerEdits.Mounts) > 0; got != tc.mounts {
				t.Errorf("spec-level mounts present %v, want %v", got, tc.mounts)
			}
			hooks := ""
			for _, h := range s.ContainerEdits.Hooks {
				hooks += strings.Join(h.Args, " ") + "\n"
			}
			if tc.hookSubstr == "" && hooks != "" || !strings.Contains(hooks, tc.hookSubstr) {
				t.Errorf("hooks %q, want %q in them", hooks, tc.hookSubstr)
			}
			if tc.noHook != "" && strings.Contains(hooks, tc.noHook) {
				t.Errorf("hooks %q run %s", hooks, tc.noHook)
			}
		})
	}
}

// TestCDIGenerateHookSelection: --disable-hooks and --enable-hooks (and
// their variables) choose the spec's hooks by NVIDIA's names.
func TestCDIGenerateHookSelection(t *testing.T) {
	root := cdiTestRoot(t)
	for _, tc := range []struct {
		name    string
		environ []string
		args    []string
		want    []string
	}{
		{name: "all", args: []string{"--disable-hooks", "all"}},
		{name: "one", args: []string{"--disable-hook", "update-ldcache"}, want: []string{"create-symlinks", "enable-cuda-compat", "disable-device-node-modification"}},
		{name: "list", args: []string{"--disable-hooks", "create-symlinks,disable-device-node-modification,enable-cuda-compat"}, want: []string{"update-ldcache"}},
		{name: "all but one", args: []string{"--disable-hooks", "all", "--enable-hooks", "update-ldcache"}, want: []string{"update-ldcache"}},
		{name: "enable overrides", args: []string{"--disable-hook", "update-ldcache", "--enable-hook", "update-ldcache"},
			want: []string{"create-symlinks", "enable-cuda-compat", "update-ldcache", "disable-device-node-modification"}},
		{name: "compat left out, chmod enabled", args: []string{"--disable-hook", "enable-cuda-compat", "--enable-hook", "chmod"},
			want: []string{"create-symlinks", "update-ldcache", "disable-device-node-modification"}},
		{name: "variable", environ: []string{"NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS=create-symlinks,update-ldcache"},
			want: []string{"enable-cuda-compat", "disable-device-node-modification"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"cdi", "generate", "--separate-hooks", "--driver-root", root}, tc.args...)
			stdout, stderr, code := cdiRun(t, tc.environ, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var got []string
			for _, h := range parseSpecOut(t, []byte(stdout)).ContainerEdits.Hooks {
				got = append(got, h.Args[1])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("hooks %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCDIGenerateNVIDIAFlags: NVIDIA's other flags are accepted with their
// meaning: --device-ids selects devices, disable-ipc-discoverer drops the
// IPC mounts, the search paths are accepted.
func TestCDIGenerateNVIDIAFlags(t *testing.T) {
	root := cdiTestRoot(t)
	if err := os.MkdirAll(filepath.Join(root, "tmp", "nvidia-mps"), 0o755); err != nil {
		t.Fatal(err)
	}
	hasMPS := func(s *cdi.Spec) bool {
		return slices.ContainsFunc(s.ContainerEdits.Mounts, func(m *cdi.Mount) bool { return m.ContainerPath == "/tmp/nvidia-mps" })
	}
	for _, tc := range []struct {
		name    string
		environ []string
		args    []string
		devices []string
		mps     bool
	}{
		{name: "device-ids", args: []string{"--device-ids", "1"}, devices: []string{"1", cdiTestUUID1, "all"}, mps: true},
		{name: "device-ids variable", environ: []string{"NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS=0"}, devices: []string{"0", cdiTestUUID0, "all"}, mps: true},
		{name: "disable-ipc-discoverer", args: []string{"--device-id", "0", "--feature-flags", "disable-ipc-discoverer,no-additional-gids-for-device-nodes"},
			devices: []string{"0", cdiTestUUID0, "all"}},
		{name: "search paths and unknown flag", args: []string{"--device-id", "0", "--library-search-path", "/x", "--config-search-path", "/y",
			"--feature-flag", "future-flag"}, devices: []string{"0", cdiTestUUID0, "all"}, mps: true},
		{name: "csv flags", args: []string{"--device-id", "0", "--csv.file", "/a.csv", "--csv.ignore-pattern", "x*", "--csv.compat-container-root", "/c"},
			devices: []string{"0", cdiTestUUID0, "all"}, mps: true},
		{name: "strategy variable", environ: []string{"NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES=type-index", "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS=1"},
			devices: []string{"gpu1", "all"}, mps: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"cdi", "generate", "--driver-root", root}, tc.args...)
			stdout, stderr, code := cdiRun(t, tc.environ, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			s := parseSpecOut(t, []byte(stdout))
			if !slices.Equal(deviceNames(s), tc.devices) {
				t.Errorf("devices %q, want %q", deviceNames(s), tc.devices)
			}
			if hasMPS(s) != tc.mps {
				t.Errorf("MPS directory mounted %v, want %v", hasMPS(s), tc.mps)
			}
		})
	}
}

// TestCDIGenerateDevLinks: the spec's create-symlinks hook creates a
// library's development link (libX.so -> SONAME) when the driver root has
// one, as NVIDIA's does; libcuda.so always.
func TestCDIGenerateDevLinks(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu"
	for _, tc := range []struct {
		name    string
		hostDev []string // development links made in the root
		want    []string // links expected in the hook
		notWant []string
	}{
		{name: "none on the host", want: []string{"libnctktest.so.1::" + lib + "/libcuda.so"},
			notWant: []string{lib + "/libnvidia-ml.so", lib + "/libnctktest.so"}},
		{name: "host has them", hostDev: []string{"libnctktest.so"},
			want: []string{"libnctktest.so.1::" + lib + "/libcuda.so", "libnctktest.so.1::" + lib + "/libnctktest.so"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := cdiTestRoot(t)
			for _, l := range tc.hostDev {
				if err := os.Symlink("libnctktest.so.1", filepath.Join(root, lib, l)); err != nil {
					t.Fatal(err)
				}
			}
			stdout, stderr, code := cdiRun(t, nil, "cdi", "generate", "--separate-hooks", "--driver-root", root)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var links []string
			for _, h := range parseSpecOut(t, []byte(stdout)).ContainerEdits.Hooks {
				if h.Args[1] == "create-symlinks" {
					links = append(links, h.Args[2:]...)
				}
			}
			got := strings.Join(links, " ")
			for _, w := range tc.want {
				if !slices.Contains(links, w) {
					t.Errorf("links %s lack %s", got, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, "::"+w+" ") || strings.HasSuffix(got, "::"+w) {
					t.Errorf("links %s have %s", got, w)
				}
			}
		})
	}
}

// TestCDIGenerateRelativeHookPath: a relative --nvidia-cdi-hook-path is
// written absolute (runtimes start hooks from other directories; NVIDIA's
// tool writes it as given).
func TestCDIGenerateRelativeHookPath(t *testing.T) {
	root := cdiTestRoot(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := cdiRun(t, nil, "cdi", "generate", "--separate-hooks", "--driver-root", root, "--nvidia-cdi-hook-path", "bin/../tools/nvidia-cdi-hook")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := filepath.Join(wd, "tools", "nvidia-cdi-hook")
	hooks := parseSpecOut(t, []byte(stdout)).ContainerEdits.Hooks
	if len(hooks) == 0 {
		t.Fatal("no hooks in the spec")
	}
	for _, h := range hooks {
		if h.Path != want {
			t.Errorf("hook %q path %q, want %q", h.Args, h.Path, want)
		}
	}
}
