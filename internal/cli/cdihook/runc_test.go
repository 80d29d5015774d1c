package cdihook

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/appprofile"
	"github.com/nctk/nctk/internal/cudacompat"
	"github.com/nctk/nctk/internal/cudacompat/compattest"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/e2e"
)

// TestRuncCreateContainerHooks runs the hooks the way a CDI spec makes a
// runtime run them: as createContainer hooks of a real runc container, in
// the container's mount namespace before pivot_root, with an explicit
// environment. The image is hostile: its libcuda.so and ld.so.cache are
// symlinks to host files. Also checks that an unknown hook name does not
// break the start.
func TestRuncCreateContainerHooks(t *testing.T) {
	e2e.RequireRoot(t)
	matches, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	if len(matches) == 0 {
		t.Skip("no host libz.so.1.* to stand in for a driver library")
	}
	lib := matches[0]
	root := e2e.BuildRootfs(t, e2e.RootfsOptions{NoCudaprobe: true})
	libdir := "/usr/lib/x86_64-linux-gnu"
	must(t, os.Symlink("/etc/passwd", root+libdir+"/libcuda.so"))
	must(t, os.Remove(root+"/etc/ld.so.cache"))
	must(t, os.Symlink("/etc/ld.so.cache", root+"/etc/ld.so.cache"))
	hostCache, _ := os.ReadFile("/etc/ld.so.cache")
	hostPasswd, _ := os.ReadFile("/etc/passwd")

	self, err := os.Executable()
	must(t, err)
	stdinRead := filepath.Join(t.TempDir(), "stdin-read")
	hookEnv := []string{"NCTK_CDIHOOK_TEST_MAIN=1", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_DEBUG=false", stdinLogEnv + "=" + stdinRead}
	hook := func(args ...string) specs.Hook {
		return specs.Hook{Path: self, Args: append([]string{"nvidia-cdi-hook"}, args...), Env: hookEnv}
	}
	drvDir := "/usr/local/nvidia/lib64"
	script := "readlink " + libdir + "/libcuda.so; ls " + drvDir + "; cat /etc/ld.so.conf.d/00-nctk.conf"
	bundle := e2e.MakeBundle(t, root, "/bin/sh", "-c", script)
	e2e.EditSpec(t, bundle, func(s *specs.Spec) {
		s.Process.Env = append(s.Process.Env, "LD_PRELOAD=/nonexistent/evil.so")
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: drvDir + "/" + filepath.Base(lib), Source: lib, Type: "bind",
			Options: []string{"rbind", "ro", "nosuid", "nodev", "rprivate"},
		})
		if s.Hooks == nil {
			s.Hooks = &specs.Hooks{}
		}
		s.Hooks.CreateContainer = append(s.Hooks.CreateContainer,
			hook("create-symlinks", "--link", "libcuda.so.1::"+libdir+"/libcuda.so"),
			hook("update-ldcache", "--folder", drvDir),
			hook("enable-cuda-compat", "--host-driver-version", "535.261.03"),
			hook("some-future-hook", "--flag", "x"),
			hook("disable-device-node-modification"),
			// A chain (nctk's spec layout) after the separate hooks.
			hook("create-symlinks", "--link", "libcuda.so.1::/usr/lib/libcuda.so", ";", "disable-device-node-modification"),
		)
	})
	rc := e2e.NewRunc(t)
	res := rc.Run(bundle, "nctk-cdihook-"+filepath.Base(bundle))
	if !res.OK() {
		t.Fatalf("container failed: %s", res)
	}
	// Under runc the hooks find the container root without the OCI state
	// (ocistate.RuncHookRoot), which runc's init delivers late.
	if read, err := os.ReadFile(stdinRead); err == nil {
		t.Errorf("hooks run by runc read the OCI state from stdin:\n%s", read)
	}
	out := strings.Fields(res.Stdout)
	want := []string{"libcuda.so.1", "libz.so.1", filepath.Base(lib)}
	for _, w := range want {
		if !strings.Contains(res.Stdout, w) {
			t.Errorf("container output lacks %q:\n%s", w, res.Stdout)
		}
	}
	if len(out) == 0 || out[0] != "libcuda.so.1" {
		t.Errorf("libcuda.so in the container -> %v, want libcuda.so.1", out)
	}
	if !strings.Contains(res.Stdout, drvDir) {
		t.Errorf("ld.so.conf drop-in missing in the container:\n%s", res.Stdout)
	}
	cache, _ := os.ReadFile(root + "/etc/ld.so.cache")
	if !strings.Contains(string(cache), drvDir+"/libz.so.1") {
		t.Error("the container's ld.so.cache lacks the injected library")
	}
	if now, _ := os.ReadFile("/etc/ld.so.cache"); !bytes.Equal(now, hostCache) {
		t.Error("the host's /etc/ld.so.cache changed")
	}
	if now, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(now, hostPasswd) {
		t.Error("the host's /etc/passwd changed")
	}
}

