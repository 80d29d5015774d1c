package containercli

import (
	"strings"

	"github.com/nctk/nctk/internal/cli/containercli/nvc"
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

// phaseError is a command failure with NVIDIA's phase word.
type phaseError struct {
	phase string
	err   error
}

func (e *phaseError) Error() string { return e.phase + ": " + e.err.Error() }
func (e *phaseError) Unwrap() error { return e.err }

// sharedFlags are the settings list and configure read from the options
// they share (migIMEXOptions but compat32, componentOptions).
type sharedFlags struct {
	migConfig, migMonitor bool
	imex                  []uint32
	noPersistenced        bool
	noFabricManager       bool
	noGSPFirmware         bool
}

// set applies p when it is one of the shared options; ok is false for
// any other option. A bad --mig-config/--mig-monitor value is a
// *phaseError; a bad IMEX channel is a plain error (an input error).
func (f *sharedFlags) set(p nvc.Parsed) (ok bool, err error) {
	switch name := p.Name(); name {
	case "mig-config", "mig-monitor":
		if !strings.EqualFold(p.Value, "all") {
			return true, &phaseError{name, errOnlyAll}
		}
		if name == "mig-config" {
			f.migConfig = true
		} else {
			f.migMonitor = true
		}
	case "imex-channel":
		ids, err := parseIMEXChannels(p.Value)
		if err != nil {
			return true, err
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
