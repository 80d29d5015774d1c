package doctor

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/devnodes"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/procfs"
)

// nodeImpact says what a missing node breaks, how bad that is, and the
// command that creates it.
func nodeImpact(p string) (Severity, string, string) {
	base := path.Base(p)
	switch {
	case base == "nvidiactl":
		return Error, `nvidia-smi "Failed to initialize NVML: Unknown Error" or "No devices were found"; every GPU container fails`,
			"sudo nvidia-ctk system create-device-nodes --control-devices"
	case base == "nvidia-uvm":
		return Error, `cuInit fails while nvidia-smi works: CUDA error 999 "unknown error" / 3 "initialization error"`,
			"sudo nvidia-modprobe -u -c 0 (or sudo nvidia-ctk system create-device-nodes --control-devices --load-kernel-modules)"
	case base == "nvidia-uvm-tools":
		return Warning, "CUDA profilers and debuggers (nsys, ncu, cuda-gdb) fail in containers",
			"sudo nvidia-modprobe -u -c 0"
	case base == "nvidia-modeset":
		// Only the display capability uses it; compute hosts often lack it.
		return OK, "containers asking for the display capability do not get nvidia-modeset",
			"sudo nvidia-modprobe -m"
	case strings.HasPrefix(p, devnodes.CapsDir+"/"):
		return Warning, "MIG configuration/monitoring (NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES) and MIG devices fail with \"Insufficient Permissions\"",
			"sudo nvidia-ctk system create-device-nodes --mig-caps"
	}
	return Error, "containers given this GPU fail: nvidia-smi \"No devices were found\", CUDA error 100",
		"sudo nvidia-ctk system create-device-nodes --gpu-devices"
}

// checkDeviceNodes: every node the loaded driver implies (from
// /proc/devices and the GPU information files) exists with its numbers.
func checkDeviceNodes(h *hostState) []Finding {
	if !h.moduleLoaded() {
		return nil
	}
	procDevices := h.host(procfs.DevicesPath)
	expected, err := devnodes.Expected(h.root, devnodes.All())
	if err != nil {
		return []Finding{{Severity: Error, Problem: "cannot tell which device nodes the driver implies: " + err.Error(),
			Breaks: "the device nodes cannot be checked or created", Fix: "sudo modprobe nvidia nvidia-uvm",
			Values: map[string]string{"proc_devices": procDevices}}}
	}
	present, err := devnodes.Scan(h.devRoot)
	if err != nil {
		return []Finding{{Severity: Error, Problem: "cannot scan the device nodes: " + err.Error(),
			Values: map[string]string{"dev_root": h.devRoot}}}
	}
	byPath := map[string]discover.DeviceNode{}
	for _, n := range present {
		byPath[n.Path] = n
	}
	var out []Finding
	for _, want := range expected {
		sev, breaks, fix := nodeImpact(want.Path)
		got, ok := byPath[want.Path]
		host := hostPath(h.devRoot, want.Path)
		vals := map[string]string{"node": host, "want": want.ID(), "proc_devices": procDevices}
		switch {
		case !ok && lexists(host):
			out = append(out, Finding{Severity: Error, Problem: fmt.Sprintf("%s is not a character device (want %s)", host, want.ID()),
				Breaks: breaks, Fix: fmt.Sprintf("sudo rm %s && %s", host, fix), Values: vals})
		case !ok && sev == OK:
			out = append(out, Finding{Severity: OK, Problem: fmt.Sprintf("device node %s (%s) is absent: %s", want.Path, want.ID(), breaks)})
		case !ok:
			out = append(out, Finding{Severity: sev, Problem: fmt.Sprintf("device node %s (%s) is missing", want.Path, want.ID()),
				Breaks: breaks, Fix: fix, Values: vals})
		case got.Major != want.Major || got.Minor != want.Minor:
			vals["found"] = got.ID()
			out = append(out, Finding{Severity: Error,
				Problem: fmt.Sprintf("device node %s is %s, but the driver's numbers are %s (per %s)", want.Path, got.ID(), want.ID(), procDevices),
				Breaks:  breaks, Fix: fmt.Sprintf("sudo rm %s && %s", host, fix), Values: vals})
		}
	}
	if !slices.ContainsFunc(out, func(f Finding) bool { return f.Severity > OK }) {
		out = append(out, Finding{Severity: OK, Problem: fmt.Sprintf("the device nodes the driver implies exist (%d expected)", len(expected))})
	}
	return out
}

// imexNodesConfig is the IMEX daemon's node list: a host that has it uses
// IMEX.
const imexNodesConfig = "/etc/nvidia-imex/nodes_config.cfg"

