package parity

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// configureCase is one `nvidia-ctk runtime configure` run: the engine, its
// configuration file (a file of the engine package's test inputs, "" for
// none), whether the NVIDIA runtime goes to a drop-in file (else into the
// file itself: --drop-in-config=""), and the other flags.
type runtimeConfigureCase struct {
	name   string
	engine string
	in     string
	dropIn bool
	args   []string
}

const configureRuntime = "--nvidia-runtime-path=/usr/bin/nvidia-container-runtime"

// runtimeConfigureCases are the cases of internal/engine's
// TestConfigureGolden (docs/runtime-configure.md) that need no engine
// binary, as command lines.
var runtimeConfigureCases = []runtimeConfigureCase{
	{"containerd-v2-drop-in", "containerd", "containerd-v2.toml", true, []string{configureRuntime}},
	{"containerd-v2-drop-in-default-cdi", "containerd", "containerd-v2.toml", true, []string{configureRuntime, "--set-as-default", "--cdi.enabled"}},
	{"containerd-v2-inherit-kata", "containerd", "configure/in/containerd-v2-kata.toml", true, []string{configureRuntime}},
	{"containerd-v2-nvidia-default", "containerd", "configure/in/containerd-v2-nvidia-default.toml", true, []string{configureRuntime}},
	{"containerd-v2-no-runtimes", "containerd", "configure/in/containerd-v2-no-runtimes.toml", true, []string{configureRuntime}},
	{"containerd-v2-imports", "containerd", "configure/in/containerd-v2-imports.toml", true, []string{configureRuntime}},
	{"containerd-missing", "containerd", "", true, []string{configureRuntime}},
	{"containerd-missing-custom-name", "containerd", "", true, []string{"--nvidia-runtime-name=nvidia-cdi", "--nvidia-runtime-path=/usr/bin/nvidia-container-runtime.cdi"}},
	{"containerd-v2-in-place", "containerd", "containerd-v2.toml", false, []string{configureRuntime}},
	{"containerd-v3-drop-in", "containerd", "containerd-v3.toml", true, []string{configureRuntime, "--set-as-default", "--cdi.enabled"}},
	{"containerd-v3-default-crun", "containerd", "configure/in/containerd-v3-crun.toml", true, []string{configureRuntime, "--cdi.enabled"}},
	{"containerd-v1-in-place", "containerd", "containerd-v1.toml", false, []string{configureRuntime, "--set-as-default"}},
	{"containerd-v1-cdi", "containerd", "containerd-v1.toml", false, []string{configureRuntime, "--cdi.enabled"}},
	{"containerd-v1-drop-in", "containerd", "containerd-v1.toml", true, []string{configureRuntime}},
	{"docker-sample", "docker", "daemon.json", false, []string{"--nvidia-runtime-path=nvidia-container-runtime"}},
	{"docker-missing-default-cdi", "docker", "", false, []string{"--nvidia-runtime-path=nvidia-container-runtime", "--set-as-default", "--cdi.enabled"}},
	{"docker-nvidia-entry", "docker", "configure/in/daemon-nvidia-entry.json", false, []string{"--nvidia-runtime-path=nvidia-container-runtime"}},
	{"docker-features", "docker", "configure/in/daemon-features.json", false, []string{"--nvidia-runtime-path=nvidia-container-runtime", "--cdi.enabled"}},
	{"crio-drop-in", "crio", "crio.conf", true, []string{configureRuntime, "--cdi.enabled"}},
	{"crio-drop-in-default", "crio", "crio.conf", true, []string{configureRuntime, "--set-as-default"}},
	{"crio-nvidia-default", "crio", "configure/in/crio-nvidia-default.conf", true, []string{configureRuntime}},
	{"crio-missing", "crio", "", true, []string{configureRuntime, "--set-as-default"}},
	{"crio-in-place", "crio", "crio.conf", false, []string{configureRuntime, "--set-as-default"}},
}

