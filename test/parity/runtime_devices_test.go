package parity

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/fixture"
)

// TestRuntimeDevices runs nvidia-container-runtime's create on each case of
// testdata/request/runtime-devices.txt and compares with NVIDIA's runtime
// what it put in config.json: the device nodes, the mounts, the additional
// GIDs, the environment it added, and which GPUs the container gets (from
// its device nodes, or, where a prestart hook is left to inject them as
// NVIDIA's legacy mode does, from the device list that hook hands
// nvidia-container-cli). Issue 9 item 3: the feature-gated devices,
// default-kind, the runtime.nvidia.com/gpu kind, additional GIDs and
// NVIDIA_VISIBLE_DEVICES as volume mounts.
//
// Recording needs NVIDIA's runtime built with an NVML stand-in that answers
// from the fixture root's /proc (NCTK_CMP_FAKE_NVML_ROOT, as for
// TestGenerateAgainstNVIDIA: docs/cdi-generate.md), since its jit-cdi mode
// asks NVML for the GPUs; nctk's runtime reads the root itself and ignores
// the variable.
func TestRuntimeDevices(t *testing.T) {
	runtime := tool(t, "nvidia-container-runtime")
	needRoot(t)
	fx := fixture.Build(t, fixture.Spec{GPUs: 2, Features: true})
	if !fx.DeviceNodes {
		t.Skipf("fixture root without device nodes: %s", fx.NoDeviceNodesReason)
	}
	// GPU index 0's node: a node the container user (1000) cannot open
	// gets its group added to the process.
	gpu0 := fx.HostPath(fx.GPUs[0].DevicePath)
	if err := os.Chmod(gpu0, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(gpu0, 0, 4545); err != nil {
		t.Fatal(err)
	}
	gpuIndex := map[string]string{}
	for _, g := range fx.GPUs {
		gpuIndex[g.DevicePath] = fmt.Sprint(g.Index)
	}

	dir := t.TempDir()
	write(t, dir, "/cdi/parity.yaml", `cdiVersion: 0.5.0
kind: parity.example.com/dev
devices:
- name: x
  containerEdits:
    env: ["PARITY_INJECTED=x"]
- name: "0"
  containerEdits:
    env: ["PARITY_INJECTED_0=0"]
`, 0o644)
	write(t, dir, "/low-level-runtime", "#!/bin/sh\n"+
		"b=.\nwhile [ $# -gt 0 ]; do case \"$1\" in -b|--bundle) b=$2; shift;; esac; shift; done\n"+
		"cp \"$b/config.json\" \"$STUB_OUT\"\n", 0o755)
	write(t, dir, "/nvidia-container-cli", "#!/bin/sh\nprintf '%s\\n' \"$@\" >\"$CLI_OUT\"\n", 0o755)

	var b strings.Builder
	for _, c := range readDeviceCases(t, "request/runtime-devices.txt") {
		fmt.Fprintf(&b, "== %s\n", c.line)
		b.WriteString(runDeviceCase(t, runtime, dir, fx.Path, c, gpuIndex))
	}
	golden(t, "request/runtime-devices.golden", b.String(), nil, runtimeDeviceDifferences)
}

type deviceCase struct {
	line     string
	mode     string
	settings []string
	env      []string
	mounts   []string
}

func readDeviceCases(t *testing.T, name string) []deviceCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var cases []deviceCase
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		head, tail, ok := strings.Cut(line, " -- ")
		if !ok {
			t.Fatalf("%s:%d: no ' -- '", name, n+1)
		}
		f := strings.Fields(head)
		c := deviceCase{line: line, mode: f[0], settings: f[1:]}
		for _, w := range strings.Fields(tail) {
			if d, ok := strings.CutPrefix(w, "mount:"); ok {
				c.mounts = append(c.mounts, d)
			} else {
				c.env = append(c.env, w)
			}
		}
		cases = append(cases, c)
	}
	return cases
}

