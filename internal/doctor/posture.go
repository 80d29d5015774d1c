package doctor

import (
	"os"
	"strings"
)

// checkCgroup names the cgroup version (the device cgroup the hook path
// programs: v1 devices.allow, v2 a BPF program).
func checkCgroup(h *hostState) []Finding {
	switch {
	case exists(h.host("/sys/fs/cgroup/cgroup.controllers")):
		return []Finding{{Severity: OK, Problem: "cgroup v2 (unified)", Values: map[string]string{"cgroup": "v2"}}}
	case exists(h.host("/sys/fs/cgroup/devices")):
		return []Finding{{Severity: OK, Problem: "cgroup v1 (device controller present)", Values: map[string]string{"cgroup": "v1"}}}
	}
	return nil
}

// checkSELinux: enforcing SELinux denies containers the NVIDIA device nodes
// unless a policy allows them.
func checkSELinux(h *hostState) []Finding {
	data, err := os.ReadFile(h.host("/sys/fs/selinux/enforce"))
	if err != nil || strings.TrimSpace(string(data)) != "1" {
		return nil
	}
	return []Finding{{Severity: Warning,
		Problem: "SELinux is enforcing",
		Breaks:  `containers without a GPU-aware policy cannot open /dev/nvidia*: "Failed to initialize NVML: Insufficient Permissions"`,
		Fix:     "sudo setsebool -P container_use_devices on (or run the container with --security-opt label=disable)",
		Values:  map[string]string{"selinux": "enforcing"}}}
}

// checkRootless: rootless containers cannot have the hook program device
// cgroups; and on a Kubernetes node, the runtime should not take device
// requests from unprivileged pods' environment.
func checkRootless(h *hostState) []Finding {
	c := h.cfgOK()
	if c == nil {
		return nil
	}
	var out []Finding
	if h.o.Rootless && !c.CLI.NoCgroups {
		out = append(out, Finding{Severity: Warning,
			Problem: "rootless use, but config.toml has nvidia-container-cli.no-cgroups = false",
			Breaks:  `rootless podman/docker with the hook: "nvidia-container-cli: mount error: failed to add device rules: … permission denied"`,
			Fix:     "sudo nvidia-ctk config --set nvidia-container-cli.no-cgroups --in-place (or use CDI: podman run --device nvidia.com/gpu=all)",
			Values:  map[string]string{"no-cgroups": "false"}})
	}
	if exists(h.host("/var/lib/kubelet")) && c.AcceptEnvvarUnprivileged {
		out = append(out, Finding{Severity: Warning,
			Problem: "Kubernetes node, and accept-nvidia-visible-devices-envvar-when-unprivileged = true",
			Breaks:  "any pod can reach every GPU by setting NVIDIA_VISIBLE_DEVICES=all, bypassing the device plugin's allocation",
			Fix:     "sudo nvidia-ctk config --set accept-nvidia-visible-devices-envvar-when-unprivileged=false --set accept-nvidia-visible-devices-as-volume-mounts --in-place (device plugin: deviceListStrategy=volume-mounts)",
			Values:  map[string]string{"accept-nvidia-visible-devices-envvar-when-unprivileged": "true"}})
	}
	return out
}
