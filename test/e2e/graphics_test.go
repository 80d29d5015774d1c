package e2e

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/appprofile"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// graphicsScript lists what a container got of the graphics stack: each
// /dev/dri node and by-path link, and the md5 of each file named (read
// through the container's own paths, links followed).
func graphicsScript(files []string) string {
	return `for p in /dev/dri/* /dev/dri/by-path/*; do
	if [ -L "$p" ]; then echo "link $p $(readlink "$p")"; elif [ -c "$p" ]; then echo "node $p"; fi
done
for f in ` + strings.Join(files, " ") + `; do
	if [ -r "$f" ]; then echo "file $f $(md5sum < "$f" | cut -d' ' -f1)"; fi
done
if [ -r ` + appprofile.File + ` ]; then echo "profile $(cat ` + appprofile.File + `)"; fi
echo graphics-probe-done
`
}

// TestRuncGraphics runs containers asking for GPU 1 with graphics and
// display through nvidia-container-runtime (legacy mode, and CDI mode with
// the spec nvidia-ctk cdi generate wrote) over a 3-GPU graphics-capable
// fixture driver, and with plain runc and the prestart hook docker --gpus
// adds (nvidia-container-cli configure): each gets the Vulkan ICD and layer files below /etc, the
// EGL vendor and platform files, the OpenCL vendor file, the X.Org driver,
// the GBM link (with compute), with the host files' content, and /dev/dri with GPU 1's
// card and render nodes and their by-path links only; a compute container
// gets none of it.
func TestRuncGraphics(t *testing.T) {
	f := newRuncFixture(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 3, Graphics: true}, e2e.RootfsOptions{})
	if !f.host.Root.DeviceNodes {
		t.Skipf("no device nodes: %s", f.host.Root.NoDeviceNodesReason)
	}
	r := f.host.Root
	libDir := e2e.LayoutDebian.LibDir()
	// container path -> host file (in-root path)
	files := map[string]string{
		"/etc/vulkan/icd.d/nvidia_icd.json":                             "/usr/share/vulkan/icd.d/nvidia_icd.json",
		"/etc/vulkan/implicit_layer.d/nvidia_layers.json":               "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
		"/usr/share/glvnd/egl_vendor.d/10_nvidia.json":                  "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
		"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json":     "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
		"/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json": "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
		"/etc/OpenCL/vendors/nvidia.icd":                                "/etc/OpenCL/vendors/nvidia.icd",
		"/usr/lib/xorg/modules/drivers/nvidia_drv.so":                   "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
		"/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf":        "/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf",
		libDir + "/gbm/nvidia-drm_gbm.so":                               "/usr/lib/x86_64-linux-gnu/libnvidia-allocator.so." + r.LibVersion,
		libDir + "/libnvidia-egl-gbm.so.1":                              "/usr/lib/x86_64-linux-gnu/libnvidia-egl-gbm.so.1.1.0",
	}
	var names []string
	for c := range files {
		names = append(names, c)
	}
	slices.Sort(names)
	var want []string
	for _, c := range names {
		sum := md5.Sum(readFile(t, r.HostPath(files[c])))
		want = append(want, fmt.Sprintf("file %s %s", c, hex.EncodeToString(sum[:])))
	}
	g := r.GPUs[1]
	want = append(want, "node "+g.DRMCard, "node "+g.DRMRender,
		fmt.Sprintf("link /dev/dri/by-path/pci-%s-card ../%s", g.PCIAddress, path.Base(g.DRMCard)),
		fmt.Sprintf("link /dev/dri/by-path/pci-%s-render ../%s", g.PCIAddress, path.Base(g.DRMRender)))
	slices.Sort(want)
	// The GBM link points to libnvidia-allocator, a compute library: a
	// container without compute gets no link (NVIDIA's would dangle).
	gbm := "file " + libDir + "/gbm/nvidia-drm_gbm.so "
	noGBM := slices.DeleteFunc(slices.Clone(want), func(l string) bool { return strings.HasPrefix(l, gbm) })
	if len(noGBM) != len(want)-1 {
		t.Fatalf("want has no %s line: %q", gbm, want)
	}
	specDir := engCDISpec(t, f.host)
	withProfile := append(slices.Clone(want), "profile "+string(appprofile.Content(1<<g.Minor)))
	slices.Sort(withProfile)

	for _, tc := range []struct {
		name string
		env  []string
		want []string
		hook bool // plain runc with docker --gpus's prestart hook (nvidia-container-cli configure)
		// created: create with a --pid-file, then start, as engines do: the
		// runtime makes the /dev/dri/by-path links in the created container
		// itself (internal/aftercreate) instead of a hook.
		created bool
	}{
		{"legacy/graphics,display", []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=graphics,display"}, noGBM, false, false},
		{"legacy/all", []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=all"}, want, false, false},
		// The spec's update-application-profile: EGL limited to GPU 1
		// (written by the runtime, or by the hook on a host with a
		// loaded driver).
		{"cdi/nvidia.com/gpu=1", []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"}, withProfile, false, false},
		{"legacy/compute", []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}, nil, false, false},
		{"prestart-hook/graphics,display", []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=graphics,display"}, noGBM, true, false},
		{"created/legacy/all", []string{"NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=all"}, want, false, true},
		{"created/cdi/nvidia.com/gpu=1", []string{"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"}, withProfile, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rootfs := copyRootfs(t, f.image)
			bundle := e2e.MakeBundle(t, rootfs, "/bin/sh", "-c", graphicsScript(names))
			e2e.EditSpec(t, bundle, func(s *specs.Spec) {
				s.Process.Env = append(s.Process.Env, tc.env...)
				if tc.hook {
					if s.Hooks == nil {
						s.Hooks = &specs.Hooks{}
					}
					//lint:ignore SA1019 prestart is where dockerd puts this hook
					s.Hooks.Prestart = append(s.Hooks.Prestart, specs.Hook{Path: tool(t, "nvidia-container-runtime-hook"),
						Args: []string{"nvidia-container-runtime-hook", "-config", f.host.Config, "prestart"},
						Env:  []string{"PATH=" + filepath.Dir(tool(t, "nvidia-container-cli")) + ":" + e2e.SystemPath}})
				}
			})
			bin := tool(t, "nvidia-container-runtime")
			if tc.hook {
				bin = e2e.RequireTool(t, "runc")
			}
			rt := e2e.NewRuntime(t, bin)
			rt.Env = append(rt.Env, f.host.Env...)
			id := "nctk-" + filepath.Base(bundle)
			var out string
			if tc.created {
				res := rt.RuncOpts(e2e.RunOpts{OutputFile: rt.OutputPath(id)}, "create", "--bundle", bundle, "--pid-file", filepath.Join(rt.Dir, id+".pid"), id)
				if !res.OK() {
					t.Fatalf("nvidia-container-runtime create (CDI specs in %s): %s\n%s", specDir, res, rt.Output(id))
				}
				if s, err := e2e.ReadSpec(bundle); err != nil || (s.Hooks != nil && len(s.Hooks.CreateContainer) != 0) {
					t.Errorf("createContainer hooks after a create with a pid file: %v %+v", err, s.Hooks)
				}
				if res := rt.Start(id); !res.OK() {
					t.Fatalf("start: %s", res)
				}
				if err := rt.WaitStopped(id, time.Minute); err != nil {
					t.Fatal(err)
				}
				out = rt.Output(id)
			} else {
				res := rt.Run(bundle, id)
				if !res.OK() {
					t.Fatalf("nvidia-container-runtime run (CDI specs in %s): %s", specDir, res)
				}
				out = res.Combined()
			}
			if !strings.Contains(out, "graphics-probe-done") {
				t.Fatalf("the probe did not finish:\n%s", out)
			}
			var got []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "node ") || strings.HasPrefix(l, "link ") || strings.HasPrefix(l, "file ") || strings.HasPrefix(l, "profile ") {
					got = append(got, strings.TrimSpace(l))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("the container got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}
