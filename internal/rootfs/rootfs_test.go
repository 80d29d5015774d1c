package rootfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if MaybeRunChild(os.Args) {
		return
	}
	os.Exit(m.Run())
}

// requireRoot skips tests that mount or change namespaces when not root.
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("needs root (mounts, namespaces); running as uid %d", os.Geteuid())
	}
}

// env is a test container root next to a "host" directory that must stay
// untouched.
type env struct {
	dir  string
	root string // the container root
	host string // host files that hostile symlinks point at
	snap string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	d := t.TempDir()
	e := &env{dir: d, root: filepath.Join(d, "root"), host: filepath.Join(d, "host")}
	for _, p := range []string{e.root, e.host + "/etc", e.host + "/lib"} {
		must(t, os.MkdirAll(p, 0o755))
	}
	must(t, os.WriteFile(e.host+"/etc/passwd", []byte("root:x:0:0::/root:/bin/sh\n"), 0o644))
	must(t, os.WriteFile(e.host+"/etc/ld.so.cache", []byte("host cache"), 0o644))
	must(t, os.WriteFile(e.host+"/lib/libhost.so.1", []byte("host lib"), 0o644))
	e.snap = snapshot(t, e.host)
	return e
}

// checkHost fails the test if anything under the host directory changed or
// is mounted over.
func (e *env) checkHost(t *testing.T) {
	t.Helper()
	if got := snapshot(t, e.host); got != e.snap {
		t.Errorf("host directory changed:\nbefore:\n%s\nafter:\n%s", e.snap, got)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	for line := range strings.SplitSeq(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (strings.HasPrefix(f[4], e.host+"/") || f[4] == e.host) {
			t.Errorf("host path mounted over: %s", line)
		}
	}
}

// snapshot lists every entry under dir with its type, size and content.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v %d", strings.TrimPrefix(p, dir), info.Mode(), info.Size())
		if info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += " " + string(b)
		}
		lines = append(lines, line)
		return nil
	})
	must(t, err)
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) open(t *testing.T) *Root {
	t.Helper()
	r, err := Open(e.root)
	must(t, err)
	t.Cleanup(func() {
		if err := r.Rollback(); err != nil {
			t.Errorf("rollback: %v", err)
		}
		r.Close()
	})
	return r
}

// mirror creates the directory p (a host path) inside the root, so that
// symlinks in the image pointing at p resolve (inside the root).
func (e *env) mirror(t *testing.T, p string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(e.root, p), 0o755))
}

func (e *env) symlink(t *testing.T, target, link string) {
	t.Helper()
	p := filepath.Join(e.root, link)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.Symlink(target, p))
}

// TestMkdirAllHostile: directories created through hostile symlinks land
// inside the root.
func TestMkdirAllHostile(t *testing.T) {
	tests := []struct {
		name    string
		links   map[string]string // link (in root) -> target
		mirror  string            // directory (host path) that also exists inside the root
		mkdir   string
		landsAt string // where the directory must appear, relative to root; "" = must fail
	}{
		{"absolute symlink to host dir", map[string]string{"/usr/lib/x86_64-linux-gnu": "HOST/etc"}, "HOST/etc", "/usr/lib/x86_64-linux-gnu/nvidia", "HOST/etc/nvidia"},
		{"absolute symlink to host dir, dangling in root", map[string]string{"/usr/lib/x86_64-linux-gnu": "HOST/etc"}, "", "/usr/lib/x86_64-linux-gnu/nvidia", ""},
		{"absolute symlink to /etc", map[string]string{"/usr/lib/x86_64-linux-gnu": "/etc"}, "/etc", "/usr/lib/x86_64-linux-gnu/nctk-test-dir", "/etc/nctk-test-dir"},
		{"absolute symlink to /etc, dangling in root", map[string]string{"/usr/lib/x86_64-linux-gnu": "/etc"}, "", "/usr/lib/x86_64-linux-gnu/nctk-test-dir", ""},
		{"dotdot chain", map[string]string{"/usr/lib64": "../../../../../../../../HOST/lib"}, "HOST/lib", "/usr/lib64/sub", "HOST/lib/sub"},
		{"dotdot chain, dangling in root", map[string]string{"/usr/lib64": "../../../../../../../../HOST/lib"}, "", "/usr/lib64/sub", ""},
		{"dotdot in path", nil, "", "/usr/../../../../HOST/x", "HOST/x"},
		{"chain of symlinks", map[string]string{"/a": "/b", "/b": "c/../../../HOST", "/c": "."}, "HOST/etc", "/a/etc/new", "HOST/etc/new"},
		{"relative symlink", map[string]string{"/usr/lib": "lib64", "/usr/lib64": "../../../HOST/lib"}, "HOST/lib", "/usr/lib/new", "HOST/lib/new"},
		{"symlink loop", map[string]string{"/a": "/b", "/b": "/a"}, "", "/a/x", ""},
	}
	for _, tt := range tests {
		for _, fallback := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/securejoin=%v", tt.name, fallback), func(t *testing.T) {
				e := newEnv(t)
				for l, target := range tt.links {
					e.symlink(t, strings.ReplaceAll(target, "HOST", e.host), l)
				}
				if tt.mirror != "" {
					e.mirror(t, strings.ReplaceAll(tt.mirror, "HOST", e.host))
				}
				r := e.open(t)
				r.noOpenat2 = fallback
				err := r.MkdirAll(strings.ReplaceAll(tt.mkdir, "HOST", e.host), 0o755)
				if tt.landsAt == "" {
					if err == nil {
						t.Errorf("MkdirAll(%s) succeeded, want an error", tt.mkdir)
					}
				} else {
					must(t, err)
					at := filepath.Join(e.root, strings.ReplaceAll(tt.landsAt, "HOST", e.host))
					if st, err := os.Lstat(at); err != nil || !st.IsDir() {
						t.Errorf("directory not created at %s inside the root: %v", at, err)
					}
				}
				e.checkHost(t)
				if _, err := os.Stat("/etc/nctk-test-dir"); err == nil {
					os.Remove("/etc/nctk-test-dir")
					t.Errorf("created /etc/nctk-test-dir on the host")
				}
			})
		}
	}
}

