package doctor

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nctk/nctk/internal/cdispec"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/engine"
	"github.com/nctk/nctk/internal/hostfile"
)

// engineNames are the engines --engine accepts.
func engineNames() []string { return []string{"docker", "containerd", "crio", "podman"} }

// runtimeBinary is the executable the engines register.
const runtimeBinary = "nvidia-container-runtime"

// configureFix is the command that registers the runtime with an engine.
func configureFix(eng, daemon string) string {
	return fmt.Sprintf("sudo nvidia-ctk runtime configure --runtime=%s && sudo systemctl restart %s", eng, daemon)
}

// runtimeUsable checks a registered runtime executable: an absolute path
// must be an executable file below the host root, a bare name must be on
// the default PATH. It returns "" when usable, else why not.
func (h *hostState) runtimeUsable(p string) string {
	if !filepath.IsAbs(p) {
		if h.findBinary(p) == "" {
			return fmt.Sprintf("%s is not on the daemon's PATH (%s)", p, strings.Join(binDirs(), ":"))
		}
		return ""
	}
	fi, err := os.Stat(h.host(p))
	if err != nil {
		return fmt.Sprintf("%s does not exist", p)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Sprintf("%s is not an executable file", p)
	}
	return ""
}

// dockerConfig is the part of daemon.json the checks read.
type dockerConfig struct {
	Runtimes map[string]struct {
		Path string `json:"path"`
	} `json:"runtimes"`
	DefaultRuntime string          `json:"default-runtime"`
	Features       map[string]bool `json:"features"`
	ExecOpts       []string        `json:"exec-opts"`
}

// readDockerConfig reads daemon.json; a missing or unreadable file is an
// empty config, one that does not parse is err (checkDocker reports that).
func (h *hostState) readDockerConfig() (dc dockerConfig, path string, err error) {
	path = h.host(engine.DefaultDockerConfig)
	data, rerr := hostfile.ReadFile(path, hostfile.MaxConfig)
	if rerr != nil {
		return dc, path, nil
	}
	return dc, path, json.Unmarshal(data, &dc)
}

// checkDockerCgroup: docker's cgroup driver (exec-opts
// native.cgroupdriver in daemon.json, else dockerd's default: systemd on
// a cgroup v2 host booted with systemd, cgroupfs otherwise) fits the host.
func checkDockerCgroup(h *hostState) []Finding {
	if !h.engineWanted("docker") || (!exists(h.host(engine.DefaultDockerConfig)) && h.findBinary("dockerd") == "") {
		return nil
	}
	dc, cfgPath, _ := h.readDockerConfig()
	v2 := exists(h.host("/sys/fs/cgroup/cgroup.controllers"))
	systemd := exists(h.host("/run/systemd/system"))
	driver, set := "", false
	for _, o := range dc.ExecOpts {
		k, v, _ := strings.Cut(o, "=")
		if strings.TrimSpace(k) == "native.cgroupdriver" {
			driver, set = strings.TrimSpace(v), true
		}
	}
	if !set {
		driver = "cgroupfs"
		if v2 && systemd {
			driver = "systemd"
		}
	}
	cgroup := "v1"
	if v2 {
		cgroup = "v2"
	}
	vals := map[string]string{"file": cfgPath, "cgroup_driver": driver, "cgroup": cgroup, "systemd": strconv.FormatBool(systemd),
		"from": map[bool]string{true: "exec-opts", false: "default"}[set]}
	switch {
	case driver != "systemd" && driver != "cgroupfs":
		return []Finding{{Severity: Error,
			Problem: fmt.Sprintf("docker's cgroup driver %s is neither systemd nor cgroupfs", echo.Quote(driver)),
			Breaks:  "dockerd refuses the option and does not start, so no container runs",
			Fix:     `set "exec-opts": ["native.cgroupdriver=systemd"] (cgroupfs where systemd does not run) in ` + cfgPath + ", then sudo systemctl restart docker",
			Values:  vals}}
	case driver == "systemd" && !systemd:
		return []Finding{{Severity: Error,
			Problem: "docker uses the systemd cgroup driver but systemd is not running (no /run/systemd/system)",
			Breaks:  `runc cannot create the container's cgroup through systemd: every container fails to start ("systemd not running on this host")`,
			Fix:     `set "exec-opts": ["native.cgroupdriver=cgroupfs"] in ` + cfgPath + ", then restart dockerd",
			Values:  vals}}
	case driver == "cgroupfs" && systemd && v2:
		return []Finding{{Severity: Warning,
			Problem: "docker uses the cgroupfs cgroup driver on a cgroup v2 host run by systemd",
			Breaks: `two managers of one cgroup tree: systemd may move or reset the containers' cgroups (their device rules, GPU access included); ` +
				"kubelet with cri-dockerd refuses to run: \"misconfiguration: kubelet cgroup driver: 'systemd' is different from docker cgroup driver: 'cgroupfs'\"",
			Fix:    `set "exec-opts": ["native.cgroupdriver=systemd"] in ` + cfgPath + " (or drop the option: systemd is the default here), then sudo systemctl restart docker",
			Values: vals}}
	}
	note := ""
	if driver == "systemd" {
		note = "; GPU access after systemctl daemon-reload depends on the /dev/char links (devices.char-links)"
	}
	return []Finding{{Severity: OK, Problem: fmt.Sprintf("docker cgroup driver %s (%s, cgroup %s)%s", driver, vals["from"], cgroup, note), Values: vals}}
}

