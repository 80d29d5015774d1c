package ctk

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/doctor"
	"github.com/nctk/nctk/internal/fixture"
)

// TestDoctor runs `nvidia-ctk doctor` over fixture hosts: exit status 0
// when nothing would stop a GPU container, 1 with the finding otherwise,
// and the same findings as JSON.
func TestDoctor(t *testing.T) {
	healthy := fixture.Build(t, fixture.Spec{GPUs: 2, IPC: true})
	noDriver := fixture.Build(t, fixture.Spec{GPUs: 1, Broken: fixture.NoDriver})
	mismatch := fixture.Build(t, fixture.Spec{GPUs: 1, Broken: fixture.VersionMismatch})
	cases := []struct {
		name   string
		args   []string
		code   int
		out    []string
		notOut string
		err    string
	}{
		{name: "healthy", args: []string{"--host-root", healthy.Path}, code: 0,
			out: []string{"0 error(s)", "GPU containers should work"}, notOut: "ERROR"},
		{name: "healthy verbose", args: []string{"--host-root", healthy.Path, "-v"}, code: 0,
			out: []string{"ok       driver.module               kernel module " + healthy.Version}},
		{name: "no driver", args: []string{"--host-root", noDriver.Path}, code: 1,
			out: []string{"ERROR    driver.module", "fix:    sudo modprobe nvidia", "GPU containers will fail"},
			err: "nvidia-ctk doctor: 1 problem(s) would stop or break GPU containers"},
		{name: "version mismatch", args: []string{"--host-root", mismatch.Path}, code: 1,
			out: []string{"driver/library version mismatch", "module_version=" + mismatch.Version, "library_version=" + mismatch.LibVersion}},
		{name: "driver root flag", args: []string{"--host-root", noDriver.Path, "--driver-root", healthy.Path, "--engine", "docker"}, code: 1,
			out: []string{"ERROR    driver.module"}},
		{name: "unknown engine", args: []string{"--host-root", healthy.Path, "--engine", "lxc"}, code: 1, err: `unknown engine "lxc"`},
		{name: "image and bundle", args: []string{"--image", "ubuntu", "--bundle", "/x"}, code: 1, err: "--image and --bundle: give one container"},
		{name: "positional argument", args: []string{"extra"}, code: 1, err: `unexpected argument "extra"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, nil, append([]string{"doctor"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, o := range tc.out {
				if !strings.Contains(stdout, o) {
					t.Errorf("stdout lacks %q:\n%s", o, stdout)
				}
			}
			if tc.notOut != "" && strings.Contains(stdout, tc.notOut) {
				t.Errorf("stdout has %q:\n%s", tc.notOut, stdout)
			}
			if !strings.Contains(stderr, tc.err) {
				t.Errorf("stderr %q lacks %q", stderr, tc.err)
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		stdout, _, code := run(t, nil, "doctor", "--json", "--host-root", noDriver.Path)
		var rep doctor.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, stdout)
		}
		if code != 1 || len(rep.Findings) == 0 || rep.Findings[0].Check != "driver.module" || rep.Findings[0].Severity != doctor.Error ||
			!strings.Contains(rep.Findings[0].Fix, "modprobe") || rep.Findings[0].Values["path"] != noDriver.HostPath("/proc/driver/nvidia/version") {
			t.Fatalf("exit %d, findings %+v", code, rep.Findings)
		}
	})

	t.Run("bundle", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.MkdirAll(dir+"/rootfs/lib", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/rootfs/lib/ld-musl-x86_64.so.1", nil, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := `{"ociVersion":"1.0.2","process":{"args":["sh"],"cwd":"/","env":["NVIDIA_VISIBLE_DEVICES=all"]},"root":{"path":"rootfs"}}`
		if err := os.WriteFile(dir+"/config.json", []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, _, code := run(t, nil, "doctor", "--host-root", healthy.Path, "--bundle", dir)
		if code != 1 || !strings.Contains(stdout, "ERROR    container.libc") {
			t.Fatalf("exit %d\n%s", code, stdout)
		}
	})

	t.Run("image no engine", func(t *testing.T) {
		stdout, _, code := run(t, []string{"PATH=" + t.TempDir()}, "doctor", "--host-root", healthy.Path, "--image", "nctk/none")
		if code != 1 || !strings.Contains(stdout, "ERROR    container.request") || !strings.Contains(stdout, "no engine knows it") ||
			!strings.Contains(stdout, "docker: docker not found on PATH") || !strings.Contains(stdout, "image=nctk/none") {
			t.Fatalf("exit %d\n%s", code, stdout)
		}
	})

	t.Run("image docker host", func(t *testing.T) {
		// A stand-in docker client records the DOCKER_HOST it is given
		// and knows no image.
		bin := t.TempDir()
		log := filepath.Join(t.TempDir(), "host")
		script := "#!/bin/sh\necho \"$DOCKER_HOST\" > " + log + "\necho 'Error: No such image' >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		stdout, _, code := run(t, []string{"PATH=" + bin}, "doctor", "--host-root", healthy.Path, "--image", "x", "--engine", "docker",
			"--docker-host", "unix:///tmp/nctk-test.sock")
		got, _ := os.ReadFile(log)
		if code != 1 || strings.TrimSpace(string(got)) != "unix:///tmp/nctk-test.sock" || !strings.Contains(stdout, "docker: Error: No such image") {
			t.Fatalf("exit %d, DOCKER_HOST %q\n%s", code, got, stdout)
		}
	})
}
