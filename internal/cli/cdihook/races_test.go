package cdihook

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/cudacompat/compattest"
	"github.com/nctk/nctk/internal/e2e"
)

// mountCheckEnv names the container root of a hook run in its own mount
// namespace (execHookNS): after the hook, the child reports every mount it
// made outside that root and exits mountEscapeCode.
const (
	mountCheckEnv   = "NCTK_CDIHOOK_TEST_MOUNTS_UNDER"
	mountEscapeCode = 97
)

// mountPoints returns the mount points of the calling process's mount
// namespace.
func mountPoints() (map[string]bool, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 4 {
			out[f[4]] = true
		}
	}
	return out, sc.Err()
}

// mainCheckingMounts runs Main as nvidia-cdi-hook and then reports the
// mounts it made outside root (the child side of execHookNS).
func mainCheckingMounts(root string, run func() int) int {
	before, err := mountPoints()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := run()
	after, err := mountPoints()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for mp := range after {
		if !before[mp] && mp != root && !strings.HasPrefix(mp, root+"/") {
			fmt.Fprintf(os.Stderr, "mount outside the container root: %s\n", mp)
			code = mountEscapeCode
		}
	}
	return code
}

// execHookNS is execHook in a mount namespace of its own (as runc runs
// createContainer hooks, in the container's): the hook's mounts vanish
// with it, and it reports any it made outside root.
func execHookNS(t *testing.T, root, state string, args ...string) result {
	t.Helper()
	bin, err := os.Executable()
	must(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Args[0] = "nvidia-cdi-hook"
	cmd.Env = []string{"NCTK_CDIHOOK_TEST_MAIN=1", mountCheckEnv + "=" + root, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin = strings.NewReader(state)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

// flipper swaps a container directory with a symlink to a host directory,
// atomically (renameat2 RENAME_EXCHANGE), as fast as it can: the image
// changing a directory into a symlink to the host between a hook's check
// and its use (the CVE-2024-0132 / CVE-2026-24260 class).
type flipper struct {
	dir, alt string
	stop     atomic.Bool
	flips    atomic.Int64
	wg       sync.WaitGroup
	err      error
}

// startFlipper makes alt (beside dir) a symlink to target and starts
// flipping it with dir.
func startFlipper(t *testing.T, dir, target string) *flipper {
	t.Helper()
	f := &flipper{dir: dir, alt: dir + "-race-alt"}
	must(t, os.Symlink(target, f.alt))
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for !f.stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, f.dir, unix.AT_FDCWD, f.alt, unix.RENAME_EXCHANGE); err != nil {
				f.err = err
				return
			}
			f.flips.Add(1)
		}
	}()
	return f
}

// halt stops the flipping with dir a directory again.
func (f *flipper) halt(t *testing.T) {
	t.Helper()
	f.stop.Store(true)
	f.wg.Wait()
	if f.err != nil {
		t.Fatalf("flip %s: %v", f.dir, f.err)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(f.dir, &st))
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		must(t, unix.Renameat2(unix.AT_FDCWD, f.dir, unix.AT_FDCWD, f.alt, unix.RENAME_EXCHANGE))
	}
}

