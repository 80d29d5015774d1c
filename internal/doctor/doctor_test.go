package doctor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/devnodes"
	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/fixture"
)

func TestMain(m *testing.M) {
	// The requirement checks probe the fixture's libcuda in a child: this
	// test binary re-executed.
	if driverprobe.MaybeRunChild(os.Args) {
		return
	}
	os.Exit(m.Run())
}

// write creates a file below the fixture root (its directories too).
func write(t *testing.T, r *fixture.Root, p, data string, mode os.FileMode) {
	t.Helper()
	full := r.HostPath(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(full)
	if err := os.WriteFile(full, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// remove deletes a path below the fixture root.
func remove(t *testing.T, r *fixture.Root, p string) {
	t.Helper()
	if err := os.RemoveAll(r.HostPath(p)); err != nil {
		t.Fatal(err)
	}
}

// needNodes skips when the fixture could not make device nodes (not root).
func needNodes(t *testing.T, r *fixture.Root) {
	t.Helper()
	if !r.DeviceNodes {
		t.Skip("fixture has no device nodes: " + r.NoDeviceNodesReason)
	}
}

// libcuda is the fixture's 64-bit libcuda file.
func libcuda(t *testing.T, r *fixture.Root) string {
	t.Helper()
	l, ok := r.Library("libcuda.so", false)
	if !ok {
		t.Fatal("fixture has no libcuda")
	}
	return l.Path
}

// cdiSpec is a spec for GPU 0 of r naming the fixture's nodes, libcuda and
// a hook; extra is appended to the spec-wide mounts.
func cdiSpec(t *testing.T, r *fixture.Root, kindDevice string, extraMount string) string {
	t.Helper()
	mounts := []string{libcuda(t, r)}
	if extraMount != "" {
		mounts = append(mounts, extraMount)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: %q\n  containerEdits:\n    deviceNodes:\n    - path: %s\n",
		kindDevice, r.GPUs[0].DevicePath)
	b.WriteString("containerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n  mounts:\n")
	for _, m := range mounts {
		fmt.Fprintf(&b, "  - hostPath: %s\n    containerPath: %s\n    options: [ro, nosuid, nodev, bind]\n", m, m)
	}
	b.WriteString("  hooks:\n  - hookName: createContainer\n    path: /usr/bin/nvidia-cdi-hook\n    args: [nvidia-cdi-hook, update-ldcache]\n")
	return b.String()
}

// bundle writes an OCI bundle with the environment env and returns its
// directory; files are created in its rootfs (path → content).
func bundle(t *testing.T, env []string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process":    map[string]any{"args": []string{"sh"}, "cwd": "/", "env": append([]string{"PATH=/usr/bin:/bin"}, env...)},
		"root":       map[string]any{"path": "rootfs"},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"usr/bin", "usr/lib/x86_64-linux-gnu", "etc"} {
		if err := os.MkdirAll(filepath.Join(dir, "rootfs", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range files {
		full := filepath.Join(dir, "rootfs", p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// run runs the doctor over r with o's other fields.
func run(t *testing.T, r *fixture.Root, o Options) *Report {
	t.Helper()
	o.HostRoot = r.Path
	if o.ProbeConfig.CacheDir == "" {
		o.ProbeConfig.CacheDir = t.TempDir()
	}
	rep, err := Run(o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// find returns the findings of a check.
func find(rep *Report, check string) []Finding {
	var out []Finding
	for _, f := range rep.Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// dump renders the report for failure messages.
func dump(rep *Report) string { return rep.Text(true) }

// TestBrokenHosts builds fixture hosts broken one way each and checks the
// finding that names the breakage: its severity, what it says, the fix and
// the named values.
func TestBrokenHosts(t *testing.T) {
	type want struct {
		check   string
		sev     Severity
		problem string // substring of Problem
		fix     string // substring of Fix
		breaks  string // substring of Breaks
		values  func(r *fixture.Root) map[string]string
	}
	cases := []struct {
		name  string
		spec  fixture.Spec
		nodes bool // needs device nodes (root)
		setup func(t *testing.T, r *fixture.Root, o *Options)
		want  want
	}{
		{name: "no kernel module", spec: fixture.Spec{Broken: fixture.NoDriver},
			want: want{check: "driver.module", sev: Error, problem: "not loaded", fix: "sudo modprobe nvidia", breaks: "CUDA error 100",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"path": r.HostPath("/proc/driver/nvidia/version")}
				}}},
		{name: "version mismatch", spec: fixture.Spec{Broken: fixture.VersionMismatch},
			want: want{check: "driver.user-space", sev: Error, problem: "version mismatch", fix: "reboot", breaks: "Driver/library version mismatch",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"module_version": r.Version, "library_version": r.LibVersion}
				}}},
		{name: "no ld.so.cache", spec: fixture.Spec{Broken: fixture.NoLDCache},
			want: want{check: "driver.user-space", sev: Error, problem: "linker cache", breaks: "libnvidia-ml.so.1",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"ldcache": r.HostPath("/etc/ld.so.cache")}
				}}},
		{name: "no device nodes", spec: fixture.Spec{Broken: fixture.NoDeviceNodes},
			want: want{check: "devices.nodes", sev: Error, problem: "/dev/nvidiactl (195:255) is missing", fix: "create-device-nodes --control-devices",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"node": r.HostPath("/dev/nvidiactl"), "want": "195:255"}
				}}},
		{name: "no nvidia-uvm", nodes: true,
			setup: func(t *testing.T, r *fixture.Root, o *Options) { remove(t, r, "/dev/nvidia-uvm") },
			want: want{check: "devices.nodes", sev: Error, problem: "/dev/nvidia-uvm (", fix: "nvidia-modprobe -u -c 0", breaks: "cuInit",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"want": fmt.Sprintf("%d:0", r.Majors.UVM)}
				}}},
		{name: "GPU node with wrong numbers", nodes: true, spec: fixture.Spec{GPUs: 2},
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				p := r.HostPath(r.GPUs[0].DevicePath)
				remove(t, r, r.GPUs[0].DevicePath)
				if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, 77))); err != nil {
					t.Fatal(err)
				}
			},
			want: want{check: "devices.nodes", sev: Error, problem: "is 195:77", fix: "sudo rm",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"found": "195:77", "want": fmt.Sprintf("195:%d", r.GPUs[0].Minor)}
				}}},
		{name: "missing /dev/char links, systemd host", nodes: true,
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				if err := os.MkdirAll(r.HostPath("/run/systemd/system"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			want: want{check: "devices.char-links", sev: Warning, problem: "have no", fix: "create-dev-char-symlinks --create-all", breaks: "Failed to initialize NVML: Unknown Error",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"char_dir": r.HostPath("/dev/char")}
				}}},
		{name: "missing /dev/char links, no systemd", nodes: true,
			want: want{check: "devices.char-links", sev: OK, problem: "systemd does not run this host",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"char_dir": r.HostPath("/dev/char")}
				}}},
		{name: "IMEX channels offered, none created, IMEX not used",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				offerIMEX(t, r)
			},
			want: want{check: "devices.imex-channels", sev: OK, problem: "no IMEX channel nodes"}},
		{name: "IMEX channels offered, none created, IMEX daemon configured",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				offerIMEX(t, r)
				write(t, r, "/etc/nvidia-imex/nodes_config.cfg", "10.0.0.1\n10.0.0.2\n", 0o644)
			},
			want: want{check: "devices.imex-channels", sev: Warning, problem: "2048 IMEX channels", fix: "nvidia-modprobe -i 0",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"major": "234", "channels": "2048"}
				}}},
		{name: "IMEX channels offered, none created, the container asks for one",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				offerIMEX(t, r)
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=0"}, nil)
			},
			want: want{check: "devices.imex-channels", sev: Warning, problem: "2048 IMEX channels", breaks: "NVIDIA_IMEX_CHANNELS"}},
		{name: "excluded GPU", spec: fixture.Spec{GPUs: 2},
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				p := r.GPUs[1].ProcDir + "/information"
				data, err := os.ReadFile(r.HostPath(p))
				if err != nil {
					t.Fatal(err)
				}
				write(t, r, p, strings.Replace(string(data), "GPU Excluded:\t No", "GPU Excluded:\t Yes", 1), 0o444)
			},
			want: want{check: "driver.excluded-gpus", sev: Warning, problem: "excludes 1 GPU", fix: "NVreg_ExcludedGpus",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"excluded": r.GPUs[1].PCIAddress}
				}}},
		{name: "no persistence daemon",
			want: want{check: "driver.persistence", sev: Warning, problem: "not running", fix: "systemctl enable --now nvidia-persistenced",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"socket": r.HostPath("/run/nvidia-persistenced/socket")}
				}}},
		{name: "compat32 asked, no 32-bit libraries",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32"}, nil)
			},
			want: want{check: "driver.libraries", sev: Error, problem: "no 32-bit libcuda.so", fix: "i386",
				values: func(r *fixture.Root) map[string]string { return map[string]string{"arch": "i386"} }}},
		{name: "config.toml does not parse",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli\nroot = \"/\"\n", 0o644)
			},
			want: want{check: "config.file", sev: Error, problem: "does not load", fix: "nvidia-ctk config default --output", breaks: "OCI runtime create failed",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"file": r.HostPath("/etc/nvidia-container-runtime/config.toml")}
				}}},
		{name: "config.toml names a missing driver root",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/nvidia-container-runtime/config.toml", "[nvidia-container-cli]\nroot = \"/run/nvidia/driver\"\n", 0o644)
			},
			want: want{check: "config.driver-root", sev: Error, problem: `"/run/nvidia/driver"`, fix: "nvidia-container-cli.root=/",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"root": "/run/nvidia/driver", "file": r.HostPath("/etc/nvidia-container-runtime/config.toml")}
				}}},
		{name: "CDI spec does not load",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [\n", 0o644)
			},
			want: want{check: "cdi.specs", sev: Error, problem: "does not load", fix: "nvidia-ctk cdi generate", breaks: "unresolvable CDI devices"}},
		{name: "no CDI spec",
			want: want{check: "cdi.specs", sev: Warning, problem: "no CDI spec defines nvidia.com/gpu", fix: "nvidia-ctk cdi generate",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"spec_dirs": r.HostPath("/etc/cdi") + "," + r.HostPath("/run/cdi")}
				}}},
		{name: "stale CDI spec",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0o755)
				write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "0", "/usr/lib/x86_64-linux-gnu/libcuda.so.520.0.1"), 0o644)
			},
			want: want{check: "cdi.stale", sev: Error, problem: "is stale", fix: "nvidia-ctk cdi generate --output=",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"missing": "/usr/lib/x86_64-linux-gnu/libcuda.so.520.0.1"}
				}}},
		{name: "CDI spec for a GPU that is gone",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0o755)
				write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "GPU-00000000-dead-beef-0000-000000000000", ""), 0o644)
			},
			want: want{check: "cdi.stale", sev: Error, problem: "GPU GPU-00000000-dead-beef-0000-000000000000 is gone", fix: "nvidia-ctk cdi generate --output="}},
		{name: "CDI hook not executable",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0o644)
				write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "0", ""), 0o644)
			},
			want: want{check: "cdi.stale", sev: Error, problem: "not executable", fix: "chmod 0755",
				values: func(r *fixture.Root) map[string]string { return map[string]string{"hooks": "/usr/bin/nvidia-cdi-hook"} }}},
		{name: "CDI device defined twice",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0o755)
				write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "0", ""), 0o644)
				write(t, r, "/run/cdi/nvidia.yaml", cdiSpec(t, r, "0", ""), 0o644)
			},
			want: want{check: "cdi.duplicates", sev: Warning, problem: "nvidia.com/gpu=0 is defined 2 times", fix: "remove all but one",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"device": "nvidia.com/gpu=0", "used": r.HostPath("/run/cdi/nvidia.yaml")}
				}}},
		{name: "CDI spec not readable by rootless users",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0o755)
				write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "0", ""), 0o600)
			},
			want: want{check: "cdi.specs", sev: Warning, problem: "not world-readable", fix: "chmod 0644",
				values: func(r *fixture.Root) map[string]string { return map[string]string{"mode": "0600"} }}},
		{name: "docker: daemon.json is not JSON",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/docker/daemon.json", `{"runtimes": {`, 0o644)
			},
			want: want{check: "engine.docker", sev: Error, problem: "not valid JSON", breaks: "dockerd does not start"}},
		{name: "docker: no runtime and no hook",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/docker/daemon.json", `{"features": {"cdi": true}}`, 0o644)
			},
			want: want{check: "engine.docker", sev: Error, problem: "no NVIDIA runtime", fix: "nvidia-ctk runtime configure --runtime=docker",
				breaks: `could not select device driver \"\" with capabilities: [[gpu]]`}},
		{name: "docker: hook only",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/docker/daemon.json", `{"features": {"cdi": true}}`, 0o644)
				write(t, r, "/usr/bin/nvidia-container-runtime-hook", "#!/bin/sh\n", 0o755)
			},
			want: want{check: "engine.docker", sev: Warning, problem: "no NVIDIA runtime registered", breaks: "unknown or invalid runtime name: nvidia",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"hook": r.HostPath("/usr/bin/nvidia-container-runtime-hook")}
				}}},
		{name: "docker: runtime registered, binary missing",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/docker/daemon.json", `{"runtimes": {"nvidia": {"path": "/usr/local/bin/nvidia-container-runtime", "args": []}}}`, 0o644)
			},
			want: want{check: "engine.docker", sev: Error, problem: "does not exist", fix: "--nvidia-runtime-path",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"runtime": "nvidia", "path": "/usr/local/bin/nvidia-container-runtime"}
				}}},
		{name: "docker: CDI off",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
				write(t, r, "/etc/docker/daemon.json", `{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}`, 0o644)
			},
			want: want{check: "engine.docker", sev: Warning, problem: "CDI support is not enabled", fix: "--enable-cdi"}},
		{name: "docker: not restarted after the edit",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
				write(t, r, "/run/docker.pid", "123\n", 0o644)
				old := time.Now().Add(-time.Hour)
				if err := os.Chtimes(r.HostPath("/run/docker.pid"), old, old); err != nil {
					t.Fatal(err)
				}
				write(t, r, "/etc/docker/daemon.json", `{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}, "features": {"cdi": true}}`, 0o644)
			},
			want: want{check: "engine.docker", sev: Warning, problem: "changed after docker started", fix: "systemctl restart docker"}},
		{name: "containerd: drop-in not imported",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
				write(t, r, "/etc/containerd/config.toml", "version = 2\n", 0o644)
				write(t, r, "/etc/containerd/conf.d/99-nvidia.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\n", 0o644)
			},
			want: want{check: "engine.containerd", sev: Error, problem: "does not import it", fix: "--runtime=containerd",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"drop_in": r.HostPath("/etc/containerd/conf.d/99-nvidia.toml")}
				}}},
		{name: "containerd: no runtime handler",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/containerd/config.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n", 0o644)
			},
			want: want{check: "engine.containerd", sev: Warning, problem: "no runtime handler", breaks: "runtimeClassName nvidia"}},
		{name: "containerd: CDI off",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
				write(t, r, "/etc/containerd/config.toml", "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", 0o644)
				write(t, r, "/etc/containerd/conf.d/99-nvidia.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\n", 0o644)
			},
			want: want{check: "engine.containerd", sev: Warning, problem: "enable_cdi off", fix: "--enable-cdi",
				values: func(r *fixture.Root) map[string]string { return map[string]string{"config_version": "2"} }}},
		{name: "CRI-O: runtime binary missing",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/crio/crio.conf.d/99-nvidia.conf", "[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n", 0o644)
			},
			want: want{check: "engine.crio", sev: Error, problem: "does not exist", fix: "--runtime=crio",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"path": "/usr/bin/nvidia-container-runtime"}
				}}},
		{name: "docker: systemd cgroup driver without systemd",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/docker/daemon.json", `{"exec-opts": ["native.cgroupdriver=systemd"]}`, 0o644)
			},
			want: want{check: "engine.docker-cgroup", sev: Error, problem: "systemd is not running", fix: "native.cgroupdriver=cgroupfs", breaks: "every container fails to start",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"cgroup_driver": "systemd", "from": "exec-opts", "systemd": "false", "file": r.HostPath("/etc/docker/daemon.json")}
				}}},
		{name: "docker: cgroupfs driver on a systemd cgroup v2 host",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/docker/daemon.json", `{"exec-opts": ["native.cgroupdriver = cgroupfs"]}`, 0o644)
				write(t, r, "/sys/fs/cgroup/cgroup.controllers", "cpu memory\n", 0o644)
				if err := os.MkdirAll(r.HostPath("/run/systemd/system"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			want: want{check: "engine.docker-cgroup", sev: Warning, problem: "cgroupfs cgroup driver on a cgroup v2 host", fix: "native.cgroupdriver=systemd", breaks: "kubelet cgroup driver",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"cgroup_driver": "cgroupfs", "cgroup": "v2", "systemd": "true"}
				}}},
		{name: "docker: unknown cgroup driver",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/docker/daemon.json", `{"exec-opts": ["native.cgroupdriver=systemdd"]}`, 0o644)
			},
			want: want{check: "engine.docker-cgroup", sev: Error, problem: `"systemdd" is neither`, breaks: "does not start",
				values: func(r *fixture.Root) map[string]string { return map[string]string{"cgroup_driver": "systemdd"} }}},
		{name: "containerd: CDI annotations not passed to the runtime",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
				write(t, r, "/etc/containerd/config.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = false\n"+
					"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\npod_annotations = [\"io.kubernetes.*\"]\n"+
					"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\n", 0o644)
			},
			want: want{check: "engine.containerd", sev: Warning, problem: "does not pass cdi.k8s.io/ annotations", fix: `container_annotations = ["cdi.k8s.io/*"]`, breaks: "cdi-annotations",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"annotations": "io.kubernetes.*", "file": r.HostPath("/etc/containerd/config.toml")}
				}}},
		{name: "CRI-O: CDI spec dirs miss the NVIDIA spec",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "0", ""), 0o644)
				write(t, r, "/etc/crio/crio.conf.d/50-cdi.conf", "[crio.runtime]\ncdi_spec_dirs = [\"/opt/cdi\"]\n", 0o644)
			},
			want: want{check: "engine.crio", sev: Warning, problem: "CRI-O reads CDI specs from /opt/cdi", fix: "cdi_spec_dirs", breaks: "unresolvable CDI devices",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"cdi_spec_dirs": "/opt/cdi", "specs_in": r.HostPath("/etc/cdi"), "from": r.HostPath("/etc/crio/crio.conf.d/50-cdi.conf")}
				}}},
		{name: "podman without CDI specs",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				write(t, r, "/usr/bin/podman", "#!/bin/sh\n", 0o755)
			},
			want: want{check: "engine.podman", sev: Warning, problem: "no CDI spec", breaks: "unresolvable CDI devices nvidia.com/gpu=all"}},
		{name: "container asks for no GPU",
			setup: func(t *testing.T, r *fixture.Root, o *Options) { o.Bundle = bundle(t, nil, nil) },
			want:  want{check: "container.request", sev: Warning, problem: "NVIDIA_VISIBLE_DEVICES=(unset)", fix: "--gpus all"}},
		{name: "container needs a newer CUDA",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				if r.CUDAVersion == "" {
					t.Skip("the fixture's CUDA version was not measured")
				}
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"}, nil)
			},
			want: want{check: "container.requirements", sev: Error, problem: "cuda>=13.0", fix: "update the host driver", breaks: "CUDA driver version is insufficient",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"requirements": "cuda>=13.0", "host_cuda": r.CUDAVersion, "host_driver": r.Version}
				}}},
		{name: "image built for other GPUs",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				o.GPUArchs = []string{"9.0"}
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"},
					map[string]string{"/usr/local/bin/train": string(elfBytes(t, makeFatbin(FatbinEntry{Arch: 70}, FatbinEntry{Arch: 80})))})
			},
			want: want{check: "container.kernel-images", sev: Error, problem: "/usr/local/bin/train has no GPU code for compute capability 9.0",
				fix: "-gencode arch=compute_90,code=sm_90", breaks: "no kernel image is available for execution on the device",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"file": "/usr/local/bin/train", "gpu_arch": "9.0", "image_archs": "sm_70,sm_80"}
				}}},
		{name: "image CUDA runtime newer than the driver",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				if r.CUDAVersion == "" {
					t.Skip("the fixture's CUDA version was not measured")
				}
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, map[string]string{"/usr/local/cuda-13.0/lib64/libcudart.so.13.0.48": "x"})
			},
			want: want{check: "container.cuda-runtime", sev: Error, problem: "needs a newer driver", fix: "update the host driver", breaks: "CUDA error 35",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"image_cuda": "13.0", "host_cuda": r.CUDAVersion, "cudart": "/usr/local/cuda-13.0/lib64/libcudart.so.13.0.48"}
				}}},
		{name: "image CUDA runtime a minor version ahead",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				if r.CUDAVersion != "12.2" {
					t.Skipf("the fixture's CUDA version is %q, not 12.2", r.CUDAVersion)
				}
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, map[string]string{"/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.12.4.127": "x"})
			},
			want: want{check: "container.cuda-runtime", sev: Warning, problem: "minor version compatibility", breaks: "CUDA error 222",
				values: func(r *fixture.Root) map[string]string { return map[string]string{"image_cuda": "12.4"} }}},
		{name: "image relies on forward compatibility",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				if r.CUDAVersion == "" {
					t.Skip("the fixture's CUDA version was not measured")
				}
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, map[string]string{
					"/usr/local/cuda-13.0/lib64/libcudart.so.13.0.48":  "x",
					"/usr/local/cuda-13.0/compat/libcuda.so.580.65.06": "x"})
			},
			want: want{check: "container.cuda-runtime", sev: Warning, problem: "forward-compatibility libcuda", breaks: "CUDA error 804",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"compat": "/usr/local/cuda-13.0/compat/libcuda.so.580.65.06"}
				}}},
		{name: "image ships its own libcuda",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, map[string]string{"/usr/lib/x86_64-linux-gnu/libcuda.so.470.82.01": "x"})
			},
			want: want{check: "container.driver-libraries", sev: Error, problem: "version 470.82.01", fix: "without the driver packages",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"files": "/usr/lib/x86_64-linux-gnu/libcuda.so.470.82.01", "host_driver": r.LibVersion}
				}}},
		{name: "image holds empty mount points of another driver (a committed GPU container)",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, map[string]string{"/usr/lib/x86_64-linux-gnu/libcuda.so.470.82.01": ""})
			},
			want: want{check: "container.driver-libraries", sev: Warning, problem: "empty driver library files of another driver version", breaks: "file too short",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"files": "/usr/lib/x86_64-linux-gnu/libcuda.so.470.82.01", "host_driver": r.LibVersion}
				}}},
		{name: "image holds empty mount points of the host driver",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, map[string]string{"/usr/local/nvidia/lib64/libcuda.so." + r.LibVersion: ""})
			},
			want: want{check: "container.driver-libraries", sev: OK, problem: "empty mount points of the host driver's libraries",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"files": "/usr/local/nvidia/lib64/libcuda.so." + r.LibVersion, "host_driver": r.LibVersion}
				}}},
		{name: "musl image",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, map[string]string{"/lib/ld-musl-x86_64.so.1": "x"})
			},
			want: want{check: "container.libc", sev: Error, problem: "musl", fix: "glibc-based image",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"loader": "/lib/ld-musl-x86_64.so.1"}
				}}},
		{name: "LD_LIBRARY_PATH with stale driver copies",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "LD_LIBRARY_PATH=/opt/drv:/usr/local/lib"},
					map[string]string{"/opt/drv/libnvidia-ml.so.450.51.06": "x"})
			},
			want: want{check: "container.ld-library-path", sev: Error, problem: "/opt/drv/libnvidia-ml.so.450.51.06", fix: "LD_LIBRARY_PATH",
				values: func(r *fixture.Root) map[string]string {
					return map[string]string{"LD_LIBRARY_PATH": "/opt/drv:/usr/local/lib"}
				}}},
		{name: "SELinux enforcing",
			setup: func(t *testing.T, r *fixture.Root, o *Options) { write(t, r, "/sys/fs/selinux/enforce", "1\n", 0o644) },
			want:  want{check: "host.selinux", sev: Warning, problem: "enforcing", fix: "container_use_devices", breaks: "Insufficient Permissions"}},
		{name: "rootless with cgroups on",
			setup: func(t *testing.T, r *fixture.Root, o *Options) { o.Rootless = true },
			want:  want{check: "host.rootless", sev: Warning, problem: "no-cgroups = false", fix: "nvidia-container-cli.no-cgroups"}},
		{name: "Kubernetes node accepting the envvar from unprivileged pods",
			setup: func(t *testing.T, r *fixture.Root, o *Options) {
				if err := os.MkdirAll(r.HostPath("/var/lib/kubelet"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			want: want{check: "host.rootless", sev: Warning, problem: "Kubernetes node", fix: "accept-nvidia-visible-devices-envvar-when-unprivileged=false"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := tc.spec
			if spec.GPUs == 0 {
				spec.GPUs = 1
			}
			r := fixture.Build(t, spec)
			if tc.nodes {
				needNodes(t, r)
			}
			var o Options
			if tc.setup != nil {
				tc.setup(t, r, &o)
			}
			check := func(t *testing.T, rep *Report) {
				t.Helper()
				var got *Finding
				for _, f := range find(rep, tc.want.check) {
					if f.Severity == tc.want.sev && strings.Contains(f.Problem, tc.want.problem) {
						got = &f
						break
					}
				}
				if got == nil {
					t.Fatalf("no %s finding %q from %s; report:\n%s", tc.want.sev, tc.want.problem, tc.want.check, dump(rep))
				}
				if !strings.Contains(got.Fix, tc.want.fix) {
					t.Errorf("fix %q, want it to contain %q", got.Fix, tc.want.fix)
				}
				if !strings.Contains(got.Breaks, tc.want.breaks) {
					t.Errorf("breaks %q, want it to contain %q", got.Breaks, tc.want.breaks)
				}
				if tc.want.sev > OK && (got.Fix == "" || got.Breaks == "") {
					t.Errorf("finding without fix or breaks: %+v", *got)
				}
				if tc.want.values != nil {
					for k, v := range tc.want.values(r) {
						if got.Values[k] != v {
							t.Errorf("value %s = %q, want %q (values %v)", k, got.Values[k], v, got.Values)
						}
					}
				}
				if tc.want.sev == Error && rep.Worst() != Error {
					t.Errorf("worst severity %s, want error", rep.Worst())
				}
			}
			check(t, run(t, r, o))
			if o.Bundle == "" {
				return
			}
			// The same container as an image, read from a docker client in
			// both archive layouts, gives the same finding.
			for _, layout := range []string{layoutDockerSave, layoutOCI} {
				t.Run(layout, func(t *testing.T) {
					io := o
					asImage(t, &io, layout)
					check(t, run(t, r, io))
				})
			}
		})
	}
}

// healthyHost builds a fixture host with everything a GPU container needs
// configured: CDI spec, docker and containerd registered, /dev/char links,
// persistenced.
func healthyHost(t *testing.T, layout fixture.Layout) *fixture.Root {
	t.Helper()
	r := fixture.Build(t, fixture.Spec{Layout: layout, GPUs: 2, IPC: true, MIG: true})
	write(t, r, "/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0o755)
	write(t, r, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
	write(t, r, "/usr/bin/nvidia-container-runtime-hook", "#!/bin/sh\n", 0o755)
	write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "0", ""), 0o644)
	write(t, r, "/etc/docker/daemon.json", `{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}, "features": {"cdi": true}}`, 0o644)
	write(t, r, "/etc/containerd/config.toml", "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", 0o644)
	write(t, r, "/etc/containerd/conf.d/99-nvidia.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n"+
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\n", 0o644)
	if r.DeviceNodes {
		nodes, err := devnodes.Scan(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := devnodes.CreateCharSymlinks(r.Path, r.HostPath("/dev/char"), nodes, false); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestHealthyHost: a fixture host of every layout with nothing broken
// (GKE's missing nvidia-modeset is not a problem for compute) has no error
// and no warning, with a GPU container whose requirements, CUDA runtime and
// GPU code suit the host.
func TestHealthyHost(t *testing.T) {
	for _, layout := range fixture.Layouts() {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			r := healthyHost(t, layout)
			needNodes(t, r)
			o := Options{Bundle: bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=11.0", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"},
				map[string]string{
					"/usr/local/bin/train":                             string(elfBytes(t, makeFatbin(FatbinEntry{Arch: 80}, FatbinEntry{PTX: true, Arch: 80}))),
					"/usr/local/cuda-11.0/lib64/libcudart.so.11.0.221": "x",
				}),
				GPUArchs: []string{"9.0"}}
			start := time.Now()
			rep := run(t, r, o)
			took := time.Since(start)
			for _, f := range rep.Findings {
				if f.Severity > OK {
					t.Errorf("healthy host: %s %s: %s", f.Severity, f.Check, f.Problem)
				}
			}
			if rep.Worst() == Error {
				t.Fatalf("report:\n%s", dump(rep))
			}
			for _, id := range []string{"driver.module", "driver.user-space", "driver.libraries", "devices.nodes", "devices.char-links",
				"cdi.specs", "engine.docker", "engine.containerd", "container.request", "container.requirements", "container.driver-libraries",
				"container.cuda-runtime", "container.kernel-images"} {
				if len(find(rep, id)) == 0 {
					t.Errorf("no finding from %s", id)
				}
			}
			if !testing.Short() && took > 2*time.Second {
				t.Errorf("doctor took %v", took)
			}
		})
	}
}

func TestReportOrderAndJSON(t *testing.T) {
	r := fixture.Build(t, fixture.Spec{GPUs: 1, Broken: fixture.NoDriver})
	rep := run(t, r, Options{})
	for i := 1; i < len(rep.Findings); i++ {
		if rep.Findings[i].Severity > rep.Findings[i-1].Severity {
			t.Fatalf("findings not ordered by severity:\n%s", dump(rep))
		}
	}
	data, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Findings) != len(rep.Findings) || back.Findings[0].Severity != Error || back.Findings[0].Check != "driver.module" {
		t.Fatalf("JSON round trip: %s", data)
	}
	text := rep.Text(false)
	if !strings.HasPrefix(text, "ERROR    driver.module") || !strings.Contains(text, "fix:    sudo modprobe nvidia") ||
		!strings.HasSuffix(text, "GPU containers will fail\n") || strings.Contains(text, "\nok ") {
		t.Fatalf("text:\n%s", text)
	}
}

