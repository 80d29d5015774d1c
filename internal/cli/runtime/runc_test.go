package runtime

// Tests and benchmarks against the real runc: what the wrapper writes into
// config.json must be accepted by runc, and do what it says.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/plan"
)

// realRuncSetup is a busybox bundle whose container requests GPUs, and the
// wrapper (this test binary in child mode) configured to exec runc.
type realRuncSetup struct {
	bundle   string
	hostFile string
	hookOut  string
	rt       *e2e.Runc
}

// runcPlan bind-mounts a host file, adds a device node that runc does not
// allow by default (/dev/kmsg's 1:11, opened write-only, which needs no
// capability), a symlink (made by the wrapper in the rootfs), a
// /proc/driver/nvidia view (so a hook runs: newRealRunc makes the wrapper see
// the driver in procfs) and a variable.
func runcPlan(hostFile string) *plan.Plan {
	return &plan.Plan{
		Devices: []plan.Device{{Path: "/dev/nctk-test0", HostPath: "/dev/kmsg", Major: 1, Minor: 11, FileMode: 0o620, GID: 0}},
		Mounts: []plan.Mount{{Source: hostFile, Destination: "/usr/lib/nctk/libfake.so.1.2", Kind: plan.KindFile,
			Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}}},
		Symlinks: []plan.Symlink{{Link: "/usr/lib/nctk/libfake.so.1", Target: "libfake.so.1.2"}},
		Proc:     &plan.ProcView{HostDir: "/nonexistent/proc/driver/nvidia", Files: []string{"version"}},
		Env:      []string{"NCTK_INJECTED=yes"},
	}
}

