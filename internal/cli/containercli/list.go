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
	lines, phase, err := listLines(d, req, g.Root)
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

// listLines computes list's output in NVIDIA's fixed order: device nodes
// (driver-wide, GPUs, MIG capabilities), IMEX channels, MIG
// config/monitor, binaries, libraries (64-bit, then 32-bit), IPCs,
// firmware; one host path per line, duplicates dropped.
func listLines(d *discover.Driver, r *listRequest, root string) ([]string, string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	capSet := r.caps
	if capSet != nil && r.compat32 {
		capSet = mergeCaps(capSet, caps.Set{caps.Compat32: true})
	}

	// Device selection.
	var sel selector.Selection
	if len(r.devices) > 0 {
		if len(d.GPUs) == 0 && allOnly(r.devices) {
			// NVIDIA's CLI skips selection on a host without GPUs.
		} else {
			s, err := selector.Resolve(d, r.devices)
			if err != nil {
				var nog *selector.NoGPUError
				if errors.As(err, &nog) {
					nog.Source = "--device"
				}
				return nil, "device", err
			}
			sel = s
		}
		if sel.All && (r.migConfig || r.migMonitor) {
			// "all" includes every MIG device; NVIDIA refuses config/monitor
			// only with specific MIG devices.
		} else if len(sel.MIG) > 0 && r.migConfig {
			return nil, "mig-config", errors.New("cannot enable mig-config with specific MIG devices selected")
		} else if len(sel.MIG) > 0 && r.migMonitor {
			return nil, "mig-monitor", errors.New("cannot enable mig-monitor with specific MIG devices selected")
		}
		gpus := slices.Clone(sel.GPUs)
		slices.SortFunc(gpus, func(a, b discover.GPU) int { return a.Index - b.Index })
		if err := d.CheckDevices(gpus); err != nil {
			return nil, "device", err
		}
		nodes := d.ControlNodes
		if capSet != nil {
			nodes = d.ControlNodesFor(capSet)
		}
		for _, n := range nodes {
			add(n.HostPath)
		}
		for _, g := range gpus {
			add(g.Node.HostPath)
		}
		if !r.migConfig && !r.migMonitor {
			for _, m := range sel.MIG {
				add(join(d.Root, m.MIG.GIAccessProc))
				add(join(d.Root, m.MIG.CIAccessProc))
				add(m.MIG.GIAccess.HostPath)
				add(m.MIG.CIAccess.HostPath)
			}
		}
	}

	// IMEX channels.
	for _, id := range r.imex {
		name := fmt.Sprintf("channel%d", id)
		i := slices.IndexFunc(d.IMEXChannels, func(n discover.DeviceNode) bool { return path.Base(n.Path) == name })
		if i < 0 {
			return nil, "device", fmt.Errorf("missing device /dev/nvidia-caps-imex-channels/%s (IMEX channel %d)", name, id)
		}
		add(d.IMEXChannels[i].HostPath)
	}

	// MIG configuration and monitoring.
	for _, mc := range []struct {
		on   bool
		name string
		node discover.DeviceNode
	}{{r.migConfig, "config", d.MIGConfig}, {r.migMonitor, "monitor", d.MIGMonitor}} {
		if !mc.on {
			continue
		}
		add(join(d.Root, "/proc/driver/nvidia/capabilities/mig/"+mc.name))
		add(mc.node.HostPath)
		for _, g := range sel.GPUs {
			if !g.MIGCapable {
				continue
			}
			add(join(d.Root, g.MIGCapsDir))
			if len(g.MIGCapNodes) > 0 {
				add(path.Dir(g.MIGCapNodes[0].HostPath))
			}
			for _, n := range g.MIGCapNodes {
				add(n.HostPath)
			}
		}
	}

	if r.binaries {
		bins := d.Binaries
		if capSet != nil {
			bins = d.BinariesFor(capSet)
		}
		for _, f := range bins {
			add(f.HostPath)
		}
	}
	if r.libraries {
		var libs []discover.File
		if capSet != nil {
			libs = d.LibrariesFor(capSet)
		} else {
			for _, f := range d.Libraries {
				if !f.Compat32 || r.compat32 {
					libs = append(libs, f)
				}
			}
		}
		for _, f := range libs {
			add(f.HostPath)
		}
	}
	if r.ipcs {
		ipcs := d.IPCs
		if capSet != nil {
			ipcs = d.IPCsFor(capSet)
		}
		for _, f := range ipcs {
			if (r.noPersistenced && f.Name == "persistenced") || (r.noFabricManager && f.Name == "fabricmanager") {
				continue
			}
			add(f.HostPath)
		}
	}
	if r.firmwares {
		for _, f := range d.Firmware {
			add(join(d.Root, f.Path))
		}
	}
	return out, "", nil
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