// checkIMEXChannels: when the driver offers IMEX channels
// (ImexChannelCount > 0 and the nvidia-caps-imex-channels major) and IMEX
// is used (the daemon's node list, or a container asking for channels),
// their nodes exist.
func checkIMEXChannels(h *hostState) []Finding {
	if !h.moduleLoaded() {
		return nil
	}
	devs, err := procfs.ReadDevices(h.host(procfs.DevicesPath))
	if err != nil {
		return nil
	}
	major, ok := devs.CharMajor(procfs.DevNVIDIACapsIMEX)
	if !ok {
		return nil
	}
	count := uint64(0)
	if params, err := procfs.ReadParams(h.host(procfs.ParamsPath)); err == nil {
		count, _, _ = params.Uint(procfs.ParamImexChannelCount)
	}
	if count == 0 {
		return nil
	}
	dir := hostPath(h.devRoot, "/dev/nvidia-caps-imex-channels")
	entries, err := os.ReadDir(dir)
	if err == nil && len(entries) > 0 {
		return []Finding{{Severity: OK, Problem: fmt.Sprintf("%d IMEX channel node(s) in %s", len(entries), dir)}}
	}
	// Every recent driver offers 2048 channels and none has a node until
	// someone creates one: that matters only where IMEX is used (its
	// daemon configured on this host, or the container judged asking for
	// channels).
	asked := ""
	if b := h.container(); b != nil && b.err == nil {
		if v, ok := b.getenv("NVIDIA_IMEX_CHANNELS"); ok && v != "" && v != "none" && v != "void" {
			asked = v
		}
	}
	_, daemonErr := os.Stat(h.host(imexNodesConfig))
	if asked == "" && daemonErr != nil {
		return []Finding{{Severity: OK,
			Problem: fmt.Sprintf("no IMEX channel nodes in %s (the driver offers %d): only containers asking NVIDIA_IMEX_CHANNELS on an IMEX host need them", dir, count)}}
	}
	return []Finding{{Severity: Warning,
		Problem: fmt.Sprintf("the driver offers %d IMEX channels (major %d) but %s has no channel nodes", count, major, dir),
		Breaks:  "containers asking for NVIDIA_IMEX_CHANNELS get no channel: multi-node NVLink (IMEX) memory sharing fails",
		Fix:     "sudo nvidia-modprobe -i 0 (creates /dev/nvidia-caps-imex-channels/channel0)",
		Values:  map[string]string{"dir": dir, "major": fmt.Sprint(major), "channels": fmt.Sprint(count)},
	}}
}

// checkCharLinks: each NVIDIA node has its /dev/char/MAJOR:MINOR link, which
// systemd needs to keep a container's device rules after a daemon-reload.
// The check is the dry run of `nvidia-ctk system create-dev-char-symlinks`.
func checkCharLinks(h *hostState) []Finding {
	if !h.moduleLoaded() {
		return nil
	}
	nodes, err := devnodes.Scan(h.devRoot)
	if err != nil || len(nodes) == 0 {
		return nil
	}
	charDir := filepath.Join(hostPath(h.devRoot, "/dev"), "char")
	results, err := devnodes.CreateCharSymlinks(h.devRoot, charDir, nodes, true)
	var missing, wrong []string
	for _, r := range results {
		switch r.Status {
		case devnodes.WouldCreate:
			missing = append(missing, r.Node.ID())
		case devnodes.Mismatch:
			wrong = append(wrong, r.Node.ID()+" ("+r.Detail+")")
		}
	}
	var mm *devnodes.MismatchError
	if err != nil && !errors.As(err, &mm) {
		return []Finding{{Severity: Warning, Problem: "cannot check the /dev/char links: " + err.Error()}}
	}
	const breaks = `"Failed to initialize NVML: Unknown Error" in running GPU containers after systemctl daemon-reload (systemd drops device rules it cannot resolve through /dev/char)`
	const fix = "sudo nvidia-ctk system create-dev-char-symlinks --create-all (and make it persistent with a udev rule or a systemd unit)"
	var out []Finding
	// Only systemd drops the device rules it cannot resolve: on a host it
	// did not boot (sd_booted: /run/systemd/system), missing links break
	// nothing.
	if _, err := os.Stat(h.host("/run/systemd/system")); err != nil && len(missing) > 0 {
		out = append(out, Finding{Severity: OK,
			Problem: fmt.Sprintf("%d of %d NVIDIA device nodes have no %s link; systemd does not run this host, so nothing needs them", len(missing), len(nodes), charDir),
			Values:  map[string]string{"char_dir": charDir, "missing": strings.Join(missing, ",")}})
		missing = nil
	}
	if len(missing) > 0 {
		out = append(out, Finding{Severity: Warning,
			Problem: fmt.Sprintf("%d of %d NVIDIA device nodes have no %s link: %s", len(missing), len(nodes), charDir, abbreviate(missing, 8)),
			Breaks:  breaks, Fix: fix,
			Values: map[string]string{"char_dir": charDir, "missing": strings.Join(missing, ",")}})
	}
	if len(wrong) > 0 {
		out = append(out, Finding{Severity: Warning,
			Problem: fmt.Sprintf("%d /dev/char links point elsewhere: %s", len(wrong), abbreviate(wrong, 4)),
			Breaks:  breaks, Fix: "remove them, then " + fix,
			Values: map[string]string{"char_dir": charDir}})
	}
	if len(out) == 0 {
		out = append(out, Finding{Severity: OK, Problem: fmt.Sprintf("every NVIDIA device node has its /dev/char link (%d)", len(nodes))})
	}
	return out
}

// abbreviate joins the first n items and says how many more there are.
func abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s, … (%d more)", strings.Join(items[:n], ", "), len(items)-n)
}