func newRealRunc(tb testing.TB, args ...string) *realRuncSetup {
	tb.Helper()
	e2e.RequireRoot(tb)
	runc := e2e.RequireTool(tb, "runc")
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	rootfs := e2e.BuildRootfs(tb, e2e.RootfsOptions{NoCudaprobe: true, NoLdCache: true})
	s := &realRuncSetup{bundle: e2e.MakeBundle(tb, rootfs, args...)}
	e2e.EditSpec(tb, s.bundle, func(sp *specs.Spec) {
		sp.Process.Env = append(sp.Process.Env, "LD_PRELOAD=/nonexistent/poc.so", "NVIDIA_VISIBLE_DEVICES=all")
	})
	dir := e2e.TempDir(tb, "rt")
	s.hostFile = filepath.Join(dir, "libfake.so.1.2")
	if err := os.WriteFile(s.hostFile, []byte("host driver file\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	// The hook is this test binary (see hookRecorder): it records its
	// argv, cwd and exact environment in the rootfs, its working directory.
	s.hookOut = filepath.Join(rootfs, hookRecord)
	hook := filepath.Join(dir, hookargs.Binary)
	if err := os.Symlink(self, hook); err != nil {
		tb.Fatal(err)
	}
	planFile := filepath.Join(dir, "plan.json")
	data, _ := json.Marshal(runcPlan(s.hostFile))
	if err := os.WriteFile(planFile, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("[nvidia-container-runtime]\nruntimes = [%q]\n", runc)), 0o644); err != nil {
		tb.Fatal(err)
	}
	s.rt = e2e.NewRuntime(tb, self)
	s.rt.Env = append(s.rt.Env, childEnv+"=1", childPlanEnv+"="+planFile, childHookEnv+"="+hook,
		childProcEnv+"="+dir, "NVIDIA_CTK_CONFIG_FILE_PATH="+cfgFile)
	return s
}

func TestRealRunc(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containers with runc")
	}
	script := strings.Join([]string{
		"stat -c 'node %F %t:%T %a' /dev/nctk-test0",
		"(: > /dev/nctk-test0) && echo open-ok",
		"cat /sys/fs/cgroup/devices/devices.list 2>/dev/null | sed 's/^/cgroup /'",
		"cat /usr/lib/nctk/libfake.so.1.2",
		"if (echo x > /usr/lib/nctk/libfake.so.1.2) 2>/dev/null; then echo WRITABLE; else echo ro-ok; fi",
		"grep ' /usr/lib/nctk/libfake.so.1.2 ' /proc/self/mountinfo | sed 's/^/mount /'",
		"echo \"env NCTK_INJECTED=$NCTK_INJECTED\"",
		"echo \"link $(readlink /usr/lib/nctk/libfake.so.1)\"",
	}, "\n")
	s := newRealRunc(t, "/bin/sh", "-c", script)
	res := s.rt.Run(s.bundle, "nctk-rt-"+filepath.Base(s.bundle))
	if !res.OK() {
		t.Fatalf("run failed: %s", res)
	}
	out := res.Stdout
	for _, want := range []string{
		"node character special file 1:b 620", // runc made the node as written
		"open-ok",                             // and the device cgroup lets the container open it
		"host driver file",                    // the bind mount is there
		"ro-ok",                               // read-only
		"env NCTK_INJECTED=yes",
		"link libfake.so.1.2", // the wrapper's symlink, made in the rootfs
	} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
	// The mount is ro,nosuid,nodev.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "mount ") {
			f := strings.Fields(line)
			if len(f) < 7 || !hasAll(strings.Split(f[6], ","), "ro", "nosuid", "nodev") {
				t.Errorf("mount options: %s", line)
			}
		}
	}
	// cgroup v1: the container's rules include exactly ours for 1:11.
	if strings.Contains(out, "cgroup ") && !strings.Contains(out, "cgroup c 1:11 rw\n") {
		t.Errorf("device cgroup lacks c 1:11 rw:\n%s", out)
	}
	// The hook ran with only its explicit environment.
	hookOut, err := os.ReadFile(s.hookOut)
	if err != nil {
		t.Fatalf("hook did not run: %v", err)
	}
	var env []string
	for _, l := range strings.Split(strings.TrimSpace(string(hookOut)), "\n") {
		switch {
		case strings.HasPrefix(l, "args: "):
			if want := "args: mount-proc-driver --host-dir /nonexistent/proc/driver/nvidia --file version"; l != want {
				t.Errorf("hook %q, want %q", l, want)
			}
		case strings.HasPrefix(l, "cwd: "):
			if got, want := strings.TrimPrefix(l, "cwd: "), filepath.Dir(s.hookOut); got != want {
				t.Errorf("hook cwd %q, want the rootfs %q", got, want)
			}
		default:
			env = append(env, l)
		}
	}
	if !slices.Equal(env, hookargs.Env()) {
		t.Errorf("hook environment %q, want exactly %q", env, hookargs.Env())
	}
}

