package containercli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/cdispec"
	"github.com/nctk/nctk/internal/cli/containercli/nvc"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/configure"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/planner"
)

// injected is what a container gets on one path, as sets: device nodes
// (container paths), host files bound into it, and /proc/driver/nvidia
// entries (relative to that directory) its view exposes.
type injected struct {
	devices, files, procs []string
}

// addOnce appends s to list unless it is there.
func addOnce(list *[]string, s string) {
	if !slices.Contains(*list, s) {
		*list = append(*list, s)
	}
}

func (in *injected) sorted() injected {
	out := injected{slices.Clone(in.devices), slices.Clone(in.files), slices.Clone(in.procs)}
	for _, l := range [][]string{out.devices, out.files, out.procs} {
		slices.Sort(l)
	}
	return out
}

// agreementCase is one request, written for each path: the
// nvidia-container-cli options list and configure share, the runtime's
// environment, and the CDI device it names (if CDI can express it).
type agreementCase struct {
	name string
	// cli are list's and configure's options (capabilities included: list
	// reads them as a filter, configure as the capabilities).
	cli []string
	// env is the container's environment for the runtime; privileged puts
	// CAP_SYS_ADMIN in its bounding set.
	env        []string
	privileged bool
	// cdiDevice is the CDI device name (nvidia.com/gpu=NAME) that asks
	// for the same, "" when CDI cannot express the request (no device,
	// MIG config/monitor, IMEX channels, a GPU in MIG mode as a whole).
	cdiDevice string
	caps      caps.Set
	// devices are the device nodes every path must give (container paths).
	devices func(r *fixture.Root) []string
	// err, when set, is the error every CLI path and the runtime give.
	err string
	// runtimeErr, when set, is the runtime's own refusal (list and
	// configure, which have no notion of privilege, accept the request).
	runtimeErr string
}

