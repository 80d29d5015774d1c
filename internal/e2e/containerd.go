package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ContainerdOptions configures StartContainerdWith.
type ContainerdOptions struct {
	// Path, if set, replaces SystemPath as containerd's PATH (the shim and
	// the runtime binary are resolved in it).
	Path string
	// ExtraPath directories are put in front of the PATH.
	ExtraPath []string
	// Env entries (KEY=VALUE) are added to containerd's environment.
	Env []string
	// ExtraConfig is TOML appended to the generated config file (version 2),
	// e.g. runtime sections.
	ExtraConfig string
	// ConfigFile, if set, is a configuration the test wrote, which
	// containerd runs on as it is (ExtraConfig is then unused). Its
	// directory (from TempDir) becomes Dir and must be where the file puts
	// root, state and the grpc address: <dir>/root, <dir>/state and
	// <dir>/containerd.sock.
	ConfigFile string
	// StartTimeout defaults to 30s.
	StartTimeout time.Duration
	// Root, if set, runs containerd (with its shims and runc) and ctr in
	// that engine root: its binaries, not the host's.
	Root *EngineRoot
}

// Containerd is a private containerd for one test, driven with ctr.
type Containerd struct {
	t testing.TB
	// Dir holds everything of this daemon.
	Dir string
	// Namespace is the containerd namespace Ctr uses; it is unique, and
	// also names the cgroup parent of the containers ctr runs
	// (/<namespace>/<id>).
	Namespace string
	// Socket is the gRPC address.
	Socket string
	// Root, State, ConfigFile and LogFile are containerd's.
	Root, State, ConfigFile, LogFile string
	// CtrBin is the ctr client.
	CtrBin string
	// Env is containerd's environment.
	Env []string

	d    *daemon
	root *EngineRoot
}

// StartContainerd starts a containerd with default options; see
// StartContainerdWith.
func StartContainerd(t testing.TB) *Containerd {
	t.Helper()
	return StartContainerdWith(t, ContainerdOptions{})
}

// StartContainerdWith starts a containerd with its own root, state, socket
// and config file (CRI plugin disabled, unless opts.ConfigFile) and waits until ctr reaches it. At
// cleanup it kills and removes all tasks and containers, stops the daemon,
// kills any shim left over, and removes its directory and cgroups. It skips
// the test if root, containerd, ctr, the runc shim or runc are missing.
func StartContainerdWith(t testing.TB, opts ContainerdOptions) *Containerd {
	t.Helper()
	RequireRoot(t)
	bin := opts.Root.RequireTool(t, "containerd")
	ctr := opts.Root.RequireTool(t, "ctr")
	opts.Root.RequireTool(t, "containerd-shim-runc-v2")
	opts.Root.RequireTool(t, "runc")

	dir := filepath.Dir(opts.ConfigFile)
	if opts.ConfigFile == "" {
		dir = TempDir(t, "containerd")
	}
	c := &Containerd{
		t:          t,
		Dir:        dir,
		Namespace:  uniqueName(dir),
		Socket:     filepath.Join(dir, "containerd.sock"),
		Root:       filepath.Join(dir, "root"),
		State:      filepath.Join(dir, "state"),
		ConfigFile: filepath.Join(dir, "config.toml"),
		LogFile:    filepath.Join(dir, "containerd.log"),
		CtrBin:     ctr,
		root:       opts.Root,
	}
	t.Cleanup(func() {
		if err := removeCgroup(c.Namespace); err != nil {
			t.Errorf("e2e: containerd cleanup: %v", err)
		}
	})
	if opts.ConfigFile != "" {
		c.ConfigFile = opts.ConfigFile
	} else if err := writeFile(c.ConfigFile, []byte(containerdConfig(c, opts.ExtraConfig)), 0o644); err != nil {
		t.Fatalf("e2e: containerd config: %v", err)
	}
	path := opts.Path
	if path == "" {
		path = SystemPath
	}
	if len(opts.ExtraPath) > 0 {
		path = strings.Join(opts.ExtraPath, ":") + ":" + path
	}
	// TMPDIR keeps containerd's stack dumps (SIGUSR1) and temp files inside.
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatalf("e2e: containerd: %v", err)
	}
	c.Env = mergeEnv([]string{"PATH=" + path, "HOME=" + dir, "TMPDIR=" + tmp, "LANG=C.UTF-8"}, opts.Env)

	proc, err := startDaemon("containerd", c.LogFile, c.Env, opts.Root.Command(bin, "--config", c.ConfigFile)...)
	if err != nil {
		t.Fatal(err)
	}
	c.d = proc
	t.Cleanup(c.stop)
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	start := time.Now()
	err = proc.waitReady(timeout, func() error {
		conn, err := net.DialTimeout("unix", c.Socket, time.Second)
		if err != nil {
			return err
		}
		conn.Close()
		r := c.CtrOpts(RunOpts{Quiet: true, Timeout: 10 * time.Second}, "version")
		return r.Err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: containerd ready in %v at %s (namespace %s)", time.Since(start).Round(time.Millisecond), c.Socket, c.Namespace)
	return c
}

// containerdConfig is the configuration StartContainerdWith writes for c:
// everything inside c.Dir, the CRI plugin disabled, extra appended.
func containerdConfig(c *Containerd, extra string) string {
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""
  level = "debug"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, c.Root, c.State, c.Socket, c.Socket+".ttrpc", filepath.Join(c.Dir, "opt"))
	if extra != "" {
		config += "\n" + extra + "\n"
	}
	return config
}

