// Package e2e is the end-to-end test harness of nctk: it builds a tiny test
// image (busybox + host glibc + cudaprobe), and starts private, throw-away
// instances of the container engines found on the machine (dockerd,
// containerd/ctr, podman, runc) so that tests in other packages can run real
// containers through nctk's runtime, hook and CDI specs.
//
// Every daemon and every directory the harness creates is private to one test
// (its own sockets, roots, state and cgroup parents under a fresh temporary
// directory) and is stopped, unmounted and removed in t.Cleanup, also when the
// test fails. Nothing here uses the machine-wide engine configuration.
//
// The helpers need root and the engines' tools. Missing prerequisites make a
// test skip with the reason printed; with NCTK_E2E_STRICT=1 in the
// environment (CI, where .ci/setup installed everything) they fail instead.
//
// A typical GPU test in another package:
//
//	root := e2e.BuildRootfs(t, e2e.RootfsOptions{})
//	d := e2e.StartDockerd(t, e2e.DockerdOptions{
//		Runtimes:  map[string]e2e.DockerRuntime{"nvidia": {Path: runtimeBin}},
//		ExtraPath: []string{dirWithHookBinary}, // for --gpus
//	})
//	d.ImportImage(root, "nctk-e2e:probe")
//	r := d.Docker("run", "--rm", "--network=none", "--runtime=nvidia",
//		"-e", "NVIDIA_VISIBLE_DEVICES=all", "nctk-e2e:probe", e2e.CudaprobePath, "init")
//
// and likewise StartContainerd + Ctr ("run --gpus 0"), NewPodman + Podman
// ("run --device nvidia.com/gpu=all" with PodmanOptions.CDISpecDir), and
// MakeBundle + NewRunc/NewRuntime for the runtime alone. FakeTool records
// how an engine calls a binary (hook, CLI, runtime) without a GPU.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// StrictEnv names the environment variable that turns the skips of
// RequireRoot and RequireTool into failures when set to "1" or "true".
const StrictEnv = "NCTK_E2E_STRICT"

// DefaultTimeout bounds every command the harness runs unless RunOpts says
// otherwise; a hung engine fails the test instead of hanging CI.
const DefaultTimeout = 2 * time.Minute

// SystemPath is the PATH given to daemons and engine CLIs unless a test
// chooses another: the standard system directories only, so that a tool a
// developer left in ~/go/bin or /usr/local/bin does not leak into a test by
// accident (/usr/local is included because that is where `make install` puts
// nctk's binaries; tests that must not find them set their own PATH).
const SystemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// logLimit is how much of a command's output goes into the test log.
const logLimit = 8 << 10

func strict() bool {
	v := os.Getenv(StrictEnv)
	return v == "1" || strings.EqualFold(v, "true")
}

// skipOrFail skips t with the message, or fails it in strict mode.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if strict() {
		t.Fatalf("%s (%s is set, so this is an error rather than a skip)", msg, StrictEnv)
	}
	t.Skip(msg)
}

// RequireRoot skips t (with the reason) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if euid := os.Geteuid(); euid != 0 {
		skipOrFail(t, "e2e: needs root, running as euid %d", euid)
	}
}

// RequireTool returns the absolute path of the executable name, looked up in
// PATH and then in the sbin directories (which a non-login root PATH may
// lack). It skips t, with the reason, when the tool is absent.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := LookTool(name)
	if err != nil {
		skipOrFail(t, "e2e: required tool %q is not installed: %v", name, err)
	}
	return p
}

// LookTool finds an executable like RequireTool, without a test.
func LookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	if strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("%s: not an executable file", name)
	}
	for _, dir := range filepath.SplitList(SystemPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH or %s", name, SystemPath)
}

// Result is a finished command.
type Result struct {
	// Cmd is the command line, shell-quoted, for messages.
	Cmd    string
	Stdout string
	Stderr string
	// ExitCode is the exit status, or -1 when the command could not be
	// started or was killed (by a signal or its timeout).
	ExitCode int
	// Err is nil exactly when the command ran and exited 0.
	Err      error
	Duration time.Duration
}

// Combined is stdout followed by stderr.
func (r Result) Combined() string { return r.Stdout + r.Stderr }