// checkDocker: daemon.json parses; the nvidia runtime is registered (or at
// least the hook `--gpus` uses is on dockerd's PATH) and its executable
// exists; CDI is enabled; dockerd was restarted after the last edit.
func checkDocker(h *hostState) []Finding {
	dockerd := h.findBinary("dockerd")
	if !h.engineWanted("docker") || (!exists(h.host(engine.DefaultDockerConfig)) && dockerd == "") {
		return nil
	}
	dc, cfgPath, err := h.readDockerConfig()
	if err != nil {
		return []Finding{{Severity: Error,
			Problem: fmt.Sprintf("%s is not valid JSON: %v", cfgPath, err),
			Breaks:  "dockerd does not start (\"unable to configure the Docker daemon with file\"), so no container runs",
			Fix:     "correct the file (python3 -m json.tool " + cfgPath + " shows where), then " + configureFix("docker", "docker"),
			Values:  map[string]string{"file": cfgPath}}}
	}
	var out []Finding
	hook := h.findBinary("nvidia-container-runtime-hook")
	var name, path string
	for _, n := range slices.Sorted(maps.Keys(dc.Runtimes)) {
		if r := dc.Runtimes[n]; filepath.Base(r.Path) == runtimeBinary && (name == "" || n == "nvidia") {
			name, path = n, r.Path
		}
	}
	switch {
	case name == "" && hook == "":
		out = append(out, Finding{Severity: Error,
			Problem: "docker has no NVIDIA runtime registered and nvidia-container-runtime-hook is not on dockerd's PATH",
			Breaks:  `docker run --gpus: "could not select device driver \"\" with capabilities: [[gpu]]"; --runtime=nvidia: "unknown or invalid runtime name: nvidia"`,
			Fix:     "install nctk (make install), then " + configureFix("docker", "docker"),
			Values:  map[string]string{"file": cfgPath}})
	case name == "":
		out = append(out, Finding{Severity: Warning,
			Problem: "docker has no NVIDIA runtime registered (docker run --gpus works through the hook " + hook + ")",
			Breaks:  `docker run --runtime=nvidia: "unknown or invalid runtime name: nvidia"`,
			Fix:     configureFix("docker", "docker"),
			Values:  map[string]string{"file": cfgPath, "hook": hook}})
	default:
		if why := h.runtimeUsable(path); why != "" {
			out = append(out, Finding{Severity: Error,
				Problem: fmt.Sprintf("docker's runtime %q is registered but %s", name, why),
				Breaks:  `docker run --runtime=` + name + `: "fork/exec ` + path + `: no such file or directory"`,
				Fix:     "install nctk (make install), or point it at the installed runtime: sudo nvidia-ctk runtime configure --runtime=docker --nvidia-runtime-path=/usr/bin/nvidia-container-runtime && sudo systemctl restart docker",
				Values:  map[string]string{"file": cfgPath, "runtime": name, "path": path}})
		} else {
			def := ""
			if dc.DefaultRuntime == name {
				def = ", the default"
			}
			out = append(out, Finding{Severity: OK, Problem: fmt.Sprintf("docker runtime %q registered (%s%s)", name, path, def)})
		}
	}
	if !dc.Features["cdi"] {
		out = append(out, Finding{Severity: Warning,
			Problem: "docker's CDI support is not enabled (features.cdi in " + cfgPath + ")",
			Breaks:  `docker run --device nvidia.com/gpu=all (Docker 25-27): "could not select device driver \"cdi\""`,
			Fix:     "sudo nvidia-ctk runtime configure --runtime=docker --enable-cdi && sudo systemctl restart docker",
			Values:  map[string]string{"file": cfgPath}})
	}
	out = append(out, h.restartCheck("docker", cfgPath, "/run/docker.pid", `"unknown or invalid runtime name: nvidia"`)...)
	return out
}