// TestRuncNVIDIASpecHooks runs the spec-level hooks of a CDI spec written by
// NVIDIA's tools (testdata/nvidia-1.20-hooks.yaml: separate hooks,
// update-ldcache --folder only, enable-cuda-compat and
// update-application-profile) unchanged, with
// nctk's nvidia-cdi-hook at their path, as createContainer hooks of a runc
// container: the links exist, ld.so.cache holds the library (the host
// ldconfig ran, confined), and the image without compat libraries or GPU
// nodes gets neither a compat drop-in nor an application profile.
//
// Under runc the first hook runs the five after it in its own process and
// masks their program in the container's mount namespace (hookbatch):
// one hook process, and the program as it was outside the container, also
// when the program is on a mount shared with the host (the container's
// copy of it is a slave, runc's default). Where the mask could reach other
// namespaces (that mount, and the container's root propagation shared)
// each entry is a process of its own; with another program's hook
// between the entries, those before it run on their own and the first
// after it takes on the rest. Entries written as `nvidia-ctk hook …`
// (NVIDIA's specs before 1.17) are taken on the same way. The container
// gets the same each time.
func TestRuncNVIDIASpecHooks(t *testing.T) {
	for _, tt := range []struct {
		name      string
		compatGPU bool
		variant   nvspecVariant
		processes int
	}{
		{"plain image", false, nvspecPlain, 1},
		{"compat libraries and GPU nodes", true, nvspecPlain, 1},
		{"program on a shared mount", false, nvspecSharedMount, 1},
		{"program on a shared mount, root propagation shared", false, nvspecSharedMount | nvspecRshared, 6},
		{"root propagation shared", false, nvspecRshared, 1},
		{"another hook between", true, nvspecForeign, 3},
		{"nvidia-ctk hook (NVIDIA's specs before 1.17)", true, nvspecCTK, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			runs := runNVIDIASpecHooks(t, tt.compatGPU, tt.variant)
			if len(runs) != tt.processes {
				t.Errorf("%d hook processes, want %d:\n%s", len(runs), tt.processes, strings.Join(runs, "\n"))
			}
		})
	}
}

// nvspecVariant is how runNVIDIASpecHooks changes the container.
type nvspecVariant int

const (
	nvspecPlain       nvspecVariant = 0
	nvspecRshared     nvspecVariant = 1 << iota // rootfsPropagation "rshared"
	nvspecSharedMount                           // the hook program on a tmpfs of its own, shared
	nvspecForeign                               // /bin/true as a hook after the second entry
	nvspecCTK                                   // each entry as `nvidia-ctk hook …`
)

