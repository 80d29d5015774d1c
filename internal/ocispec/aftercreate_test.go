package ocispec

import (
	"encoding/json"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/cdiedit"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/plan"
)

// TestApplyMountsAfterCreate: the mounts named in MountsAfterCreate, the
// plan's and the CDI edits', are left out of config.json; every other
// mount, the engine's included, stays, in the order it would have had; a
// path that is not clean and absolute is refused.
func TestApplyMountsAfterCreate(t *testing.T) {
	cfg := `{"ociVersion":"1.2.0","process":{"cwd":"/","args":["sh"]},"root":{"path":"rootfs"},
	"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/etc/hosts","type":"bind","source":"/h","options":["rbind"]}]}`
	destinations := func(d *Doc) []string {
		var out []string
		for _, m := range d.Spec().Mounts {
			out = append(out, m.Destination)
		}
		return out
	}
	ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	cdiPlan := &plan.Plan{CDI: &cdispecs.ContainerEdits{Mounts: []*cdispecs.Mount{
		{HostPath: "/usr/lib/libcuda.so.580.1", ContainerPath: "/usr/lib/libcuda.so.580.1", Options: ro},
		{HostPath: "/usr/bin/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: ro},
		{HostPath: "tmpfs", ContainerPath: "/tmp/x", Type: "tmpfs"}}}}
	for _, tt := range []struct {
		name  string
		p     *plan.Plan
		after []string
		want  []string
	}{
		{"plan, none after", testPlan(), nil, []string{"/proc", "/etc/hosts", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1", "/usr/bin/nvidia-smi", "/run/nvidia-persistenced/socket"}},
		{"plan, two after", testPlan(), []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.535.1", "/run/nvidia-persistenced/socket"}, []string{"/proc", "/etc/hosts", "/usr/bin/nvidia-smi"}},
		// The CDI library sorts the mounts it adds (by depth); what stays
		// keeps the order it gave.
		{"cdi, none after", cdiPlan, nil, []string{"/proc", "/etc/hosts", "/tmp/x", "/usr/lib/libcuda.so.580.1", "/usr/bin/nvidia-smi"}},
		{"cdi, two after", cdiPlan, []string{"/usr/lib/libcuda.so.580.1", "/usr/bin/nvidia-smi"}, []string{"/proc", "/etc/hosts", "/tmp/x"}},
		{"cdi, one after", cdiPlan, []string{"/usr/lib/libcuda.so.580.1"}, []string{"/proc", "/etc/hosts", "/tmp/x", "/usr/bin/nvidia-smi"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := Parse("cfg", []byte(cfg))
			if err != nil {
				t.Fatal(err)
			}
			if err := Apply(doc, tt.p, HookConfig{Path: hookPath, RootfsDone: true, NoProcView: true, MountsAfterCreate: tt.after, EditCDI: cdiedit.Apply}); err != nil {
				t.Fatal(err)
			}
			if got := destinations(doc); !slices.Equal(got, tt.want) {
				t.Errorf("mounts %q, want %q", got, tt.want)
			}
		})
	}
	doc, err := Parse("cfg", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"usr/lib/x", "/usr//lib", "/usr/lib/"} {
		if err := Apply(doc, testPlan(), HookConfig{Path: hookPath, MountsAfterCreate: []string{bad}}); err == nil {
			t.Errorf("MountsAfterCreate %q accepted", bad)
		}
	}
}

// TestCreateHooks: the hooks the edited config.json runs during the create:
// the engine's (NVIDIA's legacy prestart hook and an earlier Apply's own
// removed), Apply's own, and the CDI edits' of the create stages only.
func TestCreateHooks(t *testing.T) {
	own := specs.Hook{Path: hookPath, Args: []string{hookargs.Binary, hookargs.NameCreateSymlinks, "--link", "a::/b"}, Env: hookargs.Env()}
	spec := &specs.Spec{Hooks: &specs.Hooks{
		//lint:ignore SA1019 engines still write prestart hooks.
		Prestart:        []specs.Hook{{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"nvidia-container-runtime-hook", "prestart"}}, {Path: "/usr/bin/dockerd", Args: []string{"libnetwork-setkey"}}},
		CreateRuntime:   []specs.Hook{{Path: "/bin/cr"}},
		CreateContainer: []specs.Hook{own, {Path: "/bin/cc"}},
		StartContainer:  []specs.Hook{{Path: "/bin/sc"}},
		Poststart:       []specs.Hook{{Path: "/bin/ps"}},
	}}
	p := &plan.Plan{DevSymlinks: []plan.Symlink{{Link: "/dev/dri/by-path/x", Target: "../card1"}}, CDI: &cdispecs.ContainerEdits{Hooks: []*cdispecs.Hook{
		{HookName: "createContainer", Path: "/cdi/cc"}, {HookName: "startContainer", Path: "/cdi/sc"}, {HookName: "poststop", Path: "/cdi/stop"}}}}
	paths := func(hs []specs.Hook) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.Path)
		}
		return out
	}
	for _, tt := range []struct {
		hc   HookConfig
		want []string
	}{
		{HookConfig{Path: hookPath, RootfsDone: true, NoProcView: true}, []string{"/usr/bin/dockerd", "/bin/cr", "/bin/cc", hookPath, "/cdi/cc"}},
		{HookConfig{Path: hookPath, RootfsDone: true, NoProcView: true, AfterCreate: true}, []string{"/usr/bin/dockerd", "/bin/cr", "/bin/cc", "/cdi/cc"}},
	} {
		if got := paths(CreateHooks(spec, p, tt.hc)); !slices.Equal(got, tt.want) {
			t.Errorf("AfterCreate %v: %q, want %q", tt.hc.AfterCreate, got, tt.want)
		}
	}
	// Applied: the edits' createContainer hooks are config.json's.
	if got, want := paths(CreateHooks(spec, p, HookConfig{Path: hookPath, RootfsDone: true, NoProcView: true, AfterCreate: true, Applied: true})),
		[]string{"/usr/bin/dockerd", "/bin/cr", "/cdi/cc"}; !slices.Equal(got, want) {
		t.Errorf("Applied: %q, want %q", got, want)
	}
	if got := CreateHooks(&specs.Spec{}, &plan.Plan{}, HookConfig{}); len(got) != 0 {
		t.Errorf("no hooks: %v", got)
	}
}