func TestMkdirAllErrors(t *testing.T) {
	e := newEnv(t)
	must(t, os.WriteFile(e.root+"/file", nil, 0o644))
	e.symlink(t, "/nonexistent/deeper", "/dangling")
	r := e.open(t)
	if err := r.MkdirAll("/file/sub", 0o755); err == nil || !strings.Contains(err.Error(), "/file/sub") {
		t.Errorf("mkdir under a file: err = %v, want an error naming the path", err)
	}
	// A dangling symlink is not followed to create its target (mkdir -p).
	if err := r.MkdirAll("/dangling/x", 0o755); !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), "dangling") {
		t.Errorf("mkdir through a dangling symlink: err = %v, want ErrSymlink (dangling)", err)
	}
	if err := r.MkdirAll("", 0o755); err == nil {
		t.Error("empty path accepted")
	}
	if err := r.MkdirAll("/a\x00b", 0o755); err == nil {
		t.Error("NUL byte accepted")
	}
}

// TestPlaceholderHostile: a symlink at a mount destination is never
// followed; parents are resolved in the root.
func TestPlaceholderHostile(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("securejoin=%v", fallback), func(t *testing.T) { testPlaceholderHostile(t, fallback) })
	}
}

func testPlaceholderHostile(t *testing.T, fallback bool) {
	e := newEnv(t)
	e.symlink(t, e.host+"/lib/libhost.so.1", "/usr/lib64/libcuda.so.1")
	e.symlink(t, "/etc/passwd", "/usr/lib64/libnvidia-ml.so.1")
	e.symlink(t, e.host+"/etc", "/usr/lib/x86_64-linux-gnu")
	e.mirror(t, e.host+"/etc")
	must(t, os.MkdirAll(e.root+"/dir", 0o755))
	must(t, os.WriteFile(e.root+"/usr/lib64/existing.so", []byte("image copy"), 0o644))
	r := e.open(t)
	r.noOpenat2 = fallback

	for _, p := range []string{"/usr/lib64/libcuda.so.1", "/usr/lib64/libnvidia-ml.so.1"} {
		f, err := r.CreatePlaceholder(p, KindFile, 0o644)
		if !errors.Is(err, ErrSymlink) {
			t.Errorf("placeholder at symlink %s: err = %v, want ErrSymlink", p, err)
		}
		if f != nil {
			f.Close()
		}
		if err != nil && !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %s", err, p)
		}
	}
	f, err := r.CreatePlaceholder("/usr/lib/x86_64-linux-gnu/libcuda.so.535", KindFile, 0o644)
	must(t, err)
	f.Close()
	if _, err := os.Stat(filepath.Join(e.root, e.host, "etc/libcuda.so.535")); err != nil {
		t.Errorf("placeholder not created inside the root: %v", err)
	}
	// Existing regular file is reused untouched; a directory is refused for
	// a file mount and accepted for a directory mount.
	f, err = r.CreatePlaceholder("/usr/lib64/existing.so", KindFile, 0o644)
	must(t, err)
	f.Close()
	if b, _ := os.ReadFile(e.root + "/usr/lib64/existing.so"); string(b) != "image copy" {
		t.Errorf("existing file modified: %q", b)
	}
	if _, err := r.CreatePlaceholder("/dir", KindFile, 0o644); !errors.Is(err, ErrExists) {
		t.Errorf("file placeholder on a directory: err = %v, want ErrExists", err)
	}
	if _, err := r.CreatePlaceholder("/usr/lib64/existing.so", KindDir, 0o755); !errors.Is(err, ErrExists) {
		t.Errorf("dir placeholder on a file: err = %v, want ErrExists", err)
	}
	f, err = r.CreatePlaceholder("/dir", KindDir, 0o755)
	must(t, err)
	f.Close()
	e.checkHost(t)
}

