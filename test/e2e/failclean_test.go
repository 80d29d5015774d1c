package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// startGPUDockerd starts a private dockerd over a 2-GPU fixture driver
// with the nvidia runtime registered and nctk's hook on its PATH (the
// --gpus path), and imports the probe image as img. With trixie it is
// Debian 13's dockerd (26.1, runc 1.1) in a mount namespace of its own,
// else the host's.
func startGPUDockerd(t *testing.T, img string, trixie bool) (*gpuHost, *e2e.Dockerd) {
	t.Helper()
	spec := fixture.Spec{Layout: "multiarch", GPUs: 2}
	var root *e2e.EngineRoot
	var host *gpuHost
	if trixie {
		root = e2e.StartTrixie(t)
		host = trixieHost(t, root, spec)
	} else {
		host = newHost(t, spec)
	}
	d := e2e.StartDockerd(t, e2e.DockerdOptions{
		Root:      root,
		Runtimes:  map[string]e2e.DockerRuntime{"nvidia": {Path: tool(t, "nvidia-container-runtime")}},
		ExtraPath: []string{binDir},
		Env:       host.Env,
	})
	d.ImportImage(e2e.BuildRootfs(t, e2e.RootfsOptions{}), img)
	return host, d
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
	host, d := startGPUDockerd(t, img, false)
	userMount(t, host, d, img)
}

// TestTrixieDockerUserMount is TestDockerUserMount against Debian 13's
// docker (26.1) and runc (1.1), whose daemons run in a mount namespace of
// their own.
func TestTrixieDockerUserMount(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	const img = "nctk-e2e:usermount"
	host, d := startGPUDockerd(t, img, true)
	userMount(t, host, d, img)
}

// userMount runs the cases of TestDockerUserMount against d, whose image
// img is the probe image.
func userMount(t *testing.T, host *gpuHost, d *e2e.Dockerd, img string) {
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
			before := e2e.TreeState(t, vol)
			argv := append([]string{"run", "--rm", "--network=none", "-v", vol + ":" + libDir}, tt.args...)
			res := d.Docker(append(argv, img, "/bin/true")...)
			if got := e2e.TreeState(t, vol); !maps.Equal(got, before) {
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
			if got := e2e.TreeState(t, vol); !maps.Equal(got, before) {
				t.Errorf("the host directory changed by a container with it at /data:\n%v\nwas\n%v", got, before)
			}
		})
	}
}

// hugeEnvBound is how long a docker run with an oversized value may take
// to fail (issue 13: it hung for good).
const hugeEnvBound = 20 * time.Second

// TestDockerHugeEnv replays issue 13: an image whose NVIDIA_REQUIRE_CUDA is
// 40,000 characters long hung `docker run` for good on both paths (the
// error repeated the value, and the runtime or runc blocked writing it to a
// pipe nobody drained). Values of 100 KB, in the image's ENV and from -e,
// through --gpus and --runtime=nvidia, must make docker run fail within
// hugeEnvBound with a short error naming the variable (no echo of the
// value), and leave no container, mount or nctk process behind.
func TestDockerHugeEnv(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	const img = "nctk-e2e:hugeenv"
	host, d := startGPUDockerd(t, img, false)
	hugeEnv(t, host, d, img)
}

// TestTrixieDockerHugeEnv is TestDockerHugeEnv against Debian 13's docker
// (26.1) and runc (1.1).
func TestTrixieDockerHugeEnv(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	const img = "nctk-e2e:hugeenv"
	host, d := startGPUDockerd(t, img, true)
	hugeEnv(t, host, d, img)
}