func hasAll(have []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// BenchmarkCreate compares `runc create` with `nvidia-container-runtime
// create` on the same bundle, alternating in one process, and reports the
// median of each and the median extra time of the wrapper. The wrapper is
// this test binary in child mode with a fixed plan (a device, a mount, a
// proc-view hook run by /bin/true; the symlink is made by the wrapper). A third arm runs runc on the spec as the
// wrapper leaves it: runc-edited-ms - runc-ms is runc's cost of applying
// the plan, wrapper-ms = nvidia-ms - runc-edited-ms the wrapper's own
// (start, config, spec load/edit/save, exec). Set NCTK_BENCH_RUNTIME to the path of a
// real nvidia-container-runtime to measure that instead (it gets the same
// environment, so NVIDIA_CTK_CONFIG_FILE_PATH must name a config whose
// runtimes list runc). Each container is deleted outside the timing.
func BenchmarkCreate(b *testing.B) {
	s := newRealRunc(b, "/bin/true")
	runc := e2e.RequireTool(b, "runc")
	wrapper, env := os.Args[0], slices.Clone(s.rt.Env)
	for i, kv := range env {
		if strings.HasPrefix(kv, childHookEnv+"=") {
			env[i] = childHookEnv + "=/bin/true"
		}
	}
	if p := os.Getenv("NCTK_BENCH_RUNTIME"); p != "" {
		wrapper, env = p, s.rt.Env[:1]
	}
	if abs, err := filepath.Abs(wrapper); err == nil {
		wrapper = abs
	}
	specPath := filepath.Join(s.bundle, "config.json")
	orig, err := os.ReadFile(specPath)
	if err != nil {
		b.Fatal(err)
	}
	// The created container's init keeps the command's stdio open, so
	// output goes to a file rather than a pipe.
	outPath := filepath.Join(s.rt.Dir, "bench.out")
	create := func(bin, id string, spec []byte) time.Duration {
		if err := os.WriteFile(specPath, spec, 0o644); err != nil {
			b.Fatal(err)
		}
		out, err := os.Create(outPath)
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "--root", s.rt.Root, "create", "--bundle", s.bundle, id)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = out, out
		start := time.Now()
		err = cmd.Run()
		d := time.Since(start)
		if err != nil {
			msg, _ := os.ReadFile(outPath)
			b.Fatalf("%s create: %v\n%s", bin, err, msg)
		}
		if res, err := exec.CommandContext(ctx, runc, "--root", s.rt.Root, "delete", "--force", id).CombinedOutput(); err != nil {
			b.Fatalf("delete: %v\n%s", err, res)
		}
		return d
	}
	// The spec as the wrapper leaves it, for the third arm: runc on the
	// edited spec splits the wrapper's own cost from runc's cost of doing
	// what the plan asks (hooks, mounts, nodes).
	create(wrapper, "nctk-bench-warmup", orig)
	edited, err := os.ReadFile(specPath)
	if err != nil {
		b.Fatal(err)
	}
	var plain, wrapped, runcEdited []time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("nctk-bench-%d", i)
		arms := []func(){
			func() { plain = append(plain, create(runc, id+"-runc", orig)) },
			func() { wrapped = append(wrapped, create(wrapper, id+"-nvidia", orig)) },
			func() { runcEdited = append(runcEdited, create(runc, id+"-edited", edited)) },
		}
		for k := range arms {
			arms[(i+k)%len(arms)]()
		}
	}
	mp, mw, me := median(plain), median(wrapped), median(runcEdited)
	b.ReportMetric(ms(mp), "runc-ms")
	b.ReportMetric(ms(mw), "nvidia-ms")
	b.ReportMetric(ms(mw-mp), "extra-ms")
	b.ReportMetric(ms(me), "runc-edited-ms")
	b.ReportMetric(ms(mw-me), "wrapper-ms")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestRealRuncAfterCreate: a create that names a --pid-file, as every