// Ctr runs `ctr --address <socket> --namespace <ns> args...` with the test's
// environment and returns the result (it does not fail the test).
func (c *Containerd) Ctr(args ...string) Result {
	c.t.Helper()
	return c.CtrOpts(RunOpts{}, args...)
}

// CtrOpts is Ctr with options. ctr resolves `containerd` and, for `run
// --gpus`, `nvidia-container-cli` in its own PATH and gives the hook its
// environment, so tests set PATH here (RunOpts.Env) to choose them.
func (c *Containerd) CtrOpts(o RunOpts, args ...string) Result {
	c.t.Helper()
	return runLogged(c.t, os.Environ(), o, c.CtrArgv(args...)...)
}

// CtrArgv is the command line Ctr runs: `ctr --address <socket> --namespace
// <ns> args...` (through nsenter with ContainerdOptions.Root), for a caller
// that runs it itself (from a parallel subtest that logs to its own t).
func (c *Containerd) CtrArgv(args ...string) []string {
	return c.root.Command(append([]string{c.CtrBin, "--address", c.Socket, "--namespace", c.Namespace}, args...)...)
}

// MustCtr runs ctr, fails the test unless it exits 0, and returns stdout.
func (c *Containerd) MustCtr(args ...string) string {
	c.t.Helper()
	r := c.Ctr(args...)
	if !r.OK() {
		c.t.Fatalf("ctr command failed (daemon log: %s)", c.LogFile)
	}
	return r.Stdout
}

// ImportImage imports rootfs as an image (an OCI image-layout archive made
// by WriteOCIArchive, through `ctr image import`) and returns the full
// reference ctr knows it by (FullImageName(name)), which `ctr run` needs.
func (c *Containerd) ImportImage(rootfs, name string) string {
	c.t.Helper()
	ref := loadOCIArchive(c.t, c.Dir, rootfs, name, c.ImportArchive)
	out := c.MustCtr("image", "ls", "-q")
	if !slices.Contains(strings.Fields(out), ref) {
		c.t.Fatalf("e2e: image %s not in ctr image ls after import:\n%s", ref, out)
	}
	return ref
}

// ImportArchive runs `ctr image import` on an image archive (OCI layout or
// `docker save` form), failing the test on error.
func (c *Containerd) ImportArchive(archive string) {
	c.t.Helper()
	if r := c.Ctr("image", "import", archive); !r.OK() {
		c.t.Fatalf("e2e: ctr image import %s failed", archive)
	}
}

// Log returns containerd's log so far.
func (c *Containerd) Log() string {
	data, err := os.ReadFile(c.LogFile)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.LogFile, err)
	}
	return string(data)
}

// stop removes tasks and containers and stops the daemon; a cleanup.
func (c *Containerd) stop() {
	c.d.shutdown(c.t, c.Dir, 15*time.Second, func() {
		quiet := RunOpts{Quiet: true, Timeout: 30 * time.Second}
		if r := c.CtrOpts(quiet, "task", "ls", "-q"); r.OK() {
			for _, id := range strings.Fields(r.Stdout) {
				c.CtrOpts(quiet, "task", "kill", "-a", "-s", "SIGKILL", id)
				c.CtrOpts(quiet, "task", "rm", "-f", id)
			}
		}
		if r := c.CtrOpts(quiet, "container", "ls", "-q"); r.OK() {
			for _, id := range strings.Fields(r.Stdout) {
				if r := c.CtrOpts(quiet, "container", "rm", id); !r.OK() {
					c.t.Logf("e2e: containerd cleanup: %s", r)
				}
			}
		}
	})
}
