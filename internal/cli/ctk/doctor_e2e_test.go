package ctk

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/doctor"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// TestE2EDoctorImage builds an image in a private dockerd (`docker import`
// of a small rootfs, with an NVIDIA_REQUIRE_CUDA newer than the fixture
// driver's CUDA and a libcuda of its own) and runs `nvidia-ctk doctor
// --image` against it through that dockerd's socket: the doctor reads the
// image with `docker image save` and reports the unmet requirement and the
// shipped driver library, and the image is still there afterwards.
func TestE2EDoctorImage(t *testing.T) {
	skipShort(t)
	host := fixture.Build(t, fixture.Spec{GPUs: 1})
	if host.CUDAVersion == "" {
		t.Skip("the fixture driver's CUDA version was not measured (its libcuda could not be probed)")
	}
	major, _, _ := strings.Cut(host.CUDAVersion, ".")
	m, err := strconv.Atoi(major)
	if err != nil {
		t.Fatalf("fixture CUDA version %q", host.CUDAVersion)
	}
	require := "cuda>=" + strconv.Itoa(m+1) + ".0"

	d := e2e.StartDockerd(t, e2e.DockerdOptions{})
	rootfs := t.TempDir()
	for p, data := range map[string]string{
		"etc/os-release": "ID=debian\nVERSION_ID=12\n",
		"usr/lib/x86_64-linux-gnu/libcuda.so.470.82.01": "not really a library",
		"usr/local/bin/app":                             "#!/bin/sh\n",
	} {
		full := filepath.Join(rootfs, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const image = "nctk-e2e/doctor:newer-cuda"
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(e2e.WriteRootfsTar(pw, rootfs)) }()
	r := d.DockerOpts(e2e.RunOpts{Stdin: pr}, "import",
		"--change", "ENV NVIDIA_VISIBLE_DEVICES=all",
		"--change", "ENV NVIDIA_REQUIRE_CUDA="+require,
		"--change", `ENTRYPOINT ["/usr/local/bin/app"]`,
		"-", image)
	pr.CloseWithError(io.ErrClosedPipe)
	if !r.OK() {
		t.Fatalf("docker import failed:\n%s\ndockerd log:\n%s", r, d.Log())
	}
	id := strings.TrimSpace(d.MustDocker("image", "inspect", "--format", "{{.Id}}", image))

	// The installed binaries: nvidia-ctk and the driver probe helper
	// beside it that learns the fixture driver's CUDA version.
	ctk := filepath.Join(e2e.MustBuildNctk(t), "nvidia-ctk")
	env := []string{"PATH=" + os.Getenv("PATH"), "XDG_CACHE_HOME=" + t.TempDir()}
	doctorRun := func(env []string, args ...string) (string, string, int) {
		t.Helper()
		r := e2e.Run(t, e2e.RunOpts{Env: env, Quiet: true}, append([]string{ctk, "doctor", "--host-root", host.Path, "--engine", "docker", "--image", image}, args...)...)
		if r.Err != nil && r.ExitCode <= 0 {
			t.Fatalf("nvidia-ctk doctor did not run: %v", r.Err)
		}
		return r.Stdout, r.Stderr, r.ExitCode
	}
	stdout, stderr, code := doctorRun(env, "--json", "--docker-host", d.Host)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	var req, libs *doctor.Finding
	for i, f := range rep.Findings {
		switch {
		case f.Check == "container.request" && f.Severity == doctor.Error:
			t.Fatalf("the image was not read: %s", f.Problem)
		case f.Check == "container.requirements":
			req = &rep.Findings[i]
		case f.Check == "container.driver-libraries":
			libs = &rep.Findings[i]
		}
	}
	if req == nil || req.Severity != doctor.Error || !strings.Contains(req.Problem, require) ||
		req.Values["requirements"] != require || req.Values["host_cuda"] != host.CUDAVersion || !strings.Contains(req.Fix, "update the host driver") {
		t.Errorf("requirement finding %+v; report:\n%s", req, stdout)
	}
	if libs == nil || libs.Severity != doctor.Error || libs.Values["files"] != "/usr/lib/x86_64-linux-gnu/libcuda.so.470.82.01" {
		t.Errorf("driver library finding %+v", libs)
	}

	// DOCKER_HOST works as the flag does.
	stdout, _, _ = doctorRun(append(env, "DOCKER_HOST="+d.Host))
	t.Logf("DOCKER_HOST=%s nvidia-ctk doctor --host-root %s --engine docker --image %s:\n%s", d.Host, host.Path, image, stdout)
	if !strings.Contains(stdout, "ERROR    container.requirements") {
		t.Errorf("with DOCKER_HOST: no requirement error:\n%s", stdout)
	}

	// Reading changed nothing: the image is still there, and no container
	// was created.
	if got := strings.TrimSpace(d.MustDocker("image", "inspect", "--format", "{{.Id}}", image)); got != id {
		t.Errorf("image id %q after doctor, want %q", got, id)
	}
	if ps := strings.TrimSpace(d.MustDocker("ps", "-aq")); ps != "" {
		t.Errorf("containers after doctor: %s", ps)
	}
}