// runDeviceCase creates one container and returns its summary.
func runDeviceCase(t *testing.T, runtime, dir, driverRoot string, c deviceCase, gpuIndex map[string]string) string {
	t.Helper()
	run, err := os.MkdirTemp(dir, "case-")
	if err != nil {
		t.Fatal(err)
	}
	defaultKind := "nvidia.com/gpu"
	var top []string
	for _, s := range c.settings {
		k, v, _ := strings.Cut(s, "=")
		if k == "default-kind" {
			defaultKind = v
			continue
		}
		if v != "true" && v != "false" {
			v = fmt.Sprintf("%q", v)
		}
		top = append(top, k+" = "+v)
	}
	hookDir := filepath.Dir(runtime)
	write(t, run, "/xdg/nvidia-container-runtime/config.toml", fmt.Sprintf(`%s
[nvidia-container-cli]
root = %q
path = %q
[nvidia-container-runtime]
mode = %q
runtimes = [%q]
[nvidia-container-runtime.modes.cdi]
spec-dirs = [%q]
default-kind = %q
[nvidia-container-runtime-hook]
path = %q
[nvidia-ctk]
path = %q
`, strings.Join(top, "\n"), driverRoot, filepath.Join(dir, "nvidia-container-cli"), c.mode,
		filepath.Join(dir, "low-level-runtime"), filepath.Join(dir, "cdi"), defaultKind,
		filepath.Join(hookDir, "nvidia-container-runtime-hook"), filepath.Join(hookDir, "nvidia-ctk")), 0o644)

	bundle := filepath.Join(run, "bundle")
	write(t, bundle, "/rootfs/etc/debian_version", "12.0\n", 0o644)
	mkdir(t, bundle, "/rootfs/usr/lib/x86_64-linux-gnu")
	spec := specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: "rootfs"},
		Process: &specs.Process{Cwd: "/", Args: []string{"sh"}, User: specs.User{UID: 1000, GID: 1000}, Env: c.env},
		Linux:   &specs.Linux{},
	}
	for _, m := range c.mounts {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m, Source: "/dev/null", Type: "bind", Options: []string{"bind", "ro"}})
	}
	data, err := json.Marshal(&spec)
	if err != nil {
		t.Fatal(err)
	}
	write(t, bundle, "/config.json", string(data), 0o644)

	out := filepath.Join(run, "config.out.json")
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + filepath.Join(run, "xdg"),
		"STUB_OUT=" + out, "NCTK_CMP_FAKE_NVML_ROOT=" + driverRoot}
	cmd := exec.Command(runtime, "create", "--bundle", bundle, "parity")
	cmd.Dir = run
	cmd.Env = env
	output, err := cmd.CombinedOutput()
	rc := exitCode(t, c.line, err)
	t.Logf("%s: exit %d\n%s", c.line, rc, output)
	var s strings.Builder
	fmt.Fprintf(&s, "exit: %s\n", exitClass(rc))
	data, err = os.ReadFile(out)
	if err != nil {
		return s.String()
	}
	var got specs.Spec
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%s: config.json: %v", c.line, err)
	}

	legacy := c.mode == "legacy"
	var gpus, devices []string
	if got.Linux != nil {
		for _, d := range got.Linux.Devices {
			if i, ok := gpuIndex[d.Path]; ok {
				gpus = append(gpus, i)
			}
			if legacy && driverNode(d.Path) {
				// NVIDIA's legacy mode leaves the driver's nodes to the
				// prestart hook: compared through the GPUs below.
				continue
			}
			devices = append(devices, fmt.Sprintf("%s %d:%d", d.Path, d.Major, d.Minor))
		}
	}
	var mounts []string
	for _, m := range got.Mounts {
		if slices.Contains(c.mounts, m.Destination) {
			continue
		}
		if legacy && driverMount(m.Destination) {
			continue
		}
		mounts = append(mounts, m.Destination)
	}
	if hook := legacyHook(got); hook != "" {
		gpus = hookDevices(t, hook, run, env, bundle, dir, gpuIndex)
	}
	var added []string
	for _, e := range got.Process.Env {
		if !slices.Contains(c.env, e) {
			added = append(added, e)
		}
	}
	var gids []string
	for _, g := range got.Process.User.AdditionalGids {
		gids = append(gids, fmt.Sprint(g))
	}
	slices.Sort(gpus)
	slices.Sort(devices)
	slices.Sort(mounts)
	slices.Sort(added)
	fmt.Fprintf(&s, "gpus: %s\n", orNone(slices.Compact(gpus)))
	fmt.Fprintf(&s, "devices: %s\n", orNone(devices))
	fmt.Fprintf(&s, "mounts: %s\n", orNone(mounts))
	fmt.Fprintf(&s, "additionalGids: %s\n", orNone(gids))
	fmt.Fprintf(&s, "env added: %s\n", orNone(added))
	return s.String()
}

