package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// podmanUlimits are added to `podman run`/`create`: podman's default
// RLIMIT_NOFILE (1048576) is above the hard limit a test may run under
// (20000 on the development VM), and runc then fails with "error setting
// rlimit type 7: operation not permitted".
func podmanUlimits() []string {
	return []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
}

// PodmanOptions configures NewPodman.
type PodmanOptions struct {
	// Runtime is the OCI runtime (--runtime: a path, or a name podman
	// knows). Default: the host's runc.
	Runtime string
	// CDISpecDir, if set, is the only CDI spec directory podman sees.
	// Podman 4.3 reads specs from the fixed directories /etc/cdi and
	// /var/run/cdi only (no --cdi-spec-dir flag, no cdi_spec_dirs setting
	// before 5.x), so every podman command then runs in a private mount
	// namespace (util-linux unshare) where CDISpecDir is bind-mounted on
	// /var/run/cdi and an empty directory on /etc/cdi (when it exists). The
	// host's spec directories are untouched and hidden. Because container
	// mounts made in that namespace die with the command, use `run --rm`
	// (attached) in this mode, not detached containers.
	CDISpecDir string
	// HooksDirs are the OCI hooks directories (JSON hook files) podman
	// reads. Default: one empty private directory, so that hooks installed
	// on the host (/usr/share/containers/oci/hooks.d,
	// /etc/containers/oci/hooks.d) do not apply.
	HooksDirs []string
	// Path, if set, replaces SystemPath as podman's PATH (it runs conmon, the
	// runtime and hooks).
	Path string
	// ExtraPath directories are put in front of the PATH.
	ExtraPath []string
	// Env entries (KEY=VALUE) are added to podman's environment.
	Env []string
	// EngineConf and ContainersSection are TOML lines (key = value) added to
	// the [engine] and [containers] tables of the generated containers.conf.
	EngineConf, ContainersSection []string
	// ContainersConf is TOML appended to the generated containers.conf, for
	// other tables (TOML forbids repeating [engine] or [containers]).
	ContainersConf string
	// Root, if set, runs podman (and conmon and the runtime) in that engine
	// root: its binaries, not the host's. CDISpecDir is not supported there
	// (write specs to the root's /etc/cdi instead).
	Root *EngineRoot
}

// Podman runs the podman CLI with all its state (--root, --runroot,
// --tmpdir, volumes, networks config, locks, events, containers.conf,
// storage.conf) in a private directory of one test, the cgroupfs cgroup
// manager and the file events backend.
type Podman struct {
	t testing.TB
	// Bin is the podman binary.
	Bin string
	// Dir holds everything of this instance.
	Dir string
	// Name is unique to this instance; it names the cgroup parent of its
	// containers.
	Name string
	// Root and RunRoot are podman's --root and --runroot.
	Root, RunRoot string
	// ContainersConf and StorageConf are the generated config files.
	ContainersConf, StorageConf string
	// CDISpecDir is PodmanOptions.CDISpecDir.
	CDISpecDir string
	// Env is podman's environment (added to the test's).
	Env []string

	global  []string
	emptyMp string
}

