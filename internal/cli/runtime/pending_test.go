package runtime

import (
	"reflect"
	"testing"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// TestPending: the plan's file mounts (with what discovery knows of them)
// and its symlinks, nothing else, are what the root will get.
func TestPending(t *testing.T) {
	lib := &ldcache.Library{SONAME: "libcuda.so.1", Flags: 0x303}
	p := &plan.Plan{
		Mounts: []plan.Mount{
			{Source: "/drv/libcuda.so.535.1", Destination: "/usr/lib64/libcuda.so.535.1", Kind: plan.KindFile, Library: lib},
			{Source: "/drv/nvidia-smi", Destination: "/usr/bin/nvidia-smi", Kind: plan.KindFile},
			{Source: "/run/nvidia-persistenced/socket", Destination: "/run/nvidia-persistenced/socket", Kind: plan.KindSocket},
			{Source: "/tmp/nvidia-mps", Destination: "/tmp/nvidia-mps", Kind: plan.KindDir},
		},
		Symlinks: []plan.Symlink{{Link: "/usr/lib64/libcuda.so.1", Target: "libcuda.so.535.1"}},
	}
	want := rootfs.Pending{
		Files: []rootfs.PendingFile{
			{Path: "/usr/lib64/libcuda.so.535.1", Source: "/drv/libcuda.so.535.1", Library: lib},
			{Path: "/usr/bin/nvidia-smi", Source: "/drv/nvidia-smi"},
		},
		Links: []rootfs.PendingLink{{Path: "/usr/lib64/libcuda.so.1", Target: "libcuda.so.535.1"}},
	}
	if got := pending(p); !reflect.DeepEqual(got, want) {
		t.Errorf("pending = %+v,\nwant %+v", got, want)
	}

	// CDI bind mounts, with what the resolved-spec cache knows of their
	// host files (plan.Plan.CDILibs).
	c := &plan.Plan{
		CDI: &cdispecs.ContainerEdits{Mounts: []*cdispecs.Mount{
			{HostPath: "/drv/libnvidia-ml.so.535.1", ContainerPath: "/usr/lib64/libnvidia-ml.so.535.1", Options: []string{"ro", "bind"}},
			{HostPath: "/drv/libcuda.so.535.1", ContainerPath: "/usr/lib64/libcuda.so.535.1", Type: "bind"},
			{HostPath: "tmpfs", ContainerPath: "/tmp", Type: "tmpfs"},
		}},
		CDILibs: map[string]ldcache.Library{"/drv/libcuda.so.535.1": *lib},
	}
	want = rootfs.Pending{Files: []rootfs.PendingFile{
		{Path: "/usr/lib64/libnvidia-ml.so.535.1", Source: "/drv/libnvidia-ml.so.535.1"},
		{Path: "/usr/lib64/libcuda.so.535.1", Source: "/drv/libcuda.so.535.1", Library: lib},
	}}
	if got := pending(c); !reflect.DeepEqual(got, want) {
		t.Errorf("CDI: pending = %+v,\nwant %+v", got, want)
	}
}

// debianTarget is the layout of Debian-family x86-64 images.
func debianTarget() plan.Target {
	return plan.Target{LibDir: "/usr/lib/x86_64-linux-gnu", Lib32Dir: "/usr/lib/i386-linux-gnu", BinDir: "/usr/bin"}
}

// TestPendingFromDiscovery: a plan built from discovery carries each
// library's SONAME and cache flags (Mount.Library, from the driver root's
// ld.so.cache), and rootfs.Root.PendingLibraryEntries of pending(p) uses
// them without opening the host files: the entries equal those read from
// the files, for every layout and with 32-bit libraries, also when the
// sources cannot be read.
func TestPendingFromDiscovery(t *testing.T) {
	for _, layout := range fixture.Layouts() {
		t.Run(string(layout), func(t *testing.T) {
			fx := fixture.Build(t, fixture.Spec{Layout: layout, GPUs: 1, Compat32: layout == fixture.Multiarch})
			drv, err := discover.Discover(discover.Options{Root: fx.Path})
			if err != nil {
				t.Fatal(err)
			}
			p, err := plan.Build(drv, plan.Options{Caps: caps.Full(), Target: debianTarget()})
			if err != nil {
				t.Fatal(err)
			}
			read := *p
			read.Mounts = nil
			unreadable := *p
			unreadable.Mounts = nil
			known := 0
			for _, m := range p.Mounts {
				if m.Library != nil {
					known++
				}
				r := m
				r.Library = nil
				read.Mounts = append(read.Mounts, r)
				u := m
				u.Source = "/nonexistent" + m.Source
				unreadable.Mounts = append(unreadable.Mounts, u)
			}
			if known == 0 {
				t.Fatal("no mount carries library facts from discovery")
			}
			r, err := rootfs.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			libs := p.LdcacheLibs()
			want, err := r.PendingLibraryEntries(pending(&read), libs)
			if err != nil {
				t.Fatal(err)
			}
			for name, q := range map[string]*plan.Plan{"from discovery": p, "sources unreadable": &unreadable} {
				got, err := r.PendingLibraryEntries(pending(q), libs)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: entries %+v,\nread from the files %+v", name, got, want)
				}
			}
		})
	}
}
