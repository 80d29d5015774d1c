// Command nvidia-container-runtime-hook is the prestart hook `docker run
// --gpus` adds (the code of `nctk nvidia-container-runtime-hook`, which
// configures the container in process), built as a binary of its own:
// runc starts it on every such create, and without the tools it does not
// run (the runtime, nvidia-ctk's CDI, engine and doctor commands) it starts
// sooner (docs/benchmarks.md). Installed also as nvidia-container-toolkit
// (a link to it, as NVIDIA ships that name) and as nvidia-container-cli:
// the hook runs the CLI in process when the CLI it finds is this binary.
package main

import (
	"path/filepath"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/containercli"
	"github.com/nctk/nctk/internal/cli/hook"
	"github.com/nctk/nctk/internal/entry"
)

func main() { entry.Main(byName) }

// byName runs nvidia-container-cli under that name, the hook under any
// other.
func byName(e *app.Env) int {
	if filepath.Base(e.Args[0]) == hook.CLIName {
		return containercli.Main(e)
	}
	return hook.Main(e)
}
