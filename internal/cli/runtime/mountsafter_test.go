package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// TestMountsAfterCreate: which of a plan's mounts the runtime makes after
// the create, and in what order.
func TestMountsAfterCreate(t *testing.T) {
	ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	// The CDI mounts' sources exist (what is not stays with runc).
	h := t.TempDir()
	for _, d := range []string{"fw", "a"} {
		if err := os.MkdirAll(filepath.Join(h, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"libcuda.so.580.1", "nvidia-smi", "noopt", "z", "dev", "under-tmpfs", "d"} {
		if err := os.WriteFile(filepath.Join(h, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lib := plan.Mount{Source: h + "/libcuda.so.580.1", Destination: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.1", Kind: plan.KindFile, Options: ro}
	smi := plan.Mount{Source: h + "/nvidia-smi", Destination: "/usr/bin/nvidia-smi", Kind: plan.KindFile, Options: ro}
	sock := plan.Mount{Source: "/run/nvidia-persistenced/socket", Destination: "/run/nvidia-persistenced/socket", Kind: plan.KindSocket, Options: []string{"nosuid", "nodev", "noexec", "rbind", "rprivate"}}
	legacy := &plan.Plan{Mounts: []plan.Mount{lib, smi, sock}}
	cdiPlan := &plan.Plan{CDI: &cdispecs.ContainerEdits{Mounts: []*cdispecs.Mount{
		{HostPath: h + "/libcuda.so.580.1", ContainerPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.1", Options: ro},
		{HostPath: h + "/nvidia-smi", ContainerPath: "/usr/bin/nvidia-smi", Options: ro},
		{HostPath: h + "/fw", ContainerPath: "/lib/firmware/nvidia/580.1", Type: "bind", Options: []string{"ro"}},
		{HostPath: "tmpfs", ContainerPath: "/var/x", Type: "tmpfs"},
		{HostPath: h + "/noopt", ContainerPath: "/opt/noopt"},
		{HostPath: h + "/z", ContainerPath: "/opt/z", Options: []string{"ro", "bind", "z"}},
		{HostPath: "relative", ContainerPath: "/opt/rel", Options: []string{"bind"}},
		{HostPath: h + "/dev", ContainerPath: "/dev/nvidia-caps/x", Options: []string{"bind"}},
		{HostPath: h + "/under-tmpfs", ContainerPath: "/var/x/y", Options: []string{"bind"}},
	}}}
	engine := []specs.Mount{{Destination: "/proc", Type: "proc"}, {Destination: "/dev", Type: "tmpfs"}, {Destination: "/etc/hosts", Type: "bind", Source: "/h"}}
	on := injectMode{AfterCreate: true}
	docker := specs.Hook{Path: "/usr/bin/dockerd", Args: []string{"libnetwork-setkey", "-exec-root=/run/docker", "id", "key"}}
	for _, tt := range []struct {
		name   string
		spec   specs.Spec
		p      *plan.Plan
		masked []string
		hooks  []specs.Hook
		mode   injectMode
		want   []string
	}{
		{name: "legacy, in the plan's order", spec: specs.Spec{Mounts: engine}, p: legacy, mode: on,
			want: []string{lib.Destination, smi.Destination, sock.Destination}},
		{name: "not a create set up afterwards", p: legacy},
		{name: "read-only root (the mount points are made before)", spec: specs.Spec{Root: &specs.Root{Readonly: true}}, p: legacy, mode: on,
			want: []string{lib.Destination, smi.Destination, sock.Destination}},
		{name: "a mount point is a symlink in the image", p: legacy, mode: injectMode{AfterCreate: true, MountsStay: true}},
		{name: "user namespace", spec: specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.UserNamespace}}}}, p: legacy, mode: on},
		{name: "a hook runs during the create", p: legacy, hooks: []specs.Hook{{Path: "/usr/bin/nvidia-cdi-hook"}}, mode: on},
		{name: "docker's network hook", p: legacy, hooks: []specs.Hook{docker}, mode: on,
			want: []string{lib.Destination, smi.Destination, sock.Destination}},
		{name: "under an engine mount, a masked path", spec: specs.Spec{Mounts: []specs.Mount{{Destination: "/run", Type: "tmpfs"}}}, p: legacy, masked: []string{"/usr/bin"}, mode: on,
			want: []string{lib.Destination}},
		{name: "the engine's at the same place", spec: specs.Spec{Mounts: []specs.Mount{{Destination: "/usr/bin/nvidia-smi", Type: "bind", Source: "/x"}}}, p: legacy, mode: on,
			want: []string{lib.Destination, sock.Destination}},
		// CDI: binds only, sorted by depth as the CDI library sorts
		// them; not those with options rootfs does not know, a relative
		// source, below /dev, or below a mount that stays (the tmpfs).
		{name: "cdi", spec: specs.Spec{Mounts: engine}, p: cdiPlan, mode: on,
			want: []string{"/usr/bin/nvidia-smi", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.1", "/lib/firmware/nvidia/580.1"}},
		{name: "cdi, a deeper one first", p: &plan.Plan{CDI: &cdispecs.ContainerEdits{Mounts: []*cdispecs.Mount{
			{HostPath: h + "/a", ContainerPath: "/a/b/c", Options: []string{"bind"}}, {HostPath: h + "/d", ContainerPath: "/d", Options: []string{"rbind"}},
			{HostPath: h + "/missing", ContainerPath: "/m", Options: []string{"rbind"}}}}}, mode: on,
			want: []string{"/d", "/a/b/c"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			after, points := mountsAfterCreate(&tt.spec, tt.p, tt.masked, tt.hooks, tt.mode)
			dsts := mountPaths(points)
			if !slices.Equal(dsts, tt.want) {
				t.Fatalf("after the create %q, want %q", dsts, tt.want)
			}
			for i, m := range after {
				if m.Destination != dsts[i] {
					t.Errorf("mount %d at %s, destination %s", i, m.Destination, dsts[i])
				}
				if wantDir := strings.HasSuffix(m.Source, "/fw") || strings.HasSuffix(m.Source, "/a"); points[i].Dir != wantDir {
					t.Errorf("%s: a directory mount point %v, want %v", m.Destination, points[i].Dir, wantDir)
				}
				if tt.p.CDI != nil && m.Kind != rootfs.KindAny || tt.p.CDI == nil && m.Kind == rootfs.KindAny {
					t.Errorf("%s: kind %v", m.Destination, m.Kind)
				}
			}
		})
	}
}

// BenchmarkMountsAfterCreate: the choice for a CDI spec's 36 library mounts
// in a config.json with an engine's mounts and masked paths (per create).
func BenchmarkMountsAfterCreate(b *testing.B) {
	d := b.TempDir()
	e := &cdispecs.ContainerEdits{}
	for i := range 36 {
		e.Mounts = append(e.Mounts, &cdispecs.Mount{HostPath: d, ContainerPath: fmt.Sprintf("/usr/lib/x86_64-linux-gnu/libnvidia-x%d.so.580.1", i),
			Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}})
	}
	spec := &specs.Spec{}
	for _, m := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"} {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m})
	}
	masked := []string{"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
		"/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	p := &plan.Plan{CDI: e}
	b.ReportAllocs()
	for b.Loop() {
		if after, _ := mountsAfterCreate(spec, p, masked, nil, injectMode{AfterCreate: true}); len(after) != 36 {
			b.Fatalf("%d mounts after the create, want 36", len(after))
		}
	}
}
