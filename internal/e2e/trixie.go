package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The second engine matrix: Debian 13 (trixie)'s own engines, installed by
// debootstrap into a root cached under the fixture cache, and run in a
// private mount namespace pivoted into (an overlay of) that root.

// TrixiePackages lists the packages debootstrap installs into the Debian 13
// root besides the minbase variant's own (their Depends come along).
func TrixiePackages() []string {
	return []string{"docker.io", "docker-cli", "containerd", "podman", "runc", "crun"}
}

// DebianMirrorEnv names the environment variable that overrides the Debian
// mirror debootstrap downloads from (default DefaultDebianMirror).
const DebianMirrorEnv = "NCTK_DEBIAN_MIRROR"

// DefaultDebianMirror is Debian's redirector.
const DefaultDebianMirror = "http://deb.debian.org/debian"

// rootStamp is the file in a finished cached root that records how it was
// made; a root without it (an interrupted debootstrap) or with another
// recipe is made again.
const rootStamp = ".nctk-debootstrap"

// cacheDir is the fixture cache (scripts/fetch-driver-debs.sh's NCTK_CACHE).
func cacheDir() string {
	if c := os.Getenv("NCTK_CACHE"); c != "" {
		return c
	}
	return "/var/cache/nctk"
}

// trixieRecipe is what rootStamp holds for the Debian 13 root.
func trixieRecipe() string {
	return "debootstrap --variant=minbase --include=" + strings.Join(TrixiePackages(), ",") + " trixie\n"
}

