package ctk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ociHookJSON is the hooks.d file NVIDIA's `runtime configure
// --config-mode=oci-hook` writes for a hook in /usr/bin.
const ociHookJSON = `{
  "version": "1.0.0",
  "hook": {
    "path": "/usr/bin/nvidia-container-runtime-hook",
    "args": [
      "nvidia-container-runtime-hook",
      "prestart"
    ],
    "env": [
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    ]
  },
  "when": {
    "always": true,
    "commands": [
      ".*"
    ]
  },
  "stages": [
    "prestart"
  ]
}
`

// TestRuntimeConfigureNVIDIAFlags checks that every flag of NVIDIA's
// `nvidia-ctk runtime configure` is accepted with its meaning. Every run
// names its files (--config in a temporary directory, --dry-run or
// --oci-hook-path there): none touches the machine's engine configs.
func TestRuntimeConfigureNVIDIAFlags(t *testing.T) {
	dir := t.TempDir()
	daemon := filepath.Join(dir, "daemon.json")
	ctrd := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(ctrd, []byte("version = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A stand-in for `containerd config dump` (--executable-path); it runs
	// with PATH=/nonexistent, so only shell builtins.
	fakeContainerd := filepath.Join(dir, "my-containerd")
	dump := "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n"
	if err := os.WriteFile(fakeContainerd, []byte("#!/bin/sh\necho \""+dump+"\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hookFile := filepath.Join(dir, "hooks.d", "oci-nvidia-hook.json")

	tests := []struct {
		name string
		args []string
		// out and errs are substrings of stdout and stderr; noErr must
		// not appear in stderr.
		out   []string
		errs  []string
		noErr string
		// file, when set, must hold fileData after the run.
		file, fileData string
	}{
		{name: "oci-hook to stdout", args: []string{"--config-mode=oci-hook"},
			out: []string{ociHookJSON}, errs: []string{`the \"oci-hook\" config mode is deprecated`}},
		{name: "oci-hook any runtime", args: []string{"--runtime=podman", "--config-mode=hook"}, out: []string{ociHookJSON}},
		{name: "oci-hook file", args: []string{"--config-mode=oci-hook", "--oci-hook-path=" + hookFile},
			errs: []string{"wrote OCI hook"}, file: hookFile, fileData: ociHookJSON},
		{name: "oci-hook path", args: []string{"--config-mode=oci-hook", "--nvidia-runtime-hook-path=/opt/nv/bin/nvidia-container-runtime-hook"},
			out: []string{`"path": "/opt/nv/bin/nvidia-container-runtime-hook"`, `"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/nv/bin"`}},
		{name: "unknown config mode warns", args: []string{"--config=" + daemon, "--config-mode=magic", "--dry-run"},
			out: []string{`"path": "nvidia-container-runtime"`}, errs: []string{`ignoring the unsupported config mode \"magic\"`}},
		{name: "config mode config", args: []string{"--config=" + daemon, "--config-mode=config", "--dry-run"},
			out: []string{`"nvidia"`}, noErr: "config mode"},
		{name: "cdi.enable", args: []string{"--config=" + daemon, "--cdi.enable", "--dry-run"}, out: []string{`"cdi": true`}},
		{name: "docker command source warns", args: []string{"--config=" + daemon, "--config-source=command", "--dry-run"},
			out: []string{`"nvidia"`}, errs: []string{"--config-source=command is not supported for docker; using the file"}},
		{name: "docker executable-path warns", args: []string{"--config=" + daemon, "--executable-path=/usr/bin/dockerd", "--dry-run"},
			out: []string{`"nvidia"`}, errs: []string{"ignoring --executable-path=/usr/bin/dockerd for docker"}},
		{name: "containerd executable-path", args: []string{"--runtime=containerd", "--config=" + ctrd, "--drop-in-config=" + filepath.Join(dir, "conf.d", "99-nvidia.toml"),
			"--config-source=command", "--executable-path=" + fakeContainerd, "--dry-run"},
			// The dump is version 3: so is the drop-in, and it copies runc.
			out: []string{"version = 3\n", "runtimes.nvidia.options]\n            BinaryName = '/usr/bin/nvidia-container-runtime'\n            SystemdCgroup = true\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No runtime in PATH: containerd gets /usr/bin/nvidia-container-runtime.
			stdout, stderr, code := run(t, []string{"PATH=/nonexistent"}, append([]string{"runtime", "configure"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, o := range tt.out {
				if !strings.Contains(stdout, o) {
					t.Errorf("stdout lacks %q:\n%s", o, stdout)
				}
			}
			for _, e := range tt.errs {
				if !strings.Contains(stderr, e) {
					t.Errorf("stderr lacks %q:\n%s", e, stderr)
				}
			}
			if tt.noErr != "" && strings.Contains(stderr, tt.noErr) {
				t.Errorf("stderr has %q:\n%s", tt.noErr, stderr)
			}
			if tt.file != "" {
				data, err := os.ReadFile(tt.file)
				if err != nil || string(data) != tt.fileData {
					t.Errorf("%s: %v\n%s", tt.file, err, data)
				}
			}
		})
	}
	if _, err := os.Stat(daemon); err == nil {
		t.Errorf("a dry run wrote %s", daemon)
	}
}
