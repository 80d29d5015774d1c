package rootfs

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
	"golang.org/x/sys/unix"
)

// cacheEntries returns the ELF entries of class in c whose key starts with
// prefix, in file order.
func cacheEntries(c *ldcache.Cache, class ldcache.Class, prefix string) []ldcache.Entry {
	var out []ldcache.Entry
	for _, e := range c.Entries {
		if e.IsELF() && e.Class() == class && strings.HasPrefix(e.Key, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// injectDriver copies the fixture's 64-bit 535 libraries into libDir of
// the image at root with the links nctk's plan creates, and returns the
// container paths of the files and links (what update-ldcache gets).
func injectDriver(t testing.TB, root, libDir string) []string {
	t.Helper()
	fx := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 1})
	var paths []string
	for _, l := range fx.Libraries {
		if l.Is32 {
			continue
		}
		base := path.Base(l.Path)
		data, err := os.ReadFile(filepath.Join(fx.Path, l.Path))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, libDir, base), data, 0o755); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path.Join(libDir, base))
		links := map[string]string{}
		if l.SONAME != "" && l.SONAME != base {
			links[l.SONAME] = base
		}
		switch l.Name {
		case "libcuda.so", "libnvidia-opticalflow.so":
			links[l.Name] = l.SONAME
		case "libGLX_nvidia.so":
			links["libGLX_indirect.so.0"] = base
		}
		for link, target := range links {
			if err := os.Symlink(target, filepath.Join(root, libDir, link)); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, path.Join(libDir, link))
		}
	}
	return paths
}

func ldconfigPrint(t *testing.T, file string) []string {
	t.Helper()
	b, err := exec.Command("ldconfig", "-p", "-C", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ldconfig -p -C %s: %v\n%s", file, err, b)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "\t") {
			out = append(out, l)
		}
	}
	return out
}

// TestUpdateLdCacheLoader: UpdateLdCache on a busybox+glibc image (whose
// cache the host's ldconfig wrote), for driver libraries in a directory the
// loader does not search by default, gives the cache the host's ldconfig
// writes over the same files, and glibc's loader in a chroot of the image
// finds libcuda.so.1 through it (cudaprobe dlopens it) and still finds libc.
func TestUpdateLdCacheLoader(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("ldconfig"); err != nil {
		t.Skipf("ldconfig not installed: %v", err)
	}
	root := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	// A directory the loader does not search by default: only the cache
	// leads it there.
	libDir := "/usr/local/nvidia/lib64"
	if err := os.MkdirAll(filepath.Join(root, libDir), 0o755); err != nil {
		t.Fatal(err)
	}
	libs := injectDriver(t, root, libDir)

	// Before: the image's cache does not know libcuda.
	if out, err := exec.Command("chroot", root, "/usr/bin/cudaprobe").CombinedOutput(); err == nil && strings.Contains(string(out), "12020") {
		t.Fatalf("cudaprobe found libcuda before the update:\n%s", out)
	}
	if b, err := exec.Command("ldconfig", "-r", root, "-X", "-f", "/etc/ld.so.conf", "-C", "/etc/ref.cache", libDir).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig: %v\n%s", err, b)
	}

	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.UpdateLdCache(libs, []string{libDir}, nil); err != nil {
		t.Fatal(err)
	}
	r.Commit()

	got, want := ldconfigPrint(t, filepath.Join(root, "etc/ld.so.cache")), ldconfigPrint(t, filepath.Join(root, "etc/ref.cache"))
	if !slices.Equal(got, want) {
		t.Errorf("ldconfig -p of the updated cache:\n%s\nwant (host ldconfig)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, "libc.so.6 ") }) {
		t.Errorf("the image's libc.so.6 entry is gone:\n%s", strings.Join(got, "\n"))
	}
	st, err := os.Stat(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("cache mode = %v, %v; want 0644", st.Mode(), err)
	}
	conf, err := os.ReadFile(filepath.Join(root, "etc/ld.so.conf.d/00-nctk.conf"))
	if err != nil || !strings.Contains(string(conf), libDir+"\n") {
		t.Errorf("drop-in = %q, %v", conf, err)
	}

	out, err := exec.Command("chroot", root, "/usr/bin/cudaprobe").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cuDriverGetVersion: 12020") {
		t.Fatalf("chroot cudaprobe: %v\n%s", err, out)
	}
	t.Logf("chroot cudaprobe: %s", strings.TrimSpace(string(out)))

	// Running again changes nothing.
	before, _ := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err := r.UpdateLdCache(libs, []string{libDir}, nil); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if string(before) != string(after) {
		t.Error("a second update changed the cache")
	}
}