// OK reports whether the command exited 0.
func (r Result) OK() bool { return r.Err == nil }

// String describes the result for test messages.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ %s\n", r.Cmd)
	if r.Err != nil {
		fmt.Fprintf(&b, "error: %v\n", r.Err)
	}
	if r.Stdout != "" {
		fmt.Fprintf(&b, "stdout:\n%s", ensureNL(truncate(r.Stdout)))
	}
	if r.Stderr != "" {
		fmt.Fprintf(&b, "stderr:\n%s", ensureNL(truncate(r.Stderr)))
	}
	return b.String()
}

func ensureNL(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

func truncate(s string) string {
	if len(s) <= logLimit {
		return s
	}
	return s[:logLimit/2] + "\n[... " + strconv.Itoa(len(s)-logLimit) + " bytes cut ...]\n" + s[len(s)-logLimit/2:]
}

// RunOpts adjusts one command.
type RunOpts struct {
	// Env entries (KEY=VALUE) are added to the command's environment,
	// replacing inherited variables of the same name.
	Env []string
	// Stdin, if set, is the command's standard input (else /dev/null).
	Stdin io.Reader
	// Dir is the working directory (default: the test's).
	Dir string
	// Timeout overrides DefaultTimeout.
	Timeout time.Duration
	// Quiet keeps the command and its output out of the test log.
	Quiet bool
	// OutputFile, if set, receives stdout and stderr (appended) instead of
	// pipes, so that processes the command leaves running (a created
	// container) do not hold it up; Result.Stdout is then the file's content
	// when the command exits.
	OutputFile string
}

// quote shell-quotes args for messages.
func quote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// mergeEnv returns base with the entries of extra replacing those of the
// same name and the rest appended.
func mergeEnv(base, extra []string) []string {
	idx := make(map[string]int, len(base))
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// Run runs argv[0] with the rest as arguments, with the environment of the
// test process plus o.Env, logs it to t unless o.Quiet, and returns the
// result; it never fails the test itself.
func Run(t testing.TB, o RunOpts, argv ...string) Result {
	t.Helper()
	return runLogged(t, os.Environ(), o, argv...)
}

// runLogged runs argv with environment env (and o.Env on top) and logs the
// result to t unless o.Quiet.
func runLogged(t testing.TB, env []string, o RunOpts, argv ...string) Result {
	t.Helper()
	r := runCmd(context.Background(), env, o, argv...)
	if !o.Quiet {
		t.Log(r.String())
	}
	return r
}

// MustRun is Run that fails the test unless the command exits 0, and
// returns its stdout.
func MustRun(t testing.TB, o RunOpts, argv ...string) string {
	t.Helper()
	r := runCmd(context.Background(), os.Environ(), o, argv...)
	if !r.OK() {
		t.Fatalf("command failed:\n%s", r)
	}
	if !o.Quiet {
		t.Log(r.String())
	}
	return r.Stdout
}

func runCmd(ctx context.Context, baseEnv []string, o RunOpts, argv ...string) Result {
	r := Result{Cmd: quote(argv), ExitCode: -1}
	if len(argv) == 0 {
		r.Err = errors.New("e2e: empty command")
		return r
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = mergeEnv(baseEnv, o.Env)
	cmd.Dir = o.Dir
	cmd.Stdin = o.Stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if o.OutputFile != "" {
		f, err := os.OpenFile(o.OutputFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			r.Err = fmt.Errorf("e2e: output file: %w", err)
			return r
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	// Own process group, so that the timeout kills helpers the command
	// forked too (a stuck `docker import` pipeline, a podman conmon...).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	r.Duration = time.Since(start)
	r.Stdout, r.Stderr = stdout.String(), stderr.String()
	if o.OutputFile != "" {
		data, _ := os.ReadFile(o.OutputFile)
		r.Stdout = string(data)
	}
	if cmd.ProcessState != nil {
		r.ExitCode = cmd.ProcessState.ExitCode()
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		r.Err = fmt.Errorf("e2e: %s: timed out after %v", filepath.Base(argv[0]), timeout)
	case err != nil:
		r.Err = fmt.Errorf("e2e: %s: %w", filepath.Base(argv[0]), err)
	}
	return r
}

// TempDir makes a fresh directory with a short path under os.TempDir (unix
// socket paths must stay under 108 bytes, which t.TempDir's long names can
// break) and removes it at cleanup, after unmounting anything left mounted
// below it. Register it before anything that runs inside it, so that its
// cleanup runs last.
func TempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nctk-"+prefix+"-")
	if err != nil {
		t.Fatalf("e2e: creating temp dir: %v", err)
	}
	// /tmp may be a symlink elsewhere; mountinfo shows resolved paths.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	t.Cleanup(func() {
		if err := UnmountAll(dir); err != nil {
			t.Errorf("e2e: cleanup: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("e2e: cleanup: removing %s: %v", dir, err)
		}
	})
	return dir
}

// mountEntry is one line of /proc/self/mountinfo: the mount point and the
// file system type.
type mountEntry struct{ point, fstype string }

// readMountinfo reads the test's mount table.
func readMountinfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		_, post, ok := strings.Cut(line, " - ")
		pf := strings.Fields(post)
		if len(fields) < 5 || !ok || len(pf) == 0 {
			continue
		}
		out = append(out, mountEntry{point: unescapeMountinfo(fields[4]), fstype: pf[0]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	return out, nil
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for space...) of
// /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// UnmountAll lazily unmounts everything mounted at or below dir (as seen
// from the test's mount namespace), deepest first.
func UnmountAll(dir string) error {
	var errs []error
	for range 3 { // stacked mounts need more than one pass
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, mp := range mps {
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
			}
		}
	}
	return errors.Join(errs...)
}

// killProcsMentioning SIGKILLs every process (other than this one) whose
// command line or executable path contains marker (a harness temp dir), so
// that shims and container processes a crashed daemon left behind die too.
// It returns the pids it signalled.
func killProcsMentioning(marker string) []int {
	if marker == "" {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var killed []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		hit := bytes.Contains(cmdline, []byte(marker))
		if !hit {
			if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil {
				hit = strings.Contains(exe, marker)
			}
		}
		if hit {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed = append(killed, pid)
			}
		}
	}
	return killed
}

// removeCgroup removes the cgroup directory name (relative to each
// hierarchy's root) from every mounted cgroup hierarchy, children first.
// Engines leave their (empty) parent cgroups behind; the harness gives each
// daemon and bundle a unique parent so that it can remove it. Processes
// still in it (containers of a daemon that crashed, whose shim the cleanup
// killed) are SIGKILLed first; they can only be the test's own.
func removeCgroup(name string) error {
	name = strings.Trim(filepath.Clean("/"+name), "/")
	if name == "" {
		return nil
	}
	roots, err := cgroupRoots()
	if err != nil {
		return err
	}
	var dirs []string
	for _, root := range roots {
		dir := filepath.Join(root, name)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	killCgroupProcs(dirs)
	var errs []error
	// Children first: deeper paths sort after their parents.
	sort.SliceStable(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := removeCgroupDir(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killCgroupProcs SIGKILLs the processes listed in the cgroup.procs files
// of dirs, a few rounds (a dying pid-namespace init takes its children
// along; a process may fork meanwhile).
func killCgroupProcs(dirs []string) {
	self := os.Getpid()
	for range 5 {
		found := false
		for _, d := range dirs {
			data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				pid, err := strconv.Atoi(f)
				if err != nil || pid <= 1 || pid == self {
					continue
				}
				found = true
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if !found {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroupDir rmdirs one cgroup, retrying briefly while its last tasks
// exit.
func removeCgroupDir(dir string) error {
	var err error
	for range 50 {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}

// cgroupRoots lists the mount points of the cgroup hierarchies (v1 and v2).
func cgroupRoots() ([]string, error) {
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, m := range mounts {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			roots = append(roots, m.point)
		}
	}
	return roots, nil
}

// uniqueName is a short, unique name derived from a harness temp dir.
func uniqueName(dir string) string { return filepath.Base(dir) }

// writeFile writes data to path, creating parent directories.
func writeFile(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, data, perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// tailFile returns the last n lines of a file, for failure messages.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
