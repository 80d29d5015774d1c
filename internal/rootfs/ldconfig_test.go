package rootfs

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/config"
)

// hostLib returns a real shared library of the host to put in test roots.
func hostLib(t testing.TB) (path, soname string) {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libz.so.1.*")
	if len(matches) == 0 {
		matches, _ = filepath.Glob("/lib*/libz.so.1.*")
	}
	if len(matches) == 0 {
		t.Skip("no libz.so.1.* on this host to build a test library directory")
	}
	return matches[0], "libz.so.1"
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	must(t, os.WriteFile(dst, b, 0o755))
}

// hostLdconfig returns the host's default ldconfig as nctk resolves it.
func hostLdconfig(t testing.TB) string {
	t.Helper()
	p, err := config.Ldconfig{}.HostPath()
	must(t, err)
	return p
}

func TestPrepareLdconfig(t *testing.T) {
	d := t.TempDir()
	if _, err := PrepareLdconfig(d); err == nil {
		t.Error("a directory accepted as ldconfig")
	}
	if _, err := PrepareLdconfig(d + "/missing"); err == nil {
		t.Error("a missing ldconfig accepted")
	}
	must(t, os.WriteFile(d+"/ld", []byte("#!/bin/sh\n"), 0o755))
	l, err := PrepareLdconfig(d + "/ld")
	must(t, err)
	defer l.Close()
	// Preparing opens the file; the copy is made when first needed.
	if l.memfd != nil {
		t.Error("PrepareLdconfig copied ldconfig before it is run")
	}
	// What runs is the file as opened: replacing the path afterwards
	// changes nothing.
	must(t, os.Rename(d+"/ld", d+"/ld.old"))
	must(t, os.WriteFile(d+"/ld", []byte("#!/bin/sh\nreplaced\n"), 0o755))
	mf, err := l.sealed()
	must(t, err)
	if again, err := l.sealed(); err != nil || again != mf {
		t.Errorf("second sealed() = %v, %v: want the same copy", again, err)
	}
	got := make([]byte, 64)
	n, _ := mf.ReadAt(got, 0)
	if string(got[:n]) != "#!/bin/sh\n" {
		t.Errorf("copy holds %q, want the file as opened", got[:n])
	}
	// The copy is sealed: it cannot be written.
	if _, err := mf.Write([]byte("x")); err == nil {
		t.Error("sealed ldconfig copy is writable")
	}
	if l.path != d+"/ld" {
		t.Errorf("path = %q", l.path)
	}
	var nilL *Ldconfig
	if err := nilL.Run(context.Background(), d, nil, LdconfigOptions{}); err == nil {
		t.Error("Run on an unprepared ldconfig succeeded")
	}
}

// TestRunLdconfigHostile runs the host's real ldconfig over a container root
// whose /etc/ld.so.cache and library links point at host files, and whose
// directory list names a host-only directory.
func TestRunLdconfigHostile(t *testing.T) {
	requireRoot(t)
	lib, soname := hostLib(t)
	e := newEnv(t)
	must(t, os.MkdirAll(e.root+"/etc", 0o755))
	must(t, os.WriteFile(e.root+"/etc/debian_version", []byte("12\n"), 0o644))
	libdir := "/usr/lib/x86_64-linux-gnu"
	copyFile(t, lib, filepath.Join(e.root, libdir, filepath.Base(lib)))
	// Hostile: the cache and the SONAME link point at host files.
	must(t, os.Symlink(e.host+"/etc/ld.so.cache", e.root+"/etc/ld.so.cache"))
	must(t, os.Symlink(e.host+"/lib/libhost.so.1", filepath.Join(e.root, libdir, soname)))
	err := RunLdconfig(context.Background(), e.root, []string{libdir, e.host + "/lib"}, LdconfigOptions{Ldconfig: hostLdconfig(t)})
	must(t, err)
	e.checkHost(t)
	st, err := os.Lstat(e.root + "/etc/ld.so.cache")
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("container cache is not a regular file: %v %v", st, err)
	}
	cache, _ := os.ReadFile(e.root + "/etc/ld.so.cache")
	if !strings.Contains(string(cache), soname) || !strings.Contains(string(cache), libdir) {
		t.Errorf("cache lacks %s in %s", soname, libdir)
	}
	if strings.Contains(string(cache), "libhost") {
		t.Error("cache lists a host-only library")
	}
	if got, _ := os.Readlink(filepath.Join(e.root, libdir, soname)); got != filepath.Base(lib) {
		t.Errorf("SONAME link = %q, want %q", got, filepath.Base(lib))
	}
}