func TestUnknownEngine(t *testing.T) {
	if _, err := Run(Options{HostRoot: t.TempDir(), Engines: []string{"lxc"}}); err == nil || !strings.Contains(err.Error(), `unknown engine "lxc"`) {
		t.Fatalf("err = %v", err)
	}
}

// TestEngineFilter: --engine limits the engine checks.
func TestEngineFilter(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/docker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/docker/daemon.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		engines []string
		want    int
	}{{nil, 1}, {[]string{"docker"}, 1}, {[]string{"podman"}, 0}} {
		rep, err := Run(Options{HostRoot: root, Engines: tc.engines})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(find(rep, "engine.docker")); got != tc.want {
			t.Errorf("engines %v: %d docker findings, want %d", tc.engines, got, tc.want)
		}
	}
}

func TestSeverityText(t *testing.T) {
	for _, s := range []Severity{OK, Warning, Error} {
		b, _ := s.MarshalText()
		var back Severity
		if err := back.UnmarshalText(b); err != nil || back != s {
			t.Errorf("%s: round trip gave %v, %v", s, back, err)
		}
	}
	var s Severity
	if err := s.UnmarshalText([]byte("fatal")); err == nil {
		t.Error("unknown severity accepted")
	}
}

// TestCheckIDs: every check has a unique, group-prefixed id.
func TestCheckIDs(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range registry() {
		id := c.ID
		group, _, ok := strings.Cut(id, ".")
		if !ok || seen[id] || !strings.Contains("driver devices config cdi engine container host", group) {
			t.Errorf("bad or duplicate check id %q", id)
		}
		seen[id] = true
	}
}

