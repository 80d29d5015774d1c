package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/version"
)

// The test in this file installs nctk's Debian package into the Debian 13
// root (an overlay of the cached root: the cache stays clean) and uses it
// as an admin would: dpkg -i, `nvidia-ctk runtime configure` for docker and
// containerd, the engines started on the files it wrote, GPU containers
// through them with the tools, the config.toml and the CDI spec from the
// package's own paths (/usr/bin, /etc/nvidia-container-runtime,
// /var/run/cdi) — no test binary or config file of the harness — then
// apt-get remove and purge, after each of which the engines must start
// again on the configs `runtime configure` left.

// Paths the package and `nvidia-ctk runtime configure` use in the root.
const (
	pkgDaemonJSON   = "/etc/docker/daemon.json"
	pkgContainerdDI = "/etc/containerd/conf.d/99-nvidia.toml"
	pkgRefreshUnit  = "/usr/lib/systemd/system/nvidia-cdi-refresh.service"
	pkgRefreshEnv   = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
	pkgRuntime      = "/usr/bin/nvidia-container-runtime"
)

// buildDeb builds the package as `make deb` does, from the binaries this
// run built, and returns its path.
func buildDeb(t *testing.T) string {
	t.Helper()
	e2e.RequireTool(t, "dpkg-deb")
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go" // as e2e.BuildNctk
	}
	out := e2e.TempDir(t, "deb")
	deb := strings.TrimSpace(e2e.MustRun(t, e2e.RunOpts{Dir: repo, Env: []string{"GO=" + goBin}},
		"packaging/build-deb.sh", filepath.Dir(tool(t, "nctk")), out))
	if filepath.Dir(deb) != out || !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("build-deb.sh printed %q, want a .deb in %s", deb, out)
	}
	return deb
}

// writeInRoot writes content to the file p in the engine root (making its
// directory).
func writeInRoot(t *testing.T, root *e2e.EngineRoot, p, content string) {
	t.Helper()
	root.MustRun(t, e2e.RunOpts{Stdin: strings.NewReader(content)}, "/bin/sh", "-c", `mkdir -p "$(dirname "$1")" && cat > "$1"`, "sh", p)
}

// readInRoot returns the content of the file p in the engine root.
func readInRoot(t *testing.T, root *e2e.EngineRoot, p string) string {
	t.Helper()
	return root.MustRun(t, e2e.RunOpts{Quiet: true}, "cat", p)
}

// pkgStatus is dpkg's status and version of nctk in the root ("" when
// dpkg does not know it).
func pkgStatus(t *testing.T, root *e2e.EngineRoot) string {
	t.Helper()
	res := root.Run(t, e2e.RunOpts{}, "dpkg-query", "-W", "-f", "${Status} ${Version}", "nctk")
	return strings.TrimSpace(res.Stdout)
}

// unitCommand reads a systemd service unit and returns its ExecStart
// command and the environment it runs with: its Environment= lines, then
// those of its EnvironmentFile= (KEY=VALUE lines; a "-" prefix makes the
// file optional), read with read.
func unitCommand(t *testing.T, unit string, read func(p string) (string, bool)) (argv, env []string) {
	t.Helper()
	var files []string
	for _, line := range strings.Split(unit, "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch key {
		case "Environment":
			env = append(env, strings.Fields(value)...)
		case "EnvironmentFile":
			files = append(files, value)
		case "ExecStart":
			if argv != nil {
				t.Fatalf("unit has two ExecStart lines:\n%s", unit)
			}
			argv = strings.Fields(value)
		}
	}
	for _, f := range files {
		optional := strings.HasPrefix(f, "-")
		data, ok := read(strings.TrimPrefix(f, "-"))
		if !ok {
			if !optional {
				t.Fatalf("the unit's EnvironmentFile %s is missing", f)
			}
			continue
		}
		for _, line := range strings.Split(data, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				env = append(env, line)
			}
		}
	}
	if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
		t.Fatalf("unit has no absolute ExecStart:\n%s", unit)
	}
	return argv, env
}

// pkgContainerdConfig writes the containerd config an admin's node has
// before `runtime configure`: Debian's packaged /etc/containerd/config.toml,
// with what the test host needs (StartContainerdWith's root, state and
// socket in dir; restrict_oom_score_adj, see criConfig; the sandbox image
// the test imports) — to <dir>/config.toml, which it returns.
func pkgContainerdConfig(t *testing.T, root *e2e.EngineRoot, dir, sandboxImage string) string {
	t.Helper()
	cfg := filepath.Join(dir, "config.toml")
	top := fmt.Sprintf("root = %q\nstate = %q\n", filepath.Join(dir, "root"), filepath.Join(dir, "state"))
	debian := readInRoot(t, root, "/etc/containerd/config.toml")
	if !strings.HasPrefix(debian, "version = 2\n") {
		t.Fatalf("Debian 13's /etc/containerd/config.toml does not start with version = 2:\n%s", debian)
	}
	data := "version = 2\n" + top + strings.TrimPrefix(debian, "version = 2\n") +
		fmt.Sprintf("\n[grpc]\n  address = %q\n", filepath.Join(dir, "containerd.sock"))
	if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	criEdit(t, cfg, func(doc map[string]any) {
		cri := criTable(t, doc)
		cri["restrict_oom_score_adj"] = true
		cri["sandbox_image"] = sandboxImage
	})
	return cfg
}

