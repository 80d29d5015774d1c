package cdispec

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/planner"
)

// Mode is what a spec describes (nvidia-ctk cdi generate --mode).
type Mode string

// The modes Generate renders. The feature modes are the discover.Feature
// names (gds, mofed, gdrcopy, nvswitch).
const (
	// ModeNVML is the GPUs and MIG devices, one device each, and "all"
	// (NVIDIA's nvml mode; nctk discovers from /proc, /sys and /dev).
	ModeNVML Mode = "nvml"
	// ModeManagement is one device "all" holding every device node of the
	// driver (GPUs, nvidia-caps, IMEX channels), for the GPU Operator's own
	// pods; its default vendor is management.nvidia.com.
	ModeManagement Mode = "management"
	// ModeIMEX is the IMEX channels, one device per channel named by its
	// number; its default class is imex-channel.
	ModeIMEX Mode = "imex"
)

// Defaults of the modes other than nvml.
const (
	ManagementVendor = "management.nvidia.com"
	IMEXClass        = "imex-channel"
)

// UnsupportedModeError reports a mode NVIDIA has that nctk does not
// implement (wsl, csv).
type UnsupportedModeError struct{ Mode string }

func (e *UnsupportedModeError) Error() string {
	return fmt.Sprintf("mode %q is not supported yet (nctk supports auto, nvml, management, imex, %s)",
		e.Mode, strings.Join(featureNames(), ", "))
}

func featureNames() []string {
	var out []string
	for _, f := range discover.Features() {
		out = append(out, string(f))
	}
	return out
}

// ParseMode reads a --mode value: auto (nvml), nvml, management, imex or a
// feature name. wsl and csv give an *UnsupportedModeError.
func ParseMode(s string) (Mode, error) {
	m := strings.ToLower(strings.TrimSpace(s))
	switch m {
	case "", "auto", string(ModeNVML):
		return ModeNVML, nil
	case string(ModeManagement), string(ModeIMEX):
		return Mode(m), nil
	case "wsl", "csv":
		return "", &UnsupportedModeError{Mode: m}
	}
	if slices.Contains(featureNames(), m) {
		return Mode(m), nil
	}
	return "", fmt.Errorf("unknown mode %q: want auto, nvml, management, imex, %s (wsl and csv are not supported yet)",
		s, strings.Join(featureNames(), ", "))
}

// feature returns the feature m names, if any.
func (m Mode) feature() (discover.Feature, bool) {
	f := discover.Feature(m)
	return f, slices.Contains(discover.Features(), f)
}

// kind returns the spec's vendor and class: o's, else the mode's defaults
// (as NVIDIA's spec library picks them).
func (m Mode) kind(o Options) (string, string, error) {
	vendor, class := o.Vendor, o.Class
	if vendor == "" {
		vendor = DefaultVendor
		if m == ModeManagement {
			vendor = ManagementVendor
		}
	}
	if class == "" {
		class = DefaultClass
		if m == ModeIMEX {
			class = IMEXClass
		} else if f, ok := m.feature(); ok {
			class = string(f)
		}
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return "", "", fmt.Errorf("vendor %q: %w", vendor, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return "", "", fmt.Errorf("class %q: %w", class, err)
	}
	return vendor, class, nil
}

// generateMode discovers the driver (with the feature m names, if any)
// and renders the spec of a mode other than nvml.
func generateMode(_ context.Context, job planner.Job, o Options) (*cdi.Spec, error) {
	opts := job.Driver
	opts.Logger = job.Logger
	if f, ok := o.Mode.feature(); ok {
		opts.Features = []discover.Feature{f}
	}
	d, err := discover.Discover(opts)
	if err != nil {
		return nil, fmt.Errorf("generate CDI spec: %w", err)
	}
	switch o.Mode {
	case ModeManagement:
		return RenderManagement(d, o)
	case ModeIMEX:
		return RenderIMEX(d, job.Request.Devices, o)
	}
	if f, ok := o.Mode.feature(); ok {
		return RenderFeature(d, f, o)
	}
	return nil, fmt.Errorf("generate CDI spec: unknown mode %q", o.Mode)
}

// RenderManagement builds the management spec: the driver's files and hooks
// as spec-level edits, as in Render, and one device "all" with every device
// node discovery found (every GPU's node, every /dev/nvidia-caps node,
// every IMEX channel), whatever the GPUs' MIG mode. Its hooks leave out
// disable-device-node-modification: management pods (the GPU Operator's)
// may create device nodes.
func RenderManagement(d *discover.Driver, o Options) (*cdi.Spec, error) {
	if d == nil {
		return nil, errors.New("render CDI spec: no driver discovery result")
	}
	vendor, class, err := ModeManagement.kind(o)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}
	hc, err := hookConfig(o)
	if err != nil {
		return nil, err
	}
	base := baseOptions(o)
	// NVIDIA's management spec: the driver's files and every NVIDIA node,
	// none of the graphics files or DRM nodes.
	base.NoGraphics = true
	common, err := plan.Build(d, base)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}
	full := base
	for _, g := range d.GPUs {
		if g.Node.Path != "" {
			full.GPUs = append(full.GPUs, g)
		}
	}
	full.IMEXChannels = imexNumbers(d)
	p, err := plan.Build(d, full)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}
	all := deviceEdits(p, common)
	for _, n := range d.CapsNodes {
		if !slices.ContainsFunc(all.DeviceNodes, func(x *cdi.DeviceNode) bool { return x.Path == n.Path }) {
			all.DeviceNodes = append(all.DeviceNodes, deviceNode(plan.Device{Path: n.Path, HostPath: n.HostPath,
				Major: n.Major, Minor: n.Minor, FileMode: n.Mode & 0o777, GID: n.GID}))
		}
	}
	if len(all.DeviceNodes) == 0 {
		return nil, errors.New("render CDI spec: management mode: no GPU, nvidia-caps or IMEX channel node found")
	}
	if h := chmodHook(all.DeviceNodes, hc, o); h != nil {
		all.Hooks = append(all.Hooks, h)
	}
	noProc := *common
	noProc.Proc = nil
	hc.InProcessLdcache = !o.SeparateHooks
	spec := &cdi.Spec{Kind: vendor + "/" + class, ContainerEdits: commonEdits(&noProc, hc, !o.SeparateHooks, o.DisabledHooks),
		Devices: []cdi.Device{{Name: AllDevice, ContainerEdits: all}}}
	return withVersion(spec)
}