// TestNoFalseAlarms: setups that look like a breakage but are not give no
// such finding.
func TestNoFalseAlarms(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, r *fixture.Root, o *Options)
		check string
		sev   Severity // no finding of check at this severity or worse
		about string   // only findings whose problem says this ("": any)
	}{
		{"all capabilities without 32-bit libraries", func(t *testing.T, r *fixture.Root, o *Options) {
			o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"}, nil)
		}, "driver.libraries", Warning, ""},
		{"containerd binary without a config file", func(t *testing.T, r *fixture.Root, o *Options) {
			write(t, r, "/usr/bin/containerd", "#!/bin/sh\n", 0o755)
		}, "engine.containerd", Warning, "enable_cdi"},
		{"SELinux permissive", func(t *testing.T, r *fixture.Root, o *Options) {
			write(t, r, "/sys/fs/selinux/enforce", "0\n", 0o644)
		}, "host.selinux", Warning, ""},
		{"rootful use", nil, "host.rootless", Warning, ""},
		{"forward-compat libcuda in the image", func(t *testing.T, r *fixture.Root, o *Options) {
			o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"}, map[string]string{"/usr/local/cuda/compat/libcuda.so.580.65.06": "x"})
		}, "container.driver-libraries", Warning, ""},
		{"CDI spec with host paths below the host root", func(t *testing.T, r *fixture.Root, o *Options) {
			write(t, r, "/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0o755)
			write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "0", r.HostPath(libcuda(t, r))), 0o644)
		}, "cdi.stale", Warning, ""},
		{"docker's default cgroup driver on a systemd cgroup v2 host", func(t *testing.T, r *fixture.Root, o *Options) {
			write(t, r, "/etc/docker/daemon.json", `{}`, 0o644)
			write(t, r, "/sys/fs/cgroup/cgroup.controllers", "cpu\n", 0o644)
			if err := os.MkdirAll(r.HostPath("/run/systemd/system"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "engine.docker-cgroup", Warning, ""},
		{"containerd passing CDI annotations, enable_cdi off", func(t *testing.T, r *fixture.Root, o *Options) {
			write(t, r, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
			write(t, r, "/etc/containerd/config.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = false\n"+
				"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\ncontainer_annotations = [\"cdi.k8s.io/*\"]\n"+
				"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/usr/bin/nvidia-container-runtime\"\n", 0o644)
		}, "engine.containerd", Warning, "cdi.k8s.io"},
		{"CRI-O with the spec in its CDI dirs", func(t *testing.T, r *fixture.Root, o *Options) {
			write(t, r, "/etc/cdi/nvidia.yaml", cdiSpec(t, r, "0", ""), 0o644)
			write(t, r, "/etc/crio/crio.conf.d/50-cdi.conf", "[crio.runtime]\ncdi_spec_dirs = [\"/opt/cdi\", \"/etc/cdi\"]\n", 0o644)
		}, "engine.crio", Warning, "CDI"},
		{"GPU code as PTX only", func(t *testing.T, r *fixture.Root, o *Options) {
			o.GPUArchs = []string{"9.0", "8.6"}
			o.Bundle = bundle(t, []string{"NVIDIA_VISIBLE_DEVICES=all"},
				map[string]string{"/app/serve": string(elfBytes(t, makeFatbin(FatbinEntry{PTX: true, Arch: 80})))})
		}, "container.kernel-images", Warning, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := fixture.Build(t, fixture.Spec{GPUs: 1})
			var o Options
			if tc.setup != nil {
				tc.setup(t, r, &o)
			}
			rep := run(t, r, o)
			for _, f := range find(rep, tc.check) {
				if f.Severity >= tc.sev && strings.Contains(f.Problem, tc.about) {
					t.Errorf("false alarm: %s %s: %s", f.Severity, f.Check, f.Problem)
				}
			}
		})
	}
}

// offerIMEX makes the fixture's driver offer 2048 IMEX channels (major 234)
// with no channel node.
func offerIMEX(t *testing.T, r *fixture.Root) {
	t.Helper()
	data, err := os.ReadFile(r.HostPath("/proc/devices"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, r, "/proc/devices", strings.Replace(string(data), "Character devices:\n", "Character devices:\n234 nvidia-caps-imex-channels\n", 1), 0o444)
	params, err := os.ReadFile(r.HostPath("/proc/driver/nvidia/params"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, r, "/proc/driver/nvidia/params", string(params)+"ImexChannelCount: 2048\n", 0o444)
}
