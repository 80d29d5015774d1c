package discover

import (
	"cmp"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/fixture"
)

// TestGraphicsFiles checks, on each 535 layout with Spec.Graphics, the
// graphics files discovery finds (in-root paths, container paths),
// against the files the fixture placed; and that a capability set without
// graphics or display looks for none.
func TestGraphicsFiles(t *testing.T) {
	want := map[fixture.Layout][][2]string{ // in-root path (resolved), container path ("" = the same)
		fixture.Multiarch: {
			{"/usr/lib/x86_64-linux-gnu/libnvidia-egl-gbm.so.1.1.0", ""},
			{"/usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.10", ""},
			{"/usr/lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so.535.261.03", ""},
			{"/usr/share/glvnd/egl_vendor.d/10_nvidia.json", ""},
			{"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json", ""},
			{"/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json", ""},
			{"/usr/share/nvidia/nvoptix.bin", ""},
			{"/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf", ""},
			{"/etc/OpenCL/vendors/nvidia.icd", ""},
			{"/usr/lib/xorg/modules/drivers/nvidia_drv.so", ""},
			{"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.535.261.03", ""},
			{"/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json"},
			{"/usr/share/vulkan/implicit_layer.d/nvidia_layers.json", "/etc/vulkan/implicit_layer.d/nvidia_layers.json"},
		},
		// Debian: the X.Org files through the alternatives (resolved in
		// the root), no nvoptix.bin in /usr/share, no versioned GLX module
		// in X.Org's module path.
		fixture.Debian: {
			{"/usr/lib/x86_64-linux-gnu/libnvidia-egl-gbm.so.1.1.0", ""},
			{"/usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.10", ""},
			{"/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-vulkan-producer.so.535.261.03", ""},
			{"/usr/share/glvnd/egl_vendor.d/10_nvidia.json", ""},
			{"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json", ""},
			{"/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json", ""},
			{"/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf", ""},
			{"/etc/OpenCL/vendors/nvidia.icd", ""},
			{"/usr/lib/xorg/modules/drivers/nvidia_drv.so", ""},
			{"/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json"},
			{"/usr/share/vulkan/implicit_layer.d/nvidia_layers.json", "/etc/vulkan/implicit_layer.d/nvidia_layers.json"},
		},
	}
	for _, l := range []fixture.Layout{fixture.Multiarch, fixture.Debian} {
		t.Run(string(l), func(t *testing.T) {
			r := fixture.Build(t, fixture.Spec{Layout: l, GPUs: 2, Graphics: true})
			d, err := Discover(Options{Root: r.Path})
			if err != nil {
				t.Fatal(err)
			}
			var got [][2]string
			for _, f := range d.Graphics {
				real, err := securejoin.SecureJoin(r.Path, f.Path)
				if err != nil || real != f.HostPath {
					t.Errorf("%s: host path %s, want %s (%v)", f.Path, f.HostPath, real, err)
				}
				got = append(got, [2]string{f.Path, f.Dest})
				isLib := slices.Contains([]string{"libnvidia-egl-gbm.so.1.1.0", "libnvidia-egl-wayland.so.1.1.10",
					"libnvidia-vulkan-producer.so.535.261.03"}, path.Base(f.Path))
				if f.Library != isLib {
					t.Errorf("%s: Library %v, want %v", f.Path, f.Library, isLib)
				}
			}
			if !slices.Equal(got, want[l]) {
				t.Errorf("graphics files\n got %q\nwant %q", got, want[l])
			}
			if gl := d.GraphicsFor(caps.Set{caps.Compute: true}); gl != nil {
				t.Errorf("compute selects graphics files: %v", gl)
			}
			if gl := d.GraphicsFor(caps.Set{caps.Display: true}); len(gl) != len(d.Graphics) {
				t.Errorf("display selects %d of %d graphics files", len(gl), len(d.Graphics))
			}
			dc, err := Discover(Options{Root: r.Path, Caps: caps.Set{caps.Compute: true}})
			if err != nil {
				t.Fatal(err)
			}
			if len(dc.Graphics) != 0 || len(dc.GPUs[0].DRMNodes) != 0 {
				t.Errorf("a compute-only discovery looked for graphics: %v %v", dc.Graphics, dc.GPUs[0].DRMNodes)
			}
		})
	}
}

// TestDRMNodes checks each GPU's DRM nodes and by-path links: its own only
// (never the BMC's card0), with the host's link targets.
func TestDRMNodes(t *testing.T) {
	r := fixture.Build(t, fixture.Spec{GPUs: 3, Graphics: true})
	if !r.DeviceNodes {
		t.Skipf("no device nodes: %s", r.NoDeviceNodesReason)
	}
	d, err := Discover(Options{Root: r.Path})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range d.GPUs {
		fg := r.GPUs[i]
		var nodes []string
		for _, n := range g.DRMNodes {
			nodes = append(nodes, n.Path)
			if n.Major != 226 || n.HostPath != r.HostPath(n.Path) || n.Mode != 0o660 {
				t.Errorf("GPU %d: node %+v", i, n)
			}
		}
		if want := []string{fg.DRMCard, fg.DRMRender}; !slices.Equal(nodes, want) {
			t.Errorf("GPU %d: DRM nodes %q, want %q", i, nodes, want)
		}
		pci := fg.PCIAddress
		wantLinks := []DRMLink{
			{Path: "/dev/dri/by-path/pci-" + pci + "-card", Target: "../" + path.Base(fg.DRMCard)},
			{Path: "/dev/dri/by-path/pci-" + pci + "-render", Target: "../" + path.Base(fg.DRMRender)},
		}
		if !slices.Equal(g.DRMLinks, wantLinks) {
			t.Errorf("GPU %d: links %+v, want %+v", i, g.DRMLinks, wantLinks)
		}
	}
}

// TestConfigSearchPaths: with Options.ConfigSearchPaths the configuration
// files come from those host directories (mounted at the same path, Vulkan's
// below /etc), and the root's own are not looked at; a Vulkan file the
// directories lack is still taken from the root itself (NVIDIA's fallback
// to {root}/vulkan).
func TestConfigSearchPaths(t *testing.T) {
	r := fixture.Build(t, fixture.Spec{GPUs: 1, Graphics: true})
	dir := t.TempDir()
	for _, f := range []string{"glvnd/egl_vendor.d/10_nvidia.json", "vulkan/icd.d/nvidia_icd.json"} {
		if err := os.MkdirAll(path.Dir(path.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path.Join(dir, f), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(r.HostPath("/vulkan/implicit_layer.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.HostPath("/vulkan/implicit_layer.d/nvidia_layers.json"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Discover(Options{Root: r.Path, ConfigSearchPaths: []string{"/nonexistent", dir}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range d.Graphics {
		if !f.Library && !strings.HasPrefix(f.Path, "/usr/lib/xorg/") {
			got = append(got, f.HostPath+" -> "+cmp.Or(f.Dest, f.Path))
		}
	}
	want := []string{
		dir + "/glvnd/egl_vendor.d/10_nvidia.json -> " + dir + "/glvnd/egl_vendor.d/10_nvidia.json",
		dir + "/vulkan/icd.d/nvidia_icd.json -> /etc/vulkan/icd.d/nvidia_icd.json",
		r.HostPath("/vulkan/implicit_layer.d/nvidia_layers.json") + " -> /etc/vulkan/implicit_layer.d/nvidia_layers.json",
	}
	if !slices.Equal(got, want) {
		t.Errorf("configuration files\n got %q\nwant %q", got, want)
	}
}