// restartCheck warns when an engine's config file changed after the
// daemon started (its pid file's time).
func (h *hostState) restartCheck(eng, cfgPath, pidFile, breaks string) []Finding {
	cfg, err1 := os.Stat(cfgPath)
	pid, err2 := os.Stat(h.host(pidFile))
	if err1 != nil || err2 != nil || !cfg.ModTime().After(pid.ModTime()) {
		return nil
	}
	return []Finding{{Severity: Warning,
		Problem: fmt.Sprintf("%s changed after %s started (%s newer than %s)", cfgPath, eng, cfgPath, h.host(pidFile)),
		Breaks:  "the running daemon does not know the change yet: " + breaks,
		Fix:     "sudo systemctl restart " + eng,
		Values: map[string]string{"file": cfgPath, "changed": cfg.ModTime().UTC().Format("2006-01-02T15:04:05Z"),
			"started": pid.ModTime().UTC().Format("2006-01-02T15:04:05Z")}}}
}

// tomlTable reads an engine's TOML file with the engine package's parser;
// a missing file is a nil table.
func tomlTable(p string) (map[string]any, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, nil
	}
	t, err := engine.ParseTOML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return t, nil
}

// checkContainerd: config.toml parses; the nvidia drop-in, when there is
// one, is imported; the nvidia runtime handler (for Kubernetes/CRI) is
// registered with an existing executable; enable_cdi is on.
func checkContainerd(h *hostState) []Finding {
	mainPath := h.host(engine.DefaultContainerdConfig)
	dropIn := h.host(engine.DefaultContainerdDropIn)
	if !h.engineWanted("containerd") || (!exists(mainPath) && h.findBinary("containerd") == "") {
		return nil
	}
	main, err := tomlTable(mainPath)
	var version int
	if err == nil {
		if version, err = engine.ContainerdVersion(main); err != nil {
			err = fmt.Errorf("%s: %w", mainPath, err)
		}
	}
	if err != nil {
		return []Finding{{Severity: Error, Problem: "containerd's config does not parse: " + err.Error(),
			Breaks: "containerd does not start (or ignores the file), so no container runs", Fix: "correct the file, then " + configureFix("containerd", "containerd"),
			Values: map[string]string{"file": mainPath}}}
	}
	files := []string{mainPath}
	imported := false
	if imps, ok := main["imports"].([]any); ok {
		for _, i := range imps {
			s, ok := i.(string)
			if !ok {
				continue
			}
			if !filepath.IsAbs(s) {
				s = filepath.Join(filepath.Dir(engine.DefaultContainerdConfig), s)
			}
			matches, _ := filepath.Glob(h.host(s))
			for _, m := range matches {
				files = append(files, m)
				if m == dropIn {
					imported = true
				}
			}
		}
	}
	var out []Finding
	if exists(dropIn) && !imported {
		out = append(out, Finding{Severity: Error,
			Problem: fmt.Sprintf("%s exists but %s does not import it", dropIn, mainPath),
			Breaks:  `the nvidia runtime it defines is unknown to containerd: pods with runtimeClassName nvidia fail with "no runtime for \"nvidia\" is configured"`,
			Fix:     configureFix("containerd", "containerd") + " (adds the imports entry)",
			Values:  map[string]string{"file": mainPath, "drop_in": dropIn}})
	}
	cri := engine.CRIPluginPath(version)
	var rtPath, rtFile string
	var rtTable any
	cdi, cdiSet := false, false
	for _, f := range files {
		t := main
		if f != mainPath {
			var err error
			if t, err = tomlTable(f); err != nil || t == nil {
				if err != nil {
					out = append(out, Finding{Severity: Error, Problem: "a containerd drop-in does not parse: " + err.Error(),
						Breaks: "containerd does not start", Fix: "correct or remove " + f, Values: map[string]string{"file": f}})
				}
				continue
			}
		}
		if rts, ok := engine.TOMLValue(t, append(slices.Clone(cri), "containerd", "runtimes")...); ok {
			if m, ok := rts.(map[string]any); ok {
				for _, n := range slices.Sorted(maps.Keys(m)) {
					if bn, ok := engine.TOMLValue(m[n], "options", "BinaryName"); ok {
						if s, ok := bn.(string); ok && filepath.Base(s) == runtimeBinary {
							rtPath, rtFile, rtTable = s, f, m[n]
						}
					}
				}
			}
		}
		if v, ok := engine.TOMLValue(t, append(slices.Clone(cri), "enable_cdi")...); ok {
			cdi, cdiSet = v == true, true
		}
	}
	switch {
	case rtPath == "":
		out = append(out, Finding{Severity: Warning,
			Problem: "containerd has no runtime handler for nvidia-container-runtime (ctr run --gpus still works through the hook)",
			Breaks:  `Kubernetes pods with runtimeClassName nvidia: "no runtime for \"nvidia\" is configured"`,
			Fix:     configureFix("containerd", "containerd"),
			Values:  map[string]string{"file": mainPath}})
	default:
		if why := h.runtimeUsable(rtPath); why != "" {
			out = append(out, Finding{Severity: Error,
				Problem: "containerd's nvidia runtime handler is registered but " + why,
				Breaks:  `pods using it fail: "failed to create containerd task: … ` + rtPath + `: no such file or directory"`,
				Fix:     "install nctk (make install), then " + configureFix("containerd", "containerd"),
				Values:  map[string]string{"file": rtFile, "path": rtPath}})
		} else {
			out = append(out, Finding{Severity: OK, Problem: "containerd runtime handler for " + rtPath + " in " + rtFile})
		}
		out = append(out, annotationFinding(rtTable, rtFile, (cdiSet && cdi) || (!cdiSet && version >= 3))...)
	}
	// containerd 2.x (config version 3) has CDI on by default; without a
	// config file the version, hence the default, is unknown.
	if (cdiSet && !cdi) || (!cdiSet && version < 3 && exists(mainPath)) {
		out = append(out, Finding{Severity: Warning,
			Problem: "containerd's CRI plugin has enable_cdi off",
			Breaks:  `CDI device requests (device plugins in CDI mode, cdi.k8s.io annotations) are ignored or fail: "unresolvable CDI devices"`,
			Fix:     "sudo nvidia-ctk runtime configure --runtime=containerd --enable-cdi && sudo systemctl restart containerd",
			Values:  map[string]string{"file": mainPath, "config_version": fmt.Sprint(version)}})
	}
	return out
}

