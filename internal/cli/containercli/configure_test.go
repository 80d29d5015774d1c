package containercli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/cli/containercli/nvc"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/configure"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/hostfacts"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/planner"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/requirements"
	"github.com/nctk/nctk/internal/runcache"
	"github.com/nctk/nctk/internal/selector"
)

// unsatisfied is the error of checking req against a driver supporting
// CUDA 12.2.
func unsatisfied(t *testing.T, req string) error {
	t.Helper()
	e, err := requirements.Parse(req)
	if err != nil {
		t.Fatal(err)
	}
	err = requirements.Check([]requirements.Expr{e}, requirements.Facts{CUDA: "12.2", Driver: "535.261.03"})
	if err == nil {
		t.Fatalf("%s holds with CUDA 12.2", req)
	}
	return err
}

// configureRun records what configure asked the planner and the applier.
type configureRun struct {
	job       planner.Job
	container configure.Container
	opts      configure.Options
	applied   bool
	planErr   error
	applyErr  error
	result    *planner.Result
	stdout    string
	stderr    string
	code      int
}

func runConfigureCmd(t *testing.T, r *configureRun, argv ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &app.Env{Args: append([]string{"nvidia-container-cli"}, argv...), Stdout: &out, Stderr: &errb, Environ: []string{"PATH=/usr/bin"}}
	g, _, rest, err := nvc.ParseGlobals(e, e.Args)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) == 0 || rest[0] != "configure" {
		t.Fatalf("test argv lacks configure: %v", argv)
	}
	steps := configureSteps{
		plan: func(_ context.Context, j planner.Job) (*planner.Result, error) {
			r.job = j
			if r.planErr != nil {
				return nil, r.planErr
			}
			if r.result != nil {
				return r.result, nil
			}
			return &planner.Result{Plan: &plan.Plan{}, Driver: &discover.Driver{Version: "535.261.03"}}, nil
		},
		apply: func(_ context.Context, _ *plan.Plan, c configure.Container, o configure.Options) error {
			r.applied, r.container, r.opts = true, c, o
			return r.applyErr
		},
	}
	r.code = configureWith(e, g, rest[1:], steps)
	r.stdout, r.stderr = out.String(), errb.String()
}

