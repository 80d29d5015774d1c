package cdihook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/hostfacts"
	"github.com/nctk/nctk/internal/ocistate"
	"github.com/nctk/nctk/internal/rootfs"
)

// TestMain lets the test binary act as nvidia-cdi-hook (for runc) and as
// the ldconfig sandbox child.
func TestMain(m *testing.M) {
	if rootfs.MaybeRunChild(os.Args) {
		return
	}
	if os.Getenv("NCTK_CDIHOOK_TEST_MAIN") == "1" {
		e := app.FromOS()
		if log := os.Getenv(runsLogEnv); log != "" {
			appendLine(log, strings.Join(os.Args[1:], " "))
		}
		if log := os.Getenv(stdinLogEnv); log != "" {
			e.Stdin = &stdinLog{r: e.Stdin, log: log}
		}
		if len(os.Args) > 1 && os.Args[0] == "nvidia-ctk" && os.Args[1] == "hook" {
			// As nctk's nvidia-ctk dispatches `nvidia-ctk hook …`.
			e.Args = append([]string{"nvidia-ctk hook"}, os.Args[2:]...)
		}
		if root := os.Getenv(mountCheckEnv); root != "" {
			os.Exit(mainCheckingMounts(root, func() int { return Main(e) }))
		}
		os.Exit(Main(e))
	}
	os.Exit(m.Run())
}

// runsLogEnv names a file to which a hook run as the test binary appends
// its arguments when it starts: one line per hook process.
const runsLogEnv = "NCTK_CDIHOOK_TEST_RUNS_LOG"

// appendLine appends line and a newline to the file at p.
func appendLine(p, line string) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line + "\n")
}

// stdinLogEnv names a file to which a hook run as the test binary
// appends its arguments when it reads the OCI state from stdin.
const stdinLogEnv = "NCTK_CDIHOOK_TEST_STDIN_LOG"

// stdinLog is stdin, noting in log that it was read.
type stdinLog struct {
	r    io.Reader
	log  string
	read bool
}

func (s *stdinLog) Read(p []byte) (int, error) {
	if !s.read {
		s.read = true
		if f, err := os.OpenFile(s.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
			fmt.Fprintln(f, strings.Join(os.Args[1:], " "))
			f.Close()
		}
	}
	return s.r.Read(p)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type result struct {
	code           int
	stdout, stderr string
}

func run(stdin string, environ []string, args ...string) result {
	var out, errb bytes.Buffer
	e := &app.Env{Args: append([]string{"nvidia-cdi-hook"}, args...), Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Environ: environ}
	code := Main(e)
	return result{code, out.String(), errb.String()}
}

// bundle is a bundle directory with a config.json whose root.path is
// "rootfs" (relative) and that rootfs.
func bundle(t *testing.T) (dir, root string) {
	t.Helper()
	dir = t.TempDir()
	root = filepath.Join(dir, "rootfs")
	must(t, os.MkdirAll(root, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"cwd":"/","user":{"uid":0,"gid":0}}}`), 0o644))
	return dir, root
}

func stateFor(bundle string) string {
	return fmt.Sprintf(`{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":%q}`, bundle)
}

// unmountUnder lazily unmounts everything mounted below dir (tests that run
// hooks in-process mount in the test's own namespace).
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		var mps []string
		for line := range strings.SplitSeq(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				mps = append(mps, f[4])
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(mps)))
		for _, m := range mps {
			unix.Unmount(m, unix.MNT_DETACH)
		}
	})
}

// decodeChecked is what containerRoot does with the state on stdin: the
// shared decoding, then the hooks' own check.
func decodeChecked(data []byte) (ocistate.State, error) {
	s, err := ocistate.DecodeState(data)
	if err != nil {
		return ocistate.State{}, err
	}
	return s, checkState(s)
}

