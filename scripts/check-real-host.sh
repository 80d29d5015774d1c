#!/usr/bin/env bash
# check-real-host.sh — on a host with a real NVIDIA driver and GPU, compare
# nctk's `nvidia-container-cli info` and `list` with what nvidia-smi (and,
# when installed, NVIDIA's own nvidia-container-cli) report, field by field.
#
# Usage: scripts/check-real-host.sh [--cli PATH] [--nvidia-cli PATH] [--root DIR] [--out FILE]
#
#   --cli PATH         nctk's nvidia-container-cli (default: bin/nvidia-container-cli
#                      next to this script's repository, else the one on PATH)
#   --nvidia-cli PATH  NVIDIA's nvidia-container-cli to diff `list` against
#                      (default: none; e.g. /usr/bin/nvidia-container-cli)
#   --root DIR         driver root passed to nctk as --root (default /)
#   --out FILE         also write the report (markdown) to FILE
#
# Checks (each printed as "ok" or "MISMATCH" with both values):
#   1. driver version: nvidia-smi --query-gpu=driver_version vs info's NVRM version
#   2. CUDA version: the "CUDA Version" in nvidia-smi's banner vs info's CUDA version
#   3. per GPU, matched by PCI bus id: index, minor (nvidia-smi -q "Minor Number"),
#      UUID, model (name), brand ("Product Brand"), architecture (compute_cap)
#   4. libraries: every file named *.so.<driver version> that the dynamic linker
#      cache (ldconfig -p) points at, for NVIDIA's library names, must appear in
#      `list --libraries --compat32`, and no other library may (the graphics
#      files nctk lists there too are shown, not compared)
#   5. with --nvidia-cli: `list` of both CLIs, line by line
#
# Exit status: 0 when everything agrees, 1 on a mismatch, 2 when a tool is missing.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cli=""
nvidia_cli=""
root=/
out=""
while [ $# -gt 0 ]; do
	case "$1" in
	--cli) cli=${2:?--cli needs a path}; shift ;;
	--nvidia-cli) nvidia_cli=${2:?--nvidia-cli needs a path}; shift ;;
	--root) root=${2:?--root needs a directory}; shift ;;
	--out) out=${2:?--out needs a file}; shift ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "check-real-host: unknown argument: $1" >&2; exit 2 ;;
	esac
	shift
done
if [ -z "$cli" ]; then
	if [ -x "$here/../bin/nvidia-container-cli" ]; then
		cli="$here/../bin/nvidia-container-cli"
	else
		cli=$(command -v nvidia-container-cli || true)
	fi
fi
for tool in nvidia-smi "$cli"; do
	if [ -z "$tool" ] || ! command -v "$tool" >/dev/null 2>&1; then
		echo "check-real-host: ${tool:-nctk nvidia-container-cli} not found (build nctk with make, or pass --cli)" >&2
		exit 2
	fi
done
# nctk's binaries are static and ask libcuda for the CUDA version through the
# cgo helper installed beside them; without it every CUDA check would be a
# false mismatch.
cli_exe=$(readlink -f "$(command -v "$cli")")
if [ -x "$(dirname "$cli_exe")/nctk" ] && [ ! -x "$(dirname "$cli_exe")/nctk-driverprobe" ]; then
	echo "check-real-host: $(dirname "$cli_exe")/nctk-driverprobe is missing beside $cli_exe (run make build)" >&2
	exit 2
fi

report=$(mktemp)
trap 'rm -f "$report"' EXIT
fail=0
want_label=nvidia-smi got_label=nctk # check WHAT NVIDIA_SMI_VALUE NCTK_VALUE
# shellcheck source=lib/report.sh
. "$here/lib/report.sh"

say "# nctk vs nvidia-smi on $(hostname)"
say ""
say '```'
say "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "kernel:  $(uname -srm)"
say "os:      $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")"
say "module:  $(head -n1 /proc/driver/nvidia/version 2>/dev/null)"
say "gpus:    $(nvidia-smi -L 2>&1 | tr '\n' ';')"
say "nctk:    $cli --root=$root"
say '```'
say ""

say "## nctk nvidia-container-cli info"
say '```'
"$cli" --root="$root" info 2>&1 | tee -a "$report"
say '```'
info_csv=$("$cli" --root="$root" info --csv 2>/dev/null) || { say "MISMATCH  nctk info --csv failed"; fail=1; }

say ""
say "## Field by field"
smi_driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1 | tr -d ' ')
smi_cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n1)
nctk_driver=$(printf '%s\n' "$info_csv" | sed -n '2p' | cut -d, -f1)
nctk_cuda=$(printf '%s\n' "$info_csv" | sed -n '2p' | cut -d, -f2)
check "driver version" "$smi_driver" "$nctk_driver"
check "CUDA version" "$smi_cuda" "$nctk_cuda"