// TestRuntimeConfigure runs `nvidia-ctk runtime configure` for each of
// runtimeConfigureCases in a directory of its own and compares, with
// NVIDIA's, every file the run leaves there: its keys and values (TOML and
// JSON flattened to one sorted line per leaf, so that layout and comments
// do not count), and whether it failed. Where nctk differs on purpose
// (docs/runtime-configure.md) the difference is spelled out line by line in
// configureDifferences, and a listed difference that is gone fails too.
func TestRuntimeConfigure(t *testing.T) {
	ctk := tool(t, "nvidia-ctk")
	var b strings.Builder
	for _, c := range runtimeConfigureCases {
		dir := t.TempDir()
		file := map[string]string{"containerd": "config.toml", "crio": "crio.conf", "docker": "daemon.json"}[c.engine]
		if c.in != "" {
			data, err := os.ReadFile(filepath.Join("..", "..", "internal", "engine", "testdata", c.in))
			if err != nil {
				t.Fatal(err)
			}
			write(t, dir, "/"+file, string(data), 0o644)
		}
		args := []string{"runtime", "configure", "--runtime=" + c.engine, "--config=" + filepath.Join(dir, file), "--config-source=file"}
		switch {
		case c.engine == "docker":
		case c.dropIn && c.engine == "containerd":
			args = append(args, "--drop-in-config="+filepath.Join(dir, "conf.d", "99-nvidia.toml"))
		case c.dropIn:
			args = append(args, "--drop-in-config="+filepath.Join(dir, "crio.conf.d", "99-nvidia.toml"))
		default:
			args = append(args, "--drop-in-config=")
		}
		args = append(args, c.args...)
		cmd := exec.Command(ctk, args...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg")}
		output, err := cmd.CombinedOutput()
		rc := exitCode(t, c.name, err)
		t.Logf("%s: %q: exit %d\n%s", c.name, args, rc, output)
		fmt.Fprintf(&b, "== %s\nexit: %s\n", c.name, exitClass(rc))
		b.WriteString(configureFiles(t, dir))
	}
	golden(t, "cli/runtime-configure.golden", b.String(), nil, configureDifferences)
}

// configureFiles lists the files below dir (the xdg directory aside), one
// line per leaf of each: its path relative to dir, then the flattened
// line, all sorted.
func configureFiles(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, "xdg/") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		flat := flatten(t, rel, data)
		if len(flat) == 0 {
			flat = []string{"(empty)"}
		}
		for _, l := range flat {
			lines = append(lines, rel+": "+strings.ReplaceAll(l, dir, "DIR"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// flatten is a configuration file's content as sorted "key.path = value"
// lines (values as JSON); a file that is neither TOML nor JSON is one line
// per line of text.
func flatten(t *testing.T, name string, data []byte) []string {
	t.Helper()
	var v any
	var err error
	if strings.HasSuffix(name, ".json") {
		err = json.Unmarshal(data, &v)
	} else {
		var m map[string]any
		err = toml.Unmarshal(data, &m)
		v = m
	}
	if err != nil {
		return append([]string{"unparsable: " + err.Error()}, strings.Split(strings.TrimSpace(string(data)), "\n")...)
	}
	var lines []string
	var walk func(prefix string, x any)
	walk = func(prefix string, x any) {
		if m, ok := x.(map[string]any); ok && len(m) > 0 {
			for k, y := range m {
				key := k
				if prefix != "" {
					key = prefix + "." + k
				}
				walk(key, y)
			}
			return
		}
		j, _ := json.Marshal(x)
		lines = append(lines, prefix+" = "+string(j))
	}
	walk("", v)
	slices.Sort(lines)
	return lines
}

// configureDifference is a difference nctk keeps from NVIDIA's result in
// one case: lines of NVIDIA's that nctk has not (drop) and lines nctk has
// that NVIDIA's has not (add), in the flattened form of configureFiles.
type configureDifference struct {
	drop, add []string
}

// configureDifferences turns NVIDIA's results into nctk's where nctk
// differs on purpose (docs/runtime-configure.md). Each listed line must be
// in NVIDIA's result (drop) or not (add): a difference that has gone fails
// the comparison.
func configureDifferences(s string) string {
	blocks := strings.Split(s, "== ")
	for i, blk := range blocks {
		name, _, _ := strings.Cut(blk, "\n")
		d, ok := knownConfigureDifferences[name]
		if !ok {
			continue
		}
		lines := strings.Split(strings.TrimSuffix(blk, "\n"), "\n")
		for _, l := range d.drop {
			j := slices.Index(lines, l)
			if j < 0 {
				lines = append(lines, "difference gone: NVIDIA's result lacks "+l)
				continue
			}
			lines = slices.Delete(lines, j, j+1)
		}
		for _, l := range d.add {
			if slices.Contains(lines, l) {
				lines = append(lines, "difference gone: NVIDIA's result has "+l)
				continue
			}
			lines = append(lines, l)
		}
		slices.Sort(lines[2:]) // after the name and exit lines
		blocks[i] = strings.Join(lines, "\n") + "\n"
	}
	return strings.Join(blocks, "== ")
}

// knownConfigureDifferences: see configureDifferences; the reasons are
// docs/runtime-configure.md's.
var knownConfigureDifferences = map[string]configureDifference{
	// The file names no runc runtime and the default is runc: NVIDIA's
	// drop-in leaves containerd without its default runtime (its CRI plugin
	// then refuses to load); nctk adds containerd's built-in runc.
	"containerd-v2-no-runtimes": {add: builtinRuncLines},
	// The file names no runc runtime and the default is runc: NVIDIA's
	// drop-in leaves containerd without its default runtime (its CRI plugin
	// then refuses to load); nctk adds containerd's built-in runc.
	"containerd-v2-imports": {add: builtinRuncLines},
	// The file names no runc runtime and the default is runc: NVIDIA's
	// drop-in leaves containerd without its default runtime (its CRI plugin
	// then refuses to load); nctk adds containerd's built-in runc.
	"containerd-missing": {add: builtinRuncLines},
	// The file names no runc runtime and the default is runc: NVIDIA's
	// drop-in leaves containerd without its default runtime (its CRI plugin
	// then refuses to load); nctk adds containerd's built-in runc.
	"containerd-missing-custom-name": {add: builtinRuncLines},
	// NVIDIA's --drop-in-config="" writes the drop-in over config.toml and
	// then the old config.toml over it: the runtime is lost and config.toml
	// imports its own directory; nctk edits config.toml in place
	"containerd-v2-in-place": {drop: []string{
		"config.toml: imports = [\"DIR/*.toml\"]",
	}, add: []string{
		"config.toml: plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia.options.BinaryName = \"/usr/bin/nvidia-container-runtime\"",
		"config.toml: plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia.options.SystemdCgroup = true",
		"config.toml: plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia.privileged_without_host_devices = false",
		"config.toml: plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia.runtime_type = \"io.containerd.runc.v2\"",
	}},
	// NVIDIA writes enable_cdi into plugins.cri.containerd, where containerd
	// does not read it; nctk into plugins.cri
	"containerd-v1-cdi": {drop: []string{
		"config.toml: plugins.cri.containerd.enable_cdi = true",
	}, add: []string{
		"config.toml: plugins.cri.enable_cdi = true",
	}},
	// NVIDIA writes the whole v1 config to a drop-in, which a v1 config cannot
	// import; nctk edits config.toml (with a note)
	"containerd-v1-drop-in": {drop: []string{
		"conf.d/99-nvidia.toml: grpc.address = \"/run/containerd/containerd.sock\"",
		"conf.d/99-nvidia.toml: oom_score = -999",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.default_runtime.runtime_type = \"io.containerd.runtime.v1.linux\"",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.runtimes.kata.runtime_type = \"io.containerd.kata.v2\"",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.runtimes.nvidia.options.BinaryName = \"/usr/bin/nvidia-container-runtime\"",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.runtimes.nvidia.options.Runtime = \"/usr/bin/nvidia-container-runtime\"",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.runtimes.nvidia.options.SystemdCgroup = true",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.runtimes.nvidia.runtime_type = \"io.containerd.runc.v2\"",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.runtimes.runc.options.SystemdCgroup = true",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.runtimes.runc.runtime_type = \"io.containerd.runc.v2\"",
		"conf.d/99-nvidia.toml: plugins.cri.containerd.snapshotter = \"overlayfs\"",
		"conf.d/99-nvidia.toml: plugins.cri.registry.mirrors.docker.io.endpoint = [\"https://mirror.example.com\"]",
		"conf.d/99-nvidia.toml: plugins.cri.sandbox_image = \"registry.example.com/pause:3.2\"",
		"conf.d/99-nvidia.toml: plugins.linux.shim_debug = true",
		"conf.d/99-nvidia.toml: root = \"/var/lib/containerd\"",
		"conf.d/99-nvidia.toml: state = \"/run/containerd\"",
		"conf.d/99-nvidia.toml: version = 1",
	}, add: []string{
		"config.toml: plugins.cri.containerd.runtimes.nvidia.options.BinaryName = \"/usr/bin/nvidia-container-runtime\"",
		"config.toml: plugins.cri.containerd.runtimes.nvidia.options.Runtime = \"/usr/bin/nvidia-container-runtime\"",
		"config.toml: plugins.cri.containerd.runtimes.nvidia.options.SystemdCgroup = true",
		"config.toml: plugins.cri.containerd.runtimes.nvidia.runtime_type = \"io.containerd.runc.v2\"",
		"config.toml: version = 1",
	}},
	// NVIDIA's --cdi.enabled replaces "features" with {"cdi": true}; nctk
	// keeps the other features
	"docker-features": {add: []string{
		"daemon.json: features.buildkit = true",
		"daemon.json: features.containerd-snapshotter = false",
	}},
	// NVIDIA's --drop-in-config="" replaces crio.conf with the drop-in's
	// content; nctk edits crio.conf in place, keeping the rest
	"crio-in-place": {add: []string{
		"crio.conf: crio.api.listen = \"/var/run/crio/crio.sock\"",
		"crio.conf: crio.image.pause_image = \"registry.k8s.io/pause:3.9\"",
		"crio.conf: crio.log_dir = \"/var/log/crio/pods\"",
		"crio.conf: crio.runtime.cgroup_manager = \"systemd\"",
		"crio.conf: crio.runtime.conmon_cgroup = \"pod\"",
		"crio.conf: crio.runtime.runtimes.crun.allowed_annotations = [\"io.containers.trace-syscall\"]",
		"crio.conf: crio.runtime.runtimes.crun.monitor_path = \"/usr/libexec/crio/conmon\"",
		"crio.conf: crio.runtime.runtimes.crun.runtime_path = \"/usr/bin/crun\"",
		"crio.conf: crio.runtime.runtimes.crun.runtime_root = \"/run/crun\"",
		"crio.conf: crio.runtime.runtimes.crun.runtime_type = \"oci\"",
		"crio.conf: crio.runtime.runtimes.runc.runtime_path = \"\"",
		"crio.conf: crio.runtime.runtimes.runc.runtime_root = \"/run/runc\"",
		"crio.conf: crio.runtime.runtimes.runc.runtime_type = \"oci\"",
	}},
}

// builtinRuncLines are the lines of containerd's built-in runc runtime in a
// version 2 drop-in.
var builtinRuncLines = []string{
	"conf.d/99-nvidia.toml: plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.privileged_without_host_devices = false",
	"conf.d/99-nvidia.toml: plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.runtime_engine = \"\"",
	"conf.d/99-nvidia.toml: plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.runtime_root = \"\"",
	"conf.d/99-nvidia.toml: plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.runtime_type = \"io.containerd.runc.v2\"",
}