func TestCheckState(t *testing.T) {
	tests := []struct {
		in   string
		want ocistate.State
		err  string
	}{
		{`{"pid":3,"bundle":"/b"}`, ocistate.State{Pid: 3, Bundle: "/b"}, ""},
		{`{"pid":3,"bundlePath":"/b"}`, ocistate.State{Pid: 3, Bundle: "/b"}, ""},
		{`{"root":"/r"}`, ocistate.State{Root: "/r"}, ""},
		{`{"root":"rel","bundle":"/b"}`, ocistate.State{Root: "rel", Bundle: "/b"}, ""},
		{``, ocistate.State{}, "empty input"},
		{`{`, ocistate.State{}, "OCI state"},
		{`[]`, ocistate.State{}, "OCI state"},
		{`{"pid":"x","bundle":"/b"}`, ocistate.State{}, "OCI state"},
		{`{"pid":1}`, ocistate.State{}, "neither bundle nor root"},
		{`null`, ocistate.State{}, "neither bundle nor root"},
		{`{"bundle":"relative"}`, ocistate.State{}, "not an absolute path"},
		{`{"bundlePath":"relative","root":"/r"}`, ocistate.State{}, "not an absolute path"},
		{`{"root":{"path":"rootfs"},"bundle":"/b"}`, ocistate.State{}, `field "root"`},
	}
	for _, tt := range tests {
		got, err := decodeChecked([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("decodeChecked(%q) = %+v, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("decodeChecked(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzCheckState(f *testing.F) {
	f.Add([]byte(`{"pid":3,"bundle":"/b"}`))
	f.Add([]byte(`{"root":"rootfs","bundle":"/b"}`))
	f.Add([]byte(`{"bundlePath":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeChecked(data)
		if err == nil && s.Bundle != "" && !filepath.IsAbs(s.Bundle) {
			t.Fatalf("relative bundle %q accepted", s.Bundle)
		}
		if err == nil && s.Bundle == "" && s.Root == "" {
			t.Fatalf("state %+v without bundle or root accepted", s)
		}
	})
}

func TestContainerRoot(t *testing.T) {
	b, root := bundle(t)
	h := func(stdin string) *hookEnv {
		return &hookEnv{Env: &app.Env{Stdin: strings.NewReader(stdin)}, log: discard()}
	}
	tests := []struct {
		stdin, spec, want, err string
	}{
		{stateFor(b), "", root, ""},
		{`{"root":"/abs/root","bundle":"/b"}`, "", "/abs/root", ""},
		{`{"root":"rel","bundle":"/b"}`, "", "/b/rel", ""},
		{`{"root":"rel"}`, "", "", "relative root"},
		{"", filepath.Join(b, "config.json"), root, ""},
		{stateFor("/nonexistent"), "", "", "/nonexistent/config.json"},
	}
	for _, tt := range tests {
		got, err := h(tt.stdin).containerRoot(tt.spec)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("containerRoot(%q, %q) = %q, %v; want error %q", tt.stdin, tt.spec, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("containerRoot(%q, %q) = %q, %v; want %q", tt.stdin, tt.spec, got, err, tt.want)
		}
	}
}

// TestContainerRootOncePerChain: the hooks of one chain share the state
// and read config.json once; a hook run alone reads it each time.
func TestContainerRootOncePerChain(t *testing.T) {
	b, root := bundle(t)
	state := stateFor(b)
	moved := filepath.Join(t.TempDir(), "other-root")
	for _, chained := range []bool{true, false} {
		var chain *chainMemo
		if chained {
			chain = newChainMemo()
		}
		h := &hookEnv{Env: &app.Env{Stdin: strings.NewReader(state)}, log: discard(), chain: chain}
		if got, err := h.containerRoot(""); err != nil || got != root {
			t.Fatalf("chained %v: first containerRoot = %q, %v; want %q", chained, got, err, root)
		}
		// config.json now names another root; the next hook gets the
		// state again, as Main gives each hook of a chain.
		cfg := filepath.Join(b, "config.json")
		orig, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, []byte(`{"ociVersion":"1.2.0","root":{"path":"`+moved+`"}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		h = &hookEnv{Env: &app.Env{Stdin: strings.NewReader(state)}, log: discard(), chain: chain}
		got, err := h.containerRoot("")
		want := moved
		if chained {
			want = root
		}
		if err != nil || got != want {
			t.Errorf("chained %v: second containerRoot = %q, %v; want %q", chained, got, err, want)
		}
		if err := os.WriteFile(cfg, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUnknownHooksAndUsage(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"enable-cuda-compat", "--host-driver-version", "580.1", "--bogus"}, 1, "bogus"},
		{[]string{"chmod", "--path", "/dev/dri"}, 1, "--mode is required"},
		{[]string{"some-future-hook", "--whatever=1", "x"}, 0, "unknown hook"},
		{[]string{"--quiet", "some-future-hook"}, 0, ""},
		{[]string{"noop"}, 0, ""},
		{nil, 0, "no CDI hook specified"},
		{[]string{";"}, 0, "no CDI hook specified"},
		{[]string{"--bogus"}, 0, "unsupported CDI hook"},
		{[]string{"--bogus", "future-hook", "--x"}, 0, "unsupported CDI hook \"future-hook\""},
		{[]string{"--bogus", "create-symlinks", "--link", "a::/b"}, 1, "bogus"},
		{[]string{"create-symlinks", "--bogus"}, 1, "bogus"},
		{[]string{"create-symlinks", "--link", "nolink"}, 1, `invalid --link "nolink"`},
		{[]string{"create-symlinks", "--link", "a::relative"}, 1, "absolute container path"},
		{[]string{"create-symlinks", "positional"}, 1, "unexpected argument"},
		{[]string{"update-ldcache", "--folder", "relative"}, 1, "not an absolute container path"},
		{[]string{"update-ldcache", "--ldconfig-path", "sbin/ldconfig"}, 1, `invalid --ldconfig-path "sbin/ldconfig": not an absolute host path`},
		{[]string{"update-ldcache", "--lib", "lib/libcuda.so.1"}, 1, "not an absolute container path"},
		{[]string{"create-symlinks", "-h"}, 0, "-link"},
	}
	for _, tt := range tests {
		r := run("", nil, tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, tt.code, tt.stderr)
		}
		if tt.stderr == "" && r.stderr != "" {
			t.Errorf("%q: unexpected output %q", tt.args, r.stderr)
		}
	}
	if r := run("", nil, "--version"); r.code != 0 || !strings.Contains(r.stdout, "nctk") {
		t.Errorf("--version: %d %q", r.code, r.stdout)
	}
	if r := run("", []string{"NVIDIA_CTK_DEBUG=true"}, "noop"); r.code != 0 {
		t.Errorf("debug env: %d", r.code)
	}
}

// TestCreateSymlinksHostile: links whose parents are symlinks to host paths
// are created inside the root; a file at a link path is replaced (as
// NVIDIA documents); a link over an image directory is refused and the
// hook's earlier links are rolled back.
func TestCreateSymlinksHostile(t *testing.T) {
	b, root := bundle(t)
	host := t.TempDir()
	must(t, os.MkdirAll(root+"/usr/lib", 0o755))
	must(t, os.Symlink(host, root+"/usr/lib/x86_64-linux-gnu"))
	must(t, os.MkdirAll(filepath.Join(root, host), 0o755))
	r := run(stateFor(b), nil, "create-symlinks",
		"--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
		"--link=../../lib/libnvidia-ml.so.1::/usr/lib/x86_64-linux-gnu/libnvidia-ml.so")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if ents, _ := os.ReadDir(host); len(ents) != 0 {
		t.Errorf("links created on the host: %v", ents)
	}
	if got, _ := os.Readlink(filepath.Join(root, host, "libcuda.so")); got != "libcuda.so.1" {
		t.Errorf("link inside the root -> %q", got)
	}
	// A link path climbing out with ".." stays inside the root.
	if r := run(stateFor(b), nil, "create-symlinks", "--link", "t::/../../.."+host+"/climb"); r.code != 0 {
		t.Fatalf("climbing link: exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Lstat(filepath.Join(root, host, "climb")); err != nil {
		t.Errorf("climbing link not inside the root: %v", err)
	}
	if ents, _ := os.ReadDir(host); len(ents) != 0 {
		t.Errorf("links created on the host: %v", ents)
	}
	// Idempotent.
	if r := run(stateFor(b), nil, "create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"); r.code != 0 {
		t.Errorf("second run: exit %d: %s", r.code, r.stderr)
	}
	must(t, os.WriteFile(root+"/usr/lib/real", []byte("image"), 0o644))
	must(t, unix.Mkfifo(root+"/usr/lib/fifo", 0o644))
	if r := run(stateFor(b), nil, "create-symlinks", "--link", "x::/usr/lib/real", "--link", "y::/usr/lib/fifo"); r.code != 0 {
		t.Errorf("links over a file and a FIFO: exit %d, %q", r.code, r.stderr)
	}
	for name, want := range map[string]string{"real": "x", "fifo": "y"} {
		if got, err := os.Readlink(root + "/usr/lib/" + name); err != nil || got != want {
			t.Errorf("/usr/lib/%s -> %q, %v; want a link to %s", name, got, err, want)
		}
	}
	if ents, _ := os.ReadDir(root + "/usr/lib"); len(ents) != 3 {
		t.Errorf("/usr/lib holds %d entries, want 3 (the replaced files are gone)", len(ents))
	}
	must(t, os.MkdirAll(root+"/usr/lib/dir/sub", 0o755))
	r = run(stateFor(b), nil, "create-symlinks", "--link", "x::/usr/lib/new", "--link", "y::/usr/lib/dir")
	if r.code != 1 || !strings.Contains(r.stderr, "/usr/lib/dir") || !strings.Contains(r.stderr, "a directory") {
		t.Errorf("link over a directory: exit %d, %q", r.code, r.stderr)
	}
	if _, err := os.Lstat(root + "/usr/lib/new"); err == nil {
		t.Error("the failed hook's first link was not rolled back")
	}
	if _, err := os.Stat(root + "/usr/lib/dir/sub"); err != nil {
		t.Errorf("the image's directory changed: %v", err)
	}
}

func TestRootIsHostRoot(t *testing.T) {
	r := run(`{"root":"/","bundle":"/b"}`, nil, "create-symlinks", "--link", "a::/etc/nctk-should-not-exist")
	if r.code != 1 || !strings.Contains(r.stderr, "refusing") {
		t.Errorf("exit %d %q", r.code, r.stderr)
	}
	if _, err := os.Lstat("/etc/nctk-should-not-exist"); err == nil {
		os.Remove("/etc/nctk-should-not-exist")
		t.Error("created a link on the host")
	}
}

// TestUpdateLdcache runs update-ldcache every way: --folder only (as
// NVIDIA's CDI specs call it) rebuilt in-process, and with ldconfig when the
// image holds what the in-process rebuild does not reproduce (a legacy
// hwcap subdirectory); --lib in-process (as nvidia-container-runtime's spec
// edits call it), and the fall back to ldconfig when that fails (the OCI
// state on stdin, read once, still names the root); each on an image whose
// cache is a symlink to the host's.
func TestUpdateLdcache(t *testing.T) {
	for _, mode := range []string{"rebuild", "rebuild-unsupported", "lib", "lib-fallback"} {
		t.Run(mode, func(t *testing.T) { testUpdateLdcache(t, mode) })
	}
}

func testUpdateLdcache(t *testing.T, mode string) {
	e2e.RequireRoot(t)
	matches, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	if len(matches) == 0 {
		t.Skip("no host libz.so.1.* to stand in for a driver library")
	}
	b, root := bundle(t)
	data, err := os.ReadFile(matches[0])
	must(t, err)
	drv := "/usr/local/nvidia/lib64"
	must(t, os.MkdirAll(root+drv, 0o755))
	must(t, os.WriteFile(root+drv+"/"+filepath.Base(matches[0]), data, 0o755))
	hostCache, _ := os.ReadFile("/etc/ld.so.cache")
	must(t, os.MkdirAll(root+"/etc", 0o755))
	must(t, os.Symlink("/etc/ld.so.cache", root+"/etc/ld.so.cache")) // hostile
	args := []string{"--debug", "update-ldcache", "--folder", drv}
	switch mode {
	case "rebuild-unsupported":
		must(t, os.MkdirAll(root+drv+"/tls", 0o755))
	case "lib", "lib-fallback":
		// The runtime creates the SONAME link before (create-symlinks).
		must(t, os.Symlink(filepath.Base(matches[0]), root+drv+"/libz.so.1"))
		args = append(args, "--lib", drv+"/"+filepath.Base(matches[0]), "--lib", drv+"/libz.so.1")
		if mode == "lib-fallback" {
			args = append(args, "--lib", drv+"/libnctk-absent.so.1")
		}
	}
	r := run(stateFor(b), nil, args...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	ranLdconfig := strings.Contains(r.stderr, "running ldconfig")
	if wantLdconfig := strings.HasSuffix(mode, "-unsupported") || strings.HasSuffix(mode, "-fallback"); ranLdconfig != wantLdconfig {
		t.Errorf("ran ldconfig: %v, want %v: %s", ranLdconfig, wantLdconfig, r.stderr)
	}
	if mode == "rebuild" && !strings.Contains(r.stderr, "rebuilt in-process") {
		t.Errorf("no in-process rebuild logged: %s", r.stderr)
	}
	if now, _ := os.ReadFile("/etc/ld.so.cache"); !bytes.Equal(now, hostCache) {
		t.Fatal("the host's ld.so.cache changed")
	}
	cache, _ := os.ReadFile(root + "/etc/ld.so.cache")
	if !strings.Contains(string(cache), drv+"/libz.so.1") {
		t.Error("container cache lacks the library")
	}
	if target, err := os.Readlink(root + drv + "/libz.so.1"); err != nil || target != filepath.Base(matches[0]) {
		t.Errorf("SONAME link: %q, %v", target, err)
	}
	if conf, _ := os.ReadFile(root + "/etc/ld.so.conf.d/00-nctk.conf"); !strings.Contains(string(conf), drv) {
		t.Errorf("drop-in = %q", conf)
	}
	if mode == "lib" {
		// What the library's ELF headers say is kept for the next
		// container, by the file's identity, in the CDI cache directory.
		var st unix.Stat_t
		must(t, unix.Stat(root+drv+"/"+filepath.Base(matches[0]), &st))
		if lib, isLib, found := hostfacts.OpenLibFacts(hostfacts.DefaultDir(os.Getenv)).Library(&st); !found || !isLib || lib.SONAME != "libz.so.1" {
			t.Errorf("library facts for %s: %+v, isLib %v, found %v", matches[0], lib, isLib, found)
		}
	}
}

func hostProc(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	must(t, os.MkdirAll(d+"/gpus/00000000:01:00.0", 0o555))
	must(t, os.MkdirAll(d+"/gpus/00000000:02:00.0", 0o555))
	must(t, os.WriteFile(d+"/params", []byte("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n"), 0o444))
	must(t, os.WriteFile(d+"/version", []byte("NVRM version: 535.261.03\n"), 0o444))
	return d
}

func TestMountProcDriver(t *testing.T) {
	e2e.RequireRoot(t)
	b, root := bundle(t)
	unmountUnder(t, root)
	hp := hostProc(t)
	r := run(stateFor(b), nil, "mount-proc-driver", "--host-dir", hp, "--gpu", "00000000:02:00.0")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	view := root + "/proc/driver/nvidia"
	ents, _ := os.ReadDir(view + "/gpus")
	if len(ents) != 1 || ents[0].Name() != "00000000:02:00.0" {
		t.Errorf("gpus = %v", ents)
	}
	if p, _ := os.ReadFile(view + "/params"); !strings.Contains(string(p), "ModifyDeviceFiles: 0") {
		t.Errorf("params = %q", p)
	}
	if r := run(stateFor(b), nil, "mount-proc-driver", "--host-dir", hp, "--gpu", "00000000:09:00.0"); r.code != 1 || !strings.Contains(r.stderr, "00000000:09:00.0") {
		t.Errorf("missing GPU: exit %d %q", r.code, r.stderr)
	}
}

func TestDisableDeviceNodeModification(t *testing.T) {
	e2e.RequireRoot(t)
	b, root := bundle(t)
	unmountUnder(t, root)
	hp := hostProc(t)
	// No params in the container (no driver): nothing to do.
	if r := run(stateFor(b), nil, "disable-device-node-modification", "--host-dir", hp); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	must(t, os.MkdirAll(root+"/proc/driver/nvidia", 0o755))
	must(t, os.WriteFile(root+"/proc/driver/nvidia/params", []byte("ModifyDeviceFiles: 1\n"), 0o444))
	if r := run(stateFor(b), nil, "disable-device-node-modification", "--host-dir", hp); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if p, _ := os.ReadFile(root + "/proc/driver/nvidia/params"); !strings.Contains(string(p), "ModifyDeviceFiles: 0") || !strings.Contains(string(p), "ResmanDebugLevel") {
		t.Errorf("params = %q", p)
	}
	// Host without a driver: nothing to do.
	if r := run(stateFor(b), nil, "disable-device-node-modification", "--host-dir", t.TempDir()); r.code != 0 {
		t.Errorf("no host params: exit %d %s", r.code, r.stderr)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestChainedHooks(t *testing.T) {
	b, root := bundle(t)
	must(t, os.MkdirAll(root+"/usr/lib", 0o755))
	tests := []struct {
		name  string
		args  []string
		code  int
		links []string
	}{
		{"two hooks share the state", []string{"create-symlinks", "--link", "a::/usr/lib/one", ";", "noop", ";",
			"create-symlinks", "--link", "b::/usr/lib/two"}, 0, []string{"one", "two"}},
		{"empty segments are skipped", []string{";", "create-symlinks", "--link", "c::/usr/lib/three", ";", ";"}, 0, []string{"three"}},
		{"unknown hook in a chain is skipped", []string{"future-hook", "--x", ";", "create-symlinks", "--link", "d::/usr/lib/four"}, 0, []string{"four"}},
		{"a failure stops the chain", []string{"create-symlinks", "--link", "bad", ";", "create-symlinks", "--link", "e::/usr/lib/five"}, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(stateFor(b), nil, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d: %s", r.code, tc.code, r.stderr)
			}
			for _, l := range tc.links {
				if _, err := os.Lstat(filepath.Join(root, "usr/lib", l)); err != nil {
					t.Errorf("link %s: %v", l, err)
				}
			}
		})
	}
	if _, err := os.Lstat(root + "/usr/lib/five"); err == nil {
		t.Error("the hook after a failed one ran")
	}
}

// failingStdin fails every read, counting them.
type failingStdin struct{ reads int }

func (f *failingStdin) Read([]byte) (int, error) {
	f.reads++
	return 0, errors.New("stdin broken")
}

// TestChainReadsStateWhenNeeded: a chain reads the OCI state only when one
// of its hooks needs the container root, and then once.
func TestChainReadsStateWhenNeeded(t *testing.T) {
	for _, tt := range []struct {
		name  string
		args  []string
		code  int
		reads int
	}{
		{"no hook needs it", []string{"noop", ";", "noop"}, 0, 0},
		{"the first needing it fails", []string{"noop", ";", "create-symlinks", "--link", "a::/usr/lib/a", ";", "create-symlinks", "--link", "b::/usr/lib/b"}, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := &failingStdin{}
			var out, errb bytes.Buffer
			code := Main(&app.Env{Args: append([]string{"nvidia-cdi-hook"}, tt.args...), Stdin: in, Stdout: &out, Stderr: &errb})
			if code != tt.code || in.reads != tt.reads {
				t.Errorf("exit %d after %d reads of stdin, want %d after %d: %s", code, in.reads, tt.code, tt.reads, errb.String())
			}
			if tt.code != 0 && !strings.Contains(errb.String(), "OCI state") {
				t.Errorf("error does not name the OCI state: %s", errb.String())
			}
		})
	}
}

// TestEveryHookRuns: every hook hookargs parses has a handler here (a run
// without an OCI state fails for want of one, or does nothing, but never
// for want of a handler).
func TestEveryHookRuns(t *testing.T) {
	required := map[string][]string{hookargs.NameChmod: {"--mode", "755"}}
	for _, name := range hookargs.Names() {
		hook, err := hookargs.Parse(append([]string{name}, required[name]...))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h := &hookEnv{Env: &app.Env{Stdin: strings.NewReader("")}, name: name, log: discard()}
		if err := h.run(hook); err != nil && strings.Contains(err.Error(), "not implemented") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCTKGlobalFlags: as `nvidia-ctk hook`, nvidia-ctk's global flags
// --config, -v and --version are accepted (and ignored) before and after
// the hook name, as NVIDIA's nvidia-ctk does; nvidia-cdi-hook itself has
// no --config, and its -v prints the version.
func TestCTKGlobalFlags(t *testing.T) {
	runAs := func(prog string, args ...string) result {
		var out, errb bytes.Buffer
		e := &app.Env{Args: append([]string{prog}, args...), Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}
		return result{Main(e), out.String(), errb.String()}
	}
	if r := runAs("nvidia-ctk hook", "--config", "/x", "-v", "--version", "noop", "--config=/y", "-v"); r.code != 0 || r.stderr != "" || r.stdout != "" {
		t.Errorf("nvidia-ctk hook with global flags: %+v", r)
	}
	if r := runAs("nvidia-cdi-hook", "noop", "--config=/y"); r.code == 0 {
		t.Errorf("nvidia-cdi-hook noop --config: accepted: %+v", r)
	}
	if r := runAs("/usr/bin/nvidia-cdi-hook", "-v"); r.code != 0 || !strings.Contains(r.stdout, "version") {
		t.Errorf("nvidia-cdi-hook -v by path: %+v", r)
	}
	for _, h := range []string{"help", "h"} {
		if r := runAs("nvidia-cdi-hook", h, "chmod"); r.code != 0 || !strings.Contains(r.stdout, "--mode") {
			t.Errorf("nvidia-cdi-hook %s chmod: %+v", h, r)
		}
	}
}

// TestRemoveStaleOncePerChain: in a chain, a directory whose stale
// temporary files one hook removed (as it wrote there) is not read again by
// the next (the library directory create-symlinks and update-ldcache can
// both clean); a hook run alone reads it each time. A hook that writes
// nothing there does not read it.
func TestRemoveStaleOncePerChain(t *testing.T) {
	// A pid no process has: above the kernel's pid_max limit.
	const dead = 1 << 23
	for _, chained := range []bool{true, false} {
		_, root := bundle(t)
		lib := filepath.Join(root, "usr/lib")
		must(t, os.MkdirAll(lib, 0o755))
		stale := func(n int) string {
			p := filepath.Join(lib, fmt.Sprintf(".libx.so.1.nctk-%d-%d", dead, n))
			must(t, os.WriteFile(p, nil, 0o644))
			return p
		}
		var chain *chainMemo
		if chained {
			chain = newChainMemo()
		}
		write := func(r *rootfs.Root) error { return r.WriteFile("/usr/lib/x.conf", []byte("x\n"), 0o644) }
		first := stale(1)
		h := &hookEnv{Env: &app.Env{}, log: discard(), chain: chain}
		must(t, h.withRootAt(root, func(r *rootfs.Root) error { return r.WriteFile("/etc/x", nil, 0o644) }))
		if _, err := os.Lstat(first); err != nil {
			t.Fatalf("chained %v: a hook that wrote nothing in /usr/lib removed a file there: %v", chained, err)
		}
		must(t, h.withRootAt(root, write))
		if _, err := os.Lstat(first); !os.IsNotExist(err) {
			t.Fatalf("chained %v: the stale file was not removed: %v", chained, err)
		}
		second := stale(2)
		h = &hookEnv{Env: &app.Env{}, log: discard(), chain: chain}
		must(t, h.withRootAt(root, write))
		_, err := os.Lstat(second)
		if read := os.IsNotExist(err); read == chained {
			t.Errorf("chained %v: the second hook read the directory again: %v (want %v)", chained, read, !chained)
		}
	}
}
