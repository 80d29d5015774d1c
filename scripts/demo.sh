#!/usr/bin/env bash
# demo.sh — run a GPU container through nvidia-container-runtime and runc.
#
# Usage (as root, from anywhere):  scripts/demo.sh     (or: make demo)
#
# What it does:
#   1. builds bin/nctk, the runtime, hook and CDI hook binaries, the tool
#      links and bin/nctk-driverprobe (the cgo helper they run beside
#      themselves to ask libcuda for the CUDA version)
#      unless they are there (make build);
#   2. picks the driver: the host's own when /proc/driver/nvidia/version
#      exists; otherwise a fixture driver root built from the cached Debian
#      NVIDIA 535 packages (make fixtures) with 2 simulated GPUs and no
#      kernel driver;
#   3. builds a tiny image in a temporary directory: busybox-static, the
#      host's glibc and cudaprobe (a 100-line C program that dlopens
#      libcuda.so.1 and prints cuDriverGetVersion, cuInit and the device
#      count) — no NVIDIA file in it;
#   4. runs it with `nvidia-container-runtime run` (which execs the host's
#      runc) and NVIDIA_VISIBLE_DEVICES=all; the container prints
#      `nvidia-smi -L` and cudaprobe's report;
#   5. removes everything it made.
#
# With a real GPU, nvidia-smi lists it and cudaprobe reports cuInit 0 and
# the device count. With the fixture driver, cudaprobe reports the driver's
# CUDA version (12020 = CUDA 12.2) and nvidia-smi that it cannot talk to a
# kernel driver: the libraries reached the container, there is no GPU.
#
# Environment: NCTK_DEMO_KEEP=1 keeps the temporary directory; NCTK_DEMO_BIN
# runs the nctk built in that directory instead of bin/ (the test of this
# script).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="${NCTK_DEMO_BIN:-$repo/bin}"

say() { printf '\n==> %s\n' "$*"; }
die() {
	echo "demo: $*" >&2
	exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is needed ($2)"; }

[ "$(id -u)" -eq 0 ] || die "run as root: runc, bind mounts and device nodes need it (sudo make demo)"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
need runc "apt-get install runc"
need busybox "apt-get install busybox-static"
need gcc "apt-get install gcc libc6-dev"
need ldconfig "part of libc-bin"
runc_bin=$(command -v runc)

if [ ! -x "$bin/nctk" ] || [ ! -x "$bin/nctk-driverprobe" ] || [ ! -e "$bin/nvidia-container-runtime" ]; then
	say "building nctk"
	make -C "$repo" build
fi

work=$(mktemp -d /tmp/nctk-demo.XXXXXX)
chmod 755 "$work"
id="nctk-demo-$$"
cleanup() {
	"$runc_bin" --root "$work/state" delete --force "$id" >/dev/null 2>&1 || true
	if [ "${NCTK_DEMO_KEEP:-}" = 1 ]; then
		echo "demo: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

# --- the driver -------------------------------------------------------------
cli_root=/
if [ -r /proc/driver/nvidia/version ]; then
	say "host driver: $(head -n1 /proc/driver/nvidia/version)"
else
	say "no NVIDIA driver on this host: building a fixture driver root (NVIDIA 535 packages, 2 GPUs, no kernel module)"
	cli_root="$work/driver"
	"$repo/scripts/fetch-driver-debs.sh" >/dev/null || die "could not fetch the fixture driver packages (make fixtures)"
	(cd "$repo" && go run ./internal/fixture/mkroot -layout multiarch -gpus 2 "$cli_root" >/dev/null) ||
		die "could not build the fixture driver root (run 'make fixtures' first?)"
fi
cat >"$work/config.toml" <<EOF
[nvidia-container-cli]
root = "$cli_root"
ldconfig = "@$(command -v ldconfig)"
load-kmods = false

[nvidia-container-runtime]
runtimes = ["$runc_bin"]
log-level = "info"
debug = "$work/runtime.log"
EOF
export NVIDIA_CTK_CONFIG_FILE_PATH="$work/config.toml"

say "nvidia-container-cli info (driver root $cli_root)"
"$bin/nvidia-container-cli" --root "$cli_root" info || true

# --- the image ----------------------------------------------------------------
say "building a busybox + glibc + cudaprobe image"
bundle="$work/bundle"
rootfs="$bundle/rootfs"
# shellcheck source=lib/gpu-image.sh
. "$repo/scripts/lib/gpu-image.sh"
build_gpu_image "$rootfs" "$repo" || die "could not build the image"

# --- the bundle -----------------------------------------------------------------
"$runc_bin" spec --bundle "$bundle"
# No double quote, backslash, | or & in the script: it goes into a JSON
# string through sed.
script="echo '\$ nvidia-smi -L'; nvidia-smi -L; echo; echo '\$ cudaprobe init'; cudaprobe init; echo; echo '\$ ls -l /dev/nvidia*'; ls -l /dev/nvidia*; true"
sed -i \
	-e 's/"terminal": true/"terminal": false/' \
	-e 's/"readonly": true/"readonly": false/' \
	-e "s|^\(\s*\)\"sh\"\$|\1\"/bin/sh\", \"-c\", \"$script\"|" \
	-e 's/"TERM=xterm"/"TERM=xterm", "NVIDIA_VISIBLE_DEVICES=all"/' \
	"$bundle/config.json"
grep -q '"NVIDIA_VISIBLE_DEVICES=all"' "$bundle/config.json" && grep -q 'cudaprobe init' "$bundle/config.json" ||
	die "could not edit the config.json runc spec wrote"

# --- the container ----------------------------------------------------------------
say "nvidia-container-runtime run (NVIDIA_VISIBLE_DEVICES=all) -> $runc_bin"
status=0
"$bin/nvidia-container-runtime" --root "$work/state" run --bundle "$bundle" "$id" || status=$?
if [ "$status" -ne 0 ]; then
	echo "demo: the container failed (exit $status); runtime log:" >&2
	cat "$work/runtime.log" >&2 || true
	exit "$status"
fi
if [ "$cli_root" != / ]; then
	cat <<'EOF'

With the fixture driver the container got the driver's real libraries and
tools, but there is no GPU and no kernel module: cuDriverGetVersion 12020 is
CUDA 12.2 (the 535 driver's), cuInit 100 is CUDA_ERROR_NO_DEVICE and
nvidia-smi cannot reach a kernel driver. On a GPU host the same command
lists the GPUs and cuInit returns 0.
EOF
fi
say "done"