// sharedCopy copies the program at self onto a tmpfs of its own in a
// shared peer group of this namespace, unmounted at the test's end, and
// returns its path there.
func sharedCopy(t *testing.T, self string) string {
	t.Helper()
	dir := t.TempDir()
	must(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	must(t, unix.Mount("", dir, "", unix.MS_SHARED, ""))
	data, err := os.ReadFile(self)
	must(t, err)
	p := filepath.Join(dir, "nvidia-cdi-hook")
	must(t, os.WriteFile(p, data, 0o755))
	return p
}

// runNVIDIASpecHooks is TestRuncNVIDIASpecHooks; with compatGPU the image
// has a CUDA compat libcuda newer than the spec's host driver (590 against
// 580.159.04, no ELF note: majors compared) and the container gets GPU
// nodes with minors 0 and 2: the compat directory is listed in
// ld.so.conf.d and the application profile names those GPUs. It returns
// the hook processes' arguments, one line each.
func runNVIDIASpecHooks(t *testing.T, compatGPU bool, variant nvspecVariant) []string {
	e2e.RequireRoot(t)
	matches, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	if len(matches) == 0 {
		t.Skip("no host libz.so.1.* to stand in for a driver library")
	}
	lib := matches[0]
	data, err := os.ReadFile("testdata/nvidia-1.20-hooks.yaml")
	must(t, err)
	var excerpt struct {
		Hooks []cdi.Hook `json:"hooks"`
	}
	must(t, yaml.Unmarshal(bytes.ReplaceAll(data, []byte("LIBZ"), []byte(filepath.Base(lib))), &excerpt))
	if len(excerpt.Hooks) != 6 {
		t.Fatalf("%d hooks in the excerpt, want 6", len(excerpt.Hooks))
	}
	self, err := os.Executable()
	must(t, err)
	if variant&nvspecSharedMount != 0 {
		self = sharedCopy(t, self)
	}
	stdinRead := filepath.Join(t.TempDir(), "stdin-read")
	runsLog := filepath.Join(t.TempDir(), "runs")
	root := e2e.BuildRootfs(t, e2e.RootfsOptions{NoCudaprobe: true})
	drvDir := "/usr/local/nvidia/lib64"
	if compatGPU {
		must(t, os.MkdirAll(root+"/usr/local/cuda/compat", 0o755))
		must(t, os.WriteFile(root+"/usr/local/cuda/compat/libcuda.so.590.44.01", compattest.NoteELF("", "", "", 4), 0o644))
	}
	bundle := e2e.MakeBundle(t, root, "/bin/sh", "-c", "readlink "+drvDir+"/libz.so; readlink "+drvDir+"/gbm/nvidia-drm_gbm.so")
	e2e.EditSpec(t, bundle, func(s *specs.Spec) {
		if compatGPU {
			for _, minor := range []int64{0, 2} {
				s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: "/dev/nvidia" + strconv.FormatInt(minor, 10), Type: "c", Major: 195, Minor: minor})
			}
		}
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: drvDir + "/" + filepath.Base(lib), Source: lib, Type: "bind",
			Options: []string{"rbind", "ro", "nosuid", "nodev", "rprivate"},
		})
		if s.Hooks == nil {
			s.Hooks = &specs.Hooks{}
		}
		for i, h := range excerpt.Hooks {
			if h.HookName != "createContainer" || h.Path != "/opt/a/nvidia-cdi-hook" {
				t.Fatalf("excerpt hook %+v", h)
			}
			// The spec's own args and env; the test binary stands in for
			// nctk's nvidia-cdi-hook at the spec's path.
			args := h.Args
			if variant&nvspecCTK != 0 {
				args = append([]string{"nvidia-ctk", "hook"}, args[1:]...)
			}
			s.Hooks.CreateContainer = append(s.Hooks.CreateContainer, specs.Hook{Path: self, Args: args,
				Env: append([]string{"NCTK_CDIHOOK_TEST_MAIN=1", stdinLogEnv + "=" + stdinRead, runsLogEnv + "=" + runsLog}, h.Env...)})
			if variant&nvspecForeign != 0 && i == 1 {
				s.Hooks.CreateContainer = append(s.Hooks.CreateContainer, specs.Hook{Path: "/bin/true", Args: []string{"true"}})
			}
		}
		if variant&nvspecRshared != 0 {
			s.Linux.RootfsPropagation = "rshared"
		}
	})
	res := e2e.NewRunc(t).Run(bundle, "nctk-nvspec-"+filepath.Base(bundle))
	if !res.OK() {
		t.Fatalf("container failed: %s", res)
	}
	// The mask stayed in the container's mount namespace: here the
	// program is still this test binary, and no mount is over it.
	if out, err := exec.Command(self, "-test.list", "^TestRuncNVIDIASpecHooks$").Output(); err != nil || !strings.Contains(string(out), "TestRuncNVIDIASpecHooks") {
		t.Errorf("the hook program outside the container: %q, %v", out, err)
	}
	if a, b := mountID(t, self), mountID(t, filepath.Dir(self)); a != b {
		t.Errorf("a mount over the hook program outside the container: mount %d, its directory's %d", a, b)
	}
	runs := strings.Split(strings.TrimSpace(string(readOrEmpty(runsLog))), "\n")
	if read, err := os.ReadFile(stdinRead); err == nil {
		t.Errorf("hooks run by runc read the OCI state from stdin:\n%s", read)
	}
	if got, want := strings.Fields(res.Stdout), []string{"libz.so.1", "../libnvidia-allocator.so.1"}; !slices.Equal(got, want) {
		t.Errorf("links in the container: %q, want %q", got, want)
	}
	cache, _ := os.ReadFile(root + "/etc/ld.so.cache")
	if !strings.Contains(string(cache), drvDir+"/libz.so.1") {
		t.Error("the container's ld.so.cache lacks the library (update-ldcache --folder)")
	}
	if !compatGPU {
		for _, p := range []string{cudacompat.Conf, appprofile.File} {
			if _, err := os.Lstat(root + p); err == nil {
				t.Errorf("%s written in an image without compat libraries or GPU nodes", p)
			}
		}
		return runs
	}
	if got, _ := os.ReadFile(root + cudacompat.Conf); string(got) != "/usr/local/cuda/compat\n" {
		t.Errorf("compat drop-in = %q", got)
	}
	if got, want := string(readOrEmpty(root+appprofile.File)), string(appprofile.Content(0x5)); got != want {
		t.Errorf("application profile = %q, want %q", got, want)
	}
	return runs
}

