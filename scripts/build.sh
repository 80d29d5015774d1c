#!/bin/sh
# build.sh OUTDIR: builds nctk into OUTDIR (created if missing), the one
# definition `make build`, the end-to-end tests and the packaging tests use:
#
#   nvidia-cdi-hook           the CDI hook binary: the hooks of every CDI spec
#   nvidia-container-runtime  the runc wrapper; nvidia-container-runtime.cdi
#                             and .legacy are links to it
#   nctk                      the multi-call binary behind every other tool
#                             name (links below)
#   nctk-driverprobe          the driver probe helper (cgo: it dlopens
#                             libcuda/NVML)
#
# All but the probe helper are static (CGO_ENABLED=0). The hook and the runtime
# run on every container create and are built on their own, without the
# libraries only other tools need (docs/benchmarks.md). The hook binary's Go
# build ID is linked into the runtime and nctk (version.HookBuildID): how the
# runtime knows that hook binary for its own.
#
# GO names the go command (default: go).
set -eu
# The tool names installed as links to nctk, and to nvidia-container-runtime
# (the Makefile, packaging/stage.sh and internal/tools' test read these
# lines).
links="nvidia-container-cli nvidia-container-runtime-hook nvidia-container-toolkit nvidia-ctk nvidia-docker"
runtime_links="nvidia-container-runtime.cdi nvidia-container-runtime.legacy"

out=${1:?usage: build.sh OUTDIR}
go=${GO:-go}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
# An earlier build made some of these names links to nctk: replace the links,
# never write through them.
for f in nvidia-cdi-hook nvidia-container-runtime nctk nctk-driverprobe; do
	if [ -L "$out/$f" ]; then rm -f "$out/$f"; fi
done

CGO_ENABLED=0 $go build -trimpath -o "$out/nvidia-cdi-hook" ./cmd/nvidia-cdi-hook
ldflags="-X github.com/nctk/nctk/internal/version.hookBuildID=$($go tool buildid "$out/nvidia-cdi-hook")"
CGO_ENABLED=0 $go build -trimpath -ldflags "$ldflags" -o "$out/nvidia-container-runtime" ./cmd/nvidia-container-runtime
CGO_ENABLED=0 $go build -trimpath -ldflags "$ldflags" -o "$out/nctk" ./cmd/nctk
CGO_ENABLED=1 $go build -trimpath -o "$out/nctk-driverprobe" ./cmd/nctk-driverprobe
for t in $links; do
	ln -sfn nctk "$out/$t"
done
for t in $runtime_links; do
	ln -sfn nvidia-container-runtime "$out/$t"
done
