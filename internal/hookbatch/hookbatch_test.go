package hookbatch

import (
	"bytes"
	"debug/elf"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/ocistate"
)

// TestGroup: the entries a hook process takes on, and each refusal.
func TestGroup(t *testing.T) {
	const prog = "/usr/bin/nvidia-cdi-hook"
	env := []string{"NVIDIA_CTK_DEBUG=false"}
	hook := func(args ...string) specs.Hook {
		return specs.Hook{Path: prog, Args: append([]string{"nvidia-cdi-hook"}, args...), Env: env}
	}
	timeout := 5
	withTimeout := hook("update-ldcache", "--folder", "/t")
	withTimeout.Timeout = &timeout
	otherEnv := hook("update-ldcache", "--folder", "/x")
	otherEnv.Env = []string{"NVIDIA_CTK_DEBUG=true"}
	flagFirst := hook("--debug", "update-ldcache")
	foreign := specs.Hook{Path: "/bin/true", Args: []string{"true"}}
	alias := hook("disable-device-node-modification")
	alias.Path = "/usr/local/bin/nvidia-cdi-hook" // a link to the same binary
	sameFile := func(p string) bool { return p == prog || p == alias.Path }

	a, b, c := hook("create-symlinks", "--link", "x::/y"), hook("update-ldcache", "--folder", "/x"), hook("disable-device-node-modification")
	ctk := func(args ...string) specs.Hook {
		return specs.Hook{Path: prog, Args: append([]string{"nvidia-ctk", "hook"}, args...), Env: env}
	}
	ca, cb := ctk("create-symlinks", "--link", "x::/y"), ctk("update-ldcache", "--folder", "/x")
	for _, tt := range []struct {
		name  string
		hooks []specs.Hook
		self  specs.Hook
		want  int    // entries taken on, from self's
		err   string // else the refusal says this
		lead  int    // words naming the program (0: 1)
	}{
		{"nvidia-ctk hook (NVIDIA's specs before 1.17)", []specs.Hook{ca, cb}, ca, 2, "", 2},
		{"nvidia-ctk hook then nvidia-cdi-hook", []specs.Hook{ca, cb, b}, ca, 0, "a later createContainer hook runs", 2},
		{"nvidia-ctk with a flag before hook", []specs.Hook{{Path: prog, Args: []string{"nvidia-ctk", "-d", "hook", "create-symlinks"}, Env: env}, cb}, specs.Hook{Args: []string{"nvidia-ctk", "-d", "hook", "create-symlinks"}}, 0, "no hook of this program", 3},
		{"no lead word", []specs.Hook{a, b}, a, 0, "timeout or a flag", -1},
		{"NVIDIA's layout", []specs.Hook{a, b, c}, a, 3, "", 0},
		{"from the second", []specs.Hook{a, b, c}, b, 2, "", 0},
		{"the last has none after it", []specs.Hook{a, b, c}, c, 0, "no hook of this program", 0},
		{"a foreign hook before", []specs.Hook{foreign, a, b}, a, 2, "", 0},
		{"a foreign hook after the run", []specs.Hook{a, b, foreign}, a, 2, "", 0},
		{"a foreign hook between", []specs.Hook{a, b, foreign, c}, a, 0, "a later createContainer hook runs", 0},
		{"the run ends at another environment", []specs.Hook{a, b, otherEnv}, a, 0, "a later createContainer hook runs", 0},
		{"another environment right after", []specs.Hook{a, otherEnv}, a, 0, "no hook of this program", 0},
		{"a timeout after", []specs.Hook{a, withTimeout}, a, 0, "no hook of this program", 0},
		{"its own timeout", []specs.Hook{withTimeout, b}, withTimeout, 0, "timeout", 0},
		{"a global flag first", []specs.Hook{a, flagFirst}, a, 0, "no hook of this program", 0},
		{"the binary by another path later", []specs.Hook{a, b, foreign, alias}, a, 0, "/usr/local/bin/nvidia-cdi-hook", 0},
		{"its arguments twice", []specs.Hook{a, b, a}, a, 0, "two createContainer hooks", 0},
		{"not among the hooks", []specs.Hook{b, c}, a, 0, "no createContainer hook has", 0},
		{"another program with these arguments", []specs.Hook{{Path: "/opt/other", Args: a.Args}, b}, a, 0, "not this binary", 0},
		{"a relative path", []specs.Hook{{Path: "nvidia-cdi-hook", Args: a.Args, Env: env}, b}, a, 0, "not this binary", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lead := tt.lead
			if lead == 0 {
				lead = 1
			}
			got, err := Group(tt.hooks, tt.self.Args, lead, sameFile)
			if tt.err != "" {
				if !errors.Is(err, ErrNotBatched) || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("Group = %d entries, %v; want ErrNotBatched saying %q", len(got), err, tt.err)
				}
				return
			}
			if err != nil || len(got) != tt.want || !equalArgs(got[0].Args, tt.self.Args) {
				t.Errorf("Group = %d entries, %v; want %d from self's", len(got), err, tt.want)
			}
		})
	}
}

