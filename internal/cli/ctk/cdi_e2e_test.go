package ctk

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/cdihook"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/rootfs"
)

// TestMain lets the test binary run as nvidia-cdi-hook (the hooks of a
// generated CDI spec, invoked by runc under that argv[0]) and as the
// confined-ldconfig child update-ldcache re-executes.
func TestMain(m *testing.M) {
	if rootfs.MaybeRunChild(os.Args) {
		return
	}
	if filepath.Base(os.Args[0]) == hookBinaryName {
		os.Exit(cdihook.Main(app.FromOS()))
	}
	os.Exit(m.Run())
}

// driverPackageRoot returns a driver root with the real libcuda and
// libnvidia-ml of the fetched Debian driver packages (`make fixtures`,
// scripts/fetch-driver-debs.sh) and the CUDA driver version they report.
func driverPackageRoot(t *testing.T) (root, cudaVersion string) {
	t.Helper()
	cache := os.Getenv("NCTK_CACHE")
	if cache == "" {
		cache = "/var/cache/nctk"
	}
	set := filepath.Join(cache, "pkgroot", "535-amd64")
	manifest, err := os.Open(filepath.Join(set, ".nctk-set"))
	if err != nil {
		t.Skipf("driver packages not fetched (%v): run make fixtures", err)
	}
	defer manifest.Close()
	var version string
	sc := bufio.NewScanner(manifest)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "driver_version="); ok {
			version = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "cuda_driver_version="); ok {
			cudaVersion = v
		}
	}
	if version == "" || cudaVersion == "" {
		t.Fatalf("%s/.nctk-set names no driver_version or cuda_driver_version", set)
	}
	found := map[string]string{}
	err = filepath.WalkDir(set, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, name := range []string{"libcuda", "libnvidia-ml"} {
			if d.Type().IsRegular() && d.Name() == name+".so."+version {
				found[name] = p
			}
		}
		return nil
	})
	if err != nil || len(found) != 2 {
		t.Fatalf("libcuda/libnvidia-ml %s in %s: found %v, %v", version, set, found, err)
	}
	return makeCDIRoot(t, version, func(name string) string { return found[name] }), cudaVersion
}

// TestE2EPodmanCDI generates a spec with nvidia-ctk for a driver root with
// the real libcuda and runs containers with podman 4.3 (CDI library v0.5,
// cdiVersion 0.5.0 at most) through it: --device nvidia.com/gpu=all gives
// the driver files, the ld.so.cache update (cudaprobe loads libcuda.so.1
// and reports the driver's CUDA version) and every device node;
// nvidia.com/gpu=1 gives only GPU 1's node.
func TestE2EPodmanCDI(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	root, cudaVersion := driverPackageRoot(t)

	// The hooks run this test binary as nvidia-cdi-hook.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	hook := filepath.Join(bin, hookBinaryName)
	if err := os.Symlink(exe, hook); err != nil {
		t.Fatal(err)
	}

	specDir := t.TempDir()
	out := filepath.Join(specDir, "nvidia.yaml")
	if _, stderr, code := cdiRun(t, nil, "cdi", "generate", "--driver-root", root, "--output", out, "--nvidia-cdi-hook-path", hook); code != 0 {
		t.Fatalf("nvidia-ctk cdi generate: exit %d: %s", code, stderr)
	}
	spec, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(spec), "---\ncdiVersion: \"0.5.0\"\n") {
		t.Fatalf("spec is not cdiVersion 0.5.0:\n%.300s", spec)
	}

	p := e2e.NewPodman(t, e2e.PodmanOptions{CDISpecDir: specDir})
	image := p.ImportImage(e2e.BuildRootfs(t, e2e.RootfsOptions{}), "nctk-e2e:cdi")

	r := p.Podman("run", "--rm", "--network=none", "--device", "nvidia.com/gpu=all", image, "sh", "-c",
		"ls /dev/nvidia* && echo --- && grep -e nvidia -e libcuda /proc/self/mountinfo; echo ---; cudaprobe; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES")
	if !r.OK() {
		t.Fatalf("podman run --device nvidia.com/gpu=all:\n%s\nspec:\n%s", r, spec)
	}
	t.Logf("container output:\n%s", r.Stdout)
	for _, want := range []string{
		"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm",
		" /usr/lib/x86_64-linux-gnu/libcuda.so.", " /usr/bin/nvidia-smi ro,nosuid,nodev",
		"libcuda: /usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"cuDriverGetVersion: " + cudaVersion,
		"NVIDIA_VISIBLE_DEVICES=void",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("container output lacks %q", want)
		}
	}

	r = p.Podman("run", "--rm", "--network=none", "--device", "nvidia.com/gpu=1", image, "sh", "-c", "ls /dev")
	if !r.OK() {
		t.Fatalf("podman run --device nvidia.com/gpu=1:\n%s", r)
	}
	var nodes []string
	for _, f := range strings.Fields(r.Stdout) {
		if strings.HasPrefix(f, "nvidia") {
			nodes = append(nodes, f)
		}
	}
	if want := []string{"nvidia-uvm", "nvidia-uvm-tools", "nvidia1", "nvidiactl"}; !slices.Equal(nodes, want) {
		t.Errorf("nvidia.com/gpu=1: /dev has %q, want GPU 1's node and the control nodes only", nodes)
	}

	// An unknown device is an error of the engine, naming it.
	r = p.Podman("run", "--rm", "--network=none", "--device", "nvidia.com/gpu=7", image, "true")
	if r.OK() || !strings.Contains(r.Combined(), "nvidia.com/gpu=7") {
		t.Errorf("nvidia.com/gpu=7: want a failure naming the device:\n%s", r)
	}
}