// engine's does, gets the GPUs' /dev links and the /proc/driver/nvidia view
// from the runtime once runc has created the container — no hook process,
// config.json without a createContainer hook — and the started container
// has them: the link in runc's /dev. (The view goes into the container's
// procfs, which shows /proc/driver/nvidia only on a host with the driver
// loaded: there the view is checked by scripts/check-real-host-containers.sh;
// here it is skipped, as the hook skips it.) When the work fails (a link
// below /dev/null), the create fails, saying so, and the container is gone.
func TestRealRuncAfterCreate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containers with runc")
	}
	script := strings.Join([]string{
		"echo \"link $(readlink /dev/dri/by-path/pci-0000:01:00.0-card)\"",
		"echo \"lib $(readlink /usr/lib/nctk/libfake.so.1)\"",
		"cat /usr/lib/nctk/libfake.so.1.2",
		"if (echo x > /usr/lib/nctk/libfake.so.1.2) 2>/dev/null; then echo WRITABLE; else echo ro-ok; fi",
		"grep -E ' /usr/lib/nctk/lib(fake.so.1.2|image) ' /proc/self/mountinfo | cut -d' ' -f6 | sed 's/^/mount /'",
	}, "\n")
	const link = "/dev/dri/by-path/pci-0000:01:00.0-card"
	for _, tt := range []struct {
		name     string
		link     string
		noPivot  bool // runc moves the root over / instead of pivot_root
		readOnly bool // root.readonly
		symlink  bool // the image has a symlink where the library is mounted
		wantErr  string
	}{
		{name: "links and mounts", link: link},
		{name: "no pivot_root", link: link, noPivot: true},
		{name: "read-only root", link: link, readOnly: true},
		// runc follows it (inside the root) and mounts over its target:
		// the mount stays runc's.
		{name: "a symlink at the mount point", link: link, symlink: true},
		{name: "work fails", link: "/dev/null/card", wantErr: "the container was deleted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newRealRunc(t, "/bin/sh", "-c", script)
			e2e.EditSpec(t, s.bundle, func(sp *specs.Spec) { sp.Root.Readonly = tt.readOnly })
			if tt.symlink {
				sp, err := e2e.ReadSpec(s.bundle)
				if err != nil {
					t.Fatal(err)
				}
				root := sp.Root.Path
				if !filepath.IsAbs(root) {
					root = filepath.Join(s.bundle, root)
				}
				dir := filepath.Join(root, "usr/lib/nctk")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("libimage", filepath.Join(dir, "libfake.so.1.2")); err != nil {
					t.Fatal(err)
				}
			}
			p := runcPlan(s.hostFile)
			p.Proc = &plan.ProcView{HostDir: e2e.FakeProcDriver(t, "0000:01:00.0", "0000:02:00.0"), Files: []string{"params", "version"}, GPUDirs: []string{"0000:01:00.0"}}
			p.DevSymlinks = []plan.Symlink{{Link: tt.link, Target: "../card1"}}
			data, _ := json.Marshal(p)
			if err := os.WriteFile(filepath.Join(filepath.Dir(s.hostFile), "plan.json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			id := "nctk-ac-" + filepath.Base(s.bundle)
			pidFile := filepath.Join(s.rt.Dir, id+".pid")
			args := []string{"create", "--bundle", s.bundle, "--pid-file", pidFile, id}
			if tt.noPivot {
				args = slices.Insert(args, 1, "--no-pivot")
			}
			res := s.rt.RuncOpts(e2e.RunOpts{OutputFile: s.rt.OutputPath(id)}, args...)
			if tt.wantErr != "" {
				if res.OK() || !strings.Contains(s.rt.Output(id), tt.wantErr) {
					t.Fatalf("create: %s\n%s\nwant a failure saying %q", res, s.rt.Output(id), tt.wantErr)
				}
				if st, err := s.rt.State(id); err == nil {
					t.Errorf("container left behind: %+v", st)
				}
				return
			}
			if !res.OK() {
				t.Fatalf("create: %s\n%s", res, s.rt.Output(id))
			}
			// The library's mount is the runtime's to make, not runc's
			// (unless runc must follow a symlink there).
			out := s.checkCreatedAndRun(t, id, tt.symlink)
			for _, want := range []string{"link ../card1\n", "lib libfake.so.1.2\n", "host driver file\n", "ro-ok\n", "mount ro,nosuid,nodev"} {
				if !strings.Contains(out, want) {
					t.Errorf("container output lacks %q:\n%s", want, out)
				}
			}
			if _, err := os.Stat(s.hookOut); err == nil {
				t.Error("a hook process ran")
			}
			// Made in the container's root, not the host's (which, without
			// pivot_root, is still the root of its mount namespace).
			for _, p := range []string{"/usr/lib/nctk", tt.link} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s exists on the host", p)
				}
			}
		})
	}
}

