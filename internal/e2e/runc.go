package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// MakeBundle writes an OCI bundle for rootfs into a fresh directory and
// returns the bundle directory. Its config.json is `runc spec
// --rootless=false` adjusted for tests: no terminal, process.args = args
// (default /bin/sh), root.path = the absolute rootfs, writable root,
// hostname nctk-e2e, PATH only in the environment, and a cgroupsPath unique
// to the bundle. The namespaces (pid, network, ipc, uts, mount) stay as runc
// makes them: the container gets an empty network namespace. Change the
// spec further with EditSpec.
func MakeBundle(t testing.TB, rootfs string, args ...string) string {
	t.Helper()
	runc := RequireTool(t, "runc")
	abs, err := filepath.Abs(rootfs)
	if err != nil {
		t.Fatalf("e2e: bundle: %v", err)
	}
	dir := TempDir(t, "bundle")
	if r := runCmd(t.Context(), os.Environ(), RunOpts{}, runc, "spec", "--rootless=false", "--bundle", dir); !r.OK() {
		t.Fatalf("e2e: runc spec failed:\n%s", r)
	}
	if len(args) == 0 {
		args = []string{"/bin/sh"}
	}
	err = editSpec(dir, func(s *specs.Spec) {
		s.Process.Terminal = false
		s.Process.Args = slices.Clone(args)
		s.Process.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		s.Root = &specs.Root{Path: abs, Readonly: false}
		s.Hostname = "nctk-e2e"
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		s.Linux.CgroupsPath = "/" + uniqueName(dir)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// ReadSpec reads <bundle>/config.json.
func ReadSpec(bundle string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("e2e: reading bundle spec: %w", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("e2e: parsing %s/config.json: %w", bundle, err)
	}
	return &s, nil
}

// WriteSpec writes s as <bundle>/config.json.
func WriteSpec(bundle string, s *specs.Spec) error {
	data, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return fmt.Errorf("e2e: encoding bundle spec: %w", err)
	}
	return writeFile(filepath.Join(bundle, "config.json"), data, 0o644)
}

func editSpec(bundle string, edit func(*specs.Spec)) error {
	s, err := ReadSpec(bundle)
	if err != nil {
		return err
	}
	edit(s)
	return WriteSpec(bundle, s)
}

// EditSpec applies edit to <bundle>/config.json, failing the test on error.
func EditSpec(t testing.TB, bundle string, edit func(*specs.Spec)) {
	t.Helper()
	if err := editSpec(bundle, edit); err != nil {
		t.Fatal(err)
	}
}

// Runc drives runc directly with a private --root (state directory).
type Runc struct {
	t testing.TB
	// Bin is the runtime binary: runc, or a wrapper such as
	// nvidia-container-runtime (it gets the same arguments).
	Bin string
	// Root is the --root state directory; Dir holds it and output files.
	Root, Dir string
	// Env is added to the test's environment for every command.
	Env []string

	cgroups []string
}

// NewRunc returns a runc driver with a fresh state root. At cleanup every
// container left in that root is deleted with --force and its cgroup
// removed. It skips the test if root or runc is missing.
func NewRunc(t testing.TB) *Runc {
	t.Helper()
	RequireRoot(t)
	bin := RequireTool(t, "runc")
	return NewRuntime(t, bin)
}

// NewRuntime is NewRunc for another runc-compatible binary (a runtime
// wrapper under test), given by path.
func NewRuntime(t testing.TB, bin string) *Runc {
	t.Helper()
	RequireRoot(t)
	dir := TempDir(t, "runc")
	r := &Runc{t: t, Bin: bin, Root: filepath.Join(dir, "state"), Dir: dir, Env: []string{"PATH=" + SystemPath}}
	t.Cleanup(r.cleanup)
	return r
}

// Runc runs `<Bin> --root <Root> args...` and returns the result.
func (r *Runc) Runc(args ...string) Result {
	r.t.Helper()
	return r.RuncOpts(RunOpts{}, args...)
}

// RuncOpts is Runc with options.
func (r *Runc) RuncOpts(o RunOpts, args ...string) Result {
	r.t.Helper()
	argv := append([]string{r.Bin, "--root", r.Root}, args...)
	return runLogged(r.t, mergeEnv(os.Environ(), r.Env), o, argv...)
}

func (r *Runc) noteCgroup(bundle string) {
	if s, err := ReadSpec(bundle); err == nil && s.Linux != nil && s.Linux.CgroupsPath != "" {
		r.cgroups = append(r.cgroups, s.Linux.CgroupsPath)
	}
}

// Run runs the container in the foreground (`run --bundle`), returning its
// output and exit status.
func (r *Runc) Run(bundle, id string) Result {
	r.t.Helper()
	r.noteCgroup(bundle)
	return r.Runc("run", "--bundle", bundle, id)
}

// Create creates the container (`create --bundle`). The container's stdio
// (and runc's own messages) go to OutputPath(id), since a created
// container outlives the command.
func (r *Runc) Create(bundle, id string) Result {
	r.t.Helper()
	r.noteCgroup(bundle)
	return r.RuncOpts(RunOpts{OutputFile: r.OutputPath(id)}, "create", "--bundle", bundle, id)
}

// OutputPath is where a container made by Create writes its output.
func (r *Runc) OutputPath(id string) string { return filepath.Join(r.Dir, id+".out") }

// Output returns what a container made by Create has written so far.
func (r *Runc) Output(id string) string {
	data, _ := os.ReadFile(r.OutputPath(id))
	return string(data)
}

// Start starts a created container.
func (r *Runc) Start(id string) Result {
	r.t.Helper()
	return r.Runc("start", id)
}

// State returns the container's state as runc reports it.
func (r *Runc) State(id string) (specs.State, error) {
	r.t.Helper()
	var st specs.State
	res := r.RuncOpts(RunOpts{Quiet: true}, "state", id)
	if !res.OK() {
		return st, fmt.Errorf("e2e: runc state %s: %w: %s", id, res.Err, res.Stderr)
	}
	if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
		return st, fmt.Errorf("e2e: runc state %s: %w", id, err)
	}
	return st, nil
}

// WaitStopped polls until the container's status is "stopped".
func (r *Runc) WaitStopped(id string, timeout time.Duration) error {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := r.State(id)
		if err != nil {
			return err
		}
		if st.Status == specs.StateStopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("e2e: container %s still %s after %v", id, st.Status, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Delete deletes the container, killing it if needed.
func (r *Runc) Delete(id string) Result {
	r.t.Helper()
	return r.Runc("delete", "--force", id)
}

func (r *Runc) cleanup() {
	quiet := RunOpts{Quiet: true, Timeout: 30 * time.Second}
	if res := r.RuncOpts(quiet, "list", "-q"); res.OK() {
		for _, id := range strings.Fields(res.Stdout) {
			if res := r.RuncOpts(quiet, "delete", "--force", id); !res.OK() {
				r.t.Errorf("e2e: runc cleanup: %s", res)
			}
		}
	}
	for _, cg := range r.cgroups {
		if err := removeCgroup(cg); err != nil {
			r.t.Errorf("e2e: runc cleanup: %v", err)
		}
	}
}

// PrestartHooks returns the spec's prestart hooks: deprecated in the runtime
// spec, but what dockerd --gpus and ctr --gpus inject on the engines tested
// here.
func PrestartHooks(s *specs.Spec) []specs.Hook {
	if s == nil || s.Hooks == nil {
		return nil
	}
	//lint:ignore SA1019 the engines under test still emit prestart hooks.
	return s.Hooks.Prestart
}
