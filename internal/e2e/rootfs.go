package e2e

import (
	"debug/elf"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

//go:embed testdata/cudaprobe.c
var cudaprobeSource []byte

// Layout selects where the test image keeps its libraries, which decides
// where a driver injector must put the driver's (libnvidia-container picks
// the directory by the presence of /etc/debian_version).
type Layout string

const (
	// LayoutDebian is a merged-/usr Debian/Ubuntu-like image: libraries in
	// /usr/lib/x86_64-linux-gnu, /bin, /sbin, /lib linked into /usr, the
	// loader reached through /lib64/ld-linux-x86-64.so.2, and
	// /etc/debian_version (unless RootfsOptions.NoDebianVersion).
	LayoutDebian Layout = "debian"
	// LayoutLib64 is a RHEL/Fedora-like image: libraries in /usr/lib64,
	// /lib64 -> usr/lib64, no /etc/debian_version. Because the glibc copied
	// from the (Debian) host does not search /usr/lib64 by default, the image
	// lists it in /etc/ld.so.conf.d/lib64.conf.
	LayoutLib64 Layout = "lib64"
)

// LibDir is the image's library directory for the layout.
func (l Layout) LibDir() string {
	if l == LayoutLib64 {
		return "/usr/lib64"
	}
	return "/usr/lib/" + multiarchTriple
}

const (
	multiarchTriple = "x86_64-linux-gnu"
	loaderName      = "ld-linux-x86-64.so.2"
	// cudaprobePath is where BuildRootfs puts cudaprobe in the image.
	cudaprobePath = "/usr/bin/cudaprobe"
)

// CudaprobePath is the path of cudaprobe inside images from BuildRootfs.
const CudaprobePath = cudaprobePath

// CudaprobeNoDriver is what cudaprobe prints (on stderr, exit status 1) when
// no libcuda.so.1 can be loaded, i.e. no driver was injected.
const CudaprobeNoDriver = "libcuda.so.1: cannot open shared object file"

// HostLibs lists the glibc pieces (and libgcc_s) copied from the host into
// every image: what cudaprobe and a real driver's libcuda.so /
// libnvidia-ml.so need (their DT_NEEDED are among libc, libm, libdl,
// libpthread, librt and the loader).
func HostLibs() []string {
	return []string{
		loaderName, "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0",
		"librt.so.1", "libgcc_s.so.1",
	}
}

// hostLibDirs are searched, in order, for HostLibs and ExtraHostLibs.
var hostLibDirs = []string{
	"/usr/lib/" + multiarchTriple, "/lib/" + multiarchTriple, "/usr/lib64", "/lib64",
}

// RootfsOptions configures BuildRootfs. The zero value is a Debian-layout
// image with cudaprobe and an ld.so.cache.
type RootfsOptions struct {
	// Layout defaults to LayoutDebian.
	Layout Layout
	// NoDebianVersion leaves /etc/debian_version out of a LayoutDebian
	// image.
	NoDebianVersion bool
	// NoCudaprobe leaves /usr/bin/cudaprobe out (no gcc needed).
	NoCudaprobe bool
	// NoLdCache leaves /etc/ld.so.cache out (the host ldconfig is then not
	// run on the image).
	NoLdCache bool
	// ExtraHostLibs are further host libraries (file names searched in the
	// host's library directories, or absolute paths) copied into the image's
	// LibDir before the cache is made.
	ExtraHostLibs []string
	// Files are extra regular files, image path -> content (mode 0644,
	// parent directories created), written before the cache is made.
	Files map[string]string
}

// BuildRootfs makes a minimal image root filesystem in a fresh directory
// (removed at cleanup) and returns its absolute path:
//
//   - busybox-static as /usr/bin/busybox with a symlink per applet (sh, env,
//     ls, cat, ...), /bin, /sbin and /lib linked into /usr;
//   - the host's glibc (HostLibs()) in Layout.LibDir(), the loader at
//     /lib64/ld-linux-x86-64.so.2;
//   - /etc/ld.so.conf including /etc/ld.so.conf.d/*.conf, and an
//     /etc/ld.so.cache made by the host's `ldconfig -r` (no ldconfig binary
//     in the image);
//   - /usr/bin/cudaprobe, built from testdata/cudaprobe.c with the host's gcc;
//   - /etc/passwd, /etc/group, /etc/os-release and, for LayoutDebian,
//     /etc/debian_version; no NVIDIA file at all.
//
// It needs root (ldconfig -r chroots) and skips the test if busybox-static,
// gcc or ldconfig are missing.
func BuildRootfs(t testing.TB, opts RootfsOptions) string {
	t.Helper()
	RequireRoot(t)
	if runtime.GOARCH != "amd64" {
		skipOrFail(t, "e2e: BuildRootfs supports amd64 hosts only, not %s", runtime.GOARCH)
	}
	busybox := RequireTool(t, "busybox")
	if err := checkStatic(busybox); err != nil {
		skipOrFail(t, "e2e: busybox-static is not installed: %v", err)
	}
	var gcc, ldconfig string
	if !opts.NoCudaprobe {
		gcc = RequireTool(t, "gcc")
	}
	if !opts.NoLdCache {
		ldconfig = RequireTool(t, "ldconfig")
	}
	if opts.Layout == "" {
		opts.Layout = LayoutDebian
	}
	if opts.Layout != LayoutDebian && opts.Layout != LayoutLib64 {
		t.Fatalf("e2e: unknown rootfs layout %q", opts.Layout)
	}
	dir := TempDir(t, "rootfs")
	root := filepath.Join(dir, "rootfs")
	if err := buildRootfs(t, root, dir, busybox, gcc, ldconfig, opts); err != nil {
		t.Fatalf("e2e: building rootfs: %v", err)
	}
	return root
}

func buildRootfs(t testing.TB, root, work, busybox, gcc, ldconfig string, opts RootfsOptions) error {
	libDir := opts.Layout.LibDir()
	for _, d := range []string{
		"usr/bin", "usr/sbin", "usr/lib", "usr/local/bin", "usr/local/lib", libDir[1:],
		"etc/ld.so.conf.d", "proc", "sys", "dev", "run", "tmp", "var/tmp", "root", "home",
	} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("creating /%s: %w", d, err)
		}
	}
	for _, d := range []string{"tmp", "var/tmp"} {
		if err := os.Chmod(filepath.Join(root, d), 0o1777); err != nil {
			return fmt.Errorf("chmod /%s: %w", d, err)
		}
	}
	links := map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib"}
	if opts.Layout == LayoutLib64 {
		links["lib64"] = "usr/lib64"
	} else {
		if err := os.MkdirAll(filepath.Join(root, "lib64"), 0o755); err != nil {
			return fmt.Errorf("creating /lib64: %w", err)
		}
		links["lib64/"+loaderName] = libDir + "/" + loaderName
	}
	for _, name := range sortedKeys(links) {
		if err := os.Symlink(links[name], filepath.Join(root, name)); err != nil {
			return fmt.Errorf("linking /%s: %w", name, err)
		}
	}

	// busybox and its applets.
	if err := copyFile(busybox, filepath.Join(root, "usr/bin/busybox"), 0o755); err != nil {
		return err
	}
	r := runCmd(t.Context(), os.Environ(), RunOpts{}, busybox, "--list-full")
	if !r.OK() {
		return fmt.Errorf("listing busybox applets: %w: %s", r.Err, r.Stderr)
	}
	for _, applet := range strings.Fields(r.Stdout) {
		dst := applet
		switch {
		case strings.HasPrefix(dst, "bin/"), strings.HasPrefix(dst, "sbin/"):
			dst = "usr/" + dst
		case strings.HasPrefix(dst, "usr/bin/"), strings.HasPrefix(dst, "usr/sbin/"):
		default:
			continue
		}
		if filepath.Base(dst) == "busybox" || strings.Contains(dst, "ldconfig") {
			continue
		}
		if err := os.Symlink("/usr/bin/busybox", filepath.Join(root, dst)); err != nil && !os.IsExist(err) {
			return fmt.Errorf("linking applet %s: %w", dst, err)
		}
	}

	// glibc from the host.
	for _, lib := range append(HostLibs(), opts.ExtraHostLibs...) {
		src, err := findHostLib(lib)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if fi, err := os.Stat(src); err == nil {
			mode = fi.Mode().Perm()
		}
		if err := copyFile(src, filepath.Join(root, libDir, filepath.Base(src)), mode); err != nil {
			return err
		}
	}

	// /etc.
	files := map[string]string{
		"etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
		"etc/passwd":     "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":      "root:x:0:\nnogroup:x:65534:\n",
		"etc/hostname":   "nctk-e2e\n",
	}
	if opts.Layout == LayoutLib64 {
		files["etc/ld.so.conf.d/lib64.conf"] = "/usr/lib64\n"
		files["etc/os-release"] = "NAME=\"nctk e2e (lib64)\"\nID=nctk-e2e\nID_LIKE=\"rhel fedora\"\nVERSION_ID=1\n"
	} else {
		files["etc/ld.so.conf.d/libc.conf"] = "/usr/local/lib\n"
		files["etc/ld.so.conf.d/"+multiarchTriple+".conf"] = "/usr/local/lib/" + multiarchTriple + "\n/lib/" + multiarchTriple + "\n/usr/lib/" + multiarchTriple + "\n"
		files["etc/os-release"] = "PRETTY_NAME=\"nctk e2e (Debian-like)\"\nNAME=\"nctk e2e\"\nID=debian\nVERSION_ID=\"12\"\n"
		if !opts.NoDebianVersion {
			files["etc/debian_version"] = "12.0\n"
		}
	}
	for p, content := range opts.Files {
		files[strings.TrimPrefix(filepath.Clean("/"+p), "/")] = content
	}
	for _, p := range sortedKeys(files) {
		if err := writeFile(filepath.Join(root, p), []byte(files[p]), 0o644); err != nil {
			return err
		}
	}

	if !opts.NoCudaprobe {
		src := filepath.Join(work, "cudaprobe.c")
		if err := writeFile(src, cudaprobeSource, 0o644); err != nil {
			return err
		}
		r := runCmd(t.Context(), os.Environ(), RunOpts{}, gcc, "-O2", "-Wall", "-o", filepath.Join(root, cudaprobePath), src, "-Wl,--as-needed", "-ldl")
		if !r.OK() {
			return fmt.Errorf("compiling cudaprobe: %w\n%s", r.Err, r.Combined())
		}
	}
	if !opts.NoLdCache {
		r := runCmd(t.Context(), os.Environ(), RunOpts{}, ldconfig, "-r", root)
		if !r.OK() {
			return fmt.Errorf("ldconfig -r %s: %w\n%s", root, r.Err, r.Combined())
		}
	}
	return nil
}

// findHostLib resolves a library name (or absolute path) on the host.
func findHostLib(lib string) (string, error) {
	if filepath.IsAbs(lib) {
		if _, err := os.Stat(lib); err != nil {
			return "", fmt.Errorf("host library: %w", err)
		}
		return lib, nil
	}
	for _, d := range hostLibDirs {
		p := filepath.Join(d, lib)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("host library %s not found in %s", lib, strings.Join(hostLibDirs, ", "))
}

// checkStatic fails unless path is an ELF executable without an interpreter.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

// copyFile copies src (following symlinks) to a new regular file dst.
func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := writeFile(dst, data, mode); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	// WriteFile's mode is masked by the umask.
	if err := os.Chmod(dst, mode); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
