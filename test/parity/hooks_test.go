package parity

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/nctk/nctk/internal/hookargs"
)

// hookCase is one container: the image's root (build) and the hook calls
// a CDI spec makes on it, each its own process as an engine runs them.
type hookCase struct {
	name  string
	build func(t *testing.T, root string)
	steps [][]string // the hook command lines after the program name
	// nctk, when set, turns NVIDIA's result (normalized) into nctk's: a
	// difference kept on purpose, explained where it is set and in
	// docs/nvidia-parity.md.
	nctk func(nvidia string) string
	// inNS, when set, is a shell script run in the hook's mount namespace
	// before each hook call ($ROOT is the container root), and observe
	// one run after it whose output is recorded ($OUT names its file):
	// for what a hook mounts, which lives only in that namespace.
	inNS, observe string
}

// The hosts's driver in these cases: version and library directory.
const (
	hostDriver = "580.159.04"
	driverDir  = "/usr/local/nvidia/lib64"
)

// fwdCompat is the CUDA forward-compatibility note NVIDIA's compat
// libcuda carries: the host driver branches it runs on.
const fwdCompat = `{"Format":1,"CUDA Version":"13.0","Driver":[535,550,570,580],"Device":[]}`

func hookCases(t *testing.T) []hookCase {
	debian := func(t *testing.T, root string) {
		write(t, root, "/etc/debian_version", "12.8\n", 0o644)
		write(t, root, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n", 0o644)
		write(t, root, "/etc/ld.so.conf.d/x86_64-linux-gnu.conf", "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n", 0o644)
		lib(t, root, "/usr/lib/x86_64-linux-gnu/libimage.so.3.0.1", "libimage.so.3", "")
	}
	driver := func(t *testing.T, root string) {
		lib(t, root, driverDir+"/libcuda.so."+hostDriver, "libcuda.so.1", "")
		lib(t, root, driverDir+"/libnvidia-ml.so."+hostDriver, "libnvidia-ml.so.1", "")
		lib(t, root, driverDir+"/libnvidia-ptxjitcompiler.so."+hostDriver, "libnvidia-ptxjitcompiler.so.1", "")
	}
	compat := func(version, note string) func(*testing.T, string) {
		return func(t *testing.T, root string) {
			debian(t, root)
			driver(t, root)
			lib(t, root, "/usr/local/cuda/compat/libcuda.so."+version, "libcuda.so.1", note)
			symlink(t, root, "libcuda.so."+version, "/usr/local/cuda/compat/libcuda.so.1")
			lib(t, root, "/usr/local/cuda/compat/libnvidia-ptxjitcompiler.so."+version, "libnvidia-ptxjitcompiler.so.1", "")
		}
	}
	ldcache := []string{"update-ldcache", "--folder", driverDir}
	enableCompat := []string{"enable-cuda-compat", "--host-driver-version=" + hostDriver}
	return []hookCase{
		{name: "create-symlinks-new", build: debian, steps: [][]string{{"create-symlinks",
			"--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
			"--link", "../libnvidia-allocator.so.1::" + driverDir + "/gbm/nvidia-drm_gbm.so",
			"--link", "/usr/local/nvidia/lib64/libnvidia-ml.so.1::/usr/lib/x86_64-linux-gnu/libnvidia-ml.so",
		}}},
		{name: "create-symlinks-existing", build: func(t *testing.T, root string) {
			debian(t, root)
			symlink(t, root, "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so")
			symlink(t, root, "libold.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so")
			write(t, root, "/usr/lib/x86_64-linux-gnu/libnvcuvid.so", "a file the image ships\n", 0o644)
			symlink(t, root, "/nonexistent", "/usr/lib/x86_64-linux-gnu/libnvidia-encode.so")
		}, steps: [][]string{{"create-symlinks",
			"--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
			"--link", "libnvidia-ml.so.1::/usr/lib/x86_64-linux-gnu/libnvidia-ml.so",
			"--link", "libnvcuvid.so.1::/usr/lib/x86_64-linux-gnu/libnvcuvid.so,libnvidia-encode.so.1::/usr/lib/x86_64-linux-gnu/libnvidia-encode.so",
			"--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
		}}},
		{name: "create-symlinks-directory-at-link", build: func(t *testing.T, root string) {
			debian(t, root)
			mkdir(t, root, "/usr/lib/x86_64-linux-gnu/libcuda.so/sub")
		}, steps: [][]string{{"create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"}}},
		{name: "create-symlinks-through-image-link", build: func(t *testing.T, root string) {
			mkdir(t, root, "/usr/lib")
			symlink(t, root, "/usr/lib", "/usr/lib64")
			symlink(t, root, "../../..", "/usr/lib/up")
		}, steps: [][]string{{"create-symlinks",
			"--link", "libcuda.so.1::/usr/lib64/libcuda.so",
			"--link", "libnvidia-ml.so.1::/usr/lib/up/up/libnvidia-ml.so",
		}}},
		{name: "update-ldcache-debian", build: func(t *testing.T, root string) {
			debian(t, root)
			driver(t, root)
		}, steps: [][]string{ldcache}},
		{name: "update-ldcache-no-etc", build: func(t *testing.T, root string) {
			driver(t, root)
			lib(t, root, "/usr/lib64/libimage.so.3.0.1", "libimage.so.3", "")
		}, steps: [][]string{ldcache},
			// NVIDIA's hook fails the container start of an image without
			// /etc (it cannot create /etc/ld.so.conf); nctk creates /etc
			// and gives the result of update-ldcache-no-ld-so-conf.
			nctk: func(string) string { return mustRead("hooks/update-ldcache-no-ld-so-conf.txt", knownHookDifferences) }},
		{name: "update-ldcache-no-ld-so-conf", build: func(t *testing.T, root string) {
			mkdir(t, root, "/etc")
			driver(t, root)
			lib(t, root, "/usr/lib64/libimage.so.3.0.1", "libimage.so.3", "")
		}, steps: [][]string{ldcache}},
		{name: "update-ldcache-folder-listed", build: func(t *testing.T, root string) {
			debian(t, root)
			driver(t, root)
			write(t, root, "/etc/ld.so.conf.d/nvidia.conf", driverDir+"\n", 0o644)
		}, steps: [][]string{ldcache},
			// NVIDIA leaves out of its drop-in the folders the image's
			// configuration lists already (here all: no drop-in); nctk's
			// lists them again (the cache is the same).
			nctk: func(s string) string {
				return strings.Replace(s, "/etc/ld.so.conf.d dir 0755\n",
					"/etc/ld.so.conf.d dir 0755\n/etc/ld.so.conf.d/<update-ldcache folders> file 0644 \""+driverDir+"\\n\"\n", 1)
			}},
		{name: "update-ldcache-folders", build: func(t *testing.T, root string) {
			debian(t, root)
			driver(t, root)
			lib(t, root, "/usr/local/nvidia/lib/libcuda.so."+hostDriver, "libcuda.so.1", "")
			lib(t, root, "/opt/extra/libextra.so.1.0", "libextra.so.1", "")
		}, steps: [][]string{{"update-ldcache", "--folder", driverDir + ",/opt/extra", "--folder", "/usr/local/nvidia/lib"}}},
		{name: "update-ldcache-ldconfig-path", build: func(t *testing.T, root string) {
			debian(t, root)
			driver(t, root)
		}, steps: [][]string{{"update-ldcache", "--ldconfig-path", "/sbin/ldconfig", "--folder", driverDir}}},
		{name: "update-ldcache-ldconfig-missing", build: func(t *testing.T, root string) {
			debian(t, root)
			driver(t, root)
		}, steps: [][]string{{"update-ldcache", "--ldconfig-path=/nonexistent/ldconfig", "--folder", driverDir}}},
		{name: "update-ldcache-no-folder", build: func(t *testing.T, root string) {
			debian(t, root)
			driver(t, root)
		}, steps: [][]string{{"update-ldcache"}}},
		{name: "update-ldcache-rhel", build: func(t *testing.T, root string) {
			write(t, root, "/etc/redhat-release", "Rocky Linux release 9.4\n", 0o644)
			write(t, root, "/etc/ld.so.conf", "include ld.so.conf.d/*.conf\n", 0o644)
			mkdir(t, root, "/etc/ld.so.conf.d")
			lib(t, root, "/usr/lib64/libimage.so.3.0.1", "libimage.so.3", "")
			driver(t, root)
		}, steps: [][]string{ldcache}},
		{name: "update-ldcache-musl", build: func(t *testing.T, root string) {
			write(t, root, "/etc/alpine-release", "3.20.3\n", 0o644)
			write(t, root, "/lib/ld-musl-x86_64.so.1", "not really musl\n", 0o755)
			driver(t, root)
		}, steps: [][]string{ldcache}},
		{name: "cuda-compat-newer", build: compat("590.44.01", ""), steps: [][]string{enableCompat, ldcache}},
		{name: "cuda-compat-older", build: compat("575.57.08", ""), steps: [][]string{enableCompat, ldcache}},
		{name: "cuda-compat-note-listed-branch", build: compat("590.44.01", fwdCompat), steps: [][]string{enableCompat, ldcache}},
		{name: "cuda-compat-note-unlisted-branch", build: compat("590.44.01", fwdCompat),
			steps: [][]string{{"enable-cuda-compat", "--host-driver-version", "470.256.02"}, ldcache}},
		{name: "cuda-compat-note-host-cuda", build: compat("590.44.01", fwdCompat),
			steps: [][]string{{"enable-cuda-compat", "--host-cuda-version", "12.8"}, ldcache}},
		{name: "cuda-compat-no-version", build: compat("590.44.01", ""), steps: [][]string{{"enable-cuda-compat"}}},
		{name: "cuda-compat-two-libraries", build: func(t *testing.T, root string) {
			compat("590.44.01", "")(t, root)
			lib(t, root, "/usr/local/cuda/compat/libcuda.so.595.1.2", "libcuda.so.1", "")
		}, steps: [][]string{enableCompat, ldcache}},
		{name: "cuda-compat-other-root", build: func(t *testing.T, root string) {
			debian(t, root)
			driver(t, root)
			lib(t, root, "/opt/compat/libcuda.so.590.44.01", "libcuda.so.1", "")
		}, steps: [][]string{{"enable-cuda-compat", "--host-driver-version=" + hostDriver, "--cuda-compat-container-root", "/opt/compat"}, ldcache}},
		{name: "chmod", build: func(t *testing.T, root string) {
			write(t, root, "/dev/dri/card1", "", 0o600)
			write(t, root, "/dev/dri/renderD128", "", 0o600)
			write(t, root, "/dev/dri/already", "", 0o755)
			mkdir(t, root, "/dev/dri/by-path")
			write(t, root, "/etc/target", "", 0o600)
			symlink(t, root, "../../etc/target", "/dev/dri/link")
		}, steps: [][]string{{"chmod", "--mode", "755",
			"--path", "/dev/dri/card1", "--path", "/dev/dri/renderD128,/dev/dri/by-path",
			"--path", "/dev/dri/already", "--path", "/dev/dri/missing", "--path", "/dev/dri/link"}}},
		{name: "chmod-modes", build: func(t *testing.T, root string) {
			write(t, root, "/dev/dri/card1", "", 0o600)
			write(t, root, "/dev/dri/card2", "", 0o600)
			write(t, root, "/dev/dri/card3", "", 0o600)
		}, steps: [][]string{
			{"chmod", "--mode", "0640", "--path", "/dev/dri/card1"},
			{"chmod", "--mode=4755", "--path=/dev/dri/card2"},
			{"chmod", "--mode", "9", "--path", "/dev/dri/card3"},
			{"chmod", "--mode", "rwx", "--path", "/dev/dri/card3"},
			{"chmod", "--path", "/dev/dri/card3"},
			{"chmod", "--mode", "644"},
		}},
		{name: "chmod-absolute-link", build: func(t *testing.T, root string) {
			write(t, root, "/etc/target", "", 0o600)
			symlink(t, root, "/etc/target", "/dev/dri/link")
		}, steps: [][]string{{"chmod", "--mode", "755", "--path", "/dev/dri/link"}},
			// NVIDIA follows the image's absolute link on the host (here
			// to a host /etc/target that does not exist: skipped; where
			// it exists, the host file changes); nctk resolves it in the
			// container root and changes the image's file.
			nctk: func(s string) string {
				return strings.Replace(s, "/etc/target file 0600", "/etc/target file 0755", 1)
			}},
		{name: "update-application-profile", build: func(t *testing.T, root string) {
			mknod(t, root, "/dev/nvidia0", 195, 0)
			mknod(t, root, "/dev/nvidia3", 195, 3)
			mknod(t, root, "/dev/nvidiactl", 195, 255)
			mknod(t, root, "/dev/nvidia-uvm", 238, 0)
		}, steps: [][]string{{"update-application-profile"}}},
		{name: "update-application-profile-no-gpu", build: func(t *testing.T, root string) {
			mknod(t, root, "/dev/nvidiactl", 195, 255)
		}, steps: [][]string{{"update-application-profile"}}},
		{name: "disable-device-node-modification-no-driver", build: func(t *testing.T, root string) {
			write(t, root, "/proc/driver/nvidia/params", "ModifyDeviceFiles: 1\n", 0o444)
		}, steps: [][]string{{"disable-device-node-modification"}},
			inNS: `umount /proc/driver 2>/dev/null; mount -t tmpfs -o size=4k,mode=555 none /proc/driver`},
		{name: "disable-device-node-modification", build: func(t *testing.T, root string) {
			mkdir(t, root, "/proc")
		}, steps: [][]string{{"disable-device-node-modification"}},
			// The host's driver: a /proc/driver/nvidia/params of its own,
			// seen through the container's /proc as a runtime mounts it.
			inNS: `mount -t tmpfs -o size=64k none /proc/driver && mkdir /proc/driver/nvidia &&
printf 'ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n' >/proc/driver/nvidia/params &&
mount --rbind /proc "$ROOT/proc"`,
			observe: `cat "$ROOT/proc/driver/nvidia/params"
awk -v p="$ROOT/proc/driver/nvidia/params" '$5 == p { print "mount options:", $6 }' /proc/self/mountinfo`,
			// NVIDIA asks for a read-only bind mount in one mount(2)
			// call, where the kernel ignores MS_RDONLY: the file stays
			// writable. nctk's copy is mounted ro,nosuid,nodev,noexec.
			nctk: func(s string) string {
				return strings.Replace(s, "mount options: rw,relatime", "mount options: ro,nosuid,nodev,noexec,relatime", 1)
			}},
		{name: "noop", build: debian, steps: [][]string{{"noop"}}},
		{name: "noop-arguments", build: debian, steps: [][]string{{"noop", "goes", "here"}}},
		{name: "noop-unknown-flag", build: debian, steps: [][]string{{"noop", "--anything"}}},
		{name: "nvidia-h100-spec", build: func(t *testing.T, root string) {
			compat("590.44.01", fwdCompat)(t, root)
			lib(t, root, driverDir+"/libnvidia-allocator.so."+hostDriver, "libnvidia-allocator.so.1", "")
			mknod(t, root, "/dev/nvidia0", 195, 0)
			mknod(t, root, "/dev/nvidiactl", 195, 255)
		}, steps: h100SpecHooks(t)},
		{name: "spec-order", build: compat("590.44.01", ""), steps: [][]string{
			{"create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"},
			enableCompat, ldcache, {"update-application-profile"}}},
	}
}

// h100SpecHooks are the hook command lines of the CDI spec NVIDIA's
// nvidia-ctk 1.20 wrote on an H100 host (internal/cli/cdihook/testdata), in
// the spec's order.
func h100SpecHooks(t *testing.T) [][]string {
	t.Helper()
	const file = "../../internal/cli/cdihook/testdata/nvidia-1.20-hooks.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Hooks []struct{ Args []string } `json:"hooks"`
	}
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var steps [][]string
	for _, h := range spec.Hooks {
		if len(h.Args) < 2 {
			t.Fatalf("%s: a hook without a hook name: %q", file, h.Args)
		}
		steps = append(steps, h.Args[1:])
	}
	return steps
}