// hugeEnv runs the cases of TestDockerHugeEnv against d, whose image img
// is the probe image.
func hugeEnv(t *testing.T, host *gpuHost, d *e2e.Dockerd, img string) {
	require := "cuda>=12.0" + strings.Repeat(" brand=tesla,driver>=470,driver<471", 100<<10/35)
	devices := strings.Repeat("0,", 50<<10)
	nearLimit := "cuda>=99.0" + strings.Repeat(" brand=tesla,driver>=470,driver<471", (32<<10-100)/35)
	// The image's own ENV line, as any image can carry. Docker reads
	// Dockerfile lines of at most 64 KB: the value is continued over
	// lines, which the parser joins.
	var env strings.Builder
	for i := 0; i < len(require); i += 16 << 10 {
		env.WriteString(require[i:min(i+16<<10, len(require))])
		if i+16<<10 < len(require) {
			env.WriteString("\\\n")
		}
	}
	envImg := img + "-env"
	if r := d.DockerOpts(e2e.RunOpts{Quiet: true}, "commit", "--change", "ENV NVIDIA_REQUIRE_CUDA=\""+env.String()+"\"",
		d.MustDocker("create", img, "/bin/true")[:12], envImg); !r.OK() {
		t.Fatalf("docker commit with a 100 KB ENV failed: %s", clip(r.Stderr))
	}
	d.MustDocker("container", "prune", "-f")
	if r := d.DockerOpts(e2e.RunOpts{Quiet: true}, "image", "inspect", "-f", "{{json .Config.Env}}", envImg); !r.OK() || !strings.Contains(r.Stdout, `"NVIDIA_REQUIRE_CUDA=`+require+`"`) {
		t.Fatalf("image %s lacks the 100 KB ENV: %s", envImg, clip(r.Stdout+r.Stderr))
	}

	for _, tt := range []struct {
		name  string
		image string
		args  []string
		name1 string // the variable the error must name
		msg   string // what the error must say ("" for "too long")
	}{
		{"gpus/image ENV NVIDIA_REQUIRE_CUDA", envImg, []string{"--runtime=runc", "--gpus", "all"}, "NVIDIA_REQUIRE_CUDA", ""},
		{"runtime/image ENV NVIDIA_REQUIRE_CUDA", envImg, []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all"}, "NVIDIA_REQUIRE_CUDA", ""},
		{"gpus/-e NVIDIA_REQUIRE_CUDA", img, []string{"--runtime=runc", "--gpus", "all", "-e", "NVIDIA_REQUIRE_CUDA=" + require}, "NVIDIA_REQUIRE_CUDA", ""},
		{"runtime/-e NVIDIA_REQUIRE_CUDA", img, []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all", "-e", "NVIDIA_REQUIRE_CUDA=" + require}, "NVIDIA_REQUIRE_CUDA", ""},
		{"gpus/device=<100 KB>", img, []string{"--runtime=runc", "--gpus", `"device=` + strings.TrimSuffix(devices, ",") + `"`}, "NVIDIA_VISIBLE_DEVICES", ""},
		{"runtime/-e NVIDIA_VISIBLE_DEVICES", img, []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=" + devices}, "NVIDIA_VISIBLE_DEVICES", ""},
		// Just under the limit: parsed, evaluated, unsatisfied (no term
		// holds for the 535 fixture driver), and still a short error.
		{"gpus/NVIDIA_REQUIRE_CUDA under the limit", img, []string{"--runtime=runc", "--gpus", "all", "-e", "NVIDIA_REQUIRE_CUDA=" + nearLimit}, "", "unsatisfied condition"},
		{"runtime/NVIDIA_REQUIRE_CUDA under the limit", img, []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all", "-e", "NVIDIA_REQUIRE_CUDA=" + nearLimit}, "", "unsatisfied condition"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mounts := mountsBelow(t, d.Dir)
			t.Cleanup(func() { checkNothingLeft(t, d, mounts) })
			argv := append(append([]string{"run", "--rm", "--network=none"}, tt.args...), tt.image, "/bin/true")
			res := d.DockerOpts(e2e.RunOpts{Quiet: true, Timeout: 2 * hugeEnvBound}, argv...)
			t.Logf("docker run %s: exit %d after %v, %d bytes of stderr:\n%s", tt.name, res.ExitCode, res.Duration.Round(time.Millisecond), len(res.Stderr), clip(res.Stderr))
			if res.Duration > hugeEnvBound {
				t.Errorf("docker run took %v, more than %v", res.Duration, hugeEnvBound)
			}
			if res.OK() {
				t.Fatalf("docker run %s succeeded", tt.name)
			}
			if len(res.Stderr) > 2048 || strings.Contains(res.Stderr, strings.Repeat("0,", 200)) || strings.Contains(res.Stderr, strings.Repeat(" brand=tesla,driver>=470,driver<471", 10)) {
				t.Errorf("the error echoes the value (%d bytes)", len(res.Stderr))
			}
			if tt.msg != "" {
				if !strings.Contains(res.Stderr, tt.msg) {
					t.Errorf("the error does not say %q", tt.msg)
				}
			} else if !strings.Contains(res.Stderr, tt.name1) || !strings.Contains(res.Stderr, "too long") {
				t.Errorf("the error does not say that %s is too long", tt.name1)
			}
		})
	}
	// With --gpus, dockerd appends its own NVIDIA_VISIBLE_DEVICES after
	// the user's, and the later one counts (as in NVIDIA's hook): a 100 KB
	// -e value is then never read, and the container gets --gpus's GPUs.
	t.Run("gpus/-e NVIDIA_VISIBLE_DEVICES", func(t *testing.T) {
		mounts := mountsBelow(t, d.Dir)
		t.Cleanup(func() { checkNothingLeft(t, d, mounts) })
		_, mustRun := dockerProbe(d, img, e2e.LayoutDebian.LibDir())
		start := time.Now()
		out := mustRun(t, "--runtime=runc", "--gpus", "device=1", "-e", "NVIDIA_VISIBLE_DEVICES="+devices)
		if took := time.Since(start); took > hugeEnvBound {
			t.Errorf("docker run took %v, more than %v", took, hugeEnvBound)
		}
		checkGPU(t, out, want{host: host, GPUs: []int{1}, LibDir: e2e.LayoutDebian.LibDir()})
	})
}

// checkNothingLeft asserts that no container of d, no mount below its
// directory beyond the mounts there before, and no nctk process is left.
func checkNothingLeft(t *testing.T, d *e2e.Dockerd, mounts int) {
	t.Helper()
	if ids := strings.Fields(d.DockerOpts(e2e.RunOpts{Quiet: true}, "ps", "-aq").Stdout); len(ids) > 0 {
		t.Errorf("containers left: %v", ids)
	}
	if got := mountsBelow(t, d.Dir); got != mounts {
		t.Errorf("%d mounts below %s after the run, %d before", got, d.Dir, mounts)
	}
	if left := toolProcesses(); len(left) > 0 {
		t.Errorf("nctk processes left: %v", left)
	}
}

// clip shortens s for the test log.
func clip(s string) string {
	if len(s) > 1500 {
		return s[:1500] + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return s
}

// mountsBelow counts the mounts of our namespace at or below dir.
func mountsBelow(t *testing.T, dir string) int {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(mi)) {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			n++
		}
	}
	return n
}

// toolProcesses lists the running processes whose executable is nctk as
// this test run built it.
func toolProcesses() []string {
	var out []string
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		if exe, err := os.Readlink(p + "/exe"); err == nil && strings.HasPrefix(exe, binDir+"/") {
			out = append(out, filepath.Base(p)+" "+exe)
		}
	}
	return out
}