// TestBindMountHostile: binds through hostile roots land inside the root,
// are read-only and carry nosuid/nodev; a symlink destination is refused.
func TestBindMountHostile(t *testing.T) {
	requireRoot(t)
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			e := newEnv(t)
			src := filepath.Join(e.dir, "libcuda.so.535.1")
			must(t, os.WriteFile(src, []byte("driver"), 0o755))
			e.symlink(t, "/etc", "/usr/lib/x86_64-linux-gnu")
			e.mirror(t, "/etc")
			e.symlink(t, e.host+"/lib/libhost.so.1", "/usr/lib64/libcuda.so.1")
			r := e.open(t)
			r.legacyMount = legacy

			opts := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
			must(t, r.BindMount(src, "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1", KindFile, opts))
			in := filepath.Join(e.root, "etc/libcuda.so.535.1")
			if b, err := os.ReadFile(in); err != nil || string(b) != "driver" {
				t.Fatalf("mounted file at %s: %q, %v", in, b, err)
			}
			if _, err := os.Stat("/etc/libcuda.so.535.1"); err == nil {
				t.Fatal("mounted on the host's /etc")
			}
			if err := os.WriteFile(in, []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
				t.Errorf("write to mounted file: %v, want EROFS", err)
			}
			opt := mountOptions(t, in)
			for _, want := range []string{"ro", "nosuid", "nodev"} {
				if !strings.Contains(","+opt+",", ","+want+",") {
					t.Errorf("mount options %q lack %s", opt, want)
				}
			}
			err := r.BindMount(src, "/usr/lib64/libcuda.so.1", KindFile, opts)
			if !errors.Is(err, ErrSymlink) {
				t.Errorf("bind onto a symlink: err = %v, want ErrSymlink", err)
			}
			e.checkHost(t)
			if b, _ := os.ReadFile(e.host + "/lib/libhost.so.1"); string(b) != "host lib" {
				t.Errorf("host file changed: %q", b)
			}
			must(t, r.Rollback())
			if opt := mountOptions(t, in); opt != "" {
				t.Errorf("still mounted after rollback: %s", opt)
			}
			if _, err := os.Lstat(in); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("placeholder left after rollback: %v", err)
			}
		})
	}
}

// mountOptions returns the per-mount options of the mount at p ("" if p is
// not a mount point).
func mountOptions(t *testing.T, p string) string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	opt := ""
	for line := range strings.SplitSeq(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == p {
			opt = f[5] // the last (topmost) mount wins
		}
	}
	return opt
}

func TestOpenSourceChecks(t *testing.T) {
	d := t.TempDir()
	must(t, os.WriteFile(d+"/file", nil, 0o644))
	must(t, os.Symlink(d+"/file", d+"/link"))
	tests := []struct {
		path string
		kind Kind
		opts []string
		want string
	}{
		{d + "/link", KindFile, nil, "symlink"},
		{d + "/file", KindDir, nil, "unexpected file type"},
		{d, KindFile, nil, "unexpected file type"},
		{d + "/file", KindSocket, nil, "unexpected file type"},
		{d + "/missing", KindFile, nil, "no such file"},
		{"relative", KindFile, nil, "not an absolute path"},
		{d + "/file", KindFile, []string{"bogus"}, `unsupported mount option "bogus"`},
		{d + "/file", Kind(42), nil, "unknown mount kind"},
		{d + "/file", 0, nil, "unknown mount kind"},
	}
	for _, tt := range tests {
		s, err := OpenSource(tt.path, tt.kind, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("OpenSource(%s, %v, %v) = %v, want error containing %q", tt.path, tt.kind, tt.opts, err, tt.want)
		}
		s.Close()
	}
}

// TestOpenSourceAny: KindAny follows the host path's symlinks and mounts
// what they lead to, a directory as a directory, a file as a file.
func TestOpenSourceAny(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	h := t.TempDir()
	must(t, os.MkdirAll(h+"/dir", 0o755))
	must(t, os.WriteFile(h+"/dir/f", []byte("in dir"), 0o644))
	must(t, os.WriteFile(h+"/file", []byte("file"), 0o644))
	must(t, os.Symlink("file", h+"/link"))
	must(t, os.Symlink("dir", h+"/dirlink"))
	r := e.open(t)
	defer r.Rollback()
	ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	for _, m := range [][2]string{{h + "/link", "/a/file"}, {h + "/dirlink", "/a/dir"}} {
		must(t, r.BindMount(m[0], m[1], KindAny, ro))
	}
	if b, err := os.ReadFile(e.root + "/a/file"); err != nil || string(b) != "file" {
		t.Errorf("/a/file: %q, %v", b, err)
	}
	if b, err := os.ReadFile(e.root + "/a/dir/f"); err != nil || string(b) != "in dir" {
		t.Errorf("/a/dir/f: %q, %v", b, err)
	}
	if opt := mountOptions(t, e.root+"/a/file"); !strings.HasPrefix(opt, "ro,") || !strings.Contains(opt, "nosuid") {
		t.Errorf("/a/file options %q", opt)
	}
	if _, err := OpenSource(h+"/missing", KindAny, ro); err == nil {
		t.Error("a missing source opened")
	}
}

