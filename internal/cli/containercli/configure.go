package containercli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strconv"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/cli/containercli/nvc"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/configure"
	"github.com/nctk/nctk/internal/echo"
	"github.com/nctk/nctk/internal/hostfacts"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/planner"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/requirements"
	"github.com/nctk/nctk/internal/selector"
)

// maxRequire is NVIDIA's limit on --require options.
const maxRequire = 32

func configureOptions() []nvc.Option {
	opts := []nvc.Option{
		{Long: "pid", Short: 'p', Arg: nvc.RequiredArg, ArgName: "PID", Doc: "Container PID"},
		{Long: "device", Short: 'd', Arg: nvc.RequiredArg, ArgName: "ID", Doc: "Device UUID(s) or index(es) to isolate"},
		{Long: "require", Short: 'r', Arg: nvc.RequiredArg, ArgName: "EXPR", Doc: "Check container requirements"},
		{Long: "ldconfig", Short: 'l', Arg: nvc.RequiredArg, ArgName: "PATH", Doc: "Path to the ldconfig binary (@ prefix for a host path)"},
		{Long: "compute", Short: 'c', Doc: "Enable compute capability"},
		{Long: "utility", Short: 'u', Doc: "Enable utility capability"},
		{Long: "video", Short: 'v', Doc: "Enable video capability"},
		{Long: "graphics", Short: 'g', Doc: "Enable graphics capability"},
		{Long: "display", Short: 'D', Doc: "Enable display capability"},
		{Long: "ngx", Short: 'n', Doc: "Enable ngx capability"},
	}
	opts = append(opts, migIMEXOptions("inject")...)
	opts = append(opts,
		nvc.Option{Long: "no-cgroups", Doc: "Don't use cgroup enforcement"},
		nvc.Option{Long: "no-devbind", Doc: "Don't bind mount devices"},
	)
	opts = append(opts, componentOptions()...)
	return append(opts,
		nvc.Option{Long: "cuda-compat-mode", Arg: nvc.RequiredArg, ArgName: "MODE", Doc: "CUDA forward compatibility: ldconfig, mount or disabled"},
		nvc.Option{Long: "no-cntlibs", Doc: "Don't use CUDA compatibility libraries (same as --cuda-compat-mode=disabled)"},
	)
}

// configureRequest is a parsed configure command line.
type configureRequest struct {
	pid    int // 0: standalone mode
	rootfs string
	// req is what to inject: the options' devices, capabilities, parsed
	// requirements, MIG, IMEX and component settings, validated as
	// request.FromSpec validates the same values in an OCI spec.
	req                  request.Request
	ldconfig             config.Ldconfig // as given (zero: the default)
	noCgroups, noDevBind bool
	compatMode           string
}