// cdiAnnotation is an annotation key the device plugin's cdi-annotations
// mode sets (any key with the cdi.k8s.io/ prefix).
const cdiAnnotation = "cdi.k8s.io/nvidia-device-plugin_0"

// annotationPasses reports whether one of containerd's annotation
// patterns (container_annotations / pod_annotations: exact keys or
// globs such as "cdi.k8s.io/*") lets a cdi.k8s.io/ annotation through.
func annotationPasses(patterns []string) bool {
	for _, p := range patterns {
		if p == "*" || strings.HasPrefix(p, "cdi.k8s.io/") && (p == "cdi.k8s.io/*" || strings.HasSuffix(p, "*")) {
			return true
		}
		if ok, _ := path.Match(p, cdiAnnotation); ok {
			return true
		}
	}
	return false
}

// annotationFinding: the nvidia runtime handler passes cdi.k8s.io/
// annotations through to the runtime (container_annotations or
// pod_annotations on the handler, or in its options). With enable_cdi on
// (cdiOn) containerd resolves those annotations itself, so the runtime
// not seeing them is only worth a note.
func annotationFinding(rt any, file string, cdiOn bool) []Finding {
	var patterns []string
	for _, where := range [][]string{{"container_annotations"}, {"pod_annotations"}, {"options", "container_annotations"}, {"options", "pod_annotations"}} {
		if v, ok := engine.TOMLValue(rt, where...); ok {
			if l, ok := v.([]any); ok {
				for _, x := range l {
					if s, ok := x.(string); ok {
						patterns = append(patterns, s)
					}
				}
			}
		}
	}
	if annotationPasses(patterns) {
		return []Finding{{Severity: OK, Problem: "containerd passes cdi.k8s.io/ annotations to the nvidia runtime (" + strings.Join(patterns, ",") + ")"}}
	}
	if cdiOn {
		return []Finding{{Severity: OK, Problem: "containerd resolves cdi.k8s.io/ annotations itself (enable_cdi); its nvidia runtime handler does not pass them on (no container_annotations)"}}
	}
	return []Finding{{Severity: Warning,
		Problem: "containerd's nvidia runtime handler does not pass cdi.k8s.io/ annotations to the runtime (no container_annotations or pod_annotations matching them), and enable_cdi is off",
		Breaks:  "the device plugin in cdi-annotations mode (deviceListStrategy=cdi-annotations) selects GPUs through cdi.k8s.io/ annotations; containerd drops them, so the runtime injects nothing: pods start without GPUs (\"no CUDA-capable device is detected\")",
		Fix:     `add container_annotations = ["cdi.k8s.io/*"] to the nvidia runtime handler's table in ` + file + " (or turn on enable_cdi: nvidia-ctk runtime configure --runtime=containerd --enable-cdi), then sudo systemctl restart containerd",
		Values:  map[string]string{"file": file, "annotations": strings.Join(patterns, ",")}}}
}

