package cdispec

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ocispec"
)

// specDir writes the synthetic driver's spec into a fresh directory.
func specDir(t *testing.T) string {
	t.Helper()
	d := synthDriver("/")
	spec, err := Render(d, selectAll(t, d), Options{Hook: ocispec.HookConfig{Path: "/usr/bin/nvidia-cdi-hook"}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := Marshal(spec, FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "nvidia.yaml"), data); err != nil {
		t.Fatal(err)
	}
	return dir
}

func baseSpec() *specs.Spec {
	return &specs.Spec{
		Version: "1.2.0",
		Process: &specs.Process{Args: []string{"sh"}, Env: []string{"PATH=/bin", "LD_PRELOAD=/evil.so"}},
		Root:    &specs.Root{Path: "rootfs"},
		Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux:   &specs.Linux{},
	}
}

// applyNames applies the CDI device names to s as an engine does: resolved
// by Resolve, applied by the CDI library's editor.
func applyNames(s *specs.Spec, names, dirs []string) error {
	e, _, err := ResolveCached(names, dirs, "")
	if err != nil {
		return err
	}
	return (&pkgcdi.ContainerEdits{ContainerEdits: e}).Apply(s)
}

func TestResolveApplied(t *testing.T) {
	dir := specDir(t)
	tests := []struct {
		name  string
		devs  []string
		nodes []string
	}{
		{name: "one GPU by index", devs: []string{"nvidia.com/gpu=0"},
			nodes: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia0"}},
		{name: "MIG device by UUID", devs: []string{"nvidia.com/gpu=" + migUUID1},
			nodes: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
				"/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"}},
		{name: "all", devs: []string{"nvidia.com/gpu=all"},
			nodes: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
				"/dev/nvidia0", "/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22",
				"/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := baseSpec()
			if err := applyNames(s, tt.devs, []string{dir}); err != nil {
				t.Fatal(err)
			}
			var nodes []string
			for _, d := range s.Linux.Devices {
				nodes = append(nodes, d.Path)
			}
			if !slices.Equal(nodes, tt.nodes) {
				t.Errorf("devices\n got %q\nwant %q", nodes, tt.nodes)
			}
			var rules int
			for _, r := range s.Linux.Resources.Devices {
				if r.Allow && r.Type == "c" && r.Access == "rw" {
					rules++
				}
			}
			if rules != len(tt.nodes) {
				t.Errorf("%d cgroup allow rules, want %d: %+v", rules, len(tt.nodes), s.Linux.Resources.Devices)
			}
			if !slices.Contains(s.Process.Env, VoidEnv) {
				t.Errorf("env %q lacks %s", s.Process.Env, VoidEnv)
			}
			if s.Hooks == nil || len(s.Hooks.CreateContainer) != 1 {
				t.Fatalf("hooks %+v, want 1 createContainer hook (the chain)", s.Hooks)
			}
			for _, h := range s.Hooks.CreateContainer {
				if slices.ContainsFunc(h.Env, func(e string) bool { return strings.HasPrefix(e, "LD_PRELOAD") }) {
					t.Errorf("hook %q inherits the container's env: %q", h.Args, h.Env)
				}
			}
			if !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/usr/bin/nvidia-smi" }) {
				t.Errorf("no nvidia-smi mount: %+v", s.Mounts)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	dir := specDir(t)
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "bad.yaml"), []byte("cdiVersion: 0.5.0\nkind: x.com/y\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		devs []string
		dirs []string
		want []string
	}{
		{name: "unknown device", devs: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=7"}, dirs: []string{dir},
			want: []string{"nvidia.com/gpu=7", dir}},
		{name: "unknown vendor, broken spec listed", devs: []string{"x.com/y=0"}, dirs: []string{dir, broken},
			want: []string{"x.com/y=0", broken, "bad.yaml"}},
		{name: "not qualified", devs: []string{"gpu0"}, dirs: []string{dir}, want: []string{`"gpu0"`}},
		{name: "missing dir", devs: []string{"nvidia.com/gpu=0"}, dirs: []string{filepath.Join(dir, "nope")},
			want: []string{"nvidia.com/gpu=0", "nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, err := ResolveCached(tt.devs, tt.dirs, "")
			if err == nil {
				t.Fatalf("no error, edits %+v", e)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	var ue *UnresolvedError
	if _, _, err := ResolveCached([]string{"nvidia.com/gpu=9", "nvidia.com/gpu=0", "nvidia.com/gpu=9"}, []string{dir}, ""); !errors.As(err, &ue) || !slices.Equal(ue.Devices, []string{"nvidia.com/gpu=9"}) {
		t.Errorf("Resolve error %v, want *UnresolvedError naming nvidia.com/gpu=9 once", err)
	}
	s := baseSpec()
	if err := applyNames(s, nil, []string{dir}); err != nil || !reflect.DeepEqual(s, baseSpec()) {
		t.Errorf("no names: %v, spec changed: %v", err, !reflect.DeepEqual(s, baseSpec()))
	}
}

func TestList(t *testing.T) {
	dir := specDir(t)
	if err := os.WriteFile(filepath.Join(dir, "zz-broken.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := List([]string{dir, filepath.Join(dir, "missing")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1:0", "nvidia.com/gpu=1:1", "nvidia.com/gpu=" + uuid0,
		"nvidia.com/gpu=" + migUUID0, "nvidia.com/gpu=" + migUUID1, "nvidia.com/gpu=all"}
	slices.Sort(want)
	if !slices.Equal(l.Devices, want) {
		t.Errorf("devices\n got %q\nwant %q", l.Devices, want)
	}
	if len(l.Errors) != 1 || !strings.Contains(l.Errors[0], "zz-broken.json") {
		t.Errorf("errors %q, want one naming zz-broken.json", l.Errors)
	}
}

// TestSpecFileRefused: a FIFO, a device or a huge file among the spec
// files is refused at once with an error naming it (the CDI library's own
// read would block on the FIFO and read the device without end).
func TestSpecFileRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(p string) error
		want error
	}{
		{"fifo.yaml", func(p string) error { return syscall.Mkfifo(p, 0o644) }, hostfile.ErrNotRegular},
		{"zero.json", func(p string) error { return os.Symlink("/dev/zero", p) }, hostfile.ErrNotRegular},
		{"huge.yaml", func(p string) error {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return err
			}
			return os.Truncate(p, 1<<30)
		}, hostfile.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := specDir(t)
			p := filepath.Join(dir, tc.name)
			if err := tc.make(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 2)
			go func() {
				_, _, err := ResolveCached([]string{"nvidia.com/gpu=0"}, []string{dir}, "")
				done <- err
				_, err = List([]string{dir})
				done <- err
			}()
			for range 2 {
				select {
				case err := <-done:
					if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), p) {
						t.Errorf("err %v, want %v naming %s", err, tc.want, p)
					}
				case <-time.After(time.Second):
					t.Fatal("still blocked after 1s")
				}
			}
		})
	}
}

func TestResolve(t *testing.T) {
	dir := specDir(t)
	e, _, err := ResolveCached([]string{"nvidia.com/gpu=0"}, []string{dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Env) != 2 || e.Env[0] != VoidEnv {
		t.Errorf("env %q, want %s and the libcuda dirs", e.Env, VoidEnv)
	}
	if len(e.DeviceNodes) != 5 || len(e.Hooks) != 1 || len(e.Mounts) != 10 {
		t.Errorf("edits: %d devices, %d hooks, %d mounts; want 5, 1, 10", len(e.DeviceNodes), len(e.Hooks), len(e.Mounts))
	}
	if _, _, err := ResolveCached([]string{"nvidia.com/gpu=9"}, []string{dir}, ""); err == nil {
		t.Error("unknown device: no error")
	}
}

// TestResolveVoidsRequest: applied, the edits make the request variable
// void (one entry), so that a legacy hook or the runtime's own path injects
// nothing more.
func TestResolveVoidsRequest(t *testing.T) {
	s := baseSpec()
	s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0")
	if err := applyNames(s, []string{"nvidia.com/gpu=0"}, []string{specDir(t)}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range s.Process.Env {
		if strings.HasPrefix(e, "NVIDIA_VISIBLE_DEVICES=") {
			got = append(got, e)
		}
	}
	if !slices.Equal(got, []string{VoidEnv}) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES entries %q, want only %s", got, VoidEnv)
	}
}