// TestPathsAgree builds one request per case through the four ways nctk
// injects a container: nvidia-container-cli list (its output), configure
// (the plan it applies), nvidia-container-runtime (the OCI spec edits:
// ocispec.Apply of its plan) and nvidia-ctk cdi generate (the spec's common
// and device edits), over a fixture driver root, and checks that they give
// the container the same device nodes, host files and /proc entries.
func TestPathsAgree(t *testing.T) {
	r := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 3, Compat32: true, IPC: true, Firmware: true, MIG: true, Graphics: true})
	if !r.DeviceNodes {
		t.Skipf("no device nodes: %s", r.NoDeviceNodesReason)
	}
	// An IMEX channel: the fixture makes none.
	imexDir := r.HostPath("/dev/nvidia-caps-imex-channels")
	if err := os.MkdirAll(imexDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(imexDir+"/channel0", syscall.S_IFCHR|0o666, int(unix.Mkdev(511, 0))); err != nil {
		t.Skipf("cannot make an IMEX channel node: %v", err)
	}
	g0, g1, g2 := r.GPUs[0], r.GPUs[1], r.GPUs[2]
	if !g1.MIGEnabled || len(g1.MIG) < 2 || g0.MIGEnabled || g2.MIGEnabled {
		t.Fatalf("fixture: want MIG on GPU 1 only, got %+v", r.GPUs)
	}
	drv, err := discover.Discover(discover.Options{Root: r.Path})
	if err != nil {
		t.Fatal(err)
	}
	if !drv.GPUs[1].MIGCapable || drv.MIGConfig.Path == "" || drv.MIGMonitor.Path == "" || len(drv.GPUs[1].MIGCapNodes) == 0 {
		t.Fatalf("fixture: GPU 1 MIG capabilities or MIG config/monitor nodes missing: %+v", drv.GPUs[1])
	}

	ctl := func(extra ...string) []string { return append([]string{"/dev/nvidiactl"}, extra...) }
	uvm := []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
	gpu := func(gs ...fixture.GPU) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.DevicePath)
		}
		return out
	}
	drm := func(g fixture.GPU) []string { return []string{g.DRMCard, g.DRMRender} } // graphics or display only
	capNode := func(minor int) string { return fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor) }
	mig := func(ms ...fixture.MIGDevice) []string {
		var out []string
		for _, m := range ms {
			out = append(out, capNode(m.GIMinor), capNode(m.CIMinor))
		}
		return out
	}
	migCaps := func() []string { // GPU 1's MIG capabilities
		var out []string
		for _, n := range drv.GPUs[1].MIGCapNodes {
			out = append(out, n.Path)
		}
		return out
	}
	list := func(parts ...[]string) func(*fixture.Root) []string {
		return func(*fixture.Root) []string { return slices.Concat(parts...) }
	}
	uc := caps.Set{caps.Utility: true, caps.Compute: true}
	ucFlags := []string{"--utility", "--compute"}
	ucEnv := "NVIDIA_DRIVER_CAPABILITIES=utility,compute"

	tests := []agreementCase{
		{name: "none, utility", cli: []string{"--device=", "--utility"},
			env: []string{"NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_DRIVER_CAPABILITIES=utility"}, privileged: true,
			devices: list(ctl())},
		{name: "all, utility+compute", cli: append([]string{"--device=all"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=all", ucEnv}, privileged: true, cdiDevice: "all", caps: uc,
			devices: list(ctl(uvm...), gpu(g0, g1, g2), mig(g1.MIG...))},
		{name: "index 0, compute, unprivileged", cli: []string{"--device=0", "--compute"},
			env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute"}, cdiDevice: "0", caps: caps.Set{caps.Compute: true},
			devices: list(ctl(uvm...), gpu(g0))},
		{name: "GPU in MIG mode by index", cli: append([]string{"--device=1"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=1", ucEnv}, privileged: true,
			devices: list(ctl(uvm...), gpu(g1))},
		{name: "UUID, graphics+display", cli: []string{"--device=" + g2.UUID, "--graphics", "--display"},
			env: []string{"NVIDIA_VISIBLE_DEVICES=" + g2.UUID, "NVIDIA_DRIVER_CAPABILITIES=graphics,display"}, privileged: true,
			cdiDevice: g2.UUID, caps: caps.Set{caps.Graphics: true, caps.Display: true},
			devices: list(ctl("/dev/nvidia-modeset"), gpu(g2), drm(g2))},
		{name: "every capability and compat32", cli: []string{"--device=0", "--utility", "--compute", "--video", "--graphics", "--display", "--ngx", "--compat32"},
			env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"}, privileged: true, cdiDevice: "0", caps: caps.Full(),
			devices: list(ctl(uvm...), []string{"/dev/nvidia-modeset"}, gpu(g0), drm(g0))},
		{name: "MIG device", cli: append([]string{"--device=1:0"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=1:0", ucEnv}, privileged: true, cdiDevice: "1:0", caps: uc,
			devices: list(ctl(uvm...), gpu(g1), mig(g1.MIG[0]))},
		{name: "two MIG devices", cli: append([]string{"--device=1:1,1:0"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=1:1,1:0", ucEnv}, privileged: true,
			devices: list(ctl(uvm...), gpu(g1), mig(g1.MIG[1], g1.MIG[0]))},
		{name: "all with mig-config", cli: append([]string{"--device=all", "--mig-config=all"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_CONFIG_DEVICES=all", ucEnv}, privileged: true,
			devices: list(ctl(uvm...), gpu(g0, g1, g2), []string{drv.MIGConfig.Path}, migCaps())},
		{name: "GPU 1 with mig-monitor", cli: append([]string{"--device=1", "--mig-monitor=all"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_MIG_MONITOR_DEVICES=all", ucEnv}, privileged: true,
			devices: list(ctl(uvm...), gpu(g1), []string{drv.MIGMonitor.Path}, migCaps())},
		{name: "mig-config and mig-monitor on a GPU without MIG", cli: append([]string{"--device=0", "--mig-config=all", "--mig-monitor=all"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=all", ucEnv}, privileged: true,
			devices: list(ctl(uvm...), gpu(g0))},
		{name: "mig-config with a MIG device", cli: append([]string{"--device=1:0", "--mig-config=all"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=1:0", "NVIDIA_MIG_CONFIG_DEVICES=all", ucEnv}, privileged: true,
			err: "cannot enable mig-config with specific MIG devices selected"},
		{name: "mig-config unprivileged", cli: append([]string{"--device=1", "--mig-config=all"}, ucFlags...),
			env:        []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_MIG_CONFIG_DEVICES=all", ucEnv},
			runtimeErr: "only a privileged container",
			devices:    list(ctl(uvm...), gpu(g1), []string{drv.MIGConfig.Path}, migCaps())},
		{name: "IMEX channel", cli: append([]string{"--device=0", "--imex-channel=0"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=0", ucEnv}, privileged: true,
			devices: list(ctl(uvm...), gpu(g0), []string{"/dev/nvidia-caps-imex-channels/channel0"})},
		{name: "missing IMEX channel", cli: append([]string{"--device=0", "--imex-channel=5"}, ucFlags...),
			env: []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=5", ucEnv}, privileged: true,
			err: "missing device /dev/nvidia-caps-imex-channels/channel5"},
	}
	cdiSpecs := map[string]*cdi.Spec{} // by capabilities
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			paths := map[string]injected{}
			listed, err := listPath(t, r, tc)
			checkPathErr(t, "list", err, tc.err)
			if err == nil {
				paths["list"] = listed.sorted()
			}
			configured, err := configurePath(t, r, tc)
			checkPathErr(t, "configure", err, tc.err)
			if err == nil {
				paths["configure"] = configured.sorted()
			}
			wantRuntimeErr := tc.err
			if tc.runtimeErr != "" {
				wantRuntimeErr = tc.runtimeErr
			}
			edited, err := runtimePath(t, r, tc)
			checkPathErr(t, "runtime", err, wantRuntimeErr)
			if err == nil {
				paths["runtime"] = edited.sorted()
			}
			if tc.cdiDevice != "" {
				key := tc.caps.String()
				spec := cdiSpecs[key]
				if spec == nil {
					job := planner.Job{Driver: discover.Options{Root: r.Path}}
					if spec, err = cdispec.Generate(context.Background(), job, cdispec.Options{Caps: tc.caps, NoProbe: true}); err != nil {
						t.Fatalf("cdi generate: %v", err)
					}
					cdiSpecs[key] = spec
				}
				paths["cdi"] = cdiPath(t, r, spec, tc.cdiDevice).sorted()
			}
			if tc.err != "" {
				return
			}
			want := slices.Clone(tc.devices(r))
			slices.Sort(want)
			want = slices.Compact(want) // MIG devices share GPU instances
			ref := paths["list"]
			for name, got := range paths {
				if !slices.Equal(got.devices, want) {
					t.Errorf("%s: device nodes\n  %s\nwant\n  %s", name, strings.Join(got.devices, "\n  "), strings.Join(want, "\n  "))
				}
				if len(got.files) == 0 {
					t.Errorf("%s: no driver file", name)
				}
				if !slices.Equal(got.files, ref.files) {
					t.Errorf("%s and list differ in host files:\n%s", name, setDiff(got.files, ref.files))
				}
				// CDI's /proc view is its hooks' business, and has no MIG
				// config; the others expose the same entries.
				if name != "cdi" && !slices.Equal(got.procs, ref.procs) {
					t.Errorf("%s and list differ in /proc entries: %q vs %q", name, got.procs, ref.procs)
				}
			}
		})
	}
}

func checkPathErr(t *testing.T, path string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", path, err)
	case want != "" && err == nil:
		t.Errorf("%s succeeded, want an error containing %q", path, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: %v, want an error containing %q", path, err, want)
	}
}

func setDiff(got, want []string) string {
	var b strings.Builder
	for _, s := range got {
		if !slices.Contains(want, s) {
			fmt.Fprintf(&b, "  + %s\n", s)
		}
	}
	for _, s := range want {
		if !slices.Contains(got, s) {
			fmt.Fprintf(&b, "  - %s\n", s)
		}
	}
	return b.String()
}

// listPath runs nvidia-container-cli list with the case's options and every
// file section, and sorts its lines: character devices, /proc entries, the
// /dev/nvidia-caps directory NVIDIA's list names with MIG capabilities
// (dropped), and host files.
func listPath(t *testing.T, r *fixture.Root, tc agreementCase) (*injected, error) {
	args := append([]string{"--root", r.Path, "list", "-l", "-b", "-i", "-f"}, tc.cli...)
	code, out, errOut := run(t, t.TempDir(), args...)
	if code != 0 {
		return nil, fmt.Errorf("exit %d: %s", code, errOut)
	}
	in := &injected{}
	procDir := r.HostPath("/proc/driver/nvidia") + "/"
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if rel, ok := strings.CutPrefix(l, procDir); ok {
			addOnce(&in.procs, rel)
			continue
		}
		fi, err := os.Lstat(l)
		if err != nil {
			t.Errorf("list printed %s: %v", l, err)
			continue
		}
		switch {
		case fi.Mode()&os.ModeCharDevice != 0:
			addOnce(&in.devices, strings.TrimPrefix(l, r.Path))
		case fi.IsDir() && l == r.HostPath("/dev/nvidia-caps"):
		default:
			addOnce(&in.files, l)
		}
	}
	return in, nil
}

// planInjected is what a plan gives: its devices, mount sources and
// exposed /proc entries.
func planInjected(p *plan.Plan) *injected {
	in := &injected{}
	for _, d := range p.Devices {
		addOnce(&in.devices, d.Path)
	}
	for _, m := range p.Mounts {
		addOnce(&in.files, m.Source)
	}
	if p.Proc != nil {
		for _, e := range p.Proc.Expose {
			addOnce(&in.procs, e)
		}
	}
	return in
}

// debianRootfs is a container root the target layout detection reads as
// Debian's.
func debianRootfs(t *testing.T) string {
	rootfs := t.TempDir()
	if err := os.MkdirAll(rootfs+"/etc", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rootfs+"/etc/debian_version", []byte("12.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return rootfs
}

// configurePath runs nvidia-container-cli configure with the production
// planner (planner.Run) and returns what the plan it would apply gives.
func configurePath(t *testing.T, r *fixture.Root, tc agreementCase) (*injected, error) {
	argv := append([]string{"nvidia-container-cli", "--root=" + r.Path, "configure", "--pid=" + strconv.Itoa(os.Getpid())}, tc.cli...)
	argv = append(argv, debianRootfs(t))
	var out, errb bytes.Buffer
	e := &app.Env{Args: argv, Stdout: &out, Stderr: &errb,
		Environ: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NCTK_PROBE_CACHE_DIR=" + t.TempDir()}}
	g, _, rest, err := nvc.ParseGlobals(e, e.Args)
	if err != nil {
		t.Fatal(err)
	}
	var applied *plan.Plan
	steps := configureSteps{plan: planner.Run, apply: func(_ context.Context, p *plan.Plan, _ configure.Container, _ configure.Options) error {
		applied = p
		return nil
	}}
	if code := configureWith(e, g, rest[1:], steps); code != 0 {
		return nil, fmt.Errorf("exit %d: %s", code, errb.String())
	}
	if applied == nil {
		t.Fatal("configure applied no plan")
	}
	return planInjected(applied), nil
}

// runtimePath plans the container as nvidia-container-runtime does
// (planner.Prepare of its OCI spec) and returns what ocispec.Apply writes:
// linux.devices, the mounts' sources and the /proc view hook's --expose
// entries.
func runtimePath(t *testing.T, r *fixture.Root, tc agreementCase) (*injected, error) {
	bounding := []string{"CAP_CHOWN"}
	if tc.privileged {
		bounding = append(bounding, "CAP_SYS_ADMIN")
	}
	rootfs := debianRootfs(t)
	raw, err := json.Marshal(map[string]any{
		"ociVersion": "1.2.0",
		"process":    map[string]any{"args": []string{"sh"}, "cwd": "/", "env": tc.env, "capabilities": map[string]any{"bounding": bounding}},
		"root":       map[string]any{"path": rootfs},
	})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := ocispec.Parse("config.json", raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.CLI.Root = r.Path
	res, _, err := planner.Prepare(context.Background(), doc.Spec(), rootfs, cfg)
	if err != nil {
		return nil, err
	}
	if res == nil {
		t.Fatal("the runtime planned nothing")
	}
	if err := ocispec.Apply(doc, res.Plan, ocispec.HookConfig{Path: "/usr/bin/nvidia-cdi-hook"}); err != nil {
		t.Fatal(err)
	}
	spec := doc.Spec()
	in := &injected{}
	if spec.Linux != nil {
		for _, d := range spec.Linux.Devices {
			addOnce(&in.devices, d.Path)
		}
	}
	for _, m := range spec.Mounts {
		addOnce(&in.files, m.Source)
	}
	if spec.Hooks != nil {
		for _, h := range spec.Hooks.CreateContainer {
			for i, a := range h.Args {
				if a == "--expose" && i+1 < len(h.Args) {
					addOnce(&in.procs, h.Args[i+1])
				}
			}
		}
	}
	return in, nil
}

// cdiPath returns what a container asking for nvidia.com/gpu=name gets
// from spec: the common edits and the device's.
func cdiPath(t *testing.T, r *fixture.Root, spec *cdi.Spec, name string) *injected {
	i := slices.IndexFunc(spec.Devices, func(d cdi.Device) bool { return d.Name == name })
	if i < 0 {
		t.Fatalf("cdi spec has no device %q", name)
	}
	in := &injected{}
	for _, e := range []cdi.ContainerEdits{spec.ContainerEdits, spec.Devices[i].ContainerEdits} {
		for _, n := range e.DeviceNodes {
			addOnce(&in.devices, n.Path)
			if n.HostPath != "" && n.HostPath != r.HostPath(n.Path) {
				t.Errorf("cdi device %s: host path %s", n.Path, n.HostPath)
			}
		}
		for _, m := range e.Mounts {
			addOnce(&in.files, m.HostPath)
		}
	}
	return in
}