// TestApplyApplied: with edits the engine applied already, config.json's
// createContainer hooks become the edits' (the lifted one gone), an entry
// kept as it was with its unknown fields, and nothing else of the edits is
// applied again.
func TestApplyApplied(t *testing.T) {
	timeout := 5
	cfg := `{"ociVersion":"1.2.0","process":{"cwd":"/","args":["sh"]},"root":{"path":"rootfs"},
	"mounts":[{"destination":"/usr/lib/libcuda.so.1","type":"bind","source":"/h/libcuda.so.1","options":["ro","rbind"]}],
	"hooks":{"createContainer":[{"path":"/bin/engine","args":["engine"],"x-keep":1},
	  {"path":"/usr/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","create-symlinks"],"env":["NVIDIA_CTK_DEBUG=false"]}]}}`
	doc, err := Parse("cfg", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{CDI: &cdispecs.ContainerEdits{
		Hooks: []*cdispecs.Hook{{HookName: "createContainer", Path: "/bin/engine", Args: []string{"engine"}},
			// What stays of the spec's own hook: a new entry.
			{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"},
				Env: []string{"NVIDIA_CTK_DEBUG=false"}, Timeout: &timeout}},
		Mounts: []*cdispecs.Mount{{HostPath: "/h/libcuda.so.1", ContainerPath: "/usr/lib/libcuda.so.1", Options: []string{"ro", "rbind"}}}}}
	if err := Apply(doc, p, HookConfig{Path: hookPath, RootfsDone: true, NoProcView: true, Applied: true}); err != nil {
		t.Fatal(err)
	}
	got := generic(t, doc.data)
	cc := at(t, got, "hooks", "createContainer").([]any)
	if len(cc) != 2 || at(t, cc, 0, "x-keep") != json.Number("1") {
		t.Fatalf("createContainer hooks %v, want the engine's entry as it was and the hook that stays", cc)
	}
	if at(t, cc, 1, "path") != "/usr/bin/nvidia-cdi-hook" || at(t, cc, 1, "args", 1) != "update-ldcache" ||
		at(t, cc, 1, "env", 0) != "NVIDIA_CTK_DEBUG=false" || at(t, cc, 1, "timeout") != json.Number("5") {
		t.Errorf("the hook that stays: %v", cc[1])
	}
	if ms := at(t, got, "mounts").([]any); len(ms) != 1 {
		t.Errorf("mounts %v, want the one the engine applied", ms)
	}
}