// TestMountPoint: the mount points made before a later Attach: parents and
// placeholder created (and undone by a rollback), an existing one of the
// right type kept, a symlink refused; a source attached there afterwards
// covers the placeholder.
func TestMountPoint(t *testing.T) {
	e := newEnv(t)
	must(t, os.MkdirAll(e.root+"/usr/lib", 0o755))
	must(t, os.Symlink("/etc/passwd", e.root+"/usr/lib/libcuda.so.580"))
	must(t, os.WriteFile(e.root+"/usr/lib/libkept.so.580", []byte("image"), 0o644))
	r := e.open(t)
	must(t, r.MountPoint("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580", false))
	must(t, r.MountPoint("/lib/firmware/nvidia/580", true))
	must(t, r.MountPoint("/usr/lib/libkept.so.580", false))
	if err := r.MountPoint("/usr/lib/libcuda.so.580", false); !errors.Is(err, ErrSymlink) {
		t.Errorf("a symlink at the mount point: %v, want ErrSymlink", err)
	}
	if err := r.MountPoint("/usr/lib/libkept.so.580", true); err == nil {
		t.Error("a file taken for a directory mount point")
	}
	if st, err := os.Lstat(e.root + "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580"); err != nil || !st.Mode().IsRegular() {
		t.Errorf("file mount point: %v, %v", st, err)
	}
	if st, err := os.Lstat(e.root + "/lib/firmware/nvidia/580"); err != nil || !st.IsDir() {
		t.Errorf("directory mount point: %v, %v", st, err)
	}
	if os.Geteuid() == 0 {
		must(t, r.BindMount(e.host+"/lib/libhost.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580", KindFile, []string{"ro"}))
		if b, err := os.ReadFile(e.root + "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580"); err != nil || string(b) != "host lib" {
			t.Errorf("mounted over the mount point: %q, %v", b, err)
		}
	}
	must(t, r.Rollback())
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu", "/lib"} {
		if _, err := os.Lstat(e.root + p); err == nil {
			t.Errorf("%s left after the rollback", p)
		}
	}
	if b, err := os.ReadFile(e.root + "/usr/lib/libkept.so.580"); err != nil || string(b) != "image" {
		t.Errorf("the image's file: %q, %v", b, err)
	}
	e.checkHost(t)
}

// TestAttachInsideDirectoryMount: a mount attached below a directory the
// root attached a mount on goes into that mount, even where the directory
// was resolved (and kept for its entries) before it was covered.
func TestAttachInsideDirectoryMount(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	must(t, os.MkdirAll(e.root+"/opt/x", 0o755))
	r := e.open(t)
	must(t, r.MountPoint("/opt/x/y", false)) // /opt/x resolved and kept
	must(t, r.BindMount(e.host+"/lib", "/opt/x", KindDir, []string{"ro"}))
	must(t, r.BindMount(e.host+"/etc/passwd", "/opt/x/libhost.so.1", KindFile, []string{"ro"}))
	if b, err := os.ReadFile(e.root + "/opt/x/libhost.so.1"); err != nil || !strings.HasPrefix(string(b), "root:") {
		t.Errorf("the file mount is not inside the directory mount: it reads %q (%v)", b, err)
	}
	// The same for a tmpfs.
	must(t, r.MountPoint("/opt/v/y", false)) // /opt/v resolved and kept
	must(t, r.MountTmpfs("/opt/v", Tmpfs{}))
	must(t, r.Symlink("target", "/opt/v/link"))
	if _, err := os.Lstat(e.root + "/opt/v/link"); err != nil {
		t.Errorf("the link is not inside the tmpfs: %v", err)
	}
	must(t, r.Rollback())
	if b, err := os.ReadFile(e.host + "/lib/libhost.so.1"); err != nil || string(b) != "host lib" {
		t.Errorf("host file: %q, %v", b, err)
	}
	e.checkHost(t)
}

func TestOpenDevice(t *testing.T) {
	requireRoot(t)
	s, err := OpenDevice("/dev/null", 1, 3, []string{"ro", "nosuid", "noexec"})
	must(t, err)
	s.Close()
	for _, tt := range []struct {
		path         string
		major, minor uint32
		opts         []string
		want         string
	}{
		{"/dev/null", 1, 5, nil, "device 1:3, want 1:5"},
		{"/etc/passwd", 1, 3, nil, "want a character device"},
		{"/dev/null", 1, 3, []string{"nodev"}, "nodev"},
	} {
		s, err := OpenDevice(tt.path, tt.major, tt.minor, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("OpenDevice(%s, %d:%d) = %v, want error containing %q", tt.path, tt.major, tt.minor, err, tt.want)
		}
		s.Close()
	}
}