// TestHooks runs each case's hook calls with nvidia-cdi-hook on a fresh
// image and compares the resulting root with what NVIDIA's hook left.
func TestHooks(t *testing.T) {
	needHookRun(t)
	hook := tool(t, "nvidia-cdi-hook")
	for _, tc := range hookCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, "hooks/"+tc.name+".txt", runHookCase(t, tc, hook), knownHookDifferences, tc.nctk)
		})
	}
}

// TestCTKHooks runs the same cases through `nvidia-ctk hook`, which must
// leave the same roots (with -update: NVIDIA's nvidia-ctk hook must leave
// what its nvidia-cdi-hook left).
func TestCTKHooks(t *testing.T) {
	needHookRun(t)
	ctk := tool(t, "nvidia-ctk")
	for _, tc := range hookCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got := runHookCase(t, tc, ctk, "hook")
			if *update {
				if want := mustRead("hooks/"+tc.name+".txt", knownHookDifferences); knownHookDifferences(got) != want {
					t.Errorf("NVIDIA's nvidia-ctk hook differs from its nvidia-cdi-hook:\n%s", lineDiff(want, knownHookDifferences(got)))
				}
				return
			}
			golden(t, "hooks/"+tc.name+".txt", got, knownHookDifferences, tc.nctk)
		})
	}
}

