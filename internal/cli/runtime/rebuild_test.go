package runtime

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/rootfs"
)

// TestRebuildOptions: what the rebuild of a CDI spec's update-ldcache
// reads from the host (library files the spec mounts) and what it must not
// read under (every other mount: the spec's own, a directory mounted
// under a library name, files of other names); a mount at a pending
// file's path is that file's.
func TestRebuildOptions(t *testing.T) {
	ldconfig := "/sbin/ldconfig"
	if _, err := os.Stat(ldconfig); err != nil {
		t.Skipf("no %s: %v", ldconfig, err)
	}
	host := t.TempDir()
	lib := filepath.Join(host, "libcuda.so.580.1")
	if err := os.WriteFile(lib, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirLib := filepath.Join(host, "libdir.so.1")
	if err := os.Mkdir(dirLib, 0o755); err != nil {
		t.Fatal(err)
	}
	pending := rootfs.Pending{
		Files: []rootfs.PendingFile{
			{Path: "/usr/lib64/libcuda.so.580.1", Source: lib},
			{Path: "/usr/lib64/libnvidia-ml.so.580.1", Source: "/nonexistent", Library: &ldcache.Library{SONAME: "libnvidia-ml.so.1"}},
			{Path: "/usr/lib64/libdir.so.1", Source: dirLib},
			{Path: "/usr/bin/nvidia-smi", Source: lib},
		},
		Links: []rootfs.PendingLink{{Path: "/usr/lib64/libcuda.so", Target: "libcuda.so.1"}},
	}
	r := New()
	r.CDICacheDir = filepath.Join(t.TempDir(), "cdi")
	o, err := r.rebuildOptions("", pending, []string{"/proc", "/etc/hosts", "/usr/lib64/libcuda.so.580.1", "/opt/volume"})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range o.Pending.Files {
		files = append(files, f.Path)
	}
	if want := []string{"/usr/lib64/libcuda.so.580.1", "/usr/lib64/libnvidia-ml.so.580.1"}; !slices.Equal(files, want) {
		t.Errorf("pending files %q, want %q", files, want)
	}
	if want := []string{"/proc", "/etc/hosts", "/opt/volume", "/usr/lib64/libdir.so.1", "/usr/bin/nvidia-smi"}; !slices.Equal(o.Mounts, want) {
		t.Errorf("mounts %q, want %q", o.Mounts, want)
	}
	if len(o.Pending.Links) != 1 || len(o.SystemDirs) == 0 {
		t.Errorf("links %v, system directories %q", o.Pending.Links, o.SystemDirs)
	}
}