// TestDeviceBind mounts a device node (ro, nosuid, noexec; not nodev) and
// checks it is usable in the root.
func TestDeviceBind(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	must(t, os.MkdirAll(e.root+"/dev", 0o755))
	r := e.open(t)
	s, err := OpenDevice("/dev/null", 1, 3, []string{"ro", "nosuid", "noexec"})
	must(t, err)
	defer s.Close()
	must(t, r.Attach(s, "/dev/nvidia0"))
	if err := r.Attach(s, "/dev/nvidia1"); err == nil {
		t.Error("a source attached twice")
	}
	f, err := os.OpenFile(e.root+"/dev/nvidia0", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open mounted device for writing: %v", err)
	}
	f.Close()
	if opt := mountOptions(t, e.root+"/dev/nvidia0"); !strings.Contains(opt, "noexec") || strings.Contains(opt, "nodev") {
		t.Errorf("device mount options %q", opt)
	}
}

// TestSymlinkHostile: symlinks are created inside the root, replace only
// symlinks, and never write through a link.
func TestSymlinkHostile(t *testing.T) {
	e := newEnv(t)
	e.symlink(t, e.host+"/lib", "/usr/lib64")
	e.mirror(t, e.host+"/lib")
	e.symlink(t, "/somewhere/else", "/usr/lib/libcuda.so")
	e.symlink(t, e.host+"/lib/libhost.so.1", "/usr/lib/libnvidia-ml.so")
	must(t, os.WriteFile(e.root+"/usr/lib/libreal.so", []byte("image"), 0o644))
	r := e.open(t)

	must(t, r.Symlink("libcuda.so.1", "/usr/lib64/libcuda.so"))
	if got, err := os.Readlink(filepath.Join(e.root, e.host, "lib/libcuda.so")); err != nil || got != "libcuda.so.1" {
		t.Errorf("symlink not inside the root: %q, %v", got, err)
	}
	must(t, r.Symlink("libcuda.so.1", "/usr/lib/libcuda.so")) // replaces a symlink
	must(t, r.Symlink("libnvidia-ml.so.1", "/usr/lib/libnvidia-ml.so"))
	if got, _ := os.Readlink(e.root + "/usr/lib/libcuda.so"); got != "libcuda.so.1" {
		t.Errorf("existing symlink not replaced: %q", got)
	}
	must(t, r.Symlink("libcuda.so.1", "/usr/lib/libcuda.so")) // idempotent
	if err := r.Symlink("x", "/usr/lib/libreal.so"); !errors.Is(err, ErrExists) {
		t.Errorf("symlink over a regular file: err = %v, want ErrExists", err)
	}
	if err := r.Symlink("", "/usr/lib/x"); err == nil {
		t.Error("empty target accepted")
	}
	if err := r.Symlink("x", "/"); err == nil {
		t.Error("symlink at the root accepted")
	}
	e.checkHost(t)
	// Rollback restores the replaced link and removes the created ones.
	must(t, r.Rollback())
	if got, _ := os.Readlink(e.root + "/usr/lib/libcuda.so"); got != "/somewhere/else" {
		t.Errorf("rollback did not restore the image's symlink: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(e.root, e.host, "lib/libcuda.so")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("created symlink left after rollback: %v", err)
	}
}

func TestWriteAndReadFile(t *testing.T) {
	e := newEnv(t)
	e.symlink(t, e.host+"/etc/passwd", "/etc/ld.so.conf")
	e.symlink(t, e.host+"/etc", "/etc2")
	e.mirror(t, e.host+"/etc")
	r := e.open(t)
	must(t, r.WriteFile("/etc/ld.so.conf", []byte("include x\n"), 0o644))
	if st, err := os.Lstat(e.root + "/etc/ld.so.conf"); err != nil || !st.Mode().IsRegular() {
		t.Errorf("symlink not replaced by a file: %v %v", st, err)
	}
	must(t, r.WriteFile("/etc2/new.conf", []byte("y"), 0o644))
	if b, err := os.ReadFile(filepath.Join(e.root, e.host, "etc/new.conf")); err != nil || string(b) != "y" {
		t.Errorf("file not written inside the root: %q %v", b, err)
	}
	b, err := r.ReadFile("/etc2/new.conf", 0)
	if err != nil || string(b) != "y" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	if _, err := r.ReadFile("/etc2/new.conf", -1); err != nil {
		t.Error(err)
	}
	if _, err := r.ReadFile("/etc", 0); err == nil {
		t.Error("ReadFile of a directory succeeded")
	}
	must(t, os.WriteFile(e.root+"/big", bytes.Repeat([]byte("x"), 100), 0o644))
	if _, err := r.ReadFile("/big", 10); err == nil {
		t.Error("size limit not enforced")
	}
	if err := r.WriteFile("/etc", nil, 0o644); !errors.Is(err, ErrExists) {
		t.Errorf("WriteFile over a directory: %v", err)
	}
	e.checkHost(t)
}

func TestTarget(t *testing.T) {
	tests := []struct {
		name   string
		goarch string
		setup  func(t *testing.T, e *env)
		want   Target
	}{
		{"debian", "amd64", func(t *testing.T, e *env) {
			must(t, os.MkdirAll(e.root+"/etc", 0o755))
			must(t, os.WriteFile(e.root+"/etc/debian_version", []byte("12.0\n"), 0o644))
		}, Target{LibDir: "/usr/lib/x86_64-linux-gnu", Lib32Dir: "/usr/lib/i386-linux-gnu", BinDir: "/usr/bin", Multiarch: true}},
		{"debian arm64", "arm64", func(t *testing.T, e *env) {
			must(t, os.MkdirAll(e.root+"/etc", 0o755))
			must(t, os.WriteFile(e.root+"/etc/debian_version", nil, 0o644))
		}, Target{LibDir: "/usr/lib/aarch64-linux-gnu", BinDir: "/usr/bin", Multiarch: true}},
		{"busybox with multiarch glibc", "amd64", func(t *testing.T, e *env) {
			must(t, os.MkdirAll(e.root+"/lib/x86_64-linux-gnu", 0o755))
		}, Target{LibDir: "/usr/lib/x86_64-linux-gnu", Lib32Dir: "/usr/lib/i386-linux-gnu", BinDir: "/usr/bin", Multiarch: true}},
		{"fedora lib32", "amd64", func(t *testing.T, e *env) {
			must(t, os.MkdirAll(e.root+"/usr/lib64", 0o755))
			must(t, os.MkdirAll(e.root+"/usr/lib32", 0o755))
		}, Target{LibDir: "/usr/lib64", Lib32Dir: "/usr/lib32", BinDir: "/usr/bin"}},
		{"fedora lib", "amd64", func(t *testing.T, e *env) {
			must(t, os.MkdirAll(e.root+"/usr/lib64", 0o755))
			must(t, os.MkdirAll(e.root+"/usr/lib", 0o755))
		}, Target{LibDir: "/usr/lib64", Lib32Dir: "/usr/lib", BinDir: "/usr/bin"}},
		{"lib64 is lib", "amd64", func(t *testing.T, e *env) {
			must(t, os.MkdirAll(e.root+"/usr/lib", 0o755))
			must(t, os.Symlink("lib", e.root+"/usr/lib64"))
		}, Target{LibDir: "/usr/lib64", BinDir: "/usr/bin"}},
		{"empty arm64", "arm64", func(t *testing.T, e *env) {}, Target{LibDir: "/usr/lib64", BinDir: "/usr/bin"}},
		{"debian_version only on the host side of a symlink", "amd64", func(t *testing.T, e *env) {
			// /etc -> host etc (which we give a debian_version): must not count.
			must(t, os.WriteFile(e.host+"/etc/debian_version", nil, 0o644))
			must(t, os.Symlink(e.host+"/etc", e.root+"/etc"))
			e.snap = snapshot(t, e.host)
		}, Target{LibDir: "/usr/lib64", Lib32Dir: "/usr/lib", BinDir: "/usr/bin"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			tt.setup(t, e)
			r := e.open(t)
			if got := r.targetFor(tt.goarch); got != tt.want {
				t.Errorf("Target = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestTmpfsAndProcView: the proc view masks /proc/driver/nvidia with a
// read-only tmpfs of copies and only the selected GPU directories, also when
// /proc in the image is a symlink to a host path.
func TestTmpfsAndProcView(t *testing.T) {
	requireRoot(t)
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			e := newEnv(t)
			hostProc := filepath.Join(e.dir, "hostproc")
			for _, bus := range []string{"00000000:01:00.0", "00000000:02:00.0", "0003:00:00.0"} {
				must(t, os.MkdirAll(hostProc+"/gpus/"+bus, 0o555))
				must(t, os.WriteFile(hostProc+"/gpus/"+bus+"/information", []byte("Bus Location: "+bus+"\n"), 0o444))
			}
			must(t, os.WriteFile(hostProc+"/params", []byte("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"), 0o444))
			must(t, os.WriteFile(hostProc+"/version", []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03\n"), 0o444))
			must(t, os.MkdirAll(hostProc+"/capabilities/gpu0/mig/gi1", 0o555))
			must(t, os.WriteFile(hostProc+"/capabilities/gpu0/mig/gi1/access", []byte("DeviceFileMinor: 12\n"), 0o444))
			must(t, os.MkdirAll(hostProc+"/capabilities/mig", 0o555))
			must(t, os.WriteFile(hostProc+"/capabilities/mig/config", []byte("DeviceFileMinor: 1\n"), 0o444))
			must(t, os.WriteFile(hostProc+"/capabilities/mig/monitor", []byte("DeviceFileMinor: 2\n"), 0o444))
			// /proc in the image is a symlink to a host directory.
			e.symlink(t, e.host+"/etc", "/proc")
			e.mirror(t, e.host+"/etc")
			r := e.open(t)
			r.legacyMount = legacy
			pd, err := PrepareProcDriver(&ProcView{HostDir: hostProc, Files: []string{"params", "version", "registry"}, GPUDirs: []string{"00000000:02:00.0", "00000003:00:00.0"},
				Expose: []string{"capabilities/gpu0/mig/gi1/access", "capabilities/mig"}})
			must(t, err)
			defer pd.Close()
			must(t, r.MountProcDriver(pd, nil))
			view := filepath.Join(e.root, e.host, "etc/driver/nvidia")
			b, err := os.ReadFile(view + "/params")
			if err != nil || !strings.Contains(string(b), "ModifyDeviceFiles: 0") || strings.Contains(string(b), "ModifyDeviceFiles: 1") {
				t.Errorf("params copy = %q, %v", b, err)
			}
			if _, err := os.Stat(view + "/registry"); err == nil {
				t.Error("missing host file invented")
			}
			ents, _ := os.ReadDir(view + "/gpus")
			var names []string
			for _, d := range ents {
				names = append(names, d.Name())
			}
			if strings.Join(names, ",") != "00000000:02:00.0,0003:00:00.0" {
				t.Errorf("gpus = %v, want only the selected ones", names)
			}
			if b, _ := os.ReadFile(view + "/gpus/00000000:02:00.0/information"); !strings.Contains(string(b), "02:00.0") {
				t.Errorf("gpu dir content %q", b)
			}
			if b, _ := os.ReadFile(view + "/capabilities/gpu0/mig/gi1/access"); string(b) != "DeviceFileMinor: 12\n" {
				t.Errorf("exposed file = %q", b)
			}
			if b, _ := os.ReadFile(view + "/capabilities/mig/monitor"); string(b) != "DeviceFileMinor: 2\n" {
				t.Errorf("exposed directory content = %q", b)
			}
			if err := os.WriteFile(view+"/params", []byte("x"), 0o644); err == nil {
				t.Error("proc view writable")
			}
			for _, want := range []string{"ro", "nosuid", "nodev", "noexec"} {
				if opt := mountOptions(t, view); !strings.Contains(","+opt+",", ","+want+",") {
					t.Errorf("tmpfs options %q lack %s", opt, want)
				}
			}
			e.checkHost(t)
			must(t, r.Rollback())
			if opt := mountOptions(t, view); opt != "" {
				t.Errorf("proc view still mounted after rollback")
			}
		})
	}
}

func TestPrepareProcDriverErrors(t *testing.T) {
	d := t.TempDir()
	for _, v := range []*ProcView{
		nil,
		{HostDir: "relative"},
		{HostDir: d, Files: []string{"../etc/passwd"}},
		{HostDir: d, GPUDirs: []string{"../../x"}},
		{HostDir: d, GPUDirs: []string{"00000000:09:00.0"}},
		{HostDir: d, Expose: []string{"../x"}},
		{HostDir: d, Expose: []string{"capabilities/missing"}},
	} {
		if pd, err := PrepareProcDriver(v); err == nil {
			pd.Close()
			t.Errorf("PrepareProcDriver(%+v) succeeded", v)
		}
	}
}

func TestProcDirMissingOnProcfs(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	must(t, os.MkdirAll(e.root+"/proc", 0o555))
	must(t, unix.Mount("proc", e.root+"/proc", "proc", 0, ""))
	defer unix.Unmount(e.root+"/proc", unix.MNT_DETACH)
	if _, err := os.Stat("/proc/driver/nvidia"); err == nil {
		t.Skip("this host has an NVIDIA driver loaded")
	}
	r := e.open(t)
	pd, err := PrepareProcDriver(&ProcView{HostDir: t.TempDir()})
	must(t, err)
	if err := r.MountProcDriver(pd, nil); err != nil {
		t.Errorf("MountProcDriver on a procfs without nvidia: %v", err)
	}
}

func TestTmpfsValidation(t *testing.T) {
	e := newEnv(t)
	r := e.open(t)
	for _, tf := range []Tmpfs{
		{Dirs: []string{"../x"}},
		{Files: []TmpfsFile{{Name: "/abs"}}},
		{Files: []TmpfsFile{{Name: "a/../../b"}}},
	} {
		if err := r.MountTmpfs("/t", tf); err == nil {
			t.Errorf("MountTmpfs(%+v) accepted", tf)
		}
	}
}

// TestRace flips a directory of the image between a real directory and a
// symlink to the host while placeholders and mounts are made through it:
// nothing may ever land on the host.
func TestRace(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	src := filepath.Join(e.dir, "lib.so")
	must(t, os.WriteFile(src, []byte("driver"), 0o644))
	must(t, os.MkdirAll(e.root+"/usr/real", 0o755))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		lib := e.root + "/usr/lib"
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Remove(lib)
			os.Symlink(e.host+"/lib", lib)
			os.Remove(lib)
			os.Symlink("real", lib)
			os.Remove(lib)
			os.Mkdir(lib, 0o755)
			os.RemoveAll(lib)
		}
	}()
	for i := range 300 {
		r, err := Open(e.root)
		must(t, err)
		_ = r.BindMount(src, fmt.Sprintf("/usr/lib/x/lib%d.so", i), KindFile, []string{"ro"})
		_ = r.Symlink("target", fmt.Sprintf("/usr/lib/link%d", i))
		_ = r.Rollback()
		r.Close()
	}
	close(stop)
	<-done
	e.checkHost(t)
}

// Benchmarks of the operations configure and the CDI hooks run per
// container (per file: a placeholder, a mount; per link: a symlink).

func benchRoot(b *testing.B) (*Root, string) {
	b.Helper()
	d := b.TempDir()
	must(b, os.MkdirAll(d+"/root/usr/lib/x86_64-linux-gnu", 0o755))
	must(b, os.MkdirAll(d+"/root/etc", 0o755))
	must(b, os.WriteFile(d+"/root/etc/debian_version", nil, 0o644))
	must(b, os.WriteFile(d+"/lib.so", []byte("x"), 0o644))
	r, err := Open(d + "/root")
	must(b, err)
	b.Cleanup(func() { r.Rollback(); r.Close() })
	return r, d
}

func BenchmarkOpen(b *testing.B) {
	d := b.TempDir()
	for b.Loop() {
		r, err := Open(d)
		must(b, err)
		r.Close()
	}
}

func BenchmarkMkdirAllExisting(b *testing.B) {
	r, _ := benchRoot(b)
	for b.Loop() {
		must(b, r.MkdirAll("/usr/lib/x86_64-linux-gnu", 0o755))
	}
}

func BenchmarkTarget(b *testing.B) {
	r, _ := benchRoot(b)
	for b.Loop() {
		r.Target()
	}
}

func BenchmarkCreatePlaceholderExisting(b *testing.B) {
	r, _ := benchRoot(b)
	f, err := r.CreatePlaceholder("/usr/lib/x86_64-linux-gnu/libcuda.so.535", KindFile, 0o644)
	must(b, err)
	f.Close()
	for b.Loop() {
		f, err := r.CreatePlaceholder("/usr/lib/x86_64-linux-gnu/libcuda.so.535", KindFile, 0o644)
		must(b, err)
		f.Close()
	}
}

func BenchmarkSymlinkExisting(b *testing.B) {
	r, _ := benchRoot(b)
	must(b, r.Symlink("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"))
	for b.Loop() {
		must(b, r.Symlink("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"))
	}
}

// BenchmarkBindMount measures one library mount (open + clone + attach)
// and its rollback (unmount + placeholder removal).
func BenchmarkBindMount(b *testing.B) {
	requireRoot(b)
	r, d := benchRoot(b)
	opts := []string{"ro", "nosuid", "nodev"}
	for b.Loop() {
		must(b, r.BindMount(d+"/lib.so", "/usr/lib/x86_64-linux-gnu/libcuda.so.535", KindFile, opts))
		must(b, r.Rollback())
	}
}

func TestDataSource(t *testing.T) {
	requireRoot(t)
	for _, scratch := range []bool{false, true} {
		e := newEnv(t)
		must(t, os.MkdirAll(e.root+"/proc/driver/nvidia", 0o755))
		must(t, os.WriteFile(e.root+"/proc/driver/nvidia/params", []byte("ModifyDeviceFiles: 1\n"), 0o444))
		r := e.open(t)
		s, err := dataSource("params", []byte("ModifyDeviceFiles: 0\n"), []string{"ro", "nosuid", "nodev", "noexec"}, scratch)
		must(t, err)
		must(t, r.Attach(s, "/proc/driver/nvidia/params"))
		s.Close()
		p := e.root + "/proc/driver/nvidia/params"
		if b, _ := os.ReadFile(p); string(b) != "ModifyDeviceFiles: 0\n" {
			t.Errorf("scratch=%v: params = %q", scratch, b)
		}
		if opt := mountOptions(t, p); !strings.Contains(opt, "ro") || !strings.Contains(opt, "noexec") {
			t.Errorf("scratch=%v: options %q", scratch, opt)
		}
		if m := mountsUnder(t, os.TempDir()+"/nctk-data-"); len(m) != 0 {
			t.Errorf("scratch mounts left: %v", m)
		}
	}
	if _, err := DataSource("x", nil, []string{"bogus"}); err == nil {
		t.Error("bad option accepted")
	}
}

// mountsUnder lists mount points starting with prefix.
func mountsUnder(t *testing.T, prefix string) []string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	var out []string
	for line := range strings.SplitSeq(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			out = append(out, f[4])
		}
	}
	return out
}

func FuzzParseMountOptions(f *testing.F) {
	f.Add("ro,nosuid,nodev,rbind,rprivate")
	f.Add("rw,noexec")
	f.Add("bogus")
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := ParseMountOptions(strings.Split(s, ","))
		if err == nil && fl.ReadOnly && !strings.Contains(s, "ro") {
			t.Fatalf("%q parsed as read-only", s)
		}
	})
}