// TrixieRoot returns the cached Debian 13 root (<NCTK_CACHE>/trixie/root),
// making it first if it is absent or was made by another recipe:
// `debootstrap --variant=minbase --include=<TrixiePackages> trixie` from
// the mirror in NCTK_DEBIAN_MIRROR (default deb.debian.org), into a
// temporary directory renamed into place when complete, with the
// downloaded packages removed. A lock file serializes test processes that
// make it at the same time. It skips t (fails in strict mode) without root
// or debootstrap, and fails t when debootstrap fails.
func TrixieRoot(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	dir := filepath.Join(cacheDir(), "trixie")
	root := filepath.Join(dir, "root")
	want := trixieRecipe()
	if data, err := os.ReadFile(filepath.Join(root, rootStamp)); err == nil && string(data) == want {
		return root
	}
	debootstrap := RequireTool(t, "debootstrap")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("e2e: trixie root: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("e2e: trixie root: %v", err)
	}
	defer lock.Close() // and so unlocks
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatalf("e2e: trixie root: locking %s: %v", lock.Name(), err)
	}
	if data, err := os.ReadFile(filepath.Join(root, rootStamp)); err == nil && string(data) == want {
		return root // made by another process meanwhile
	}
	tmp := root + ".new"
	clear := func() {
		if err := UnmountAll(tmp); err != nil {
			t.Errorf("e2e: trixie root: %v", err)
		}
		if err := os.RemoveAll(tmp); err != nil {
			t.Errorf("e2e: trixie root: %v", err)
		}
	}
	clear()
	mirror := os.Getenv(DebianMirrorEnv)
	if mirror == "" {
		mirror = DefaultDebianMirror
	}
	start := time.Now()
	r := runLogged(t, os.Environ(), RunOpts{Timeout: 20 * time.Minute, Quiet: true, Env: []string{"PATH=" + SystemPath}}, debootstrap,
		"--variant=minbase", "--include="+strings.Join(TrixiePackages(), ","), "trixie", tmp, mirror)
	if !r.OK() {
		clear()
		t.Fatalf("e2e: making the Debian 13 root failed:\n%s", r)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "var/cache/apt/archives/*.deb"))
	for _, f := range debs {
		if err := os.Remove(f); err != nil {
			t.Fatalf("e2e: trixie root: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, rootStamp), []byte(want), 0o644); err != nil {
		t.Fatalf("e2e: trixie root: %v", err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatalf("e2e: trixie root: removing the old root: %v", err)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatalf("e2e: trixie root: %v", err)
	}
	t.Logf("e2e: made the Debian 13 root %s with debootstrap from %s in %v", root, mirror, time.Since(start).Round(time.Second))
	return root
}

// EngineRoot is a private mount namespace whose root is a writable overlay
// of a Debian root (the lower layer is never written): engines started with
// DockerdOptions.Root or PodmanOptions.Root, and commands from
// EngineRoot.Run, run its binaries there, as they would on a machine
// installed with that root. It is pivoted into (pivot_root), not a chroot:
// a prestart hook entering a container's mount namespace (nvidia-container-cli
// configure) finds that namespace's root to be the engine's root, and runc
// finds / to be a mount point.
//
// Inside, /proc is a fresh proc, /run a fresh tmpfs, and /sys, /dev and /tmp
// are the host's (recursive binds), so that everything the harness and
// the tests make under the temporary directory (nctk's binaries, fixture
// driver roots, config files, engine sockets and state) is at the same path
// on both sides.
type EngineRoot struct {
	// Lower is the Debian root (read-only here).
	Lower string
	// Dir holds the overlay's upper and work directories, the mount point
	// and the holder's log.
	Dir string

	pid     int
	nsenter string
	holder  *daemon
}

// holderScript runs in the new mount namespace: it mounts the overlay and
// the shared trees, pivots into the overlay, detaches the old root, marks
// itself ready and waits to be killed.
const holderScript = `set -e
lower=$1 upper=$2 work=$3 root=$4 ready=$5
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount --rbind /tmp "$root/tmp"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$root/run"
mkdir -p "$root/.nctk-oldroot"
cd "$root"
pivot_root . .nctk-oldroot
cd /
umount -l /.nctk-oldroot
rmdir /.nctk-oldroot
: > "$ready"
exec sleep infinity
`

// StartTrixie starts an EngineRoot over the cached Debian 13 root
// (TrixieRoot); the namespace ends at t's cleanup, after the engines
// started in it later (their cleanups run first).
func StartTrixie(t testing.TB) *EngineRoot {
	t.Helper()
	return StartEngineRoot(t, TrixieRoot(t))
}

// StartEngineRoot starts an EngineRoot over the Debian root lower. It skips
// t without root, unshare, nsenter or an overlay file system.
func StartEngineRoot(t testing.TB, lower string) *EngineRoot {
	t.Helper()
	RequireRoot(t)
	unshare := RequireTool(t, "unshare")
	nsenter := RequireTool(t, "nsenter")
	RequireTool(t, "pivot_root")
	if data, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(data), "\toverlay\n") {
		skipOrFail(t, "e2e: the overlay file system is not available (modprobe overlay)")
	}
	dir := TempDir(t, "root")
	r := &EngineRoot{Lower: lower, Dir: dir, nsenter: nsenter}
	var dirs []string
	for _, d := range []string{"upper", "work", "merged"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatalf("e2e: engine root: %v", err)
		}
		dirs = append(dirs, p)
	}
	ready := filepath.Join(dir, "ready")
	proc, err := startDaemon("engine root", filepath.Join(dir, "holder.log"), []string{"PATH=" + SystemPath, "LANG=C.UTF-8"},
		unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", holderScript, "sh",
		lower, dirs[0], dirs[1], dirs[2], ready)
	if err != nil {
		t.Fatal(err)
	}
	r.holder = proc
	r.pid = proc.cmd.Process.Pid
	t.Cleanup(func() {
		if ok, err := proc.exited(); ok {
			t.Errorf("e2e: the engine root's namespace holder died during the test: %v\n%s", err, tailFile(proc.logPath, 40))
		} else if err := proc.stop(10 * time.Second); err != nil {
			t.Errorf("%v", err)
		}
	})
	if err := proc.waitReady(30*time.Second, func() error {
		_, err := os.Stat(ready)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// Command returns argv run in the root's namespace (through nsenter, with
// the root and working directory of the namespace's holder: its / ), or
// argv itself for a nil EngineRoot, which is the host.
func (r *EngineRoot) Command(argv ...string) []string {
	if r == nil {
		return argv
	}
	return append([]string{r.nsenter, "--target", strconv.Itoa(r.pid), "--mount", "--root", "--wd", "--"}, argv...)
}

// LookTool finds an executable in the root's SystemPath directories and
// returns its path inside the root; a nil EngineRoot looks on the host
// (LookTool).
func (r *EngineRoot) LookTool(name string) (string, error) {
	if r == nil {
		return LookTool(name)
	}
	if strings.HasPrefix(name, "/") {
		if _, err := os.Lstat(filepath.Join(r.Lower, name)); err != nil {
			return "", fmt.Errorf("%s: not in the root %s: %w", name, r.Lower, err)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(SystemPath) {
		p := filepath.Join(d, name)
		// Lstat: a link's target is to be read inside the root, not here.
		if fi, err := os.Lstat(filepath.Join(r.Lower, p)); err == nil && (fi.Mode()&os.ModeSymlink != 0 || fi.Mode()&0o111 != 0) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in %s of the root %s", name, SystemPath, r.Lower)
}

// RequireTool is LookTool that skips t (fails it in strict mode) when the
// tool is absent.
func (r *EngineRoot) RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := r.LookTool(name)
	if err != nil {
		skipOrFail(t, "e2e: required tool %q is not installed: %v", name, err)
	}
	return p
}

// Run runs argv in the root (PATH SystemPath, the test's other variables,
// then o.Env), logs it and returns the result.
func (r *EngineRoot) Run(t testing.TB, o RunOpts, argv ...string) Result {
	t.Helper()
	return runLogged(t, mergeEnv(os.Environ(), []string{"PATH=" + SystemPath}), o, r.Command(argv...)...)
}

// MustRun is Run that fails t unless the command exits 0; it returns
// stdout.
func (r *EngineRoot) MustRun(t testing.TB, o RunOpts, argv ...string) string {
	t.Helper()
	res := r.Run(t, o, argv...)
	if !res.OK() {
		t.Fatalf("e2e: command in the engine root failed:\n%s", res)
	}
	return res.Stdout
}