// TestRealRuncAppliedSpec: a config.json to which the engine applied a CDI
// spec (the CDI library's InjectDevices) whose hook is this installation's
// nvidia-cdi-hook, created through the runtime with a pid file as an
// engine does: the hook's link is made by the runtime (no hook process),
// and the spec's mount is made after the create when the runtime finds it
// in its spec directories, left to runc when it does not; the started
// container sees the library and the link either way.
func TestRealRuncAppliedSpec(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containers with runc")
	}
	script := strings.Join([]string{
		"echo \"lib $(readlink /usr/lib/nctk/libfake.so.1)\"",
		"cat /usr/lib/nctk/libfake.so.1.2",
		"grep ' /usr/lib/nctk/libfake.so.1.2 ' /proc/self/mountinfo | cut -d' ' -f6 | sed 's/^/mount /'",
	}, "\n")
	for _, known := range []bool{true, false} {
		t.Run(map[bool]string{true: "spec in the runtime's spec dirs", false: "spec elsewhere"}[known], func(t *testing.T) {
			s := newRealRunc(t, "/bin/sh", "-c", script)
			dir := filepath.Dir(s.hostFile)
			hook := filepath.Join(dir, hookargs.Binary)
			specDir := filepath.Join(dir, "cdi")
			args, _ := json.Marshal(hookargs.Command(hookargs.CreateSymlinks{Links: []hookargs.Link{{Target: "libfake.so.1.2", Path: "/usr/lib/nctk/libfake.so.1"}}}))
			mustWrite(t, filepath.Join(specDir, "nvidia.yaml"), fmt.Sprintf(`cdiVersion: 0.5.0
kind: nvidia.com/gpu
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
  mounts:
  - {hostPath: %s, containerPath: /usr/lib/nctk/libfake.so.1.2, options: [ro, nosuid, nodev, rbind, rprivate]}
  hooks:
  - {hookName: createContainer, path: %s, args: %s, env: [NVIDIA_CTK_DEBUG=false]}
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - {path: /dev/nctk-test0, hostPath: /dev/kmsg, type: c, major: 1, minor: 11}
`, s.hostFile, hook, args))
			cfg := fmt.Sprintf("[nvidia-container-runtime]\nruntimes = [%q]\n", e2e.RequireTool(t, "runc"))
			if known {
				cfg += fmt.Sprintf("\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [%q]\n", specDir)
			}
			mustWrite(t, filepath.Join(dir, "config.toml"), cfg)
			e2e.EditSpec(t, s.bundle, func(sp *specs.Spec) {
				sp.Process.Env = slices.DeleteFunc(sp.Process.Env, func(kv string) bool { return strings.HasPrefix(kv, "NVIDIA_VISIBLE_DEVICES=") })
				cache, err := cdi.NewCache(cdi.WithSpecDirs(specDir), cdi.WithAutoRefresh(false))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cache.InjectDevices(sp, "nvidia.com/gpu=0"); err != nil {
					t.Fatal(err)
				}
			})
			id := "nctk-applied-" + filepath.Base(s.bundle)
			pidFile := filepath.Join(s.rt.Dir, id+".pid")
			if res := s.rt.RuncOpts(e2e.RunOpts{OutputFile: s.rt.OutputPath(id)}, "create", "--bundle", s.bundle, "--pid-file", pidFile, id); !res.OK() {
				t.Fatalf("create: %s\n%s", res, s.rt.Output(id))
			}
			out := s.checkCreatedAndRun(t, id, !known)
			for _, want := range []string{"lib libfake.so.1.2\n", "host driver file\n", "mount ro,nosuid,nodev"} {
				if !strings.Contains(out, want) {
					t.Errorf("container output lacks %q:\n%s", want, out)
				}
			}
			if _, err := os.Stat(s.hookOut); err == nil {
				t.Error("a hook process ran")
			}
		})
	}
}

// checkCreatedAndRun checks the config.json of the created container id
// (no createContainer hook left; the library's mount in it only with
// mountInSpec, else the runtime makes it after the create), starts the
// container and returns its output once it stopped.
func (s *realRuncSetup) checkCreatedAndRun(t *testing.T, id string, mountInSpec bool) string {
	t.Helper()
	spec, err := e2e.ReadSpec(s.bundle)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Hooks != nil && len(spec.Hooks.CreateContainer) != 0 {
		t.Errorf("createContainer hooks %+v, want none", spec.Hooks.CreateContainer)
	}
	inSpec := slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == "/usr/lib/nctk/libfake.so.1.2" })
	if inSpec != mountInSpec {
		t.Errorf("the library's mount in config.json: %v, want %v", inSpec, mountInSpec)
	}
	if res := s.rt.Start(id); !res.OK() {
		t.Fatalf("start: %s", res)
	}
	if err := s.rt.WaitStopped(id, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	return s.rt.Output(id)
}
