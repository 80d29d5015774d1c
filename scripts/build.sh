#!/bin/sh
# build.sh OUTDIR: builds nctk into OUTDIR (created if missing), the one
# definition `make build`, the end-to-end tests and the packaging tests use.
# The binaries an engine or runc starts on a container create each link only
# the code of their own path, so that each starts sooner:
#
#   nvidia-container-runtime       the runc wrapper (static)
#   nvidia-container-runtime-hook  the prestart hook of `docker run --gpus`,
#                                  with nvidia-container-cli, which the hook
#                                  runs in process (static)
#   nvidia-cdi-hook                the hooks of every CDI spec (static; no
#                                  CDI, YAML or eBPF library)
#   nctk                           the multi-call binary (static) behind every
#                                  other tool name (nvidia-ctk, nvidia-docker)
#                                  and `nctk TOOL` for every tool
#   nctk-driverprobe               the driver probe helper (cgo: it dlopens
#                                  libcuda/NVML)
#   <name> -> <binary>             a link per other NVIDIA tool name
#
# The binaries that carry the hook binary's Go build ID (version.HookBuildID:
# how the runtime knows that hook binary for its own) are built after it.
# GO names the go command (default: go).
set -eu
# The binaries (Makefile and packaging/stage.sh read this line).
bins="nctk nctk-driverprobe nvidia-cdi-hook nvidia-container-runtime nvidia-container-runtime-hook"
# The other tool names, installed as links NAME:BINARY (Makefile,
# packaging/stage.sh and internal/tools' test read this line).
links="nvidia-ctk:nctk nvidia-docker:nctk nvidia-container-runtime.cdi:nvidia-container-runtime nvidia-container-runtime.legacy:nvidia-container-runtime nvidia-container-toolkit:nvidia-container-runtime-hook nvidia-container-cli:nvidia-container-runtime-hook"

out=${1:?usage: build.sh OUTDIR}
go=${GO:-go}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
# An earlier build made some of these links: replace links at the
# binaries' names, never write through them.
for f in $bins; do
	if [ -L "$out/$f" ]; then rm -f "$out/$f"; fi
done

CGO_ENABLED=0 $go build -trimpath -o "$out/nvidia-cdi-hook" ./cmd/nvidia-cdi-hook
hook_id=$($go tool buildid "$out/nvidia-cdi-hook")
for b in nctk nvidia-container-runtime nvidia-container-runtime-hook; do
	CGO_ENABLED=0 $go build -trimpath -ldflags "-X github.com/nctk/nctk/internal/version.hookBuildID=$hook_id" \
		-o "$out/$b" "./cmd/$b"
done
CGO_ENABLED=1 $go build -trimpath -o "$out/nctk-driverprobe" ./cmd/nctk-driverprobe
for l in $links; do
	ln -sfn "${l#*:}" "$out/${l%%:*}"
done
