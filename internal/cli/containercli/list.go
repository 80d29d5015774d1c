package containercli

import (
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/cli/containercli/nvc"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/selector"
)

func listOptions() []nvc.Option {
	opts := []nvc.Option{
		{Long: "device", Short: 'd', Arg: nvc.RequiredArg, ArgName: "ID", Doc: "Device UUID(s) or index(es) to list"},
		{Long: "libraries", Short: 'l', Doc: "List driver libraries"},
		{Long: "binaries", Short: 'b', Doc: "List driver binaries"},
		{Long: "ipcs", Short: 'i', Doc: "List driver ipcs"},
		{Long: "firmwares", Short: 'f', Doc: "List driver firmwares"},
	}
	opts = append(opts, migIMEXOptions("list")...)
	opts = append(opts, componentOptions()...)
	return append(opts,
		// Capability filters (nctk's addition): restrict libraries,
		// binaries, IPCs and driver-wide device nodes to what a
		// container with these driver capabilities gets.
		nvc.Option{Long: "compute", Doc: "Only what the compute capability selects"},
		nvc.Option{Long: "utility", Doc: "Only what the utility capability selects"},
		nvc.Option{Long: "video", Doc: "Only what the video capability selects"},
		nvc.Option{Long: "graphics", Doc: "Only what the graphics capability selects"},
		nvc.Option{Long: "display", Doc: "Only what the display capability selects"},
		nvc.Option{Long: "ngx", Doc: "Only what the ngx capability selects"},
	)
}

// listRequest is a parsed list command line.
type listRequest struct {
	devices                              []string // --device values
	libraries, binaries, ipcs, firmwares bool
	compat32                             bool
	sharedFlags
	caps caps.Set // nil: no capability filter
}

// parseList interprets list's options. With no option other than
// --imex-channel and capability filters, list shows everything, as
// NVIDIA's does: --device=all --libraries --binaries --ipcs --firmwares
// --compat32.
func parseList(parsed []nvc.Parsed) (*listRequest, error) {
	r := &listRequest{}
	listing := false
	for _, p := range parsed {
		name := p.Name()
		switch name {
		case "compute", "utility", "video", "graphics", "display", "ngx":
			if r.caps == nil {
				r.caps = caps.Set{}
			}
			r.caps[caps.Capability(name)] = true
			continue
		case "imex-channel":
			// A filter, not a listing option.
		default:
			listing = true
		}
		if ok, err := r.set(p); ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		switch name {
		case "device":
			r.devices = append(r.devices, p.Value)
		case "libraries":
			r.libraries = true
		case "binaries":
			r.binaries = true
		case "ipcs":
			r.ipcs = true
		case "firmwares":
			r.firmwares = true
		case "compat32":
			r.compat32 = true
		}
	}
	if !listing {
		r.devices = []string{"all"}
		r.libraries, r.binaries, r.ipcs, r.firmwares, r.compat32 = true, true, true, true, true
	}
	if r.noGSPFirmware {
		r.firmwares = false
	}
	return r, nil
}

func runList(e *app.Env, g *nvc.Globals, args []string) int {
	parsed, operands, code, done := parseCommand(e, "list", listOptions(), args)
	if done {
		return code
	}
	if len(operands) > 0 {
		return nvc.UsageFail(e, nvc.Prog+" list", fmt.Errorf("unexpected argument: %s", operands[0]))
	}
	req, err := parseList(parsed)
	if err != nil {
		var pe *phase.Error
		if errors.As(err, &pe) {
			return nvc.Fail(e, string(pe.Phase), pe.Err)
		}
		return nvc.Fail(e, "input", err)
	}
	log, closeLog, err := g.OpenLog()
	if err != nil {
		return nvc.Fail(e, "initialization", err)
	}
	defer closeLog()
	d, phase, err := discoverDriver(e, g, log, false)
	if err != nil {
		return nvc.Fail(e, phase, err)
	}
	lines, phase, err := listLines(d, req)
	if err != nil {
		return nvc.Fail(e, phase, err)
	}
	writeLines(e.Stdout, lines)
	return 0
}

func writeLines(w io.Writer, lines []string) {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	io.WriteString(w, b.String())
}