// needHookRun skips where the hooks cannot run as an engine runs them.
func needHookRun(t *testing.T) {
	t.Helper()
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed: the hooks run in a mount namespace as an engine runs them")
	}
}

// runHookCase builds the case's image in a new bundle, runs its hook calls
// with the command prog (then its arguments, then the hook's), each as an
// engine runs a createContainer hook, and returns the record: each call
// with its exit status, what observe saw, and the root's listing.
func runHookCase(t *testing.T, tc hookCase, prog ...string) string {
	t.Helper()
	bundle := t.TempDir()
	root := filepath.Join(bundle, "rootfs")
	// What every image has and an engine mounts over.
	for _, d := range []string{"/proc", "/dev", "/sys", "/run", "/tmp"} {
		mkdir(t, root, d)
	}
	write(t, bundle, "/config.json", `{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"cwd":"/","args":["sh"]}}`, 0o644)
	tc.build(t, root)
	var b strings.Builder
	state := fmt.Sprintf(`{"ociVersion":"1.0.2","id":"parity","status":"creating","pid":%d,"bundle":%q}`, os.Getpid(), bundle)
	for _, step := range tc.steps {
		// As an engine runs a createContainer hook: in the container's
		// mount namespace, where the root is a mount.
		observed := filepath.Join(bundle, "observed")
		script := `mount --bind "$ROOT" "$ROOT" || exit 125
` + tc.inNS + `
"$@"
rc=$?
{
:
` + tc.observe + `
} >"$OUT"
exit $rc`
		args := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh"}, prog...)
		cmd := exec.Command("unshare", append(args, step...)...)
		cmd.Env = append(hookargs.Env(), "ROOT="+root, "OUT="+observed)
		cmd.Stdin = strings.NewReader(state)
		out, err := cmd.CombinedOutput()
		rc := exitCode(t, fmt.Sprint(step), err)
		t.Logf("%s %s: exit %d\n%s", strings.Join(prog, " "), strings.Join(step, " "), rc, out)
		if rc == 125 {
			t.Fatalf("setting up the mount namespace: %s", out)
		}
		fmt.Fprintf(&b, "$ nvidia-cdi-hook %s\nexit %s\n", strings.Join(step, " "), exitClass(rc))
		if tc.observe != "" {
			data, err := os.ReadFile(observed)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "observed in the container's mount namespace:\n%s", data)
		}
		if err := os.Remove(observed); err != nil {
			t.Fatal(err)
		}
	}
	b.WriteString(listing(t, root))
	return b.String()
}

