package e2e

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// startGPUDockerd starts a private dockerd over a 2-GPU fixture driver
// with the nvidia runtime registered and nctk's hook on its PATH (the
// --gpus path), and imports the probe image as img.
func startGPUDockerd(t *testing.T, img string) (*gpuHost, *e2e.Dockerd) {
	t.Helper()
	host := newHost(t, fixture.Spec{Layout: "multiarch", GPUs: 2})
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	d := e2e.StartDockerd(t, e2e.DockerdOptions{
		Runtimes:  map[string]e2e.DockerRuntime{"nvidia": {Path: tool(t, "nvidia-container-runtime")}},
		ExtraPath: []string{binDir},
		Env:       host.Env,
	})
	d.ImportImage(image, img)
	return host, d
}

// dirTree describes every object below dir (type and mode, content or
// link target).
func dirTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %q", b)
		} else if fi.Mode()&fs.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[strings.TrimPrefix(p, dir)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDockerUserMount replays issue 13 through docker itself: a user
// volume over the image's library directory (`-v /host/dir:/usr/lib/
// x86_64-linux-gnu`) got the driver files' mount points created in the
// host directory. On both paths (--gpus: the prestart hook and
// nvidia-container-cli configure; --runtime=nvidia) docker run now fails
// with an error naming the path, the mount and the host directory, and the
// host directory is byte for byte as it was. The same volume elsewhere
// works.
func TestDockerUserMount(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	const img = "nctk-e2e:usermount"
	host, d := startGPUDockerd(t, img)
	libDir := e2e.LayoutDebian.LibDir()
	_, mustRun := dockerProbe(d, img, libDir)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"gpus=all", []string{"--runtime=runc", "--gpus", "all"}},
		{"gpus=device=1", []string{"--runtime=runc", "--gpus", "device=1"}},
		{"runtime=nvidia", []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vol := e2e.TempDir(t, "vol")
			if err := os.WriteFile(filepath.Join(vol, "user-data"), []byte("mine"), 0o600); err != nil {
				t.Fatal(err)
			}
			before := dirTree(t, vol)
			argv := append([]string{"run", "--rm", "--network=none", "-v", vol + ":" + libDir}, tt.args...)
			res := d.Docker(append(argv, img, "/bin/true")...)
			if got := dirTree(t, vol); !maps.Equal(got, before) {
				t.Errorf("the host directory changed:\n%v\nwas\n%v", got, before)
			}
			if res.OK() {
				t.Fatalf("docker run with a volume over %s succeeded: %s", libDir, res)
			}
			if msg := res.Stderr; !strings.Contains(msg, vol) || !strings.Contains(msg, libDir) || !strings.Contains(msg, "mount the volume elsewhere") {
				t.Errorf("the error does not name the mount:\n%s", msg)
			}
			// The same volume elsewhere is no obstacle.
			out := mustRun(t, append([]string{"-v", vol + ":/data"}, tt.args...)...)
			gpus := []int{0, 1}
			if tt.name == "gpus=device=1" {
				gpus = []int{1}
			}
			checkGPU(t, out, want{host: host, GPUs: gpus, LibDir: libDir})
			if got := dirTree(t, vol); !maps.Equal(got, before) {
				t.Errorf("the host directory changed by a container with it at /data:\n%v\nwas\n%v", got, before)
			}
		})
	}
}