// checkCRIO: the nvidia runtime is in crio.conf or a drop-in, with an
// existing executable.
func checkCRIO(h *hostState) []Finding {
	mainPath := h.host("/etc/crio/crio.conf")
	dropDir := h.host("/etc/crio/crio.conf.d")
	if !h.engineWanted("crio") || (!exists(mainPath) && !exists(dropDir) && h.findBinary("crio") == "") {
		return nil
	}
	files := []string{mainPath}
	if drops, err := filepath.Glob(filepath.Join(dropDir, "*.conf")); err == nil {
		slices.Sort(drops)
		files = append(files, drops...)
	}
	var out []Finding
	var rtPath, rtFile string
	specDirs, specFile := cdispec.DefaultSpecDirs(), ""
	for _, f := range files {
		t, err := tomlTable(f)
		if err != nil {
			out = append(out, Finding{Severity: Error, Problem: "a CRI-O config file does not parse: " + err.Error(),
				Breaks: "CRI-O does not start", Fix: "correct " + f, Values: map[string]string{"file": f}})
			continue
		}
		if v, ok := engine.TOMLValue(t, "crio", "runtime", "cdi_spec_dirs"); ok {
			if l, ok := v.([]any); ok {
				specDirs, specFile = nil, f
				for _, x := range l {
					if d, ok := x.(string); ok {
						specDirs = append(specDirs, d)
					}
				}
			}
		}
		if rts, ok := engine.TOMLValue(t, "crio", "runtime", "runtimes"); ok {
			if m, ok := rts.(map[string]any); ok {
				for _, n := range slices.Sorted(maps.Keys(m)) {
					if rp, ok := engine.TOMLValue(m[n], "runtime_path"); ok {
						if s, ok := rp.(string); ok && filepath.Base(s) == runtimeBinary {
							rtPath, rtFile = s, f
						}
					}
				}
			}
		}
	}
	switch {
	case rtPath == "":
		out = append(out, Finding{Severity: Warning,
			Problem: "CRI-O has no runtime for nvidia-container-runtime",
			Breaks:  `pods with runtimeClassName nvidia: "runtime handler \"nvidia\" is not supported"`,
			Fix:     configureFix("crio", "crio"),
			Values:  map[string]string{"file": mainPath}})
	default:
		if why := h.runtimeUsable(rtPath); why != "" {
			out = append(out, Finding{Severity: Error, Problem: "CRI-O's nvidia runtime is registered but " + why,
				Breaks: "pods using it fail to start", Fix: "install nctk (make install), then " + configureFix("crio", "crio"),
				Values: map[string]string{"file": rtFile, "path": rtPath}})
		} else {
			out = append(out, Finding{Severity: OK, Problem: "CRI-O runtime " + rtPath + " in " + rtFile})
		}
	}
	return append(out, h.crioSpecDirs(specDirs, specFile)...)
}