func TestRunLdconfigDropIn(t *testing.T) {
	requireRoot(t)
	lib, soname := hostLib(t)
	e := newEnv(t)
	copyFile(t, lib, filepath.Join(e.root, "/usr/local/nvidia/lib64", filepath.Base(lib)))
	// No /etc at all (busybox-like): ldconfig must still write the cache.
	err := RunLdconfig(context.Background(), e.root, []string{"/usr/local/nvidia/lib64"}, LdconfigOptions{Ldconfig: hostLdconfig(t), ConfDropIn: true, NoPivot: true})
	must(t, err)
	conf, err := os.ReadFile(e.root + "/etc/ld.so.conf.d/00-nctk.conf")
	if err != nil || !strings.Contains(string(conf), "/usr/local/nvidia/lib64\n") {
		t.Errorf("drop-in = %q, %v", conf, err)
	}
	if b, _ := os.ReadFile(e.root + "/etc/ld.so.conf"); !strings.Contains(string(b), "include /etc/ld.so.conf.d/*.conf") {
		t.Errorf("ld.so.conf = %q", b)
	}
	if cache, _ := os.ReadFile(e.root + "/etc/ld.so.cache"); !strings.Contains(string(cache), soname) {
		t.Error("cache lacks the library")
	}
	e.checkHost(t)
}

func TestRunLdconfigErrors(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	ctx := context.Background()
	ld := hostLdconfig(t)
	if err := RunLdconfig(ctx, e.root, []string{"relative"}, LdconfigOptions{Ldconfig: ld}); err == nil {
		t.Error("relative directory accepted")
	}
	if err := RunLdconfig(ctx, e.root+"/missing", nil, LdconfigOptions{Ldconfig: ld}); err == nil {
		t.Error("missing root accepted")
	}
	for _, bad := range []string{"", "sbin/ldconfig"} {
		if err := RunLdconfig(ctx, e.root, nil, LdconfigOptions{Ldconfig: bad}); err == nil || !strings.Contains(err.Error(), "not an absolute host path") {
			t.Errorf("ldconfig %q: %v", bad, err)
		}
	}
	// A failing "ldconfig" reports its status and output.
	d := t.TempDir()
	bin := buildProbe(t, d, `package main
import ("fmt"; "os")
func main() { fmt.Println("probe failing on purpose"); os.Exit(3) }`)
	err := RunLdconfig(ctx, e.root, nil, LdconfigOptions{Ldconfig: bin})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "probe failing on purpose") {
		t.Errorf("failing ldconfig: %v", err)
	}
	// A hanging one is killed at the timeout.
	bin = buildProbe(t, t.TempDir(), `package main
import "time"
func main() { time.Sleep(time.Hour) }`)
	start := time.Now()
	err = RunLdconfig(ctx, e.root, nil, LdconfigOptions{Ldconfig: bin, Timeout: 300 * time.Millisecond})
	if err == nil || time.Since(start) > 10*time.Second {
		t.Errorf("hanging ldconfig: %v after %v", err, time.Since(start))
	}
}

// buildProbe compiles a static Go program to stand in for ldconfig.
func buildProbe(t *testing.T, dir, src string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go toolchain not in PATH (needed to build the sandbox probe): %v", err)
	}
	must(t, os.WriteFile(dir+"/main.go", []byte(src), 0o644))
	must(t, os.WriteFile(dir+"/go.mod", []byte("module probe\ngo 1.22\n"), 0o644))
	cmd := exec.Command(goBin, "build", "-o", dir+"/probe", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	return dir + "/probe"
}