// TestUpdateLdCacheNoCache: an image without a cache, or with garbage, a
// FIFO, a 1 GB sparse file or a symlink out of the root in its place, gets
// a fresh cache (the link is replaced, its target untouched); the FIFO
// does not block it (TestReadFileRefuses times the refusals).
func TestUpdateLdCacheNoCache(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string)
	}{
		{"missing", func(*testing.T, string) {}},
		{"garbage", func(t *testing.T, root string) {
			if err := os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), []byte("not a cache"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"FIFO", func(t *testing.T, root string) {
			if err := syscall.Mkfifo(filepath.Join(root, "etc/ld.so.cache"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"huge sparse", func(t *testing.T, root string) {
			if err := os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(filepath.Join(root, "etc/ld.so.cache"), 1<<30); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink out", func(t *testing.T, root string) {
			outside := filepath.Join(t.TempDir(), "host.cache")
			if err := os.WriteFile(outside, []byte("host"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(root, "etc/ld.so.cache")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if b, _ := os.ReadFile(outside); string(b) != "host" {
					t.Errorf("the link's target outside the root was changed: %q", b)
				}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			libDir := "/usr/lib/x86_64-linux-gnu"
			if err := os.MkdirAll(filepath.Join(root, libDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, root)
			libs := injectDriver(t, root, libDir)
			r, err := Open(root)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			done := make(chan error, 1)
			go func() { done <- r.UpdateLdCache(libs, []string{libDir}, nil) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("UpdateLdCache still blocked after 10s")
			}
			cacheData, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
			if err != nil {
				t.Fatal(err)
			}
			c, err := ldcache.Parse(cacheData)
			if err != nil {
				t.Fatal(err)
			}
			got := cacheEntries(c, ldcache.Class64, "libcuda.so")
			if len(got) != 2 || got[0].Key != "libcuda.so.1" || got[0].Value != libDir+"/libcuda.so.1" || got[1].Key != "libcuda.so" {
				t.Errorf("libcuda entries = %+v", got)
			}
			if b, err := os.ReadFile(filepath.Join(root, "etc/ld.so.conf")); err != nil || string(b) != "include /etc/ld.so.conf.d/*.conf\n" {
				t.Errorf("ld.so.conf = %q, %v", b, err)
			}
		})
	}
}

// TestReadFileRefuses: Root.ReadFile refuses a FIFO and a 1 GB sparse
// ld.so.cache at once, naming the file, without reading the sparse file.
func TestReadFileRefuses(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "etc/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(root, "etc/ld.so.cache"), 1<<30); err != nil {
		t.Fatal(err)
	}
	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, tc := range []struct {
		path string
		want error
	}{{"/etc/fifo", hostfile.ErrNotRegular}, {"/etc/ld.so.cache", hostfile.ErrTooLarge}} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		done := make(chan error, 1)
		go func() { _, err := r.ReadFile(tc.path, ldcache.MaxSize); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("ReadFile(%s) = %v, want %v naming the file", tc.path, err, tc.want)
			}
		case <-time.After(time.Second):
			t.Fatalf("ReadFile(%s) still blocked after 1s", tc.path)
		}
		runtime.ReadMemStats(&after)
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("ReadFile(%s) took %v", tc.path, d)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Errorf("ReadFile(%s) allocated %d bytes", tc.path, alloc)
		}
	}
}

// BenchmarkUpdateLdCache: the in-process update for the fixture's 64-bit
// driver libraries and links on the e2e image (cache read, ELF reads,
// merge, write, drop-in).
func BenchmarkUpdateLdCache(b *testing.B) {
	requireRoot(b)
	root := e2e.BuildRootfs(b, e2e.RootfsOptions{NoCudaprobe: true})
	libDir := "/usr/lib/x86_64-linux-gnu"
	libs := injectDriver(b, root, libDir)
	r, err := Open(root)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := r.UpdateLdCache(libs, []string{libDir}, nil); err != nil {
			b.Fatal(err)
		}
		r.Commit()
	}
	b.ReportMetric(float64(len(libs)), "names")
}

// TestPendingLibraryEntries: the entries read from the host files of
// pending mounts (before any mount exists) give the same ld.so.cache as
// UpdateLdCache over the same files materialised in the root; pending links
// that lead nowhere (dangling) and non-library names are skipped; and
// nothing in the root is touched by PendingLibraryEntries.
func TestPendingLibraryEntries(t *testing.T) {
	libDir := "/usr/lib/x86_64-linux-gnu"
	fx := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 1})
	var p Pending
	var libs []string
	for _, l := range fx.Libraries {
		if l.Is32 {
			continue
		}
		base := path.Base(l.Path)
		dst := path.Join(libDir, base)
		p.Files = append(p.Files, PendingFile{Path: dst, Source: filepath.Join(fx.Path, l.Path)})
		libs = append(libs, dst)
		if l.SONAME != "" && l.SONAME != base {
			p.Links = append(p.Links, PendingLink{Path: path.Join(libDir, l.SONAME), Target: base})
			libs = append(libs, path.Join(libDir, l.SONAME))
		}
		if l.Name == "libcuda.so" {
			// A chain of links: libcuda.so -> libcuda.so.1 -> the file.
			p.Links = append(p.Links, PendingLink{Path: path.Join(libDir, l.Name), Target: l.SONAME})
			libs = append(libs, path.Join(libDir, l.Name))
		}
	}
	p.Links = append(p.Links, PendingLink{Path: libDir + "/libdangling.so.1", Target: "libnowhere.so.1"})
	libs = append(libs, libDir+"/libdangling.so.1", libDir+"/notalib.txt")

	mk := func() string {
		root := t.TempDir()
		for _, d := range []string{libDir, "etc"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	pendingRoot, realRoot := mk(), mk()

	r, err := Open(pendingRoot)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	names, err := r.PendingLibraryEntries(p, libs)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(pendingRoot, libDir)); len(ents) != 0 {
		t.Errorf("PendingLibraryEntries wrote into the root: %v", ents)
	}
	for _, n := range names {
		if n.Name == "libdangling.so.1" || n.Name == "notalib.txt" {
			t.Errorf("entry for %s: want none", n.Name)
		}
	}
	if err := r.UpdateLdCacheFor(names, []string{libDir}, nil); err != nil {
		t.Fatal(err)
	}
	r.Commit()

	// The same files and links, really there.
	for _, f := range p.Files {
		data, err := os.ReadFile(f.Source)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(realRoot, f.Path), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range p.Links {
		if err := os.Symlink(s.Target, filepath.Join(realRoot, s.Path)); err != nil {
			t.Fatal(err)
		}
	}
	rr, err := Open(realRoot)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	if err := rr.UpdateLdCache(libs[:len(libs)-1], []string{libDir}, nil); err != nil {
		t.Fatal(err)
	}
	rr.Commit()

	got, err := os.ReadFile(filepath.Join(pendingRoot, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(realRoot, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("cache from the pending host files differs from the cache over the materialised files (%d vs %d bytes)", len(got), len(want))
	}
	c, err := ldcache.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if l := cacheEntries(c, ldcache.Class64, "libcuda.so"); len(l) != 2 || l[0].Key != "libcuda.so.1" || l[1].Key != "libcuda.so" {
		t.Errorf("libcuda entries = %+v", l)
	}
}

// TestImageSystemDirs: the directories an image's glibc searches without
// configuration, which the drop-in for the host's ldconfig lists.
func TestImageSystemDirs(t *testing.T) {
	tests := []struct {
		debian bool
		arch   string
		want   []string
	}{
		{true, "amd64", []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"}},
		{true, "arm64", []string{"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib"}},
		{true, "riscv64", []string{"/lib", "/usr/lib"}},
		{false, "amd64", []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/libx32", "/usr/libx32"}},
		{false, "arm64", []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64"}},
		{false, "386", []string{"/lib", "/usr/lib"}},
	}
	for _, tc := range tests {
		if got := imageSystemDirs(tc.debian, tc.arch); !slices.Equal(got, tc.want) {
			t.Errorf("imageSystemDirs(%v, %s) = %v, want %v", tc.debian, tc.arch, got, tc.want)
		}
	}
}

// fakeFacts is a LibFacts answering from a map by inode, recording what
// it was taught.
type fakeFacts struct {
	known  map[uint64]ldcache.Library
	learnt map[uint64]ldcache.Library
}

func (f *fakeFacts) Library(st *unix.Stat_t) (ldcache.Library, bool, bool) {
	lib, ok := f.known[st.Ino]
	return lib, ok, ok
}

func (f *fakeFacts) Learn(st *unix.Stat_t, lib ldcache.Library, isLib bool) {
	if isLib {
		f.learnt[st.Ino] = lib
	}
}

// TestUpdateLdCacheLibFacts: with UseLibFacts, a library the facts know
// is not read (the cache records what they say), and what is read is
// taught to them.
func TestUpdateLdCacheLibFacts(t *testing.T) {
	root := t.TempDir()
	libDir := "/usr/lib/x86_64-linux-gnu"
	for _, d := range []string{libDir, "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	libs := injectDriver(t, root, libDir)
	var cuda, other string
	for _, l := range libs {
		if strings.HasPrefix(path.Base(l), "libcuda.so.") && cuda == "" {
			cuda = l
		} else if other == "" && !strings.HasPrefix(path.Base(l), "libcuda.so") {
			other = l
		}
	}
	if cuda == "" || other == "" {
		t.Fatalf("fixture libraries %q: no libcuda and another", libs)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, cuda), &st); err != nil {
		t.Fatal(err)
	}
	f := &fakeFacts{known: map[uint64]ldcache.Library{st.Ino: {SONAME: "libfromfacts.so.9", Flags: ldcache.FlagELFLibc6 | 0x0300}},
		learnt: map[uint64]ldcache.Library{}}
	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.UseLibFacts(f)
	if err := r.UpdateLdCache(libs, []string{libDir}, nil); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ldcache.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := cacheEntries(c, ldcache.Class64, "libfromfacts.so.9"); len(got) != 1 {
		t.Errorf("the facts' SONAME for %s is not in the cache: %+v", cuda, got)
	}
	if got := cacheEntries(c, ldcache.Class64, "libcuda.so.1"); len(got) != 0 {
		t.Errorf("%s was read although the facts knew it: %+v", cuda, got)
	}
	if err := syscall.Stat(filepath.Join(root, other), &st); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.learnt[st.Ino]; !ok || len(f.learnt) == 0 {
		t.Errorf("the facts were not taught %s: %v", other, f.learnt)
	}
}

// TestSameDirTarget: a link is answered by the file it ends at without a
// resolution from the root only when its chain stays in its directory and
// ends at a regular file; anything else (a target with a slash, "..", a
// dangling or looping link, a link to a directory) is left to the
// resolution inside the root. linkOrInRootLibrary then takes what the
// facts know of that file, or inspects it where it is.
func TestSameDirTarget(t *testing.T) {
	root := t.TempDir()
	libDir := "/usr/lib"
	dir := filepath.Join(root, libDir)
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string) uint64 {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("not ELF"), 0o644); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	known := write("libknown.so.1.2")
	write("libunknown.so.1.2")
	for link, target := range map[string]string{
		"libknown.so.1": "libknown.so.1.2", "libknown.so": "libknown.so.1",
		"libunknown.so.1": "libunknown.so.1.2", "libslash.so.1": "./libknown.so.1.2", "libup.so.1": "..",
		"libabs.so.1": filepath.Join(libDir, "libknown.so.1.2"), "libdangling.so.1": "gone.so", "libloop.so.1": "libloop.so.1",
		"libdir.so.1": "sub",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	for _, tt := range []struct {
		link, target string // "" for not ok
	}{
		{"libknown.so.1", "libknown.so.1.2"},
		{"libknown.so", "libknown.so.1.2"}, // two hops
		{"libunknown.so.1", "libunknown.so.1.2"},
		{"libslash.so.1", ""},
		{"libup.so.1", ""},
		{"libabs.so.1", ""},
		{"libdangling.so.1", ""},
		{"libloop.so.1", ""},
		{"libdir.so.1", ""},
		{"libknown.so.1.2", ""}, // not a link
	} {
		target, st, ok := sameDirTarget(dfd, tt.link, "")
		if ok != (tt.target != "") || target != tt.target || (ok && st.Mode&unix.S_IFMT != unix.S_IFREG) {
			t.Errorf("sameDirTarget(%s) = %q, %v; want %q", tt.link, target, ok, tt.target)
		}
		// The same with the link's text read already: the first hop
		// takes it instead of reading the link.
		if text, err := readlinkat(dfd, tt.link); err == nil {
			target2, _, ok2 := sameDirTarget(dfd, tt.link, text)
			if ok2 != ok || target2 != target {
				t.Errorf("sameDirTarget(%s, %q) = %q, %v; want %q, %v", tt.link, text, target2, ok2, target, ok)
			}
		}
	}
	// The text given is the first hop's, not read again: a name given for
	// a link to elsewhere is followed from there.
	if target, _, ok := sameDirTarget(dfd, "libabs.so.1", "libknown.so.1"); !ok || target != "libknown.so.1.2" {
		t.Errorf("sameDirTarget(libabs.so.1, libknown.so.1) = %q, %v; want libknown.so.1.2 (the text given followed)", target, ok)
	}
	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sc := r.newLibScan()
	defer sc.close()
	f := &fakeFacts{known: map[uint64]ldcache.Library{known: {SONAME: "libknown.so.1"}}, learnt: map[uint64]ldcache.Library{}}
	sc.facts = f
	for _, tt := range []struct {
		link  string
		isLib bool
	}{
		{"libknown.so", true},       // the facts' answer
		{"libabs.so.1", true},       // through the root, the same file
		{"libunknown.so.1", false},  // inspected beside it: not ELF
		{"libdangling.so.1", false}, // nothing there
	} {
		lib, isLib, err := r.linkOrInRootLibrary(&sc, dfd, libDir+"/"+tt.link, tt.link, "")
		if err != nil || isLib != tt.isLib || (isLib && lib.SONAME != "libknown.so.1") {
			t.Errorf("linkOrInRootLibrary(%s) = %+v, %v, %v; want isLib %v", tt.link, lib, isLib, err, tt.isLib)
		}
	}
}