// gpuSpecDevices counts the nvidia.com/gpu devices the CDI specs in dirs
// (host paths) define.
func gpuSpecDevices(dirs []string) int {
	l, err := cdispec.List(dirs)
	if err != nil {
		return 0
	}
	n := 0
	for _, d := range l.Devices {
		if strings.HasPrefix(d, "nvidia.com/gpu=") {
			n++
		}
	}
	return n
}

// crioSpecDirs: CRI-O's CDI spec directories (crio.runtime.cdi_spec_dirs,
// set in file; default /etc/cdi and /var/run/cdi) hold the NVIDIA specs
// that the spec directories doctor checks hold. When no spec exists at
// all, cdi.specs says so.
func (h *hostState) crioSpecDirs(dirs []string, file string) []Finding {
	var host []string
	for _, d := range dirs {
		host = append(host, h.host(d))
	}
	from := "default"
	if file != "" {
		from = file
	}
	vals := map[string]string{"cdi_spec_dirs": strings.Join(dirs, ","), "from": from}
	if n := gpuSpecDevices(host); n > 0 {
		return []Finding{{Severity: OK, Problem: fmt.Sprintf("CRI-O finds %d nvidia.com/gpu CDI device(s) in %s", n, strings.Join(dirs, ", ")), Values: vals}}
	}
	var elsewhere []string
	for _, d := range h.specDirs() {
		if !slices.Contains(host, d) && gpuSpecDevices([]string{d}) > 0 {
			elsewhere = append(elsewhere, d)
		}
	}
	if len(elsewhere) == 0 {
		return nil
	}
	vals["specs_in"] = strings.Join(elsewhere, ",")
	where := "the default cdi_spec_dirs"
	if file != "" {
		where = "cdi_spec_dirs in " + file
	}
	return []Finding{{Severity: Warning,
		Problem: fmt.Sprintf("CRI-O reads CDI specs from %s (%s), but the NVIDIA specs are in %s", strings.Join(dirs, ", "), where, strings.Join(elsewhere, ", ")),
		Breaks:  `pods asking for CDI devices (device plugin in CDI mode, cdi.k8s.io annotations): "unresolvable CDI devices nvidia.com/gpu=…"`,
		Fix:     fmt.Sprintf("add %s to cdi_spec_dirs under [crio.runtime] (or generate the spec into %s: nvidia-ctk cdi generate --output=%s/nvidia.yaml), then sudo systemctl restart crio", strings.Join(elsewhere, ", "), dirs0(dirs), dirs0(dirs)),
		Values:  vals}}
}

// dirs0 is the first directory, or /etc/cdi.
func dirs0(dirs []string) string {
	if len(dirs) > 0 {
		return dirs[0]
	}
	return "/etc/cdi"
}

// checkPodman: podman reaches GPUs only through CDI specs in /etc/cdi or
// /var/run/cdi.
func checkPodman(h *hostState) []Finding {
	if !h.engineWanted("podman") || h.findBinary("podman") == "" {
		return nil
	}
	var dirs []string
	for _, d := range cdispec.DefaultSpecDirs() {
		dirs = append(dirs, h.host(d))
	}
	for _, d := range dirs {
		matches, _ := filepath.Glob(filepath.Join(d, "*"))
		for _, m := range matches {
			if ext := filepath.Ext(m); ext == ".yaml" || ext == ".json" {
				return []Finding{{Severity: OK, Problem: "podman finds CDI specs in " + d}}
			}
		}
	}
	return []Finding{{Severity: Warning,
		Problem: "podman is installed but there is no CDI spec in " + strings.Join(dirs, " or "),
		Breaks:  `podman run --device nvidia.com/gpu=all: "Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all"`,
		Fix:     cdiFix,
		Values:  map[string]string{"spec_dirs": strings.Join(dirs, ",")}}}
}
