package configure

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/ocistate"
	"github.com/nctk/nctk/internal/plan"
)

// hookEnvVar makes the test binary a prestart hook that applies the plan
// in the named JSON file (see runAsHook).
const hookEnvVar = "NCTK_CONFIGURE_TEST_HOOK"

// hookJob is what the test hands the hook.
type hookJob struct {
	Plan    *plan.Plan
	Options Options
}

// runAsHook is the prestart hook: OCI state on stdin, Apply on the
// container, the error on stderr.
func runAsHook(jobFile string) int {
	data, err := os.ReadFile(jobFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var job hookJob
	if err := json.Unmarshal(data, &job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	in, _ := io.ReadAll(os.Stdin)
	st, err := ocistate.ParseState(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	doc, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var spec specs.Spec
	if err := json.Unmarshal(doc, &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := Apply(context.Background(), job.Plan, Container{PID: st.Pid, Rootfs: spec.Root.Path}, job.Options); err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-container-cli: %v\n", err)
		return 1
	}
	return 0
}

// TestRuncPrestart applies a plan from a real runc prestart hook: in the
// container's mount namespace before pivot_root, with runc's device cgroup
// (which denies /dev/fuse, our stand-in GPU node, until Apply allows it).
func TestRuncPrestart(t *testing.T) {
	e2e.RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse to stand in for a GPU node: %v", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/devices/devices.allow"); err != nil {
		t.Skipf("no cgroup v1 devices hierarchy: %v", err)
	}
	d := newDriver(t)
	self, err := os.Executable()
	must(t, err)
	libdir := "/usr/lib/x86_64-linux-gnu"
	ro := []string{plan.OptRO, plan.OptNoSuid, plan.OptNoDev, plan.OptRBind, plan.OptRPrivate}
	p := &plan.Plan{
		Devices: []plan.Device{{Path: "/dev/nvidia0", HostPath: "/dev/fuse", Major: 10, Minor: 229}},
		Mounts: []plan.Mount{
			{Source: d.lib, Destination: libdir + "/" + filepath.Base(d.lib), Kind: plan.KindFile, Options: ro},
			{Source: d.bin, Destination: "/usr/bin/nvidia-smi", Kind: plan.KindFile, Options: ro},
		},
		// The SONAME link and the development link, as plan.Build makes them.
		Symlinks: []plan.Symlink{
			{Link: libdir + "/" + d.soname, Target: filepath.Base(d.lib)},
			{Link: libdir + "/libz.so", Target: d.soname},
		},
		LdconfigDirs: []string{libdir},
	}
	script := "if (exec 3<>/dev/nvidia0) 2>&-; then echo DEVICE-OPEN; else echo DEVICE-DENIED; fi; " +
		"nvidia-smi; readlink " + libdir + "/libz.so; readlink " + libdir + "/" + d.soname + "; " +
		"if echo x > /usr/bin/nvidia-smi; then echo WRITABLE; else echo READONLY; fi"

	for _, tt := range []struct {
		name      string
		opts      Options
		wantLines []string
	}{
		{"cgroups", Options{}, []string{"DEVICE-OPEN", "fake nvidia-smi", d.soname, filepath.Base(d.lib), "READONLY"}},
		{"no-cgroups", Options{NoCgroups: true}, []string{"DEVICE-DENIED", "fake nvidia-smi", "READONLY"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := e2e.BuildRootfs(t, e2e.RootfsOptions{NoCudaprobe: true})
			job, err := json.Marshal(hookJob{Plan: p, Options: tt.opts})
			must(t, err)
			jobFile := filepath.Join(t.TempDir(), "job.json")
			must(t, os.WriteFile(jobFile, job, 0o644))
			bundle := e2e.MakeBundle(t, root, "/bin/sh", "-c", script)
			e2e.EditSpec(t, bundle, func(s *specs.Spec) {
				if s.Hooks == nil {
					s.Hooks = &specs.Hooks{}
				}
				//lint:ignore SA1019 prestart is where dockerd and NVIDIA put this hook
				s.Hooks.Prestart = append(s.Hooks.Prestart, specs.Hook{
					Path: self, Args: []string{"nvidia-container-runtime-hook", "prestart"},
					Env: []string{hookEnvVar + "=" + jobFile, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
				})
			})
			rc := e2e.NewRunc(t)
			res := rc.Run(bundle, "nctk-configure-"+filepath.Base(bundle))
			if !res.OK() {
				t.Fatalf("container failed: %s", res)
			}
			for _, w := range tt.wantLines {
				if !strings.Contains(res.Stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, res.Stdout)
				}
			}
			// Nothing was mounted in the host's namespace.
			if m := mountsUnder(t, "/proc/self/mountinfo", root); len(m) != 0 {
				t.Errorf("mounts in the host namespace: %v", m)
			}
		})
	}
}

// TestRuncPrestartFailure: a failing Apply makes runc refuse to start the
// container and reports NVIDIA's phase error.
func TestRuncPrestartFailure(t *testing.T) {
	e2e.RequireRoot(t)
	d := newDriver(t)
	self, err := os.Executable()
	must(t, err)
	p := &plan.Plan{Mounts: []plan.Mount{{Source: d.bin, Destination: "/usr/bin/nvidia-smi", Kind: plan.KindFile, Options: []string{plan.OptRO}}}}
	root := e2e.BuildRootfs(t, e2e.RootfsOptions{NoCudaprobe: true})
	must(t, os.Remove(root+"/usr/bin/ls"))
	must(t, os.Symlink("/etc/shadow", root+"/usr/bin/nvidia-smi"))
	job, _ := json.Marshal(hookJob{Plan: p})
	jobFile := filepath.Join(t.TempDir(), "job.json")
	must(t, os.WriteFile(jobFile, job, 0o644))
	bundle := e2e.MakeBundle(t, root, "/bin/true")
	e2e.EditSpec(t, bundle, func(s *specs.Spec) {
		//lint:ignore SA1019 prestart is where dockerd and NVIDIA put this hook
		s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{
			Path: self, Args: []string{"nvidia-container-runtime-hook", "prestart"},
			Env: []string{hookEnvVar + "=" + jobFile},
		}}}
	})
	rc := e2e.NewRunc(t)
	res := rc.Run(bundle, "nctk-configure-fail-"+filepath.Base(bundle))
	if res.OK() || !strings.Contains(res.Combined(), "mount error") || !strings.Contains(res.Combined(), "/usr/bin/nvidia-smi") {
		t.Errorf("want runc to fail with the mount error naming the path: %s", res)
	}
}
