package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// DockerRuntime is one entry of dockerd's "runtimes" configuration.
type DockerRuntime struct {
	// Path of the OCI runtime binary (absolute, or looked up in dockerd's
	// PATH).
	Path string `json:"path"`
	// Args are extra arguments; dockerd then wraps the runtime in a script
	// under <data-root>/runtimes.
	Args []string `json:"runtimeArgs,omitempty"`
}

// DockerdOptions configures StartDockerd.
type DockerdOptions struct {
	// Runtimes are registered in the daemon's config file, e.g.
	// {"nvidia": {Path: "/abs/nvidia-container-runtime"}}.
	Runtimes map[string]DockerRuntime
	// DefaultRuntime, if set, becomes "default-runtime".
	DefaultRuntime string
	// Path, if set, replaces SystemPath as dockerd's PATH. dockerd resolves
	// containerd, runc, docker-init and (for --gpus, once at startup)
	// nvidia-container-runtime-hook in it, and hands its whole environment
	// to that hook.
	Path string
	// ExtraPath directories are put in front of the PATH.
	ExtraPath []string
	// Env entries (KEY=VALUE) are added to dockerd's environment.
	Env []string
	// Config keys are merged into the daemon config file (after runtimes).
	Config map[string]any
	// ConfigFile, if set, is a daemon config file the test (or a tool it
	// runs, e.g. `nvidia-ctk runtime configure`) wrote, which dockerd runs
	// on as it is (Runtimes, DefaultRuntime and Config are then unused):
	// with Root, its path in that root, e.g. /etc/docker/daemon.json.
	ConfigFile string
	// Args are extra dockerd flags.
	Args []string
	// StartTimeout defaults to 60s.
	StartTimeout time.Duration
	// Root, if set, runs dockerd (and the containerd, runc and docker-init
	// it starts) and the docker client in that engine root: its binaries,
	// not the host's.
	Root *EngineRoot
}

// Dockerd is a private dockerd (with the containerd it manages) that lives
// for one test. Its containers run with --cgroup-parent=Name.
type Dockerd struct {
	t testing.TB
	// Dir holds everything of this daemon.
	Dir string
	// Name is unique to this daemon; it names the cgroup parent.
	Name string
	// Socket is the API socket; Host is DOCKER_HOST for it.
	Socket, Host string
	// DataRoot, ExecRoot, ConfigFile and LogFile are dockerd's.
	DataRoot, ExecRoot, ConfigFile, LogFile string
	// CLI is the docker client used by Docker().
	CLI string
	// Env is dockerd's environment.
	Env []string

	d      *daemon
	cliEnv []string
	root   *EngineRoot
}

// dockerCLI prefers the distribution's client (it matches the daemon's API
// version) over any other docker on PATH.
func dockerCLI() (string, error) {
	for _, p := range []string{"/usr/bin/docker"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return LookTool("docker")
}

// StartDockerd starts a dockerd listening on a private unix socket with its
// own --data-root, --exec-root, --pidfile and config file, no iptables and no
// bridge network (run containers with --network=none or --network=host), and
// waits until it answers /_ping. At cleanup it removes all containers, stops
// the daemon (SIGTERM, then SIGKILL), kills anything left that was started
// from its directory, and unmounts and removes that directory and its
// cgroups. It skips the test if root, dockerd or docker are missing.
func StartDockerd(t testing.TB, opts DockerdOptions) *Dockerd {
	t.Helper()
	RequireRoot(t)
	dockerdBin := opts.Root.RequireTool(t, "dockerd")
	cli, err := dockerCLI()
	if opts.Root != nil {
		cli, err = opts.Root.LookTool("docker")
	}
	if err != nil {
		skipOrFail(t, "e2e: docker client is not installed: %v", err)
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		opts.Root.RequireTool(t, tool)
	}

	dir := TempDir(t, "dockerd")
	d := &Dockerd{
		t:          t,
		Dir:        dir,
		Name:       uniqueName(dir),
		Socket:     filepath.Join(dir, "docker.sock"),
		DataRoot:   filepath.Join(dir, "data"),
		ExecRoot:   filepath.Join(dir, "exec"),
		ConfigFile: filepath.Join(dir, "daemon.json"),
		LogFile:    filepath.Join(dir, "dockerd.log"),
		CLI:        cli,
		root:       opts.Root,
	}
	d.Host = "unix://" + d.Socket
	t.Cleanup(func() {
		if err := removeCgroup(d.Name); err != nil {
			t.Errorf("e2e: dockerd cleanup: %v", err)
		}
	})

	if opts.ConfigFile != "" {
		d.ConfigFile = opts.ConfigFile
	} else if err := writeDaemonConfig(d.ConfigFile, opts); err != nil {
		t.Fatalf("e2e: dockerd config: %v", err)
	}

	path := opts.Path
	if path == "" {
		path = SystemPath
	}
	if len(opts.ExtraPath) > 0 {
		path = strings.Join(opts.ExtraPath, ":") + ":" + path
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	d.Env = mergeEnv([]string{"PATH=" + path, "HOME=" + home, "LANG=C.UTF-8"}, opts.Env)
	d.cliEnv = mergeEnv(os.Environ(), []string{
		"DOCKER_HOST=" + d.Host,
		"DOCKER_CONFIG=" + filepath.Join(dir, "cli"),
		"DOCKER_CONTEXT=",
		"DOCKER_TLS_VERIFY=",
		"DOCKER_CERT_PATH=",
	})

	args := []string{
		dockerdBin,
		"--config-file", d.ConfigFile,
		"--data-root", d.DataRoot,
		"--exec-root", d.ExecRoot,
		"--pidfile", filepath.Join(dir, "dockerd.pid"),
		"--host", d.Host,
		"--iptables=false",
		"--ip-masq=false",
		"--bridge=none",
		"--cgroup-parent", "/" + d.Name,
		"--log-level", "debug",
	}
	args = append(args, opts.Args...)
	proc, err := startDaemon("dockerd", d.LogFile, d.Env, opts.Root.Command(args...)...)
	if err != nil {
		t.Fatal(err)
	}
	d.d = proc
	t.Cleanup(d.stop)

	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	start := time.Now()
	if err := proc.waitReady(timeout, d.ping); err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: dockerd ready in %v at %s (PATH=%s)", time.Since(start).Round(time.Millisecond), d.Host, path)
	return d
}

// writeDaemonConfig writes the daemon config file of opts' Runtimes,
// DefaultRuntime and Config to file.
func writeDaemonConfig(file string, opts DockerdOptions) error {
	config := map[string]any{}
	if len(opts.Runtimes) > 0 {
		config["runtimes"] = opts.Runtimes
	}
	if opts.DefaultRuntime != "" {
		config["default-runtime"] = opts.DefaultRuntime
	}
	maps.Copy(config, opts.Config)
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(file, data, 0o644)
}

// ping asks the API for /_ping.
func (d *Dockerd) ping() error {
	client := http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var dialer net.Dialer
				return dialer.DialContext(ctx, "unix", d.Socket)
			},
		},
	}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://docker/_ping")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/_ping: %s %q", resp.Status, body)
	}
	return nil
}