// TestTrixiePackage installs the package into the Debian 13 root and runs
// GPU containers through it as described above, over a 4-GPU fixture
// driver: docker 26.1 with `--device nvidia.com/gpu=N` (the spec written by
// the command the package's nvidia-cdi-refresh.service runs), `--gpus` and
// `--runtime=nvidia`; containerd 1.7's CRI with the nvidia handler; then
// apt-get remove and purge.
func TestTrixiePackage(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	deb := buildDeb(t)
	root := e2e.StartTrixie(t)
	host := newHost(t, fixture.Spec{Layout: "multiarch", GPUs: 4})
	rootfs := e2e.BuildRootfs(t, e2e.RootfsOptions{})
	libDir := e2e.LayoutDebian.LibDir()

	root.MustRun(t, e2e.RunOpts{}, "dpkg", "-i", deb)
	if got, want := pkgStatus(t, root), "install ok installed "+version.Version; got != want {
		t.Fatalf("dpkg-query after dpkg -i: %q, want %q", got, want)
	}
	if got := root.MustRun(t, e2e.RunOpts{}, "nvidia-ctk", "--version"); !strings.Contains(got, version.Version) {
		t.Fatalf("the installed nvidia-ctk --version: %q", got)
	}
	// The admin of a host whose driver is not at / (the fixture here, a
	// driver container elsewhere) points the toolkit at it: config.toml
	// for the runtime and hook, the refresh service's environment file
	// for the spec.
	root.MustRun(t, e2e.RunOpts{}, "nvidia-ctk", "config", "--in-place",
		"--set", "nvidia-container-cli.root="+host.Root.Path,
		"--set", "nvidia-container-cli.load-kmods=false",
		"--set", "nvidia-container-cli.debug="+host.CLILog,
		"--set", "nvidia-container-runtime.debug="+host.RuntimeLog)
	writeInRoot(t, root, pkgRefreshEnv, "NVIDIA_CTK_DRIVER_ROOT="+host.Root.Path+"\n")

	// What nvidia-cdi-refresh.service runs (ExecStart, with its
	// environment; its ExecStartPre, create-device-nodes
	// --load-kernel-modules, would act on this machine's /dev and kernel,
	// which have no NVIDIA driver, and is best effort anyway).
	argv, env := unitCommand(t, readInRoot(t, root, pkgRefreshUnit), func(p string) (string, bool) {
		res := root.Run(t, e2e.RunOpts{Quiet: true}, "cat", p)
		return res.Stdout, res.OK()
	})
	root.MustRun(t, e2e.RunOpts{Env: env}, argv...)
	root.MustRun(t, e2e.RunOpts{}, "nvidia-ctk", "cdi", "validate")
	if spec := readInRoot(t, root, "/var/run/cdi/nvidia.yaml"); !strings.Contains(spec, "/usr/bin/nvidia-cdi-hook") {
		t.Errorf("the refreshed spec does not name the packaged hook /usr/bin/nvidia-cdi-hook:\n%s", spec)
	}

	// As an admin configures the engines.
	root.MustRun(t, e2e.RunOpts{}, "nvidia-ctk", "runtime", "configure", "--runtime=docker", "--cdi.enabled")
	daemonJSON := readInRoot(t, root, pkgDaemonJSON)
	var daemon struct {
		Runtimes map[string]struct{ Path string }
		Features map[string]bool
	}
	if err := json.Unmarshal([]byte(daemonJSON), &daemon); err != nil || daemon.Runtimes["nvidia"].Path != "nvidia-container-runtime" || !daemon.Features["cdi"] {
		t.Fatalf("runtime configure --runtime=docker wrote %s (%v), want the nvidia runtime and features.cdi", daemonJSON, err)
	}
	image := e2e.FullImageName("nctk-e2e:pkg")
	ctrdCfg := pkgContainerdConfig(t, root, e2e.TempDir(t, "ctrdpkg"), image)
	root.MustRun(t, e2e.RunOpts{}, "nvidia-ctk", "runtime", "configure", "--runtime=containerd", "--config", ctrdCfg)
	ctrdMain := string(readFile(t, ctrdCfg))
	dropIn := readInRoot(t, root, pkgContainerdDI)

	t.Run("docker", func(t *testing.T) {
		d := e2e.StartDockerd(t, e2e.DockerdOptions{Root: root, ConfigFile: pkgDaemonJSON})
		d.ImportImage(rootfs, "nctk-e2e:pkg")
		_, mustRun := dockerProbe(d, "nctk-e2e:pkg", libDir)
		for _, tc := range []struct {
			name string
			args []string
			gpus []int
			cdi  bool
		}{
			{"cdi/gpu=1", []string{"--device", "nvidia.com/gpu=1"}, []int{1}, true},
			{"gpus=device=2", []string{"--gpus", `"device=2"`}, []int{2}, false},
			{"runtime=nvidia/devices=0,3", []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=0,3"}, []int{0, 3}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				checkGPU(t, mustRun(t, tc.args...), want{host: host, GPUs: tc.gpus, LibDir: libDir, Display: tc.cdi})
			})
		}
	})
	t.Run("containerd-cri", func(t *testing.T) {
		n := pkgCRINode(t, root, host, ctrdCfg, rootfs)
		for _, s := range []string{"nvidia:{Type:io.containerd.runc.v2", "BinaryName:" + pkgRuntime} {
			if !strings.Contains(n.criLine, s) {
				t.Errorf("containerd's CRI plugin configuration lacks %q:\n%s", s, n.criLine)
			}
		}
		cfg := n.probe("pkg-envvar")
		cfg.Envs = criEnv("NVIDIA_VISIBLE_DEVICES", strings.Join(n.uuids(t, 1, 2), ","))
		checkGPU(t, n.run(t, "nvidia", cfg), want{host: host, GPUs: []int{1, 2}, LibDir: libDir})
	})

	// Remove, then purge: the engines' configs stay as runtime configure
	// wrote them, and both engines start on them again and run containers.
	for _, step := range []struct{ apt, status string }{
		{"remove", "deinstall ok config-files " + version.Version},
		{"purge", ""},
	} {
		if t.Failed() {
			return
		}
		t.Run(step.apt, func(t *testing.T) {
			root.MustRun(t, e2e.RunOpts{Env: []string{"DEBIAN_FRONTEND=noninteractive"}}, "apt-get", step.apt, "-y", "nctk")
			if got := pkgStatus(t, root); got != step.status {
				t.Errorf("dpkg-query after apt-get %s: %q, want %q", step.apt, got, step.status)
			}
			gone := []string{pkgRuntime, "/usr/bin/nctk", "/var/run/cdi/nvidia.yaml"}
			if step.apt == "purge" {
				gone = append(gone, "/etc/nvidia-container-runtime")
			}
			for _, p := range gone {
				if res := root.Run(t, e2e.RunOpts{Quiet: true}, "test", "!", "-e", p); !res.OK() {
					t.Errorf("%s is still there after apt-get %s", p, step.apt)
				}
			}
			if got := readInRoot(t, root, pkgDaemonJSON); got != daemonJSON {
				t.Errorf("apt-get %s changed %s:\n%s\nwas:\n%s", step.apt, pkgDaemonJSON, got, daemonJSON)
			}
			if got := readInRoot(t, root, pkgContainerdDI); got != dropIn {
				t.Errorf("apt-get %s changed %s:\n%s\nwas:\n%s", step.apt, pkgContainerdDI, got, dropIn)
			}
			if got := string(readFile(t, ctrdCfg)); got != ctrdMain {
				t.Errorf("apt-get %s changed containerd's config:\n%s\nwas:\n%s", step.apt, got, ctrdMain)
			}

			d := e2e.StartDockerd(t, e2e.DockerdOptions{Root: root, ConfigFile: pkgDaemonJSON})
			d.ImportImage(rootfs, "nctk-e2e:pkg")
			_, mustRun := dockerProbe(d, "nctk-e2e:pkg", libDir)
			checkNoGPU(t, mustRun(t))

			// The same configuration on a containerd of its own: the
			// first one's directories moved to a new one.
			dir := e2e.TempDir(t, "ctrdpkg")
			moved := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(moved, []byte(strings.ReplaceAll(ctrdMain, filepath.Dir(ctrdCfg), dir)), 0o644); err != nil {
				t.Fatal(err)
			}
			n := pkgCRINode(t, root, host, moved, rootfs)
			checkNoGPU(t, n.run(t, "", n.probe("pkg-"+step.apt)))
		})
	}
}