# nvidia-smi: index, bus id, uuid, name, compute capability per GPU.
while IFS=, read -r idx bus uuid name cc; do
	idx=$(echo "$idx" | xargs); bus=$(echo "$bus" | xargs | tr 'A-F' 'a-f'); uuid=$(echo "$uuid" | xargs)
	name=$(echo "$name" | xargs); cc=$(echo "$cc" | xargs)
	q=$(nvidia-smi -q -i "$idx")
	minor=$(printf '%s\n' "$q" | sed -n 's/^ *Minor Number *: *//p' | head -n1)
	brand=$(printf '%s\n' "$q" | sed -n 's/^ *Product Brand *: *//p' | head -n1)
	row=$(printf '%s\n' "$info_csv" | awk -F, -v b="$bus" 'tolower($6) == b')
	if [ -z "$row" ]; then
		say "MISMATCH  GPU $bus: listed by nvidia-smi, missing from nctk info"
		fail=1
		continue
	fi
	IFS=, read -r n_idx n_minor n_model n_brand n_uuid n_bus n_arch <<<"$row"
	check "GPU $bus index" "$idx" "$n_idx"
	check "GPU $bus minor" "$minor" "$n_minor"
	check "GPU $bus UUID" "$uuid" "$n_uuid"
	check "GPU $bus model" "$name" "$n_model"
	# nvidia-smi prints brands in words ("NVIDIA", "GeForce"); NVIDIA's CLI
	# prints NVML's enum names ("Nvidia", "GeForce"): compare case-insensitively.
	check "GPU $bus brand" "$(echo "$brand" | tr 'A-Z' 'a-z' | tr -d ' ')" "$(echo "$n_brand" | tr 'A-Z' 'a-z')"
	check "GPU $bus architecture" "$cc" "$n_arch"
done < <(nvidia-smi --query-gpu=index,pci.bus_id,uuid,name,compute_cap --format=csv,noheader)
n_smi=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
n_nctk=$(printf '%s\n' "$info_csv" | sed -n '5,$p' | grep -c . || true)
check "GPU count" "$n_smi" "$n_nctk"

say ""
say "## Libraries"
# Independent expectation: NVIDIA's library names looked up with the host's
# own ldconfig -p (the cache under --root with ldconfig -p -C), resolved,
# kept when the file name ends with the driver version.
names='libnvidia-ml|libnvidia-cfg|libnvidia-nscq|libcuda|libcudadebugger|libnvidia-opencl|libnvidia-gpucomp|libnvidia-ptxjitcompiler|libnvidia-fatbinaryloader|libnvidia-allocator|libnvidia-compiler|libnvidia-pkcs11|libnvidia-pkcs11-openssl3|libnvidia-nvvm|libnvidia-tileiras|libvdpau_nvidia|libnvidia-encode|libnvidia-opticalflow|libnvcuvid|libnvidia-eglcore|libnvidia-glcore|libnvidia-tls|libnvidia-glsi|libnvidia-fbc|libnvidia-ifr|libnvidia-rtcore|libnvoptix|libGLX_nvidia|libEGL_nvidia|libGLESv2_nvidia|libGLESv1_CM_nvidia|libnvidia-glvkspirv|libnvidia-cbl|libnvidia-ngx'
cache="$root/etc/ld.so.cache"
expected=$(ldconfig -p -C "$cache" 2>/dev/null | grep -E "^[[:space:]]*($names)\.so" | sed 's/.* => //' |
	while read -r p; do
		r=$(readlink -f "$root/$p" 2>/dev/null) || continue
		case "$r" in *".$smi_driver") echo "$r" ;; esac
	done | sort -u)
# nctk's --libraries also lists the graphics files (Vulkan ICD, EGL vendor
# JSON, X.Org modules and their configs) a graphics container gets; they are shown,
# not compared.
listed_all=$("$cli" --root="$root" list --libraries --compat32 2>/dev/null | sort -u)
is_lib='^[^ ]*/[^/]+\.so(\.[^/]*)?$'
listed=$(printf '%s\n' "$listed_all" | grep -E "$is_lib" | grep -v /xorg/ || true)
graphics=$(printf '%s\n' "$listed_all" | grep -vE "$is_lib" | grep . ; printf '%s\n' "$listed_all" | grep /xorg/ || true)
missing=$(comm -23 <(printf '%s\n' "$expected") <(printf '%s\n' "$listed") | grep . || true)
extra=$(comm -13 <(printf '%s\n' "$expected") <(printf '%s\n' "$listed") | grep . || true)
say "driver libraries in the cache: $(printf '%s\n' "$expected" | grep -c .); listed by nctk: $(printf '%s\n' "$listed" | grep -c .)"
if [ -n "$missing" ]; then say "MISMATCH  not listed by nctk:"; say "$missing"; fail=1; fi
if [ -n "$extra" ]; then say "MISMATCH  listed by nctk but not a driver library in the cache:"; say "$extra"; fail=1; fi
[ -z "$missing$extra" ] && say "ok        every driver library is listed, nothing else"
[ -n "$graphics" ] && say "info      graphics files nctk also lists (not compared):" && say "$graphics"

say ""
say "## nctk nvidia-container-cli list"
say '```'
"$cli" --root="$root" list 2>&1 | tee -a "$report"
say '```'

if [ -n "$nvidia_cli" ]; then
	say ""
	say "## diff: NVIDIA's list (-) vs nctk's list (+)"
	say '```'
	if d=$(diff -u <("$nvidia_cli" --root="$root" list 2>&1) <("$cli" --root="$root" list 2>&1)); then
		say "(identical)"
	else
		say "$d"
		fail=1
	fi
	say '```'
fi

say ""
if [ "$fail" = 0 ]; then say "RESULT: nctk agrees with the driver"; else say "RESULT: MISMATCHES above"; fi
[ -n "$out" ] && cp "$report" "$out"
exit "$fail"