func TestConfigureCommandLine(t *testing.T) {
	rootfs := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(rootfs+"/etc", 0o755))
	must(os.WriteFile(rootfs+"/etc/debian_version", nil, 0o644))
	pid := strconv.Itoa(os.Getpid())

	var r configureRun
	runConfigureCmd(t, &r, "--root=/run/nvidia/driver", "--no-pivot", "configure",
		"--device=0,GPU-abc", "-d", "2", "--compute", "-u", "--compat32", "--require=cuda>=12.0", "-r", "driver>=535",
		"--ldconfig=@/sbin/ldconfig", "--no-cgroups", "--imex-channel=1,3", "--no-persistenced", "--no-fabricmanager",
		"--no-gsp-firmware", "--cuda-compat-mode=ldconfig", "--pid="+pid, rootfs)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	jr := r.job.Request
	if !reflect.DeepEqual(jr.Devices, []string{"0", "GPU-abc", "2"}) {
		t.Errorf("devices = %v", jr.Devices)
	}
	if !reflect.DeepEqual(jr.Caps, caps.Set{caps.Compute: true, caps.Utility: true, caps.Compat32: true}) {
		t.Errorf("caps = %v", jr.Caps)
	}
	var reqs []string
	for _, e := range jr.Requirements {
		reqs = append(reqs, e.Source)
	}
	if !reflect.DeepEqual(reqs, []string{"cuda>=12.0", "driver>=535"}) || !reflect.DeepEqual(jr.IMEXChannels, []int{1, 3}) {
		t.Errorf("request = %+v", jr)
	}
	if !jr.NoPersistenced || !jr.NoFabricManager || !jr.NoGSPFirmware || r.job.Driver.Root != "/run/nvidia/driver" {
		t.Errorf("job = %+v", r.job)
	}
	if r.job.Target.LibDir != "/usr/lib/x86_64-linux-gnu" || r.job.Target.BinDir != "/usr/bin" {
		t.Errorf("target = %+v (detected through /proc/PID/root)", r.job.Target)
	}
	if r.container != (configure.Container{PID: os.Getpid(), Rootfs: rootfs}) {
		t.Errorf("container = %+v", r.container)
	}
	want := configure.Options{NoCgroups: true, Ldconfig: config.Ldconfig{Path: "/sbin/ldconfig", Host: true}, NoPivot: true, CUDACompatMode: "ldconfig", DriverVersion: "535.261.03"}
	got := r.opts
	got.Log = nil
	// The library facts: the run cache's (when there is one), read and
	// written by the CLI around Apply.
	if _, ok := got.LibFacts.(*hostfacts.LibFacts); !ok && runcache.DefaultDir(os.Getenv) != "" {
		t.Errorf("options.LibFacts = %#v, want the run cache's library facts", got.LibFacts)
	}
	got.LibFacts = nil
	// The ldconfig's own directories, kept in the same run cache.
	if _, ok := got.LdconfigDirs.(*ldconfigDirs); !ok && runcache.DefaultDir(os.Getenv) != "" {
		t.Errorf("options.LdconfigDirs = %#v, want the run cache's", got.LdconfigDirs)
	}
	got.LdconfigDirs = nil
	if got != want {
		t.Errorf("options = %+v, want %+v", got, want)
	}

	// Defaults: no device, compat mode mount, container ldconfig replaced
	// by the host's, no-devbind honoured.
	r = configureRun{}
	runConfigureCmd(t, &r, "configure", "--ldconfig=/sbin/ldconfig", "--no-devbind", "--pid", pid, rootfs+"/")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if r.job.Request.Devices != nil || r.opts.CUDACompatMode != "mount" || r.opts.Ldconfig != (config.Ldconfig{}) || !r.opts.NoDevBind || r.container.Rootfs != rootfs {
		t.Errorf("job %+v options %+v container %+v", r.job, r.opts, r.container)
	}
	r = configureRun{}
	runConfigureCmd(t, &r, "configure", "--cuda-compat-mode=ldconfig", "--no-cntlibs", "--pid", pid, rootfs)
	if r.opts.CUDACompatMode != "disabled" {
		t.Errorf("--no-cntlibs: compat mode %q", r.opts.CUDACompatMode)
	}
}