// pkgCRI is a criNode started on a given containerd config, with the CRI
// plugin's logged configuration.
type pkgCRI struct {
	*criNode
	criLine string
}

// pkgCRINode starts containerd in root on the config file cfg (which must
// parse and whose directory holds its root, state and socket), waits for
// its CRI plugin and imports the test image through it.
func pkgCRINode(t *testing.T, root *e2e.EngineRoot, host *gpuHost, cfg, rootfs string) pkgCRI {
	t.Helper()
	var doc map[string]any
	if err := toml.Unmarshal(readFile(t, cfg), &doc); err != nil {
		t.Fatalf("containerd config %s does not parse: %v", cfg, err)
	}
	n := &criNode{root: root, host: host, libDir: e2e.LayoutDebian.LibDir(), image: e2e.FullImageName("nctk-e2e:pkg")}
	n.c = e2e.StartContainerdWith(t, e2e.ContainerdOptions{Root: root, ConfigFile: cfg})
	line := engWaitLog(t, n.c.LogFile, "Start cri plugin with config")
	engWaitLog(t, n.c.LogFile, "Start streaming server")
	n.cri = e2e.DialCRI(t, n.c)
	if got := n.cri.ImportImage(rootfs, "nctk-e2e:pkg", "sleep", "3600"); got != n.image {
		t.Fatalf("imported %s, want %s", got, n.image)
	}
	return pkgCRI{criNode: n, criLine: line}
}
