package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// normalizeSpec reduces a CDI spec to the set of what it gives, one entry a
// line, sorted, with the driver root removed from every path: "node P" and
// "mount HOST -> CONTAINER" for the spec-level edits, "device NAME node P"
// for each device's nodes, and for hooks (spec-level "hook …", a device's
// "device NAME hook …") one "link TARGET::PATH" per create-symlinks link,
// "update-ldcache" (whose arguments differ by design: nctk's name the
// libraries), or the hook's name and arguments for any other. A chained hook
// (parts separated by ";") counts part by part, so that nctk's one chained
// hook and NVIDIA's separate hooks compare equal when they do the same.
func normalizeSpec(t *testing.T, data []byte, root string) []string {
	t.Helper()
	var spec specs.Spec
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatalf("parse spec: %v\n%s", err, data)
	}
	strip := func(s string) string { return strings.ReplaceAll(s, root, "") }
	hooks := func(hs []*specs.Hook) []string {
		var out []string
		for _, h := range hs {
			if len(h.Args) < 2 {
				continue
			}
			var parts [][]string
			cur := []string{}
			for _, a := range h.Args[1:] {
				if a == ";" {
					parts, cur = append(parts, cur), []string{}
					continue
				}
				cur = append(cur, strip(a))
			}
			for _, p := range append(parts, cur) {
				switch {
				case len(p) == 0:
				case p[0] == "create-symlinks":
					for i := 1; i < len(p); i++ {
						switch {
						case p[i] == "--link" && i+1 < len(p):
							out = append(out, "link "+p[i+1])
							i++
						case strings.HasPrefix(p[i], "--link="):
							out = append(out, "link "+strings.TrimPrefix(p[i], "--link="))
						}
					}
				case p[0] == "update-ldcache":
					out = append(out, p[0])
				default:
					out = append(out, strings.Join(p, " "))
				}
			}
		}
		return out
	}
	var lines []string
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			lines = append(lines, fmt.Sprintf("device %s node %s", d.Name, n.Path))
		}
		for _, h := range hooks(d.ContainerEdits.Hooks) {
			lines = append(lines, fmt.Sprintf("device %s hook %s", d.Name, h))
		}
	}
	for _, n := range spec.ContainerEdits.DeviceNodes {
		lines = append(lines, "node "+n.Path)
	}
	for _, m := range spec.ContainerEdits.Mounts {
		lines = append(lines, fmt.Sprintf("mount %s -> %s", strip(m.HostPath), m.ContainerPath))
	}
	for _, h := range hooks(spec.ContainerEdits.Hooks) {
		lines = append(lines, "hook "+h)
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// knownDifference is an entry NVIDIA 1.20's spec has and nctk's lacks
// (missing), or the reverse, with the reason (docs/cdi-generate.md lists
// them too).
type knownDifference struct {
	entry   string
	missing bool
	reason  string
}

// TestGenerateAgainstNVIDIA runs nctk's nvidia-ctk cdi generate on fixture
// roots and compares the normalized spec with what NVIDIA 1.20's wrote on
// the same roots (testdata/nvidia-1.20). Every difference must be a known
// one; a known one that no longer shows fails too, so that the list (and
// the docs) stay true.
func TestGenerateAgainstNVIDIA(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	const (
		reasonSONAME     = "nctk makes every library's SONAME link; NVIDIA leaves it to ldconfig when the library is not named by the driver version"
		reasonAbsLinks   = "NVIDIA resolves the driver root's absolute symlinks (Debian's alternatives) on the host, not in the root, and misses what they reach; nctk resolves them in the root"
		reasonNotCached  = "nctk finds driver libraries through ld.so.cache, as libnvidia-container; Debian's layout leaves these out of the cache (NVIDIA also takes every *.so.<version> next to libcuda)"
		reasonBinDir     = "nctk mounts driver tools at /usr/bin, where every image's PATH finds them"
		reasonGKETools   = "on GKE's layout /usr/bin holds shell wrappers: NVIDIA mounts those, nctk the programs they run (at /usr/bin)"
		reasonMPSDir     = "NVIDIA's locator matches regular files only, so its /tmp/nvidia-mps lookup never finds the directory"
		reasonNodesLevel = "nctk puts the driver-wide nodes in the spec-level edits, NVIDIA in the management device's; a container gets them either way"
		reasonLibList    = "NVIDIA's management spec takes every *.so.<version> next to libcuda; nctk takes NVIDIA's library list, where libnvidia-vulkan-producer comes with the graphics files, which the management spec leaves out"
	)
	soname := func(lib, file string) knownDifference {
		return knownDifference{entry: "hook link " + file + "::/usr/lib/x86_64-linux-gnu/" + lib, reason: reasonSONAME}
	}
	eglLinks := []knownDifference{
		soname("libnvidia-egl-gbm.so.1", "libnvidia-egl-gbm.so.1.1.0"),
		soname("libnvidia-egl-wayland.so.1", "libnvidia-egl-wayland.so.1.1.10"),
	}
	const cur = "/usr/lib/x86_64-linux-gnu/nvidia/current/"
	gkeTools := []knownDifference{{entry: "mount /tmp/nvidia-mps -> /tmp/nvidia-mps", reason: reasonMPSDir}}
	for _, b := range []string{"nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-debugdump", "nvidia-persistenced", "nvidia-smi"} {
		gkeTools = append(gkeTools,
			knownDifference{entry: "mount /usr/bin/" + b + " -> /usr/bin/" + b, missing: true, reason: reasonGKETools},
			knownDifference{entry: "mount /usr/local/nvidia/bin/" + b + " -> /usr/bin/" + b, reason: reasonGKETools})
	}
	var mgmtNodes []knownDifference
	for _, n := range []string{"/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"} {
		mgmtNodes = append(mgmtNodes,
			knownDifference{entry: "device all node " + n, missing: true, reason: reasonNodesLevel},
			knownDifference{entry: "node " + n, reason: reasonNodesLevel})
	}
	graphics := fixture.Spec{Layout: fixture.Multiarch, GPUs: 2, Graphics: true}
	for _, tc := range []struct {
		name  string
		spec  fixture.Spec
		args  []string
		known []knownDifference
	}{
		{"multiarch-graphics", graphics, nil, eglLinks},
		{"debian-graphics", fixture.Spec{Layout: fixture.Debian, GPUs: 2, Graphics: true}, nil, append([]knownDifference{
			{entry: "mount /etc/nvidia/current/nvidia-drm-outputclass.conf -> /usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf", reason: reasonAbsLinks},
			{entry: "mount /usr/lib/nvidia/current/nvidia_drv.so -> /usr/lib/xorg/modules/drivers/nvidia_drv.so", reason: reasonAbsLinks},
			{entry: "mount /usr/lib/nvidia/current/nvidia-debugdump -> /usr/bin/nvidia-debugdump", reason: reasonAbsLinks},
			{entry: "mount /usr/lib/nvidia/current/nvidia-smi -> /usr/bin/nvidia-smi", reason: reasonAbsLinks},
			{entry: "hook link libnvidia-cfg.so.535.261.03::" + cur + "libnvidia-cfg.so.1", missing: true, reason: reasonNotCached},
			{entry: "mount " + cur + "libnvidia-cfg.so.535.261.03 -> " + cur + "libnvidia-cfg.so.535.261.03", missing: true, reason: reasonNotCached},
			{entry: "hook link libvdpau_nvidia.so.535.261.03::" + cur + "libvdpau_nvidia.so.1", missing: true, reason: reasonNotCached},
			{entry: "mount " + cur + "libvdpau_nvidia.so.535.261.03 -> " + cur + "libvdpau_nvidia.so.535.261.03", missing: true, reason: reasonNotCached},
			{entry: "mount /usr/sbin/nvidia-cuda-mps-server -> /usr/sbin/nvidia-cuda-mps-server", missing: true, reason: reasonBinDir},
			{entry: "mount /usr/sbin/nvidia-cuda-mps-server -> /usr/bin/nvidia-cuda-mps-server", reason: reasonBinDir},
		}, eglLinks...)},
		{"multiarch-compute", fixture.Spec{Layout: fixture.Multiarch, GPUs: 2}, nil, nil},
		{"gke-compute", fixture.Spec{Layout: fixture.GKE, GPUs: 1, IPC: true, Firmware: true}, nil, gkeTools},
		{"multiarch-graphics-chmod", graphics, []string{"--enable-hook", "chmod"}, eglLinks},
		{"multiarch-graphics-management", graphics, []string{"--mode", "management", "--enable-hook", "chmod"}, append([]knownDifference{
			{entry: "mount /usr/lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so.535.261.03 -> /usr/lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so.535.261.03",
				missing: true, reason: reasonLibList}}, mgmtNodes...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var want []string
			for _, l := range strings.Split(string(readFile(t, filepath.Join("testdata", "nvidia-1.20", tc.name+".txt"))), "\n") {
				if l != "" && !strings.HasPrefix(l, "#") {
					want = append(want, l)
				}
			}
			r := fixture.Build(t, tc.spec)
			if !r.DeviceNodes {
				t.Skipf("no device nodes: %s", r.NoDeviceNodesReason)
			}
			res := e2e.MustRun(t, e2e.RunOpts{}, append([]string{tool(t, "nvidia-ctk"), "cdi", "generate", "--driver-root", r.Path}, tc.args...)...)
			got := normalizeSpec(t, []byte(res), r.Path)
			var diffs []knownDifference
			for _, w := range want {
				if _, found := slices.BinarySearch(got, w); !found {
					diffs = append(diffs, knownDifference{entry: w, missing: true})
				}
			}
			for _, g := range got {
				if _, found := slices.BinarySearch(want, g); !found {
					diffs = append(diffs, knownDifference{entry: g})
				}
			}
			known := func(d knownDifference) bool {
				return slices.ContainsFunc(tc.known, func(k knownDifference) bool { return k.entry == d.entry && k.missing == d.missing })
			}
			for _, d := range diffs {
				if !known(d) {
					what := "nctk has, NVIDIA has not"
					if d.missing {
						what = "NVIDIA has, nctk has not"
					}
					t.Errorf("unexplained difference (%s): %s", what, d.entry)
				}
			}
			for _, k := range tc.known {
				if !slices.ContainsFunc(diffs, func(d knownDifference) bool { return d.entry == k.entry && d.missing == k.missing }) {
					t.Errorf("known difference no longer there (update the list and docs/cdi-generate.md): %s (%s)", k.entry, k.reason)
				}
			}
			if t.Failed() {
				t.Logf("nctk's normalized spec:\n%s", strings.Join(got, "\n"))
			}
		})
	}
}