func TestConfigureErrors(t *testing.T) {
	rootfs := t.TempDir()
	pid := strconv.Itoa(os.Getpid())
	reqs := []string{"configure"}
	for range 33 {
		reqs = append(reqs, "--require=cuda>=1")
	}
	tests := []struct {
		name   string
		argv   []string
		setup  func(r *configureRun)
		code   int
		stderr string
	}{
		{"no rootfs", []string{"configure", "--pid", pid}, nil, 64, "missing ROOTFS argument"},
		{"two operands", []string{"configure", rootfs, "/x"}, nil, 64, "unexpected argument: /x"},
		{"root rootfs", []string{"configure", "--pid", pid, "/"}, nil, 1, "nvidia-container-cli: input error: invalid rootfs directory"},
		{"relative rootfs", []string{"configure", "--pid", pid, "rootfs"}, nil, 1, "input error: invalid rootfs directory"},
		{"bad pid", []string{"configure", "--pid=abc", rootfs}, nil, 1, "input error: invalid pid: abc"},
		{"unknown option", []string{"configure", "--bogus", rootfs}, nil, 64, "bogus"},
		{"mig-config not all", []string{"configure", "--mig-config=0", "--pid", pid, rootfs}, nil, 1, "mig-config error: only 'all' devices are currently supported"},
		{"bad imex", []string{"configure", "--imex-channel=x", "--pid", pid, rootfs}, nil, 1, "input error: invalid IMEX channel"},
		{"bad requirement", []string{"configure", "--require=cuda>>12", "--pid", pid, rootfs}, nil, 1,
			`nvidia-container-cli: requirement error: invalid expression "cuda>>12": "cuda>>12": unknown operator ">>"`},
		{"bad compat mode", []string{"configure", "--cuda-compat-mode=maybe", "--pid", pid, rootfs}, nil, 1, "invalid cuda-compat-mode: maybe"},
		{"relative ldconfig", []string{"configure", "--ldconfig=@sbin/ldconfig", "--pid", pid, rootfs}, nil, 1, `input error: invalid ldconfig: "@sbin/ldconfig" is not an absolute path`},
		{"two compat modes", []string{"configure", "--cuda-compat-mode=mount", "--cuda-compat-mode=ldconfig", "--pid", pid, rootfs}, nil, 1, "only one cuda-compat-mode"},
		{"too many requirements", append(reqs, "--pid", pid, rootfs), nil, 1, "too many requirements"},
		{"100 KB requirement", []string{"configure", "--require=" + strings.Repeat("cuda>=12.0 ", 10000), "--pid", pid, rootfs}, nil, 1,
			"nvidia-container-cli: input error: --require: value too long: 110000 bytes, limit 32768\n"},
		{"newline in a device", []string{"configure", "--device=0\nlevel=error", "--pid", pid, rootfs}, func(r *configureRun) {
			r.planErr = &phase.Error{Phase: phase.Device, Err: &selector.Error{Token: "0\nlevel=error"}}
		}, 1, "nvidia-container-cli: device error: 0\\nlevel=error: unknown device\n"},
		{"newline in the pid", []string{"configure", "--pid=1\nlevel=error", rootfs}, nil, 1, "input error: invalid pid: 1\\nlevel=error\n"},
		{"missing rootfs dir", []string{"configure", "--pid", pid, filepath.Join(rootfs, "missing")}, nil, 1, "container error: open container root"},
		{"requirement", []string{"configure", "--pid", pid, rootfs}, func(r *configureRun) {
			r.planErr = &phase.Error{Phase: phase.Requirement, Err: errors.New("unsatisfied condition: cuda>=13.1")}
		}, 1, "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.1\n"},
		{"unsatisfied requirement", []string{"configure", "--pid", pid, rootfs}, func(r *configureRun) {
			r.planErr = &phase.Error{Phase: phase.Requirement, Err: unsatisfied(t, "cuda>=13.1")}
		}, 1, "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.1, please update your driver"},
		{"no driver", []string{"configure", "--pid", pid, rootfs}, func(r *configureRun) {
			r.planErr = &phase.Error{Phase: phase.Initialization, Err: &discover.NoDriverError{Root: "/", Err: os.ErrNotExist}}
		}, 1, "nvidia-container-cli: initialization error: "},
		{"unknown device", []string{"configure", "--device=9", "--pid", pid, rootfs}, func(r *configureRun) {
			r.planErr = &phase.Error{Phase: phase.Device, Err: &selector.Error{Token: "9"}}
		}, 1, "nvidia-container-cli: device error: 9: unknown device\n"},
		{"mig-config with MIG selected", []string{"configure", "--mig-config=all", "--device=0:0", "--pid", pid, rootfs}, func(r *configureRun) {
			r.planErr = &phase.Error{Phase: phase.MIGConfig, Err: &plan.MIGSelectionError{Option: plan.GrantMIGConfig}}
		}, 1, "mig-config error: cannot enable mig-config with specific MIG devices selected"},
		{"apply fails", []string{"configure", "--pid", pid, rootfs}, func(r *configureRun) {
			r.applyErr = &phase.Error{Phase: phase.Ldcache, Err: errors.New("process /sbin/ldconfig failed")}
		}, 1, "nvidia-container-cli: ldcache error: process /sbin/ldconfig failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r configureRun
			if tt.setup != nil {
				tt.setup(&r)
			}
			runConfigureCmd(t, &r, tt.argv...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tt.code, tt.stderr)
			}
			if r.code == 1 && strings.Count(r.stderr, " error: ") != 1 {
				t.Errorf("stderr %q: want the phase named once", r.stderr)
			}
			if r.code == 1 && (strings.Count(r.stderr, "\n") != 1 || len(r.stderr) > 1024) {
				t.Errorf("stderr %.300q (%d bytes): want one short line", r.stderr, len(r.stderr))
			}
			if r.code != 0 && r.applied && r.applyErr == nil {
				t.Error("applied despite the error")
			}
		})
	}
}