// exitClass is how an exit status is compared: success or failure (the
// codes of failures are not part of NVIDIA's interface).
func exitClass(rc int) string {
	if rc == 0 {
		return "0"
	}
	return "failure"
}

// knownHookDifferences normalizes the differences nctk keeps on purpose,
// in both results before they are compared (docs/nvidia-parity.md):
//   - the drop-ins' names: NVIDIA's are random (os.CreateTemp: a new file
//     on every container start), nctk's fixed (one file however often the
//     container starts); nctk's driver drop-in starts with a comment line;
//   - NVIDIA's update-ldcache leaves its empty mount point directories
//     under /run/nvidia-ctk-hook in the image;
//   - in a musl image's /etc/ld-musl-<arch>.path nctk lists musl's own
//     default directories (/lib, /usr/local/lib, /usr/lib) after the
//     driver's, NVIDIA glibc's (it drops /usr/local/lib, which the file
//     replaces in musl's search): only the driver's directories are
//     compared.
func knownHookDifferences(s string) string {
	names := []struct{ pattern, as string }{
		{"/etc/ld.so.conf.d/00-nvcr-*.conf ", "/etc/ld.so.conf.d/<update-ldcache folders> "},
		{"/etc/ld.so.conf.d/00-nctk.conf ", "/etc/ld.so.conf.d/<update-ldcache folders> "},
		{"/etc/ld.so.conf.d/zz-nvcr-*.conf ", "/etc/ld.so.conf.d/<image system dirs> "},
		{"/etc/ld.so.conf.d/zz-nctk-system.conf ", "/etc/ld.so.conf.d/<image system dirs> "},
		{"/etc/ld.so.conf.d/00-compat-*.conf ", "/etc/ld.so.conf.d/<cuda compat> "},
		{"/etc/ld.so.conf.d/00-compat-nctk.conf ", "/etc/ld.so.conf.d/<cuda compat> "},
	}
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "/run/nvidia-ctk-hook") || strings.HasPrefix(l, "/run/nvidia-ctk-hook*") {
			continue
		}
		for _, n := range names {
			if strings.HasPrefix(l, n.pattern) {
				l = n.as + strings.TrimPrefix(l, n.pattern)
				l = editContent(l, func(line string) bool { return !strings.HasPrefix(line, "#") })
			}
		}
		if strings.HasPrefix(l, "/etc/ld-musl-") {
			musl := []string{"/lib", "/usr/lib", "/usr/local/lib", "/lib64", "/usr/lib64", "/libx32", "/usr/libx32"}
			l = editContent(l, func(line string) bool { return !slices.Contains(musl, line) })
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// editContent keeps the lines of a listing line's quoted file content for
// which keep is true.
func editContent(l string, keep func(string) bool) string {
	i := strings.Index(l, " \"")
	if i < 0 {
		return l
	}
	content, err := strconv.Unquote(l[i+1:])
	if err != nil {
		return l
	}
	var kept []string
	for _, line := range strings.SplitAfter(content, "\n") {
		if line != "" && keep(strings.TrimSuffix(line, "\n")) {
			kept = append(kept, line)
		}
	}
	return l[:i+1] + strconv.Quote(strings.Join(kept, ""))
}

// mustRead is the expected result testdata/name, normalized with norm.
func mustRead(name string, norm func(string) string) string {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		return "cannot read " + name + ": " + err.Error()
	}
	return norm(string(data))
}