// parseConfigure interprets configure's options and operand. Errors are
// *phase.Error, or *nvc.UsageError for a missing or extra operand.
func parseConfigure(parsed []nvc.Parsed, operands []string) (*configureRequest, error) {
	r := &configureRequest{req: request.Request{Caps: caps.Set{}}}
	var shared sharedFlags
	compat := map[string]bool{}
	input := func(format string, args ...any) error {
		return &phase.Error{Phase: phase.Input, Err: fmt.Errorf(format, args...)}
	}
	for _, p := range parsed {
		if len(p.Value) > request.MaxValueLen { // refused before it is parsed
			return nil, input("--%s: %w: %d bytes, limit %d", p.Name(), request.ErrValueTooLong, len(p.Value), request.MaxValueLen)
		}
		if ok, err := shared.set(p); ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		switch name := p.Name(); name {
		case "pid":
			n, err := strconv.ParseUint(p.Value, 10, 31)
			if err != nil || n == 0 {
				return nil, input("invalid pid: %s", echo.Text(p.Value))
			}
			r.pid = int(n)
		case "device":
			r.req.Devices = append(r.req.Devices, selector.Split(p.Value)...)
		case "require":
			if len(r.req.Requirements) == maxRequire {
				return nil, input("too many requirements (at most %d --require)", maxRequire)
			}
			expr, err := requirements.Parse(p.Value)
			if err != nil {
				return nil, &phase.Error{Phase: phase.Requirement, Err: err}
			}
			r.req.Requirements = append(r.req.Requirements, expr)
		case "ldconfig":
			l, err := config.ParseLdconfig(p.Value)
			if err != nil {
				return nil, input("invalid ldconfig: %w", err)
			}
			r.ldconfig = l
		case "compute", "utility", "video", "graphics", "display", "ngx", "compat32":
			r.req.Caps[caps.Capability(name)] = true
		case "no-cgroups":
			r.noCgroups = true
		case "no-devbind":
			r.noDevBind = true
		case "cuda-compat-mode":
			switch p.Value {
			case configure.CompatLdconfig, configure.CompatMount, configure.CompatDisabled:
				compat[p.Value] = true
			default:
				return nil, input("invalid cuda-compat-mode: %s", echo.Text(p.Value))
			}
		case "no-cntlibs":
			compat[configure.CompatDisabled] = true
		}
	}
	// NVIDIA: one mode at a time, disabled wins; mount when absent.
	switch {
	case compat[configure.CompatDisabled]:
		r.compatMode = configure.CompatDisabled
	case len(compat) > 1:
		return nil, input("only one cuda-compat-mode can be specified at a time")
	case compat[configure.CompatLdconfig]:
		r.compatMode = configure.CompatLdconfig
	default:
		r.compatMode = configure.CompatMount
	}
	if len(operands) != 1 {
		if len(operands) == 0 {
			return nil, &nvc.UsageError{Msg: "missing ROOTFS argument"}
		}
		return nil, &nvc.UsageError{Msg: "unexpected argument: " + operands[1]}
	}
	r.rootfs = operands[0]
	if !path.IsAbs(r.rootfs) || path.Clean(r.rootfs) == "/" {
		return nil, input("invalid rootfs directory")
	}
	r.rootfs = path.Clean(r.rootfs)
	shared.request(&r.req)
	return r, nil
}

// configureSteps are the two halves of configure: computing the plan and
// applying it. Tests replace them.
type configureSteps struct {
	plan  func(ctx context.Context, j planner.Job) (*planner.Result, error)
	apply func(ctx context.Context, p *plan.Plan, c configure.Container, o configure.Options) error
}

// Configure runs `nvidia-container-cli [GLOBAL…] configure [OPTION…] ROOTFS`:
// it computes the injection plan for the requested devices and capabilities
// (discovery, device selection, requirements) and applies it to the
// container whose init process is --pid (configure.Apply). It matches
// containercli.Commands.Configure.
func Configure(e *app.Env, g *nvc.Globals, args []string) int {
	return configureWith(e, g, args, configureSteps{plan: planner.Run, apply: configure.Apply})
}

func configureWith(e *app.Env, g *nvc.Globals, args []string, steps configureSteps) int {
	parsed, operands, code, done := parseCommand(e, "configure", configureOptions(), args)
	if done {
		return code
	}
	req, err := parseConfigure(parsed, operands)
	if err != nil {
		var pe *phase.Error
		if errors.As(err, &pe) {
			return nvc.Fail(e, string(pe.Phase), pe.Err)
		}
		return nvc.UsageFail(e, nvc.Prog+" configure", err)
	}
	log, closeLog, err := g.OpenLog()
	if err != nil {
		return nvc.Fail(e, "initialization", err)
	}
	defer closeLog()
	if err := runConfigure(context.Background(), e, g, req, log, steps); err != nil {
		var pe *phase.Error
		if !errors.As(err, &pe) {
			pe = &phase.Error{Phase: phase.Container, Err: err}
		}
		log.Error(string(pe.Phase)+" error", "error", pe.Err)
		return nvc.Fail(e, string(pe.Phase), pe.Err)
	}
	return 0
}

