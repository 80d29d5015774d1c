package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// containerd 2.x: no Debian release ships it yet (Debian 13 has 1.7), but
// Debian unstable (sid) does, built against a libc Debian 13 has; its
// package is downloaded once into the fixture cache and installed into an
// overlay of the Debian 13 root by the tests that run it.

// sidStamp, in the cache directory, names the cached package file.
const sidStamp = ".nctk-sid-containerd"

// SidContainerdDeb returns Debian unstable's containerd package (.deb),
// downloading it first if the cache (<NCTK_CACHE>/sid) has none: apt-get
// update and download with a private state directory and a sources list
// naming only sid at the mirror in NCTK_DEBIAN_MIRROR (default
// deb.debian.org), signed by the Debian 13 root's archive keyring (newer
// than a Debian 12 host's). The version is whatever sid had then; it stays
// until the cache is cleared. A lock serializes test processes. It skips t
// (fails in strict mode) without root or apt-get.
func SidContainerdDeb(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	dir := filepath.Join(cacheDir(), "sid")
	if deb, ok := cachedSidDeb(dir); ok {
		return deb
	}
	aptGet := RequireTool(t, "apt-get")
	keyring := filepath.Join(TrixieRoot(t), "usr/share/keyrings/debian-archive-keyring.gpg")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("e2e: sid containerd: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("e2e: sid containerd: %v", err)
	}
	defer lock.Close() // and so unlocks
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatalf("e2e: sid containerd: locking %s: %v", lock.Name(), err)
	}
	if deb, ok := cachedSidDeb(dir); ok {
		return deb // downloaded by another process meanwhile
	}
	mirror := os.Getenv(DebianMirrorEnv)
	if mirror == "" {
		mirror = DefaultDebianMirror
	}
	work := TempDir(t, "sidapt")
	for _, d := range []string{"lists/partial", "cache/archives/partial", "dl"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			t.Fatalf("e2e: sid containerd: %v", err)
		}
	}
	sources := filepath.Join(work, "sources.list")
	status := filepath.Join(work, "status")
	if err := os.WriteFile(sources, fmt.Appendf(nil, "deb [signed-by=%s] %s sid main\n", keyring, mirror), 0o644); err != nil {
		t.Fatalf("e2e: sid containerd: %v", err)
	}
	if err := os.WriteFile(status, nil, 0o644); err != nil {
		t.Fatalf("e2e: sid containerd: %v", err)
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + sources, "-o", "Dir::Etc::SourceParts=/nonexistent",
		"-o", "Dir::Etc::Preferences=/nonexistent", "-o", "Dir::Etc::PreferencesParts=/nonexistent",
		"-o", "Dir::State::Lists=" + filepath.Join(work, "lists"), "-o", "Dir::Cache=" + filepath.Join(work, "cache"),
		"-o", "Dir::State::Status=" + status, "-o", "Acquire::Languages=none", "-o", "APT::Sandbox::User=root",
	}
	start := time.Now()
	ro := RunOpts{Timeout: 10 * time.Minute, Env: []string{"PATH=" + SystemPath}}
	if r := runLogged(t, os.Environ(), ro, append(append([]string{aptGet}, opts...), "update")...); !r.OK() {
		t.Fatalf("e2e: sid containerd: apt-get update failed:\n%s", r)
	}
	ro.Dir = filepath.Join(work, "dl")
	if r := runLogged(t, os.Environ(), ro, append(append([]string{aptGet}, opts...), "download", "containerd/sid")...); !r.OK() {
		t.Fatalf("e2e: sid containerd: apt-get download failed:\n%s", r)
	}
	debs, _ := filepath.Glob(filepath.Join(work, "dl", "containerd_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("e2e: sid containerd: apt-get download left %q, want one containerd_*.deb", debs)
	}
	name := filepath.Base(debs[0])
	if err := copyFile(debs[0], filepath.Join(dir, name+".tmp"), 0o644); err != nil {
		t.Fatalf("e2e: sid containerd: %v", err)
	}
	if err := os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)); err != nil {
		t.Fatalf("e2e: sid containerd: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, sidStamp), []byte(name+"\n"), 0o644); err != nil {
		t.Fatalf("e2e: sid containerd: %v", err)
	}
	t.Logf("e2e: downloaded %s from %s (sid) in %v", name, mirror, time.Since(start).Round(time.Second))
	return filepath.Join(dir, name)
}

// cachedSidDeb returns the package sidStamp names in dir, if both are
// there.
func cachedSidDeb(dir string) (string, bool) {
	data, err := os.ReadFile(filepath.Join(dir, sidStamp))
	if err != nil {
		return "", false
	}
	name := strings.TrimSpace(string(data))
	if name == "" || strings.Contains(name, "/") {
		return "", false
	}
	p := filepath.Join(dir, name)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return p, true
}

// InstallDebs installs Debian packages (files on the host) into the
// root's overlay with its own dpkg, as `dpkg -i` on a machine with that
// root would; the cached root itself is not changed. The files are copied
// into a directory both sides see first.
func (r *EngineRoot) InstallDebs(t testing.TB, debs ...string) {
	t.Helper()
	dir := TempDir(t, "debs")
	var argv []string
	for _, d := range debs {
		p := filepath.Join(dir, filepath.Base(d))
		if err := copyFile(d, p, 0o644); err != nil {
			t.Fatalf("e2e: %v", err)
		}
		argv = append(argv, p)
	}
	r.MustRun(t, RunOpts{Quiet: true, Env: []string{"DEBIAN_FRONTEND=noninteractive"}}, append([]string{"dpkg", "-i"}, argv...)...)
}