// Image building helpers; paths are absolute in the image.

func mkdir(t *testing.T, root, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, root, p, content string, mode os.FileMode) {
	t.Helper()
	mkdir(t, root, filepath.Dir(p))
	full := filepath.Join(root, p)
	if err := os.WriteFile(full, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(full, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, root, target, p string) {
	t.Helper()
	mkdir(t, root, filepath.Dir(p))
	if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
		t.Fatal(err)
	}
}

func mknod(t *testing.T, root, p string, major, minor uint32) {
	t.Helper()
	mkdir(t, root, filepath.Dir(p))
	if err := unix.Mknod(filepath.Join(root, p), unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatal(err)
	}
}

// libs caches the shared objects lib builds, by soname and note.
var libs struct {
	sync.Mutex
	dir   string
	built map[string]string
}

// lib puts at p a small x86-64 shared object with DT_SONAME soname and,
// when note is not "", a .note.cuda.fwd_compatibility section owned by
// "NVIDIA Corporation" with that description (built once with gcc and
// objcopy).
func lib(t *testing.T, root, p, soname, note string) {
	t.Helper()
	src := builtLib(t, soname, note)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	write(t, root, p, string(data), 0o755)
}

func builtLib(t *testing.T, soname, note string) string {
	t.Helper()
	libs.Lock()
	defer libs.Unlock()
	key := soname + "\x00" + note
	if p, ok := libs.built[key]; ok {
		return p
	}
	for _, tool := range []string{"gcc", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (.ci/setup installs it): the cases need real shared objects", tool)
		}
	}
	if libs.dir == "" {
		dir, err := os.MkdirTemp("", "nctk-parity-libs-")
		if err != nil {
			t.Fatal(err)
		}
		libs.dir, libs.built = dir, map[string]string{}
	}
	n := len(libs.built)
	c := filepath.Join(libs.dir, fmt.Sprintf("l%d.c", n))
	out := filepath.Join(libs.dir, fmt.Sprintf("l%d.so", n))
	if err := os.WriteFile(c, []byte("int parity_symbol(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, b)
		}
	}
	srcs := []string{c}
	if note != "" {
		// The note as the assembler writes one: SHT_NOTE, 4-byte aligned.
		asm := filepath.Join(libs.dir, fmt.Sprintf("l%d.s", n))
		if err := os.WriteFile(asm, noteAsm("NVIDIA Corporation", note), 0o644); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, asm)
	}
	run("gcc", append([]string{"-shared", "-fPIC", "-nostdlib", "-Wl,-soname," + soname, "-o", out}, srcs...)...)
	libs.built[key] = out
	return out
}

// noteAsm is the assembler source of a .note.cuda.fwd_compatibility
// section holding one ELF note of owner with the description desc.
func noteAsm(owner, desc string) []byte {
	var b strings.Builder
	b.WriteString(".section .note.cuda.fwd_compatibility,\"a\",@note\n.balign 4\n")
	fmt.Fprintf(&b, ".long %d\n.long %d\n.long 1\n", len(owner)+1, len(desc))
	fmt.Fprintf(&b, ".asciz %s\n.balign 4\n", strconv.Quote(owner))
	fmt.Fprintf(&b, ".ascii %s\n.balign 4\n", strconv.Quote(desc))
	return []byte(b.String())
}