// runConfigure plans and applies req. Errors are *phase.Error.
func runConfigure(ctx context.Context, e *app.Env, g *nvc.Globals, req *configureRequest, log *slog.Logger, steps configureSteps) error {
	c := configure.Container{PID: req.pid, Rootfs: req.rootfs}
	if c.PID == 0 {
		// Standalone mode: the caller set up the namespaces and mounted
		// /proc inside the rootfs; we configure our parent's view.
		c.PID, c.ProcRoot = os.Getppid(), req.rootfs
	}
	target, err := containerTarget(c)
	if err != nil {
		return &phase.Error{Phase: phase.Container, Err: err}
	}
	log.Info("container", "pid", c.PID, "rootfs", c.Rootfs, "libdir", target.LibDir, "lib32dir", target.Lib32Dir, "bindir", target.BinDir)
	if g.LoadKmods {
		nvc.LoadKmods(g, log)
	}
	job := planner.Job{
		Request: req.req,
		Driver:  g.DiscoverOptions(e, log),
		Target:  target,
		Logger:  log,
	}
	res, err := steps.plan(ctx, job)
	if err != nil {
		return err
	}
	ldconfig := req.ldconfig
	if ldconfig.InContainer() {
		// NVIDIA would run the image's own binary as root on the host side
		// (CVE-2024-0136/0137); the host's ldconfig does the same job. The
		// hook passes a container path only when config.toml's
		// features.allow-ldconfig-from-container accepts it.
		log.Warn("ldconfig is a container path; using the host's ldconfig instead", "ldconfig", ldconfig.String())
		ldconfig = config.Ldconfig{}
	}
	opts := configure.Options{
		NoCgroups:      req.noCgroups,
		NoDevBind:      req.noDevBind,
		Ldconfig:       ldconfig,
		NoPivot:        g.NoPivot,
		CUDACompatMode: req.compatMode,
		Log:            log,
	}
	if res.Driver != nil {
		opts.DriverVersion = res.Driver.Version
	}
	// What the driver libraries' ELF headers say, kept by file identity
	// with nvidia-cdi-hook's (the same host files in every container): read
	// and written here, outside the container's mount namespace.
	var facts *hostfacts.LibFacts
	if pc := job.Driver.ProbeConfig; !pc.NoCache && pc.CacheDir != "" {
		cacheDir := hostfacts.DirIn(pc.CacheDir)
		facts = hostfacts.OpenLibFacts(cacheDir)
		opts.LibFacts = facts
		opts.LdconfigDirs = &ldconfigDirs{ctx: ctx, cacheDir: cacheDir}
	}
	if err := steps.apply(ctx, res.Plan, c, opts); err != nil {
		return err // a *phase.Error
	}
	if err := facts.Save(); err != nil {
		log.Debug("library facts not kept", "error", err)
	}
	return nil
}

// ldconfigDirs finds a host ldconfig's built-in directories, kept by the
// binary's identity in the CDI cache directory nvidia-cdi-hook shares
// (hostfacts.LdconfigSystemDirs).
type ldconfigDirs struct {
	ctx      context.Context
	cacheDir string
}

func (d *ldconfigDirs) SystemDirs(hostPath string) ([]string, error) {
	return hostfacts.LdconfigSystemDirs(d.ctx, d.cacheDir, hostPath)
}

// containerTarget detects the image's library layout through the
// container's own view of its rootfs (/proc/PID/root/ROOTFS), every lookup
// resolved inside that root.
func containerTarget(c configure.Container) (plan.Target, error) {
	p := c.Rootfs
	if c.ProcRoot == "" {
		p = path.Join("/proc", strconv.Itoa(c.PID), "root") + c.Rootfs
	}
	return planner.ImageTarget(p)
}
