package containercli

import (
	"fmt"
	"io"
	"strings"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/containercli/nvc"
	"github.com/nctk/nctk/internal/discover"
)

// Words printed for values the driver could not tell. NVIDIA's CLI prints
// "Unknown" for a brand NVML does not name; the same word is used for
// every unknown value so that a script sees one token, never an empty
// field.
const unknown = "Unknown"

func infoOptions() []nvc.Option {
	return []nvc.Option{{Long: "csv", Doc: "Output in CSV format"}}
}

func runInfo(e *app.Env, g *nvc.Globals, args []string) int {
	parsed, operands, code, done := parseCommand(e, "info", infoOptions(), args)
	if done {
		return code
	}
	if len(operands) > 0 {
		return nvc.UsageFail(e, nvc.Prog+" info", fmt.Errorf("unexpected argument: %s", operands[0]))
	}
	csv := false
	for _, p := range parsed {
		if p.Name() == "csv" {
			csv = true
		}
	}
	log, closeLog, err := g.OpenLog()
	if err != nil {
		return nvc.Fail(e, "initialization", err)
	}
	defer closeLog()
	d, phase, err := discoverDriver(e, g, log, true)
	if err != nil {
		return nvc.Fail(e, phase, err)
	}
	if csv {
		writeInfoCSV(e.Stdout, d)
	} else {
		writeInfo(e.Stdout, d)
	}
	for _, w := range probeWarnings(d) {
		fmt.Fprintf(e.Stderr, "%s: warning: %s\n", nvc.Prog, w)
	}
	return 0
}

// probeWarnings picks the warnings that explain an Unknown in info's output.
func probeWarnings(d *discover.Driver) []string {
	var out []string
	for _, w := range d.Warnings {
		if strings.HasPrefix(w, "CUDA version") || strings.HasPrefix(w, "architecture unknown") ||
			strings.HasPrefix(w, "brand unknown") {
			out = append(out, w)
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return unknown
	}
	return s
}

// writeInfo prints NVIDIA's human format: labels left-justified to 15
// columns, a blank line before each GPU.
func writeInfo(w io.Writer, d *discover.Driver) {
	line := func(label, value string) { fmt.Fprintf(w, "%-15s %s\n", label+":", value) }
	line("NVRM version", d.Version)
	line("CUDA version", orUnknown(d.CUDAVersion))
	for _, g := range d.GPUs {
		fmt.Fprintln(w)
		line("Device Index", fmt.Sprint(g.Index))
		line("Device Minor", fmt.Sprint(g.Minor))
		line("Model", orUnknown(g.Model))
		line("Brand", orUnknown(g.Brand))
		line("GPU UUID", g.UUID)
		line("Bus Location", g.BusID)
		line("Architecture", orUnknown(g.Arch))
	}
}

// writeInfoCSV prints NVIDIA's CSV format.
func writeInfoCSV(w io.Writer, d *discover.Driver) {
	fmt.Fprintln(w, "NVRM version,CUDA version")
	fmt.Fprintf(w, "%s,%s\n", d.Version, orUnknown(d.CUDAVersion))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture")
	for _, g := range d.GPUs {
		fmt.Fprintf(w, "%d,%d,%s,%s,%s,%s,%s\n", g.Index, g.Minor, orUnknown(g.Model), orUnknown(g.Brand),
			g.UUID, g.BusID, orUnknown(g.Arch))
	}
}