// mountID is the id of the mount p is on.
func mountID(t *testing.T, p string) uint64 {
	t.Helper()
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_MNT_ID, &stx); err != nil {
		t.Fatal(err)
	}
	return stx.Mnt_id
}

func readOrEmpty(p string) []byte {
	data, _ := os.ReadFile(p)
	return data
}

// TestRuncApplicationProfile runs update-application-profile as a
// createContainer hook of a runc container given GPU device nodes (minors
// 1 and 5): the container reads the profile that limits EGL to them.
func TestRuncApplicationProfile(t *testing.T) {
	e2e.RequireRoot(t)
	self, err := os.Executable()
	must(t, err)
	root := e2e.BuildRootfs(t, e2e.RootfsOptions{NoCudaprobe: true})
	bundle := e2e.MakeBundle(t, root, "/bin/cat", appprofile.File)
	e2e.EditSpec(t, bundle, func(s *specs.Spec) {
		for _, minor := range []int64{1, 5} {
			s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: "/dev/nvidia" + strconv.FormatInt(minor, 10), Type: "c", Major: 195, Minor: minor})
		}
		if s.Hooks == nil {
			s.Hooks = &specs.Hooks{}
		}
		s.Hooks.CreateContainer = append(s.Hooks.CreateContainer, specs.Hook{Path: self,
			Args: []string{"nvidia-cdi-hook", "update-application-profile"},
			Env:  []string{"NCTK_CDIHOOK_TEST_MAIN=1", "NVIDIA_CTK_DEBUG=false"}})
	})
	res := e2e.NewRunc(t).Run(bundle, "nctk-appprofile-"+filepath.Base(bundle))
	if !res.OK() {
		t.Fatalf("container failed: %s", res)
	}
	if want := string(appprofile.Content(0x22)); strings.TrimSpace(res.Stdout) != want {
		t.Errorf("profile in the container: %q, want %q", res.Stdout, want)
	}
}
