package runtime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
)

// afterCreateHarness is a harness whose plan has work for after the create:
// a /proc/driver/nvidia view (of a fake host proc directory with two GPUs,
// one selected), a GPU's /dev/dri/by-path link and the library's mount (of
// a host file that exists).
func afterCreateHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	p := testPlan()
	p.Proc.HostDir = e2e.FakeProcDriver(t, "0000:01:00.0", "0000:02:00.0")
	p.Mounts[0].Source = filepath.Join(t.TempDir(), "libcuda.so.535.104.05")
	if err := os.WriteFile(p.Mounts[0].Source, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p.DevSymlinks = []plan.Symlink{{Link: "/dev/dri/by-path/pci-0000:01:00.0-card", Target: "../card1"}}
	h.rt.planner = preparerFunc(func(_ context.Context, in input) (*plan.Plan, error) { return p, nil })
	return h
}

type spawnCall struct {
	path string
	argv []string
}

// TestCreateAfterCreateWork: a create that names a --pid-file has the
// proc view done by the runtime after the low-level runtime's create (no
// hook in config.json; the create runs as a child); when that work fails,
// the container is deleted with the create's global flags and the error
// says so; a failed create is returned as its status, with nothing else run.
func TestCreateAfterCreateWork(t *testing.T) {
	tests := []struct {
		name       string
		status     int      // the create's exit status
		pid        string   // what the create writes to the pid file ("" nothing)
		wantCode   int      // the wrapper's
		wantErr    string   // in its stderr
		wantSpawns []string // the subcommands run
	}{
		{name: "create fails", status: 3, wantCode: 3, wantSpawns: []string{"create"}},
		{name: "no pid written", wantCode: 1, wantErr: "the container was deleted", wantSpawns: []string{"create", "delete"}},
		{name: "pid not a number", pid: "abc", wantCode: 1, wantErr: `"abc" is not a pid`, wantSpawns: []string{"create", "delete"}},
		{name: "pid of a process in our namespace", pid: "self", wantCode: 1, wantErr: "shares the runtime's mount namespace",
			wantSpawns: []string{"create", "delete"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := afterCreateHarness(t)
			bundle := writeBundle(t, gpuSpec)
			pidFile := filepath.Join(t.TempDir(), "init.pid")
			var calls []spawnCall
			h.rt.Start = fakeStart(func(path string, argv, env []string) (int, error) {
				calls = append(calls, spawnCall{path, argv})
				if slices.Contains(argv, "create") {
					pid := tt.pid
					if pid == "self" {
						pid = strconv.Itoa(os.Getpid())
					}
					if pid != "" {
						if err := os.WriteFile(pidFile, []byte(pid), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					return tt.status, nil
				}
				return 0, nil
			})
			code := h.run("--root", "/run/r", "--systemd-cgroup", "create", "--bundle", bundle, "--pid-file", pidFile, "ctr1")
			if code != tt.wantCode || !strings.Contains(h.stderr.String(), tt.wantErr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, h.stderr.String(), tt.wantCode, tt.wantErr)
			}
			if h.exec.called {
				t.Error("the low-level runtime was exec'ed: a create with a pid file runs it as a child")
			}
			var subs []string
			for _, c := range calls {
				if c.path != h.runc {
					t.Errorf("spawned %s, want %s", c.path, h.runc)
				}
				subs = append(subs, c.argv[4]) // after the runtime and its global flags
			}
			if !slices.Equal(subs, tt.wantSpawns) {
				t.Fatalf("spawned %q, want %q", subs, tt.wantSpawns)
			}
			if want := []string{h.runc, "--root", "/run/r", "--systemd-cgroup", "create", "--bundle", bundle, "--pid-file", pidFile, "ctr1"}; !slices.Equal(calls[0].argv, want) {
				t.Errorf("create argv %q, want %q", calls[0].argv, want)
			}
			if len(calls) > 1 {
				if want := []string{h.runc, "--root", "/run/r", "--systemd-cgroup", "delete", "--force", "ctr1"}; !slices.Equal(calls[1].argv, want) {
					t.Errorf("delete argv %q, want %q", calls[1].argv, want)
				}
			}
			// config.json: the devices, no mount (the runtime makes it),
			// no hook for the view or the /dev links (the runtime does
			// them).
			doc, err := ocispec.Load(filepath.Join(bundle, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			s := doc.Spec()
			if len(s.Linux.Devices) != 1 || len(s.Mounts) != 0 {
				t.Errorf("devices %+v, mounts %+v; want the device, no mount", s.Linux.Devices, s.Mounts)
			}
			if s.Hooks != nil && len(s.Hooks.CreateContainer) != 0 {
				t.Errorf("createContainer hooks %+v, want none", s.Hooks.CreateContainer)
			}
		})
	}
}

// TestCreateAfterCreatePrepareFails: the view's host side is prepared
// before anything is written: a selected GPU without its proc directory
// fails the create with config.json and the rootfs as they were.
func TestCreateAfterCreatePrepareFails(t *testing.T) {
	h := newHarness(t)
	p := testPlan()
	p.Proc.HostDir = e2e.FakeProcDriver(t, "0000:01:00.0", "0000:02:00.0")
	p.Proc.GPUDirs = []string{"0000:07:00.0"}
	h.rt.planner = preparerFunc(func(_ context.Context, in input) (*plan.Plan, error) { return p, nil })
	h.rt.Start = fakeStart(func(string, []string, []string) (int, error) {
		t.Error("the low-level runtime ran")
		return 0, nil
	})
	bundle := writeBundle(t, gpuSpec)
	code := h.run("create", "--bundle", bundle, "--pid-file", filepath.Join(bundle, "pid"), "ctr1")
	if code != 1 || !strings.Contains(h.stderr.String(), "GPU 0000:07:00.0") {
		t.Fatalf("exit %d, stderr %q", code, h.stderr.String())
	}
	if got := string(readFile(t, filepath.Join(bundle, "config.json"))); got != gpuSpec {
		t.Errorf("config.json changed:\n%s", got)
	}
	if entries, _ := os.ReadDir(filepath.Join(bundle, "rootfs")); len(entries) != 0 {
		t.Errorf("rootfs changed: %v", entries)
	}
}

// TestDevLinksUnderHostBind: a link below /dev that a host bind mount covers
// (a privileged container with the host's /dev, or /dev/dri) is made neither
// by a hook nor after the create: it would be made in the host's directory.
func TestDevLinksUnderHostBind(t *testing.T) {
	link := plan.Symlink{Link: "/dev/dri/by-path/pci-0000:01:00.0-card", Target: "../card1"}
	for _, tt := range []struct {
		name  string
		mount string // a bind mount's destination ("" none)
		want  bool   // a create-symlinks hook in config.json
	}{
		{"no bind", "", true},
		{"host /dev", "/dev", false},
		{"host /dev/dri", "/dev/dri", false},
		{"another directory", "/dev/shm", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			p := testPlan()
			p.Proc = nil
			p.DevSymlinks = []plan.Symlink{link}
			h.rt.planner = preparerFunc(func(_ context.Context, in input) (*plan.Plan, error) { return p, nil })
			spec := gpuSpec
			if tt.mount != "" {
				spec = strings.Replace(spec, `"root": {"path": "rootfs"},`,
					`"root": {"path": "rootfs"}, "mounts": [{"destination": "`+tt.mount+`", "type": "bind", "source": "`+tt.mount+`", "options": ["rbind"]}],`, 1)
			}
			bundle := writeBundle(t, spec)
			if code := h.run("create", "--bundle", bundle, "ctr1"); code != 0 {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			got := strings.Contains(string(readFile(t, filepath.Join(bundle, "config.json"))), hookargs.NameCreateSymlinks)
			if got != tt.want {
				t.Errorf("create-symlinks hook in config.json: %v, want %v", got, tt.want)
			}
		})
	}
	kept, n := devLinksOutsideBinds(hostBinds([]specs.Mount{{Destination: "/dev", Type: "bind", Source: "/dev"}}), []plan.Symlink{link})
	if len(kept) != 0 || n != 1 {
		t.Errorf("devLinksOutsideBinds: %v, %d", kept, n)
	}
}

// TestAfterCreateUnderMasks: where the spec masks or makes read-only a path
// the after-create work would touch (runc applies those after pivot_root,
// before that work), the work stays a hook, which runs before them as it
// did; the defaults engines set (Docker's, containerd's CRI's) do not.
func TestAfterCreateUnderMasks(t *testing.T) {
	dockerMasked := `"maskedPaths": ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"], "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]`
	for _, tt := range []struct {
		name  string
		linux string
		hook  bool // a mount-proc-driver hook in config.json (else after create)
	}{
		{"engine defaults", dockerMasked, false},
		{"view masked", `"maskedPaths": ["/proc/driver/nvidia"]`, true},
		{"a GPU directory masked", `"maskedPaths": ["/proc/driver/nvidia/gpus/0000:02:00.0"]`, true},
		{"/proc read-only", `"readonlyPaths": ["/proc"]`, true},
		{"a /dev link's directory masked", `"maskedPaths": ["/dev/dri"]`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := afterCreateHarness(t)
			spawned := false
			h.rt.Start = fakeStart(func(string, []string, []string) (int, error) { spawned = true; return 1, nil })
			h.rt.Early = func(string) bool { return false } // a create without work after it is exec'ed
			bundle := writeBundle(t, strings.Replace(gpuSpec, `"linux": {`, `"linux": {`+tt.linux+`, `, 1))
			h.run("create", "--bundle", bundle, "--pid-file", filepath.Join(bundle, "pid"), "ctr1")
			hook := strings.Contains(string(readFile(t, filepath.Join(bundle, "config.json"))), hookargs.NameMountProcDriver)
			if hook != tt.hook || spawned == tt.hook || h.exec.called != tt.hook {
				t.Errorf("hook %v, create as a child %v, exec %v; want the hook %v", hook, spawned, h.exec.called, tt.hook)
			}
		})
	}
}

// fakeStart is a Runtime.Start whose children run f when waited for (and
// not at all once killed).
func fakeStart(f func(path string, argv, env []string) (int, error)) func(string, []string, []string) (rtChild, error) {
	return func(path string, argv, env []string) (rtChild, error) {
		return &fakeChild{run: func() (int, error) { return f(path, argv, env) }}, nil
	}
}

type fakeChild struct {
	run    func() (int, error)
	killed bool
}

func (c *fakeChild) Wait() (int, error) {
	if c.killed {
		return 128 + 9, nil
	}
	return c.run()
}

func (c *fakeChild) Kill() { c.killed = true }
