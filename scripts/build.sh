#!/bin/sh
# build.sh OUTDIR: builds nctk into OUTDIR (created if missing), the one
# definition `make build`, the end-to-end tests and the packaging tests use:
#
#   nvidia-cdi-hook     the CDI hook binary (static, CGO_ENABLED=0): the hooks
#                       of every CDI spec; it links no CDI or eBPF library, so
#                       each hook process an engine starts costs less
#   nctk                the multi-call binary (static) behind every other tool
#                       name, with the hook binary's Go build ID linked in
#                       (version.HookBuildID: how the runtime knows that hook
#                       binary for its own)
#   nctk-driverprobe    the driver probe helper (cgo: it dlopens libcuda/NVML)
#   <tool> -> nctk      a link per NVIDIA tool name
#
# GO names the go command (default: go).
set -eu
# The tool names installed as links to nctk (Makefile, packaging/stage.sh and
# internal/tools' test read this line).
links="nvidia-container-cli nvidia-container-runtime nvidia-container-runtime-hook nvidia-container-toolkit nvidia-ctk nvidia-docker nvidia-container-runtime.cdi nvidia-container-runtime.legacy"

out=${1:?usage: build.sh OUTDIR}
go=${GO:-go}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
# An earlier build made nvidia-cdi-hook a link to nctk: replace links at the
# binaries' names, never write through them.
for f in nvidia-cdi-hook nctk nctk-driverprobe; do
	if [ -L "$out/$f" ]; then rm -f "$out/$f"; fi
done

CGO_ENABLED=0 $go build -trimpath -o "$out/nvidia-cdi-hook" ./cmd/nvidia-cdi-hook
hook_id=$($go tool buildid "$out/nvidia-cdi-hook")
CGO_ENABLED=0 $go build -trimpath -ldflags "-X github.com/nctk/nctk/internal/version.hookBuildID=$hook_id" \
	-o "$out/nctk" ./cmd/nctk
CGO_ENABLED=1 $go build -trimpath -o "$out/nctk-driverprobe" ./cmd/nctk-driverprobe
for t in $links; do
	ln -sfn nctk "$out/$t"
done