// listLines computes list's output: it builds the plan a container with
// the same devices, capabilities and options gets (plan.Build, as
// configure, the runtime and cdi generate do) and prints its entries'
// host paths, one a line, duplicates dropped, in NVIDIA's order: with
// --device, the driver-wide nodes, the GPUs and the MIG devices (each
// one's /proc access files, then its nodes); IMEX channels; the MIG
// config and monitor capabilities with the selected GPUs' MIG capabilities
// (/proc entry, /dev/nvidia-caps, nodes); then, as asked, binaries,
// libraries (64-bit, then 32-bit; then, nctk only, the graphics files of
// a graphics or display container), IPCs and firmware. Without a
// capability filter the plan is built for every capability (32-bit
// libraries with --compat32).
func listLines(d *discover.Driver, r *listRequest) ([]string, string, error) {
	capSet := r.caps
	if capSet == nil {
		capSet = caps.Full()
		delete(capSet, caps.Compat32)
	}
	if r.compat32 {
		capSet = mergeCaps(capSet, caps.Set{caps.Compat32: true})
	}
	o := plan.Options{
		Caps:            capSet,
		MIGConfig:       r.migConfig,
		MIGMonitor:      r.migMonitor,
		NoPersistenced:  r.noPersistenced,
		NoFabricManager: r.noFabricManager,
		NoGSPFirmware:   r.noGSPFirmware,
	}
	for _, id := range r.imex {
		o.IMEXChannels = append(o.IMEXChannels, int(id))
	}
	// NVIDIA's CLI skips selection on a host without GPUs.
	if len(r.devices) > 0 && !(len(d.GPUs) == 0 && allOnly(r.devices)) {
		sel, err := selector.Resolve(d, r.devices)
		if err != nil {
			var nog *selector.NoGPUError
			if errors.As(err, &nog) {
				nog.Source = "--device"
			}
			return nil, "device", err
		}
		o = o.Select(sel)
	}
	p, err := plan.Build(d, o)
	if err != nil {
		var me *plan.MIGSelectionError
		if errors.As(err, &me) {
			return nil, me.Option, err
		}
		return nil, "device", err
	}
	return renderList(p, r, d.Root), "", nil
}

// renderList prints p's entries as listLines describes. root is the driver
// root, where /proc/driver/nvidia is when p has no /proc view.
func renderList(p *plan.Plan, r *listRequest, root string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	procDir := join(root, "/proc/driver/nvidia")
	if p.Proc != nil {
		procDir = p.Proc.HostDir
	}
	devices := func(class plan.DeviceClass) {
		for _, d := range p.Devices {
			if d.Class == class {
				add(d.HostPath)
			}
		}
	}
	// groups prints the nodes of a class by grant: the /proc entries of
	// the group, then (for a GPU's MIG capabilities) their directory, then
	// the nodes.
	groups := func(class plan.DeviceClass) {
		for i := 0; i < len(p.Devices); {
			if p.Devices[i].Class != class {
				i++
				continue
			}
			j := i + 1
			for j < len(p.Devices) && p.Devices[j].Class == class && p.Devices[j].Grant == p.Devices[i].Grant {
				j++
			}
			group := p.Devices[i:j]
			for _, d := range group {
				if d.Proc != "" {
					add(procDir + "/" + d.Proc)
				}
			}
			if g := group[0].Grant; class == plan.DeviceMIGAdmin && g != plan.GrantMIGConfig && g != plan.GrantMIGMonitor {
				add(path.Dir(group[0].HostPath))
			}
			for _, d := range group {
				add(d.HostPath)
			}
			i = j
		}
	}
	mounts := func(class plan.MountClass) {
		for _, m := range p.Mounts {
			if m.Class == class {
				add(m.Source)
			}
		}
	}

	if len(r.devices) > 0 {
		devices(plan.DeviceDriver)
		devices(plan.DeviceGPU)
		groups(plan.DeviceMIG)
	}
	devices(plan.DeviceIMEX)
	groups(plan.DeviceMIGAdmin)
	if p.Proc != nil && (r.migConfig || r.migMonitor) {
		// A MIG-capable GPU whose MIG capabilities have no node.
		for _, rel := range p.Proc.Expose {
			add(procDir + "/" + rel)
		}
	}
	if r.binaries {
		mounts(plan.MountBinary)
	}
	if r.libraries {
		mounts(plan.MountLibrary)
		// nctk only: the graphics files (Vulkan, EGL, X.Org, OpenCL) a
		// graphics or display container gets besides the libraries.
		mounts(plan.MountGraphics)
	}
	if r.ipcs {
		mounts(plan.MountIPC)
	}
	if r.firmwares {
		mounts(plan.MountFirmware)
	}
	return out
}

func mergeCaps(a, b caps.Set) caps.Set {
	out := caps.Set{}
	for c, ok := range a {
		out[c] = ok
	}
	for c, ok := range b {
		out[c] = out[c] || ok
	}
	return out
}

func allOnly(devices []string) bool {
	toks := selector.Split(strings.Join(devices, ","))
	return len(toks) > 0 && !slices.ContainsFunc(toks, func(t string) bool { return !strings.EqualFold(t, "all") })
}

func join(root, p string) string {
	if p == "" {
		return ""
	}
	if root == "/" || root == "" {
		return p
	}
	return root + p
}