// Docker runs the docker client against this daemon and returns the result
// (it does not fail the test).
func (d *Dockerd) Docker(args ...string) Result {
	d.t.Helper()
	return d.DockerOpts(RunOpts{}, args...)
}

// DockerOpts is Docker with options (stdin, extra environment, timeout).
func (d *Dockerd) DockerOpts(o RunOpts, args ...string) Result {
	d.t.Helper()
	return runLogged(d.t, d.cliEnv, o, d.root.Command(append([]string{d.CLI}, args...)...)...)
}

// MustDocker runs the docker client, fails the test unless it exits 0, and
// returns its stdout.
func (d *Dockerd) MustDocker(args ...string) string {
	d.t.Helper()
	r := d.Docker(args...)
	if !r.OK() {
		d.t.Fatalf("docker command failed (daemon log: %s)", d.LogFile)
	}
	return r.Stdout
}

// ImportImage imports a root filesystem as image name, like
// `tar -C rootfs -c . | docker import - name`. It fails the test on error.
func (d *Dockerd) ImportImage(rootfs, name string) {
	d.t.Helper()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(WriteRootfsTar(pw, rootfs)) }()
	r := d.DockerOpts(RunOpts{Stdin: pr}, "import", "--change", "CMD [\"/bin/sh\"]", "-", name)
	pr.CloseWithError(io.ErrClosedPipe)
	if !r.OK() {
		d.t.Fatalf("e2e: docker import of %s failed", rootfs)
	}
}

// SaveImage writes image name in `docker save` form to dst (ctr image import
// and podman load read that too).
func (d *Dockerd) SaveImage(name, dst string) {
	d.t.Helper()
	if r := d.Docker("save", "-o", dst, name); !r.OK() {
		d.t.Fatalf("e2e: docker save %s failed", name)
	}
}

// Log returns dockerd's log so far.
func (d *Dockerd) Log() string {
	data, err := os.ReadFile(d.LogFile)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", d.LogFile, err)
	}
	return string(data)
}

// stop removes the containers and stops the daemon; registered as cleanup.
func (d *Dockerd) stop() {
	d.d.shutdown(d.t, d.Dir, 20*time.Second, func() {
		quiet := RunOpts{Quiet: true, Timeout: 30 * time.Second}
		if r := d.DockerOpts(quiet, "ps", "-aq"); r.OK() {
			if ids := strings.Fields(r.Stdout); len(ids) > 0 {
				if r := d.DockerOpts(quiet, append([]string{"rm", "-f"}, ids...)...); !r.OK() {
					d.t.Logf("e2e: dockerd cleanup: %s", r)
				}
			}
		}
	})
}