const probeSrc = `package main

import (
	"encoding/json"
	"net"
	"os"
	"syscall"
	"unsafe"
)

func main() {
	r := map[string]any{}
	r["pid"] = os.Getpid()
	r["env"] = os.Environ()
	r["args"] = os.Args
	r["uid"] = os.Getuid()
	var ents []string
	if es, err := os.ReadDir("/"); err == nil {
		for _, e := range es {
			ents = append(ents, e.Name())
		}
	}
	r["root"] = ents
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		es, _ := os.ReadDir(d)
		r[d] = len(es)
	}
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	r["ifaces"] = names
	nnp, _, _ := syscall.Syscall(syscall.SYS_PRCTL, 39 /* PR_GET_NO_NEW_PRIVS */, 0, 0)
	r["nnp"] = nnp
	hdr := struct{ v uint32; pid int32 }{0x20080522, 0}
	var data [2]struct{ eff, perm, inh uint32 }
	syscall.Syscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	r["capeff"] = uint64(data[0].eff) | uint64(data[1].eff)<<32
	r["capinh"] = uint64(data[0].inh) | uint64(data[1].inh)<<32
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	r["nofile"] = lim.Max
	host, _ := os.Hostname()
	r["hostname"] = host
	_, err := os.Stat(os.Args[len(os.Args)-1])
	r["hostDirVisible"] = err == nil
	b, _ := json.Marshal(r)
	os.WriteFile("/probe.json", b, 0o644)
}
`

// TestLdconfigSandbox runs a probe in place of ldconfig and checks what it
// sees: the container root as "/", PID 1, no environment, only loopback,
// masked /proc /sys /dev, no_new_privs, a reduced capability set, limits.
func TestLdconfigSandbox(t *testing.T) {
	requireRoot(t)
	bin := buildProbe(t, t.TempDir(), probeSrc)
	for _, noPivot := range []bool{false, true} {
		e := newEnv(t)
		for _, d := range []string{"/proc", "/sys", "/dev", "/etc"} {
			must(t, os.MkdirAll(e.root+d, 0o755))
		}
		must(t, os.WriteFile(e.root+"/sys/file", nil, 0o644))
		must(t, os.WriteFile(e.root+"/marker", nil, 0o644))
		err := RunLdconfig(context.Background(), e.root, []string{"/usr/lib", e.host}, LdconfigOptions{Ldconfig: bin, NoPivot: noPivot})
		must(t, err)
		b, err := os.ReadFile(e.root + "/probe.json")
		must(t, err)
		var got struct {
			Pid            int      `json:"pid"`
			Env            []string `json:"env"`
			Args           []string `json:"args"`
			Root           []string `json:"root"`
			Proc           int      `json:"/proc"`
			Sys            int      `json:"/sys"`
			Ifaces         []string `json:"ifaces"`
			NNP            int      `json:"nnp"`
			CapEff         uint64   `json:"capeff"`
			CapInh         uint64   `json:"capinh"`
			NoFile         uint64   `json:"nofile"`
			Hostname       string   `json:"hostname"`
			HostDirVisible bool     `json:"hostDirVisible"`
		}
		must(t, json.Unmarshal(b, &got))
		myHost, _ := os.Hostname()
		wantArgs := "ldconfig -f /etc/ld.so.conf -C /etc/ld.so.cache /usr/lib " + e.host
		switch {
		case got.Pid != 1:
			t.Errorf("pid = %d, want 1 (own PID namespace)", got.Pid)
		case len(got.Env) != 0:
			t.Errorf("environment = %v, want empty", got.Env)
		case strings.Join(got.Args, " ") != wantArgs:
			t.Errorf("args = %q, want %q", got.Args, wantArgs)
		case !slices.Contains(got.Root, "marker"):
			t.Errorf("/ = %v, want the container root", got.Root)
		case got.Proc != 0 || got.Sys != 0:
			t.Errorf("/proc has %d entries, /sys %d: want masked", got.Proc, got.Sys)
		case len(got.Ifaces) > 1:
			t.Errorf("network interfaces %v, want only loopback", got.Ifaces)
		case got.NNP != 1:
			t.Errorf("no_new_privs = %d", got.NNP)
		case got.CapEff&^(1<<1|1<<2|1<<3) != 0:
			t.Errorf("effective capabilities %#x beyond DAC_OVERRIDE|DAC_READ_SEARCH|FOWNER", got.CapEff)
		case got.CapInh != 0:
			t.Errorf("inheritable capabilities %#x", got.CapInh)
		case got.NoFile != 64:
			t.Errorf("RLIMIT_NOFILE = %d", got.NoFile)
		case got.HostDirVisible:
			t.Errorf("host directory %s visible in the sandbox", e.host)
		case got.Hostname == "" && myHost == "":
			t.Errorf("hostname empty")
		}
		e.checkHost(t)
	}
}