func TestConfigureHelp(t *testing.T) {
	var r configureRun
	runConfigureCmd(t, &r, "configure", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "--no-cgroups") || !strings.Contains(r.stdout, "--cuda-compat-mode") {
		t.Errorf("help: exit %d\n%s", r.code, r.stdout)
	}
}

// TestRequestErrorsMatchRuntime: a value the runtime reads from the OCI
// spec and configure from its options is checked by the same code, so the
// same input fails in the same phase with the same message (the runtime's
// error adds the variable it came from).
func TestRequestErrorsMatchRuntime(t *testing.T) {
	tests := []struct {
		env, option string
		phase       phase.Phase
		msg         string
	}{
		{"NVIDIA_IMEX_CHANNELS=x", "--imex-channel=x", phase.Input, "invalid IMEX channel: x (want a decimal number from 0 to 1048575)"},
		{"NVIDIA_IMEX_CHANNELS=1,1048576", "--imex-channel=1,1048576", phase.Input, "invalid IMEX channel: 1048576 (want a decimal number from 0 to 1048575)"},
		{"NVIDIA_IMEX_CHANNELS=-1", "--imex-channel=-1", phase.Input, "invalid IMEX channel: -1 (want a decimal number from 0 to 1048575)"},
		{"NVIDIA_REQUIRE_CUDA=cuda>>12", "--require=cuda>>12", phase.Requirement, `invalid expression "cuda>>12": "cuda>>12": unknown operator ">>" (want = != < <= > >=)`},
		{"NVIDIA_REQUIRE_CUDA=brand>=tesla", "--require=brand>=tesla", phase.Requirement, `invalid expression "brand>=tesla": "brand>=tesla": brand takes only = and !=, not >=`},
		{"NVIDIA_MIG_CONFIG_DEVICES=0", "--mig-config=0", phase.MIGConfig, "only 'all' devices are currently supported"},
		{"NVIDIA_MIG_MONITOR_DEVICES=0,1", "--mig-monitor=0,1", phase.MIGMonitor, "only 'all' devices are currently supported"},
	}
	for _, tt := range tests {
		t.Run(tt.option, func(t *testing.T) {
			// Runtime path: the container's environment.
			spec := &specs.Spec{Process: &specs.Process{
				Env:          []string{"NVIDIA_VISIBLE_DEVICES=0", tt.env},
				Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}},
			}}
			_, rtErr := request.FromSpec(spec, nil)
			var rtPhase *phase.Error
			var rtReq *request.Error
			if !errors.As(rtErr, &rtPhase) || !errors.As(rtErr, &rtReq) {
				t.Fatalf("FromSpec = %v, want a *phase.Error wrapping a *request.Error", rtErr)
			}
			wantVar, _, _ := strings.Cut(tt.env, "=")
			if rtPhase.Phase != tt.phase || rtReq.Var != wantVar || rtReq.Err.Error() != tt.msg {
				t.Errorf("runtime: phase %s, %s: %q; want %s, %s: %q", rtPhase.Phase, rtReq.Var, rtReq.Err, tt.phase, wantVar, tt.msg)
			}
			// nvidia-container-cli configure: the same value as an option.
			parsed, operands, err := nvc.Parse(configureOptions(), []string{tt.option, "/rootfs"}, false)
			if err != nil {
				t.Fatal(err)
			}
			_, cliErr := parseConfigure(parsed, operands)
			var cliPhase *phase.Error
			if !errors.As(cliErr, &cliPhase) {
				t.Fatalf("parseConfigure = %v, want a *phase.Error", cliErr)
			}
			if cliPhase.Phase != tt.phase || cliPhase.Err.Error() != tt.msg {
				t.Errorf("configure: phase %s: %q; want %s: %q", cliPhase.Phase, cliPhase.Err, tt.phase, tt.msg)
			}
			// Both print the phase once, in NVIDIA's wording.
			want := string(tt.phase) + " error: "
			for _, err := range []error{rtErr, cliErr} {
				if !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), " error: ") != 1 {
					t.Errorf("%q: want one %q prefix", err, want)
				}
			}
		})
	}
}
