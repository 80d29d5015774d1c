package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/cdispec"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/plan"
)

// withMount returns spec with m added to its mounts.
func withMount(t *testing.T, spec string, m specs.Mount) string {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(spec), &doc); err != nil {
		t.Fatal(err)
	}
	doc["mounts"] = []specs.Mount{m}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestUserMountOverLibDir replays issue 13: a user volume over the image's
// library directory got the driver files' mount points created in the host
// directory. The create is refused with an error naming the mount; the
// host directory, the rootfs and config.json are left as they were. A
// volume elsewhere, or a bind of one file, is no obstacle.
func TestUserMountOverLibDir(t *testing.T) {
	k := newKillRig(t)
	tests := []struct {
		name    string
		dst     string
		file    bool // the host path is a file
		refused bool
	}{
		{name: "volume over the lib dir", dst: "/usr/lib/x86_64-linux-gnu", refused: true},
		{name: "volume over /usr", dst: "/usr", refused: true},
		{name: "volume over /usr/lib/ (unclean)", dst: "/usr/lib/", refused: true},
		{name: "volume elsewhere", dst: "/data"},
		{name: "a file bound over /etc/hosts", dst: "/etc/hosts", file: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := t.TempDir()
			src := filepath.Join(host, "vol")
			if tt.file {
				if err := os.WriteFile(src, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Mkdir(src, 0o755); err != nil {
				t.Fatal(err)
			} else if err := os.WriteFile(filepath.Join(src, "user-data"), []byte("mine"), 0o644); err != nil {
				t.Fatal(err)
			}
			hostBefore := e2e.TreeState(t, host)
			bundle := writeBundle(t, withMount(t, k.spec, specs.Mount{Destination: tt.dst, Type: "bind", Source: src, Options: []string{"rbind", "rw"}}))
			k.image(filepath.Join(bundle, "rootfs"))
			before := e2e.TreeState(t, bundle)
			var out bytes.Buffer
			cmd := k.command(bundle)
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if d := e2e.TreeDiff(e2e.TreeState(t, host), hostBefore); len(d) > 0 {
				t.Errorf("host directory changed: %v", d)
			}
			if !tt.refused {
				if err != nil {
					t.Fatalf("create: %v: %s", err, out.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("create over a user volume at %s succeeded", tt.dst)
			}
			if msg := out.String(); !strings.Contains(msg, src) || !strings.Contains(msg, filepath.Clean(tt.dst)) || !strings.Contains(msg, "mount the volume elsewhere") {
				t.Errorf("error does not name the mount: %s", msg)
			}
			if d := e2e.TreeDiff(e2e.TreeState(t, bundle), before); len(d) > 0 {
				t.Errorf("bundle or rootfs changed: %v", d)
			}
		})
	}
}

// TestCheckUserMounts: which mounts cover which of the plan's paths.
func TestCheckUserMounts(t *testing.T) {
	lib := "/usr/lib/x86_64-linux-gnu"
	p := &plan.Plan{
		Mounts:   []plan.Mount{{Source: "/drv/libcuda.so.1", Destination: lib + "/libcuda.so.1", Kind: plan.KindFile}},
		Symlinks: []plan.Symlink{{Link: "/usr/local/cuda/compat/libcuda.so", Target: "libcuda.so.1"}},
	}
	own := cdispec.OwnHooks{Links: []hookargs.Link{{Target: "libnvidia-ml.so.1", Path: "/opt/nv/libnvidia-ml.so"}}}
	tests := []struct {
		name  string
		mount specs.Mount
		want  string // the covered path, "" for none
	}{
		{"bind type", specs.Mount{Destination: lib, Type: "bind", Source: "/host/lib"}, lib + "/libcuda.so.1"},
		{"rbind option, no type", specs.Mount{Destination: "/usr/lib", Source: "/host/lib", Options: []string{"rbind"}}, lib + "/libcuda.so.1"},
		{"bind option, other type", specs.Mount{Destination: "/usr/local", Type: "none", Source: "/host/x", Options: []string{"bind", "ro"}}, "/usr/local/cuda/compat/libcuda.so"},
		{"lifted hook link", specs.Mount{Destination: "/opt", Type: "bind", Source: "/host/opt"}, "/opt/nv/libnvidia-ml.so"},
		{"tmpfs", specs.Mount{Destination: lib, Type: "tmpfs", Source: "tmpfs"}, ""},
		{"relative source", specs.Mount{Destination: lib, Type: "bind", Source: "vol"}, ""},
		{"the file itself", specs.Mount{Destination: lib + "/libcuda.so.1", Type: "bind", Source: "/host/libcuda.so.1"}, ""},
		{"a sibling prefix", specs.Mount{Destination: "/usr/lib/x86_64", Type: "bind", Source: "/host/x"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkUserMounts(hostBinds([]specs.Mount{tt.mount}), p, own)
			var ue *plan.UserMountError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.want != "" && !errors.As(err, &ue):
				t.Errorf("err = %v, want a plan.UserMountError", err)
			case tt.want != "" && (ue.Path != tt.want || ue.Source != tt.mount.Source):
				t.Errorf("err = %+v, want path %s from %s", ue, tt.want, tt.mount.Source)
			}
		})
	}
}