// libRootAndLdconfig returns a container root holding a copy of a host
// library in /usr/lib/x86_64-linux-gnu and an empty /etc, and the host's
// ldconfig prepared (closed when tb ends).
func libRootAndLdconfig(tb testing.TB) (string, *Ldconfig) {
	tb.Helper()
	lib, _ := hostLib(tb)
	root := tb.TempDir()
	copyFile(tb, lib, filepath.Join(root, "/usr/lib/x86_64-linux-gnu", filepath.Base(lib)))
	must(tb, os.MkdirAll(root+"/etc", 0o755))
	l, err := PrepareLdconfig(hostLdconfig(tb))
	must(tb, err)
	tb.Cleanup(func() { l.Close() })
	return root, l
}

func BenchmarkRunLdconfig(b *testing.B) {
	requireRoot(b)
	root, l := libRootAndLdconfig(b)
	b.ResetTimer()
	for b.Loop() {
		must(b, l.Run(context.Background(), root, []string{"/usr/lib/x86_64-linux-gnu"}, LdconfigOptions{}))
	}
}

func BenchmarkPrepareLdconfig(b *testing.B) {
	hp := hostLdconfig(b)
	for b.Loop() {
		l, err := PrepareLdconfig(hp)
		must(b, err)
		l.Close()
	}
}

// TestLdconfigChildParentGone: a sandbox child whose parent died before it
// could set its parent-death signal (it cannot see that parent: it is PID 1
// of its own namespace) finds the liveness pipe closed and changes nothing.
func TestLdconfigChildParentGone(t *testing.T) {
	requireRoot(t)
	root, l := libRootAndLdconfig(t)
	exeCopy, err := l.sealed()
	must(t, err)
	var st syscall.Stat_t
	must(t, syscall.Stat(root, &st))
	cfg, err := json.Marshal(childConfig{Root: root, Dev: st.Dev, Ino: st.Ino, Dirs: []string{"/usr/lib/x86_64-linux-gnu"}})
	must(t, err)
	before := listTree(t, root)
	for _, parentGone := range []bool{true, false} {
		r, w, err := os.Pipe()
		must(t, err)
		if parentGone {
			w.Close()
		}
		cmd := sandboxCommand(context.Background(), "", cfg, exeCopy, r)
		out, err := cmd.CombinedOutput()
		r.Close()
		w.Close()
		if parentGone {
			if err == nil || !strings.Contains(string(out), "calling process is gone") {
				t.Errorf("parent gone: %v, %s; want a refusal", err, out)
			}
			if after := listTree(t, root); !slices.Equal(after, before) {
				t.Errorf("parent gone: the root changed: %v, was %v", after, before)
			}
			continue
		}
		if err != nil {
			t.Fatalf("parent alive: %v: %s", err, out)
		}
		if _, err := os.Stat(root + "/etc/ld.so.cache"); err != nil {
			t.Errorf("parent alive: no ld.so.cache: %v", err)
		}
	}
}

// listTree lists the paths below dir.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	must(t, filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		out = append(out, strings.TrimPrefix(p, dir))
		return err
	}))
	return out
}
