package containercli

import (
	"github.com/nctk/nctk/internal/cli/containercli/nvc"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/selector"
)

// migIMEXOptions are the MIG and IMEX options list and configure share;
// verb says what the command does with the IMEX channels.
func migIMEXOptions(verb string) []nvc.Option {
	return []nvc.Option{
		{Long: "compat32", Doc: "Enable 32bits compatibility"},
		{Long: "mig-config", Arg: nvc.RequiredArg, ArgName: "ID", Doc: "Enable configuration of MIG devices"},
		{Long: "mig-monitor", Arg: nvc.RequiredArg, ArgName: "ID", Doc: "Enable monitoring of MIG devices"},
		{Long: "imex-channel", Arg: nvc.RequiredArg, ArgName: "CHANNEL", Doc: "IMEX channel ID(s) to " + verb},
	}
}

// componentOptions are the options list and configure share to leave out
// driver components.
func componentOptions() []nvc.Option {
	return []nvc.Option{
		{Long: "no-persistenced", Doc: "Don't include the NVIDIA persistence daemon socket"},
		{Long: "no-fabricmanager", Doc: "Don't include the NVIDIA fabricmanager socket"},
		{Long: "no-gsp-firmware", Doc: "Don't include GSP firmware"},
	}
}

// sharedFlags are the settings list and configure read from the options
// they share (migIMEXOptions but compat32, componentOptions).
type sharedFlags struct {
	migConfig, migMonitor bool
	imex                  []int
	noPersistenced        bool
	noFabricManager       bool
	noGSPFirmware         bool
}

// set applies p when it is one of the shared options; ok is false for
// any other option. Values are checked by the request package's
// validators, those of the OCI spec's variables: a --mig-config or
// --mig-monitor value other than all is a mig-config or mig-monitor
// *phase.Error, a bad IMEX channel an input *phase.Error.
func (f *sharedFlags) set(p nvc.Parsed) (ok bool, err error) {
	switch name := p.Name(); name {
	case "mig-config":
		if err := request.MIGDevices(p.Value); err != nil {
			return true, &phase.Error{Phase: phase.MIGConfig, Err: err}
		}
		f.migConfig = true
	case "mig-monitor":
		if err := request.MIGDevices(p.Value); err != nil {
			return true, &phase.Error{Phase: phase.MIGMonitor, Err: err}
		}
		f.migMonitor = true
	case "imex-channel":
		ids, err := request.IMEXChannels(selector.Split(p.Value))
		if err != nil {
			return true, &phase.Error{Phase: phase.Input, Err: err}
		}
		f.imex = append(f.imex, ids...)
	case "no-persistenced":
		f.noPersistenced = true
	case "no-fabricmanager":
		f.noFabricManager = true
	case "no-gsp-firmware":
		f.noGSPFirmware = true
	default:
		return false, nil
	}
	return true, nil
}

// request copies the shared settings into r.
func (f *sharedFlags) request(r *request.Request) {
	r.MIGConfig, r.MIGMonitor = f.migConfig, f.migMonitor
	r.IMEXChannels = f.imex
	r.NoPersistenced, r.NoFabricManager, r.NoGSPFirmware = f.noPersistenced, f.noFabricManager, f.noGSPFirmware
}