// driverNode tells the driver's own nodes (GPUs, control, UVM, modeset,
// MIG capabilities) from the feature-gated ones.
func driverNode(p string) bool { return driverNodes.MatchString(p) }

var driverNodes = regexp.MustCompile(`^/dev/(nvidia[0-9]+|nvidiactl|nvidia-uvm(-tools)?|nvidia-modeset|nvidia-caps/.*)$`)

// driverMount tells the driver's libraries, programs and proc files (what
// NVIDIA's legacy mode leaves to its prestart hook) from the feature-gated
// mounts.
func driverMount(dest string) bool {
	return strings.HasPrefix(dest, "/usr/") || strings.HasPrefix(dest, "/proc/") || strings.HasPrefix(dest, "/lib")
}

// legacyHook returns the path of an nvidia-container-runtime-hook prestart
// hook in s, "" when there is none.
func legacyHook(s specs.Spec) string {
	if s.Hooks == nil {
		return ""
	}
	//lint:ignore SA1019 prestart is where NVIDIA's legacy mode puts its hook
	for _, h := range s.Hooks.Prestart {
		if filepath.Base(h.Path) == "nvidia-container-runtime-hook" {
			return h.Path
		}
	}
	return ""
}

// hookDevices runs the prestart hook on the bundle whose config.json is the
// runtime's output (as runc would) with nvidia-container-cli stubbed, and
// returns the GPUs it asked for: "all" spelled as every index, none when
// the hook did not call the CLI.
func hookDevices(t *testing.T, hook, run string, env []string, bundle, dir string, gpuIndex map[string]string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(run, "config.out.json"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, bundle, "/config.json", string(data), 0o644)
	cliOut := filepath.Join(run, "cli.out")
	cmd := exec.Command(hook, "prestart")
	cmd.Env = append(env, "CLI_OUT="+cliOut)
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.0.2","id":"parity","pid":%d,"bundle":%q}`, os.Getpid(), bundle))
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Logf("prestart hook: %v\n%s", err, output)
	}
	args, err := os.ReadFile(cliOut)
	if err != nil {
		return nil
	}
	var gpus []string
	for _, a := range strings.Split(string(args), "\n") {
		list, ok := strings.CutPrefix(a, "--device=")
		if !ok {
			continue
		}
		if list == "all" {
			for _, i := range gpuIndex {
				gpus = append(gpus, i)
			}
			continue
		}
		gpus = append(gpus, strings.Split(list, ",")...)
	}
	return gpus
}

// computeUtility are the files of the compute and utility capabilities
// (libnvidia-container's lists): what nctk mounts for a jit-cdi container
// that leaves NVIDIA_DRIVER_CAPABILITIES unset.
var computeUtility = regexp.MustCompile(`/(libcuda|libcudadebugger|libnvidia-ml|libnvidia-cfg|libnvidia-opencl|libnvidia-ptxjitcompiler|libnvidia-allocator|libnvidia-pkcs11-openssl3|libnvidia-nvvm|libnvidia-gpucomp)\.so[.0-9]*$|/(nvidia-smi|nvidia-debugdump|nvidia-persistenced|nvidia-cuda-mps-control|nvidia-cuda-mps-server)$`)

var gatedFeature = regexp.MustCompile(`^NVIDIA_(GDS|MOFED|NVSWITCH|GDRCOPY)=enabled$`)