func equalArgs(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// TestFind reads the hooks from the bundle's config.json and refuses a
// program inside the container root.
func TestFind(t *testing.T) {
	bundle := t.TempDir()
	root := filepath.Join(bundle, "rootfs")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	inRoot := filepath.Join(root, "hook")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(exe, inRoot); err != nil {
		t.Skipf("cannot link the test binary into the root: %v", err)
	}
	write := func(prog string) {
		spec := `{"root":{"path":"rootfs"},"hooks":{"createContainer":[` +
			`{"path":"` + prog + `","args":["h","create-symlinks"]},{"path":"` + prog + `","args":["h","update-ldcache","--folder","/x"]}]}}`
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := ocistate.RuntimeHook{Root: root, Bundle: bundle}
	write(exe)
	b, err := Find(h, []string{"h", "create-symlinks"}, 1, "/proc/self/exe")
	if err != nil || b.Program != exe || len(b.Args) != 2 || strings.Join(b.Args[1], " ") != "update-ldcache --folder /x" {
		t.Errorf("Find = %+v, %v", b, err)
	}
	write(inRoot)
	if _, err := Find(h, []string{"h", "create-symlinks"}, 1, "/proc/self/exe"); !errors.Is(err, ErrNotBatched) || !strings.Contains(err.Error(), "inside the container root") {
		t.Errorf("a program inside the root: %v", err)
	}
	if err := os.Remove(filepath.Join(bundle, "config.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(h, []string{"h", "create-symlinks"}, 1, "/proc/self/exe"); !errors.Is(err, ErrNotBatched) || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("no config.json: %v", err)
	}
}

// TestInside: a path is inside the root when it, its links followed, is
// the root or under it ("..x" is a name there, not a way out).
func TestInside(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for _, d := range []string{root + "/..x", root + "/usr/bin", dir + "/out"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(root+"/usr/bin", dir+"/in-link"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		root: true, root + "/..x": true, root + "/usr/bin": true, dir + "/in-link": true,
		dir + "/out": false, dir: false, dir + "/missing": true,
	} {
		if got := inside(p, root); got != want {
			t.Errorf("inside(%s) = %v, want %v", p, got, want)
		}
	}
}

// TestExitProgram: a valid ELF executable for amd64 and arm64, none for
// another architecture; on this machine it runs and exits 0.
func TestExitProgram(t *testing.T) {
	for _, arch := range []struct {
		goarch  string
		machine elf.Machine
	}{{"amd64", elf.EM_X86_64}, {"arm64", elf.EM_AARCH64}} {
		f, err := elf.NewFile(bytes.NewReader(exitProgram(arch.goarch)))
		if err != nil {
			t.Fatalf("%s: %v", arch.goarch, err)
		}
		if f.Machine != arch.machine || f.Type != elf.ET_EXEC || len(f.Progs) != 1 || f.Progs[0].Type != elf.PT_LOAD ||
			f.Entry < f.Progs[0].Vaddr || f.Entry >= f.Progs[0].Vaddr+f.Progs[0].Filesz {
			t.Errorf("%s: machine %v, type %v, %d segments, entry %#x", arch.goarch, f.Machine, f.Type, len(f.Progs), f.Entry)
		}
	}
	if exitProgram("ppc64le") != nil {
		t.Error("a program for ppc64le")
	}
	code := exitProgram(runtime.GOARCH)
	if code == nil {
		t.Skipf("no exit program for %s", runtime.GOARCH)
	}
	p := filepath.Join(t.TempDir(), "exit0")
	if err := os.WriteFile(p, code, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(p, "ignored", "--args").CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("the exit program: %q, %v", out, err)
	}
}

// TestSharedMounts reads the peer group from a mountinfo line's optional
// fields, and the table only as far as the mounts asked for.
func TestSharedMounts(t *testing.T) {
	info := "22 1 0:21 / /proc rw,relatime shared:5 - proc proc rw\n" +
		"23 1 0:22 / /sys rw master:3 - sysfs sysfs rw\n" +
		"24 1 0:23 / /tmp rw - tmpfs tmpfs rw,shared:9\n" +
		"25 1 0:24 / /x rw shared:1 master:2 - tmpfs t rw\n" +
		"26 1 0:25 / /bad rw shared:1\n"
	for _, tt := range []struct {
		ids  []uint64
		want map[uint64]bool
		err  string
	}{
		{[]uint64{22, 23}, map[uint64]bool{22: true, 23: false}, ""},
		{[]uint64{24, 24}, map[uint64]bool{24: false}, ""},
		{[]uint64{25}, map[uint64]bool{25: true}, ""},
		{[]uint64{26}, nil, `line 5: no "-"`},
		{[]uint64{99}, nil, "line 5"},
		{[]uint64{22, 2}, nil, "line 5"},
	} {
		got, err := sharedMounts(strings.NewReader(info), tt.ids)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("mounts %v: %v, %v; want an error saying %q", tt.ids, got, err, tt.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tt.want) {
			t.Errorf("mounts %v: %v, %v; want %v", tt.ids, got, err, tt.want)
		}
	}
	// Read only as far as needed: what follows the last mount asked for
	// is not parsed.
	if got, err := sharedMounts(strings.NewReader(info+"garbage\n"), []uint64{23}); err != nil || got[23] {
		t.Errorf("stopping at mount 23: %v, %v", got, err)
	}
	if _, err := sharedMounts(strings.NewReader("1 0 0:1 / / rw - x y rw\n"), []uint64{2}); err == nil || !strings.Contains(err.Error(), "mount 2 not listed") {
		t.Errorf("a mount not listed: %v", err)
	}
}

// FuzzSharedMounts: any mount table gives an answer or an error, never a
// panic; an answer holds every mount asked for.
func FuzzSharedMounts(f *testing.F) {
	f.Add([]byte("22 1 0:21 / /proc rw,relatime shared:5 - proc proc rw\n"), uint64(22))
	f.Add([]byte("1 0 0:1 / / rw\n"), uint64(1))
	f.Fuzz(func(t *testing.T, info []byte, id uint64) {
		got, err := sharedMounts(bytes.NewReader(info), []uint64{id})
		if _, ok := got[id]; err == nil && !ok {
			t.Errorf("no answer and no error for mount %d", id)
		}
	})
}

// TestMaskRefusesRuncsNamespace: a mask in the namespace runc works in
// would be seen outside the container: refused, nothing mounted.
func TestMaskRefusesRuncsNamespace(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := Mask(exe, "/proc/self/ns/mnt"); !errors.Is(err, ErrNotBatched) || !strings.Contains(err.Error(), "the runtime's own mount namespace") {
		t.Errorf("Mask in this namespace: %v", err)
	}
	if err := Mask(exe, "/nonexistent/ns"); !errors.Is(err, ErrNotBatched) {
		t.Errorf("Mask against a namespace that is not there: %v", err)
	}
}

// inMountNS runs f on a thread of its own in a new mount namespace, its
// copies of the mounts made propagation (unix.MS_SLAVE, as runc's default
// for a container, or unix.MS_SHARED, as rootfsPropagation "rshared"); the
// thread ends with f.
func inMountNS(t testing.TB, propagation uintptr, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread goes with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		if err := unix.Mount("", "/", "", propagation|unix.MS_REC, ""); err != nil {
			t.Errorf("propagation of /: %v", err)
			return
		}
		f()
	}()
	<-done
}

// TestMask masks a program in a namespace of its own: there it is the
// exit program, mounted read-only, nosuid, nodev; here it is unchanged.
// On a mount whose peer group that namespace shares with this one, the
// mask is refused and nothing is mounted.
func TestMask(t *testing.T) {
	e2e.RequireRoot(t)
	if exitProgram(runtime.GOARCH) == nil {
		t.Skipf("no exit program for %s", runtime.GOARCH)
	}
	for _, shared := range []bool{false, true} {
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		if shared {
			if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
				t.Fatal(err)
			}
		}
		prog := filepath.Join(dir, "bin", "hook")
		if err := os.MkdirAll(filepath.Dir(prog), 0o755); err != nil {
			t.Fatal(err)
		}
		script := []byte("#!/bin/sh\nexit 3\n")
		if err := os.WriteFile(prog, script, 0o755); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "link")
		if err := os.Symlink("bin/hook", link); err != nil {
			t.Fatal(err)
		}
		// This thread's namespace is the one that must not see it (the
		// thread held, so that the new namespace's goroutine gets another).
		runtime.LockOSThread()
		here := "/proc/" + strconv.Itoa(os.Getpid()) + "/task/" + strconv.Itoa(unix.Gettid()) + "/ns/mnt"
		propagation := uintptr(unix.MS_SLAVE)
		if shared {
			propagation = unix.MS_SHARED
		}
		inMountNS(t, propagation, func() {
			err := Mask(link, here)
			if shared {
				if !errors.Is(err, ErrNotBatched) || !strings.Contains(err.Error(), "shares mounts") {
					t.Errorf("Mask on a shared mount: %v", err)
				}
				if data, _ := os.ReadFile(prog); !bytes.Equal(data, script) {
					t.Error("the program changed in the namespace after a refused mask")
				}
				return
			}
			if err != nil {
				t.Fatalf("Mask: %v", err)
			}
			if data, _ := os.ReadFile(prog); !bytes.Equal(data, exitProgram(runtime.GOARCH)) {
				t.Errorf("the masked program holds %d bytes", len(data))
			}
			if err := exec.Command(link, "create-symlinks", "--link", "a::b").Run(); err != nil {
				t.Errorf("the masked program by its link: %v", err)
			}
			var sfs unix.Statfs_t
			if err := unix.Statfs(prog, &sfs); err != nil {
				t.Fatal(err)
			}
			if want := int64(unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NODEV); sfs.Flags&want != want {
				t.Errorf("the mask's mount flags %#x lack ro, nosuid, nodev", sfs.Flags)
			}
			if entries, _ := os.ReadDir(filepath.Dir(prog)); len(entries) != 1 || entries[0].Name() != "hook" {
				t.Errorf("the program's directory after the mask: %v (the scratch tmpfs left over it?)", entries)
			}
		})
		runtime.UnlockOSThread()
		// Here, outside that namespace, nothing changed.
		if data, _ := os.ReadFile(prog); !bytes.Equal(data, script) {
			t.Errorf("shared=%v: the program changed outside the namespace", shared)
		}
		if err := exec.Command(prog).Run(); err == nil {
			t.Errorf("shared=%v: the program exits 0 outside the namespace", shared)
		}
	}
}

// TestSameLabel: the hook and its runtime's process under one label, or
// both without one, may mask; a label that differs (an exec that changed
// domain) or only one of them labelled may not.
func TestSameLabel(t *testing.T) {
	label := func(self, parent string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			v := parent
			if strings.HasPrefix(p, "/self/") {
				v = self
			}
			if v == "" {
				return nil, os.ErrInvalid
			}
			return []byte(v), nil
		}
	}
	for _, tt := range []struct {
		self, parent string
		ok           bool
	}{
		{"", "", true},
		{"unconfined\n", "unconfined\n", true},
		{"system_u:system_r:container_runtime_t:s0\x00", "system_u:system_r:container_runtime_t:s0\x00", true},
		{"system_u:system_r:spc_t:s0\x00", "system_u:system_r:container_runtime_t:s0\x00", false},
		{"unconfined\n", "", false},
	} {
		err := sameLabel(label(tt.self, tt.parent), "/self", "/parent")
		if (err == nil) != tt.ok {
			t.Errorf("labels %q, %q: %v, want ok %v", tt.self, tt.parent, err, tt.ok)
		}
	}
}

// TestBindScratchRefusesRoot: no scratch tmpfs over "/", whose mount
// paths from the root would not see.
func TestBindScratchRefusesRoot(t *testing.T) {
	if err := bindScratch(exitProgram("amd64"), "/", 0, "/proc/self/exe"); err == nil || !strings.Contains(err.Error(), "in /") {
		t.Errorf("bindScratch over /: %v", err)
	}
}

// BenchmarkMask: the first hook's cost of masking the program, its run of
// the mask included, in a namespace of its own (root).
func BenchmarkMask(b *testing.B) {
	e2e.RequireRoot(b)
	dir := b.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }()
	prog := filepath.Join(dir, "bin", "hook")
	if err := os.MkdirAll(filepath.Dir(prog), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	here := "/proc/" + strconv.Itoa(os.Getpid()) + "/task/" + strconv.Itoa(unix.Gettid()) + "/ns/mnt"
	inMountNS(b, unix.MS_SLAVE, func() {
		b.ResetTimer()
		for range b.N {
			if err := Mask(prog, here); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := unix.Unmount(prog, unix.MNT_DETACH); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}
