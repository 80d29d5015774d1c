// Command nvidia-container-runtime is the runc wrapper (the code of `nctk
// nvidia-container-runtime`), built as a binary of its own: an engine
// starts it on every container create, and without the other tools the
// multi-call nctk links (the eBPF library, the engines' configuration
// editors, doctor) it starts about a millisecond sooner
// (docs/benchmarks.md). Installed also as nvidia-container-runtime.cdi and
// .legacy (links to it), whose names fix the mode.
package main

import (
	"github.com/nctk/nctk/internal/cli/runtime"
	"github.com/nctk/nctk/internal/entry"
)

func main() { entry.Main(runtime.MainByName) }