// RenderFeature builds the spec of a feature-gated device family: one
// device "all" with the feature's nodes and files (discovered with
// discover.Options.Features naming f), no spec-level edits, kind
// nvidia.com/<feature> by default. It fails when discovery found no node.
func RenderFeature(d *discover.Driver, f discover.Feature, o Options) (*cdi.Spec, error) {
	if d == nil {
		return nil, errors.New("render CDI spec: no driver discovery result")
	}
	vendor, class, err := Mode(f).kind(o)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}
	if len(d.FeatureDevicesFor(f).Nodes) == 0 {
		return nil, fmt.Errorf("render CDI spec: mode %s: no %s device node found", f, f)
	}
	base := baseOptions(o)
	common, err := plan.Build(d, base)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}
	fo := base
	fo.Features = []discover.Feature{f}
	p, err := plan.Build(d, fo)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}
	spec := &cdi.Spec{Kind: vendor + "/" + class, Devices: []cdi.Device{{Name: AllDevice, ContainerEdits: deviceEdits(p, common)}}}
	return withVersion(spec)
}

// RenderIMEX builds the IMEX channel spec: one device per channel, named
// by its number, then "all" (unless o.NoAllDevice), no spec-level edits,
// kind nvidia.com/imex-channel by default. ids selects channels by number
// or channelN; nil or "all" means every channel discovery found. A channel
// asked for that has no node is an error.
func RenderIMEX(d *discover.Driver, ids []string, o Options) (*cdi.Spec, error) {
	if d == nil {
		return nil, errors.New("render CDI spec: no driver discovery result")
	}
	vendor, class, err := ModeIMEX.kind(o)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}
	var chans []int
	if len(ids) == 0 || slices.Contains(ids, AllDevice) {
		chans = imexNumbers(d)
	} else {
		for _, id := range ids {
			n, err := strconv.ParseUint(strings.TrimPrefix(id, "channel"), 10, 20)
			if err != nil {
				return nil, fmt.Errorf("render CDI spec: IMEX channel %q: want a number below 2^20", id)
			}
			if !slices.Contains(chans, int(n)) {
				chans = append(chans, int(n))
			}
		}
	}
	if len(chans) == 0 {
		return nil, errors.New("render CDI spec: mode imex: no IMEX channel node found under /dev/nvidia-caps-imex-channels")
	}
	base := baseOptions(o)
	common, err := plan.Build(d, base)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: %w", err)
	}
	spec := &cdi.Spec{Kind: vendor + "/" + class}
	var all cdi.ContainerEdits
	for _, n := range chans {
		co := base
		co.IMEXChannels = []int{n}
		p, err := plan.Build(d, co)
		if err != nil {
			return nil, fmt.Errorf("render CDI spec: %w", err)
		}
		e := deviceEdits(p, common)
		spec.Devices = append(spec.Devices, cdi.Device{Name: strconv.Itoa(n), ContainerEdits: e})
		mergeEdits(&all, e)
	}
	if !o.NoAllDevice {
		spec.Devices = append(spec.Devices, cdi.Device{Name: AllDevice, ContainerEdits: all})
	}
	return withVersion(spec)
}

// imexNumbers returns the numbers of the IMEX channels discovery found.
func imexNumbers(d *discover.Driver) []int {
	var out []int
	for _, n := range d.IMEXChannels {
		if v, err := strconv.Atoi(strings.TrimPrefix(path.Base(n.Path), "channel")); err == nil {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// withVersion sets the spec's cdiVersion to the lowest its content needs.
func withVersion(spec *cdi.Spec) (*cdi.Spec, error) {
	v, err := cdi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("render CDI spec: minimum cdiVersion: %w", err)
	}
	spec.Version = v
	return spec, nil
}