// NewPodman prepares a private podman instance (there is no daemon) and
// registers its cleanup: all containers are removed, leftover processes
// (conmon) killed, mounts undone, and its directory and cgroups removed. It
// skips the test if root, podman, conmon or the runtime are missing (or
// unshare and mount, with CDISpecDir).
//
// Podman itself still touches a few machine-wide paths no flag moves:
// /var/lib/containers/cache/blob-info-cache-v1.boltdb (image copy cache)
// and the empty directory /run/containers/networks (netavark); with
// CDISpecDir the empty mount point /run/cdi is created if absent.
func NewPodman(t testing.TB, opts PodmanOptions) *Podman {
	t.Helper()
	RequireRoot(t)
	bin := opts.Root.RequireTool(t, "podman")
	opts.Root.RequireTool(t, "conmon")
	runtimePath := opts.Runtime
	if runtimePath == "" {
		runtimePath = opts.Root.RequireTool(t, "runc")
	}
	if opts.Root != nil && opts.CDISpecDir != "" {
		t.Fatal("e2e: podman: CDISpecDir is not supported with an engine root")
	}
	var unshare string
	if opts.CDISpecDir != "" {
		unshare = RequireTool(t, "unshare")
		RequireTool(t, "mount")
	}

	dir := TempDir(t, "podman")
	p := &Podman{
		t:              t,
		Bin:            bin,
		Dir:            dir,
		Name:           uniqueName(dir),
		Root:           filepath.Join(dir, "root"),
		RunRoot:        filepath.Join(dir, "runroot"),
		ContainersConf: filepath.Join(dir, "containers.conf"),
		StorageConf:    filepath.Join(dir, "storage.conf"),
		CDISpecDir:     opts.CDISpecDir,
	}
	t.Cleanup(func() {
		if err := removeCgroup(p.Name); err != nil {
			t.Errorf("e2e: podman cleanup: %v", err)
		}
	})
	hooks := opts.HooksDirs
	if hooks == nil {
		hooks = []string{filepath.Join(dir, "hooks.d")}
	}
	for _, d := range []string{filepath.Join(dir, "hooks.d"), filepath.Join(dir, "tmp"), filepath.Join(dir, "imgtmp"), filepath.Join(dir, "networks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("e2e: podman: %v", err)
		}
	}
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
%s
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %s
lock_type = "file"
hooks_dir = [%s]
%s`, tomlLines(opts.ContainersSection), tomlString(filepath.Join(dir, "events.log")), tomlStrings(hooks), tomlLines(opts.EngineConf))
	if opts.ContainersConf != "" {
		conf += "\n" + opts.ContainersConf + "\n"
	}
	if err := writeFile(p.ContainersConf, []byte(conf), 0o644); err != nil {
		t.Fatalf("e2e: podman: %v", err)
	}
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %s\nrunroot = %s\n", tomlString(p.Root), tomlString(p.RunRoot))
	if err := writeFile(p.StorageConf, []byte(storage), 0o644); err != nil {
		t.Fatalf("e2e: podman: %v", err)
	}

	path := opts.Path
	if path == "" {
		path = SystemPath
	}
	if len(opts.ExtraPath) > 0 {
		path = strings.Join(opts.ExtraPath, ":") + ":" + path
	}
	p.Env = mergeEnv([]string{
		"PATH=" + path,
		"CONTAINERS_CONF=" + p.ContainersConf,
		"CONTAINERS_STORAGE_CONF=" + p.StorageConf,
		"TMPDIR=" + filepath.Join(dir, "imgtmp"),
	}, opts.Env)

	p.global = []string{
		"--root", p.Root,
		"--runroot", p.RunRoot,
		"--tmpdir", filepath.Join(dir, "tmp"),
		"--volumepath", filepath.Join(dir, "volumes"),
		"--network-config-dir", filepath.Join(dir, "networks"),
		"--cgroup-manager=cgroupfs",
		"--events-backend=file",
		"--runtime", runtimePath,
	}
	for _, h := range hooks {
		p.global = append(p.global, "--hooks-dir", h)
	}
	if opts.CDISpecDir != "" {
		if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
			t.Fatalf("e2e: podman: creating the CDI mount point: %v", err)
		}
		p.emptyMp = filepath.Join(dir, "empty")
		if err := os.MkdirAll(p.emptyMp, 0o755); err != nil {
			t.Fatalf("e2e: podman: %v", err)
		}
		p.global = append([]string{unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", cdiWrapper, "sh", p.emptyMp, opts.CDISpecDir, bin}, p.global...)
	} else {
		p.global = opts.Root.Command(append([]string{bin}, p.global...)...)
	}
	t.Cleanup(p.cleanup)
	return p
}

// cdiWrapper runs podman with $2 as /var/run/cdi and $1 (empty) over
// /etc/cdi, in the private mount namespace unshare made.
const cdiWrapper = `set -e
empty=$1 cdi=$2
shift 2
if [ -d /etc/cdi ]; then mount --bind "$empty" /etc/cdi; fi
mount --bind "$cdi" /var/run/cdi
exec "$@"`

func tomlString(s string) string { return strconv.Quote(s) }

func tomlLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tomlString(s)
	}
	return strings.Join(q, ", ")
}

// withRunDefaults adds the flags every `run`/`create` needs here unless the
// caller gave them: the ulimits, --cgroup-parent=/<Name> (not with
// --cgroups) and
// --network=none (this harness sets up no container networking).
func (p *Podman) withRunDefaults(args []string) []string {
	i := 0
	if len(args) > 1 && args[0] == "container" {
		i = 1
	}
	if len(args) <= i || (args[i] != "run" && args[i] != "create") {
		return args
	}
	has := func(flag string) bool {
		return slices.ContainsFunc(args[i+1:], func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
	}
	var extra []string
	if !has("--ulimit") {
		extra = append(extra, podmanUlimits()...)
	}
	if !has("--cgroup-parent") && !has("--cgroups") {
		extra = append(extra, "--cgroup-parent=/"+p.Name)
	}
	if !has("--network") && !has("--net") {
		extra = append(extra, "--network=none")
	}
	out := slices.Clone(args[:i+1])
	out = append(out, extra...)
	return append(out, args[i+1:]...)
}

// Podman runs podman with this instance's global flags (and, for run and
// create, its default flags) and returns the result (it does not fail the
// test).
func (p *Podman) Podman(args ...string) Result {
	p.t.Helper()
	return p.PodmanOpts(RunOpts{}, args...)
}

// PodmanOpts is Podman with options.
func (p *Podman) PodmanOpts(o RunOpts, args ...string) Result {
	p.t.Helper()
	argv := append(slices.Clone(p.global), p.withRunDefaults(args)...)
	return runLogged(p.t, mergeEnv(os.Environ(), p.Env), o, argv...)
}

// MustPodman runs podman, fails the test unless it exits 0, and returns
// stdout.
func (p *Podman) MustPodman(args ...string) string {
	p.t.Helper()
	r := p.Podman(args...)
	if !r.OK() {
		p.t.Fatalf("podman command failed")
	}
	return r.Stdout
}

// ImportImage loads rootfs as image name (an OCI archive from
// WriteOCIArchive, through `podman load`) and returns its full reference.
func (p *Podman) ImportImage(rootfs, name string) string {
	p.t.Helper()
	ref := loadOCIArchive(p.t, p.Dir, rootfs, name, p.LoadImage)
	if r := p.Podman("image", "exists", ref); !r.OK() {
		p.t.Fatalf("e2e: image %s missing after podman load", ref)
	}
	return ref
}

// LoadImage runs `podman load -i archive` (OCI or docker archive).
func (p *Podman) LoadImage(archive string) {
	p.t.Helper()
	if r := p.Podman("load", "-q", "-i", archive); !r.OK() {
		p.t.Fatalf("e2e: podman load %s failed", archive)
	}
}

func (p *Podman) cleanup() {
	quiet := RunOpts{Quiet: true, Timeout: 60 * time.Second}
	if r := p.PodmanOpts(quiet, "rm", "--all", "--force", "--time", "0"); !r.OK() {
		p.t.Logf("e2e: podman cleanup: %s", r)
	}
	if pids := killProcsMentioning(p.Dir); len(pids) > 0 {
		p.t.Logf("e2e: podman cleanup: killed leftover processes %v", pids)
	}
}
