// Package tools maps the names nctk is installed under to the tools'
// entry points; cmd/nctk dispatches through it.
package tools

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/cdihook"
	"github.com/nctk/nctk/internal/cli/containercli"
	"github.com/nctk/nctk/internal/cli/ctk"
	"github.com/nctk/nctk/internal/cli/hook"
	"github.com/nctk/nctk/internal/cli/nvdocker"
	"github.com/nctk/nctk/internal/cli/runtime"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/version"
)

// All returns the tools by the names they are installed under.
func All() map[string]app.Tool {
	return map[string]app.Tool{
		"nvidia-container-cli":     containercli.Main,
		"nvidia-container-runtime": runtime.Main,
		// NVIDIA's runtime installed with its mode fixed.
		"nvidia-container-runtime.cdi":    runtime.MainMode(config.ModeCDI),
		"nvidia-container-runtime.legacy": runtime.MainMode(config.ModeLegacy),
		"nvidia-ctk":                      ctk.Main,
		// dockerd looks the hook up by this name; NVIDIA ships the second
		// name as a link to it.
		"nvidia-container-runtime-hook": hook.Main,
		"nvidia-container-toolkit":      hook.Main,
		"nvidia-docker":                 nvdocker.Main,
		"nvidia-cdi-hook":               cdihook.Main,
	}
}

// Run picks the tool from argv[0]'s base name, or from argv[1] when invoked
// as nctk, and runs it.
func Run(e *app.Env) int {
	all := All()
	name := filepath.Base(e.Args[0])
	if t, ok := all[name]; ok {
		return t(e)
	}
	if len(e.Args) > 1 {
		if t, ok := all[e.Args[1]]; ok {
			sub := *e
			sub.Args = e.Args[1:]
			return t(&sub)
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(e.Stderr, "%s: run as one of: %s\n(or: nctk TOOL [ARGS...])\n", version.String(), strings.Join(names, ", "))
	return 2
}