// TestHookRaces is the race class of the hostile-input suite (issue 13):
// for every writing hook, run as an engine runs it (its own process, the
// OCI state on stdin), a racer flips the directory the hook writes
// through — the library directory, the link's parent, /etc,
// /etc/ld.so.conf.d, /etc/nvidia, /dev/dri, the compat directory,
// /proc/driver/nvidia, /proc/driver (nctk's mount-proc-driver) — between a real directory and a symlink to a
// sentinel host directory (absolute, or climbing with ".."), while the
// hook runs again and again. After every run the sentinel host directory
// (its files, contents, modes, links) is unchanged, and no mount was made
// outside the container root.
func TestHookRaces(t *testing.T) {
	e2e.RequireRoot(t)
	const lib = "/usr/lib/x86_64-linux-gnu"
	const compat = "/usr/local/cuda/compat"
	libz, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	if len(libz) == 0 {
		t.Skip("no host libz.so.1.* to stand in for a driver library")
	}
	libzData, err := os.ReadFile(libz[0])
	must(t, err)
	libzName := filepath.Base(libz[0])
	climb := func(host, sub string) string { return "../../../../../../../../../.." + host + sub }
	abs := func(host, sub string) string { return host + sub }

	tests := []struct {
		name string
		// image lays out the container root (the flipped directory is a
		// real directory there).
		image func(t *testing.T, root, host string)
		// flip is the container directory flipped; target the host path
		// its symlink names (from the host directory).
		flip   string
		target func(host, sub string) string
		sub    string
		args   []string
		// mountNS runs the hook in a mount namespace of its own, checking
		// its mounts.
		mountNS bool
	}{
		{name: "create-symlinks, library directory",
			image: func(t *testing.T, root, host string) { must(t, os.MkdirAll(root+lib, 0o755)) },
			flip:  lib, target: abs, sub: "/lib",
			args: []string{"create-symlinks", "--link", "libcuda.so.999.1.1::" + lib + "/libcuda.so.1", "--link", "libcuda.so.1::" + lib + "/libcuda.so",
				"--link", "libnvidia-ml.so.570::" + lib + "/libnvidia-ml.so.1"}},
		{name: "create-symlinks, the link's parent, climbing",
			image: func(t *testing.T, root, host string) { must(t, os.MkdirAll(root+lib+"/nvidia/current", 0o755)) },
			flip:  lib + "/nvidia/current", target: climb, sub: "/lib",
			args: []string{"create-symlinks", "--link", "libnvidia-ml.so.570::" + lib + "/nvidia/current/libnvidia-ml.so.1",
				"--link", "x::" + lib + "/nvidia/current/libcuda.so.999.1.1"}},
		{name: "update-ldcache, /etc/ld.so.conf.d",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/etc/ld.so.conf.d", 0o755))
				must(t, os.MkdirAll(root+lib, 0o755))
				must(t, os.WriteFile(root+lib+"/"+libzName, libzData, 0o755))
				must(t, os.Symlink(libzName, root+lib+"/libz.so.1"))
			},
			flip: "/etc/ld.so.conf.d", target: abs, sub: "/etc/ld.so.conf.d",
			args: []string{"update-ldcache", "--folder", lib, "--lib", lib + "/" + libzName, "--lib", lib + "/libz.so.1"}},
		{name: "update-ldcache, /etc, folders only (in-process rebuild)",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/etc/ld.so.conf.d", 0o755))
				must(t, os.MkdirAll(root+lib, 0o755))
				must(t, os.WriteFile(root+lib+"/"+libzName, libzData, 0o755))
			},
			flip: "/etc", target: abs, sub: "/etc",
			args: []string{"update-ldcache", "--folder", lib}},
		{name: "update-ldcache, /etc, in process, climbing",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/etc/ld.so.conf.d", 0o755))
				must(t, os.MkdirAll(root+lib, 0o755))
				must(t, os.WriteFile(root+lib+"/"+libzName, libzData, 0o755))
				must(t, os.Symlink(libzName, root+lib+"/libz.so.1"))
			},
			flip: "/etc", target: climb, sub: "/etc",
			args: []string{"update-ldcache", "--folder", lib, "--lib", lib + "/" + libzName, "--lib", lib + "/libz.so.1"}},
		{name: "enable-cuda-compat, /etc/ld.so.conf.d",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+compat, 0o755))
				must(t, os.WriteFile(root+compat+"/libcuda.so.999.1.1", compattest.NoteELF("", "", "", 4), 0o644))
				must(t, os.MkdirAll(root+"/etc/ld.so.conf.d", 0o755))
			},
			flip: "/etc/ld.so.conf.d", target: abs, sub: "/etc/ld.so.conf.d",
			args: []string{"enable-cuda-compat", "--host-driver-version=580.65.06"}},
		{name: "enable-cuda-compat, the compat directory",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+compat, 0o755))
				must(t, os.WriteFile(root+compat+"/libcuda.so.999.1.1", compattest.NoteELF("", "", "", 4), 0o644))
				must(t, os.MkdirAll(root+"/etc/ld.so.conf.d", 0o755))
			},
			flip: compat, target: abs, sub: "/lib",
			args: []string{"enable-cuda-compat", "--host-driver-version=580.65.06"}},
		{name: "chmod, /dev/dri",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/dev/dri", 0o755))
				must(t, os.WriteFile(root+"/dev/dri/nvidia0", nil, 0o600))
			},
			flip: "/dev/dri", target: abs, sub: "/dev",
			args: []string{"chmod", "--mode", "777", "--path", "/dev/dri/nvidia0", "--path", "/dev/dri"}},
		{name: "update-application-profile, /etc/nvidia",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/etc/nvidia", 0o755))
				must(t, os.MkdirAll(root+"/dev", 0o755))
				must(t, unix.Mknod(root+"/dev/nvidia0", unix.S_IFCHR|0o666, int(unix.Mkdev(195, 0))))
			},
			flip: "/etc/nvidia", target: abs, sub: "/etc",
			args: []string{"update-application-profile"}},
		{name: "disable-device-node-modification, /proc/driver/nvidia",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/proc/driver/nvidia", 0o755))
				must(t, os.WriteFile(root+"/proc/driver/nvidia/params", []byte("ModifyDeviceFiles: 1\n"), 0o444))
			},
			flip: "/proc/driver/nvidia", target: abs, sub: "/proc/driver/nvidia",
			args:    []string{"disable-device-node-modification", "--host-dir", "{{hostproc}}"},
			mountNS: true},
		{name: "mount-proc-driver, /proc/driver",
			image: func(t *testing.T, root, host string) { must(t, os.MkdirAll(root+"/proc/driver/nvidia", 0o755)) },
			flip:  "/proc/driver", target: climb, sub: "/proc/driver",
			args:    []string{"mount-proc-driver", "--host-dir", "{{hostproc}}", "--gpu", "00000000:02:00.0"},
			mountNS: true},
	}
	budget, maxRuns := 3*time.Second, 150
	if testing.Short() {
		budget, maxRuns = 700*time.Millisecond, 30
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := sentinelHost(t)
			must(t, os.MkdirAll(host+"/proc/driver/nvidia", 0o755))
			must(t, os.WriteFile(host+"/proc/driver/nvidia/params", []byte("ModifyDeviceFiles: 1\n"), 0o644))
			hostProcDir := hostProc(t)
			b, root := bundle(t)
			tc.image(t, root, host)
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "{{hostproc}}", hostProcDir)
			}
			want := hostSnapshot(t, host)
			f := startFlipper(t, root+tc.flip, tc.target(host, tc.sub))
			defer f.halt(t)
			var runs, failed int
			for deadline := time.Now().Add(budget); runs < maxRuns && time.Now().Before(deadline); runs++ {
				var r result
				if tc.mountNS {
					r = execHookNS(t, root, stateFor(b), args...)
				} else {
					r = execHook(t, stateFor(b), args...)
				}
				if r.code == mountEscapeCode {
					t.Fatalf("run %d: %s", runs, r.stderr)
				}
				if r.code != 0 {
					failed++
				}
				if d := e2e.TreeDiff(hostSnapshot(t, host), want); len(d) > 0 {
					t.Fatalf("run %d (%d flips so far): the host changed: %v (hook exit %d: %s)", runs, f.flips.Load(), d, r.code, r.stderr)
				}
			}
			f.halt(t)
			if f.flips.Load() < int64(runs) {
				t.Fatalf("only %d flips during %d runs", f.flips.Load(), runs)
			}
			// With the directory back in place, the hook works.
			var r result
			if tc.mountNS {
				r = execHookNS(t, root, stateFor(b), args...)
			} else {
				r = execHook(t, stateFor(b), args...)
			}
			if r.code != 0 {
				t.Errorf("after the race, with the directory in place: exit %d: %s", r.code, r.stderr)
			}
			if d := e2e.TreeDiff(hostSnapshot(t, host), want); len(d) > 0 {
				t.Fatalf("the host changed: %v", d)
			}
			t.Logf("%d runs (%d failed) during %d flips of %s; the host is unchanged", runs, failed, f.flips.Load(), tc.flip)
		})
	}
}