// runtimeDeviceDifferences turns NVIDIA's results into nctk's where nctk
// differs on purpose (docs/nvidia-parity.md, "The runtime"):
//   - NVIDIA's feature-gated and per-container specs append
//     NVIDIA_VISIBLE_DEVICES=void to the container's environment (so that a
//     legacy hook later injects nothing); nctk leaves the variable as the
//     image or user set it;
//   - in legacy mode that appended void reaches NVIDIA's own prestart hook,
//     which then injects no GPU at all: NVIDIA_GDS=enabled (or any gated
//     feature) silently takes the GPUs away. nctk gives the GPUs asked for
//     and the feature's devices;
//   - in legacy mode nctk puts the GPUs' nodes in config.json itself, so a
//     GPU node the container user cannot open (GPU 0's here, group 4545)
//     gets its group added as in NVIDIA's CDI modes, first; NVIDIA's
//     legacy hook makes the node in the container and adds no group, so
//     the user cannot open its GPU;
//   - NVIDIA's runtime.nvidia.com/gpu devices carry every driver file and
//     /dev/nvidia-modeset whatever NVIDIA_DRIVER_CAPABILITIES says; nctk
//     honours the capabilities there as on every other path (compute,utility
//     by default: no graphics, video or display files, no modeset node).
func runtimeDeviceDifferences(s string) string {
	blocks := strings.Split(s, "== ")
	for i, blk := range blocks {
		if blk == "" {
			continue
		}
		header, _, _ := strings.Cut(blk, "\n")
		lines := strings.Split(blk, "\n")
		_, envPart, _ := strings.Cut(header, " -- ")
		visible, caps := "", ""
		gated := false
		for _, w := range strings.Fields(envPart) {
			switch {
			case strings.HasPrefix(w, "NVIDIA_VISIBLE_DEVICES="):
				visible = strings.TrimPrefix(w, "NVIDIA_VISIBLE_DEVICES=")
			case strings.HasPrefix(w, "NVIDIA_DRIVER_CAPABILITIES="):
				caps = strings.TrimPrefix(w, "NVIDIA_DRIVER_CAPABILITIES=")
			case gatedFeature.MatchString(w):
				gated = true
			}
		}
		perContainer := strings.HasPrefix(header, "jit-cdi ") || strings.Contains(visible, "runtime.nvidia.com/gpu=")
		legacy := strings.HasPrefix(header, "legacy ")
		noGIDs := strings.Contains(header, "no-additional-gids-for-device-nodes=true")
		gpu0 := false
		for j, l := range lines {
			switch {
			case strings.HasPrefix(l, "env added: "):
				var keep []string
				for _, e := range strings.Split(strings.TrimPrefix(l, "env added: "), ",") {
					if e != "NVIDIA_VISIBLE_DEVICES=void" && e != "none" {
						keep = append(keep, e)
					}
				}
				lines[j] = "env added: " + orNone(keep)
			case strings.HasPrefix(l, "gpus: none") && legacy && gated:
				switch visible {
				case "all":
					lines[j] = "gpus: 0,1"
				case "0", "1":
					lines[j] = "gpus: " + visible
				}
				gpu0 = strings.Contains(lines[j], "0")
			case strings.HasPrefix(l, "gpus: "):
				gpu0 = slices.Contains(strings.Split(strings.TrimPrefix(l, "gpus: "), ","), "0")
			case strings.HasPrefix(l, "additionalGids: ") && legacy && gpu0 && !noGIDs:
				gids := strings.TrimPrefix(l, "additionalGids: ")
				if gids == "none" {
					lines[j] = "additionalGids: 4545"
				} else {
					lines[j] = "additionalGids: 4545," + gids
				}
			case perContainer && caps != "all" && strings.HasPrefix(l, "devices: "):
				var keep []string
				for _, d := range strings.Split(strings.TrimPrefix(l, "devices: "), ",") {
					if !strings.HasPrefix(d, "/dev/nvidia-modeset ") {
						keep = append(keep, d)
					}
				}
				lines[j] = "devices: " + orNone(keep)
			case perContainer && caps != "all" && strings.HasPrefix(l, "mounts: "):
				var keep []string
				for _, m := range strings.Split(strings.TrimPrefix(l, "mounts: "), ",") {
					if computeUtility.MatchString(m) || !strings.HasPrefix(m, "/usr/") && !strings.HasPrefix(m, "/etc/vulkan") {
						keep = append(keep, m)
					}
				}
				lines[j] = "mounts: " + orNone(keep)
			}
		}
		blocks[i] = strings.Join(lines, "\n")
	}
	return strings.Join(blocks, "== ")
}
