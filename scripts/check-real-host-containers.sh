#!/usr/bin/env bash
# check-real-host-containers.sh — on a host with a loaded NVIDIA driver and a
# GPU, start real containers through every nctk path and check what each one
# gets; then time the create paths beside plain runc.
#
# Usage (as root): scripts/check-real-host-containers.sh [--rounds N] [--out FILE]
#                      [--nvidia-ctk PATH] [--nvidia-cdi-hook PATH] [--nvidia-runtime PATH]
#                      [--root DIR] [--cdi-inject PATH] [--cli-debug FILE] [--tmpfs]
#
#   --rounds N             timed creates per path (default 25; 0 skips timing)
#   --root DIR             a driver root without a kernel driver (a fixture root,
#                          internal/fixture/mkroot) instead of the host's driver:
#                          the same paths and checks, with what such a root can
#                          give (the libraries and nodes, cuInit 100, no GPU for
#                          nvidia-smi); the test of this script uses it
#   --out FILE             also write the report (markdown) to FILE
#   --nvidia-ctk PATH      NVIDIA's nvidia-ctk: its `cdi generate` spec is run
#                          with nctk's hooks and, with --nvidia-cdi-hook, with
#                          NVIDIA's own hooks
#   --nvidia-cdi-hook PATH NVIDIA's nvidia-cdi-hook for that second spec
#   --nvidia-runtime PATH  NVIDIA's nvidia-container-runtime: timed in CDI mode
#                          on NVIDIA's spec and hooks (needs both options above)
#   --cdi-inject PATH      test/cdiinject (go build ./test/cdiinject): adds the
#                          paths where an engine applies the spec itself (podman,
#                          Docker 25+ --device, containerd's CRI) and runc runs
#                          its hooks: nctk's spec ("native"), its --separate-hooks
#                          spec ("sep-native"), nctk's spec with the hooks'
#                          GOMAXPROCS=1 left out ("native-gmp"), with
#                          --nvidia-ctk NVIDIA's spec naming nctk's hook
#                          ("nvspec-native": the GPU Operator's and device
#                          plugin's specs on a host with nctk), and with
#                          --nvidia-cdi-hook NVIDIA's spec and hooks ("nv-native");
#                          and nctk's and its --separate-hooks spec (and with
#                          --nvidia-ctk NVIDIA's) applied, then nctk's runtime run
#                          on them ("native-rt", "sep-native-rt", "nvspec-native-rt");
#                          checked as containers and timed (floor: runc on the
#                          same config.json without the spec's hooks)
#   --cli-debug FILE       nvidia-container-cli's debug log ([nvidia-container-cli]
#                          debug): the --gpus hook's steps, each timed
#   --tmpfs                the work directory (image copies, bundle) on a tmpfs:
#                          the check copies the image afresh before every create,
#                          and on a disk file system the inodes every path then
#                          makes (runc's mount targets, the links, ld.so.cache)
#                          can cost what it charges after mass deletes
#
# The image is busybox + the host's glibc + cudaprobe (scripts/lib/gpu-image.sh),
# with no NVIDIA file. Every container prints what it got: the GPUs nvidia-smi
# lists, cuInit and the CUDA device count, the GPU device nodes in /dev, and
# the driver file mounts that are not read-only, nosuid and nodev, and the
# params file's ModifyDeviceFiles (0: masked). Checked,
# each printed "ok" or "MISMATCH":
#   legacy mode (NVIDIA_VISIBLE_DEVICES=all, =<first GPU's UUID>, =none, =void),
#   NVIDIA_REQUIRE_CUDA met and not met, an unknown device id, CDI mode with
#   nctk's spec (one hook call) and its --separate-hooks spec, jit-cdi mode,
#   the docker --gpus path (runc with nvidia-container-runtime-hook as prestart
#   hook), NVIDIA's spec, and `nvidia-ctk doctor` on the host and on a bundle
#   whose requirement fails.
# Timing: the median `create` of plain runc, of each nctk path, and of runc
# alone on the config.json each path wrote (the floor its mounts, devices and
# hooks set); a path's own share is its median minus its floor. The --gpus
# hook's floor is legacy-hook's (runc making the same plan's mounts and
# devices from config.json; the hook makes them itself). The last column is
# the share over runc making the same container where the path's config.json
# lacks the driver's mounts (the runtime makes them after a create with a pid
# file): cdi and legacy over cdi-hook's and legacy-hook's floor, an
# engine-applied spec then the runtime over the engine-applied config.json's.
#
# Needs: runc, busybox (static), gcc, ldconfig, nvidia-smi (not with --root).
# NCTK_BIN runs the nctk built in that directory instead of bin/. Exit status
# 0 when every check passes, 1 on a mismatch, 2 when a tool is missing.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="${NCTK_BIN:-$repo/bin}"
rounds=25
root=""
out=""
nv_ctk=""
nv_hook=""
nv_runtime=""
inject=""
debug_log=""
on_tmpfs=0
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=${2:?--rounds needs a number}; shift ;;
	--out) out=${2:?--out needs a file}; shift ;;
	--nvidia-ctk) nv_ctk=${2:?--nvidia-ctk needs a path}; shift ;;
	--nvidia-cdi-hook) nv_hook=${2:?--nvidia-cdi-hook needs a path}; shift ;;
	--nvidia-runtime) nv_runtime=${2:?--nvidia-runtime needs a path}; shift ;;
	--root) root=${2:?--root needs a directory}; shift ;;
	--cdi-inject) inject=${2:?--cdi-inject needs a path}; shift ;;
	--cli-debug) debug_log=${2:?--cli-debug needs a file}; shift ;;
	--tmpfs) on_tmpfs=1 ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "check-real-host-containers: unknown argument: $1" >&2; exit 2 ;;
	esac
	shift
done
# The tools given go into specs and configs that runc and engines run from
# other directories: absolute, and there.
for opt in nv_ctk:--nvidia-ctk nv_hook:--nvidia-cdi-hook nv_runtime:--nvidia-runtime inject:--cdi-inject; do
	var=${opt%%:*}
	[ -n "${!var}" ] || continue
	abs=$(realpath -e -- "${!var}" 2>/dev/null) && [ -x "$abs" ] ||
		{ echo "check-real-host-containers: ${opt#*:} ${!var}: no such executable" >&2; exit 2; }
	printf -v "$var" '%s' "$abs"
done
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
[ "$(id -u)" -eq 0 ] || { echo "check-real-host-containers: run as root" >&2; exit 2; }
tools="runc busybox gcc ldconfig"
[ -z "$root" ] && tools="$tools nvidia-smi"
for tool in $tools; do
	command -v "$tool" >/dev/null || { echo "check-real-host-containers: $tool not found" >&2; exit 2; }
done
if [ -n "$root" ]; then
	root=$(cd "$root" && pwd) || exit 2
	[ -r "$root/proc/driver/nvidia/version" ] || { echo "check-real-host-containers: $root is no driver root" >&2; exit 2; }
else
	[ -r /proc/driver/nvidia/version ] || { echo "check-real-host-containers: no NVIDIA kernel driver loaded" >&2; exit 2; }
fi
if [ ! -x "$bin/nctk" ] || [ ! -e "$bin/nvidia-container-runtime" ]; then
	make -C "$repo" build >/dev/null || exit 2
fi
runc_bin=$(command -v runc)
ldconfig_bin=$(command -v ldconfig)

work=$(mktemp -d /tmp/nctk-hostcheck.XXXXXX)
if [ "$on_tmpfs" = 1 ]; then
	mount -t tmpfs -o size=4g,mode=755 nctk-hostcheck "$work" || { echo "check-real-host-containers: tmpfs at $work failed" >&2; rmdir "$work"; exit 2; }
fi
chmod 755 "$work"
state="$work/state"
report="$work/report.md"
cleanup() {
	for id in $("$runc_bin" --root "$state" list -q 2>/dev/null); do
		"$runc_bin" --root "$state" delete --force "$id" >/dev/null 2>&1
	done
	[ "$on_tmpfs" = 1 ] && umount -l "$work"
	rm -rf "$work"
}
trap cleanup EXIT
fail=0
# shellcheck source=lib/report.sh
. "$repo/scripts/lib/report.sh"

if [ -n "$root" ]; then
	ngpus=$(find "$root/proc/driver/nvidia/gpus" -mindepth 1 -maxdepth 1 | grep -c .)
	uuid0=$(sed -n 's/^GPU UUID:[[:space:]]*//p' "$root"/proc/driver/nvidia/gpus/*/information | head -n1)
	gpus="$ngpus in the driver root $root (no kernel driver)"
else
	ngpus=$(nvidia-smi -L | grep -c '^GPU ')
	uuid0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n1 | tr -d ' ')
	gpus=$(nvidia-smi -L | tr '\n' ';')
fi
say "# nctk containers on $(hostname)"
say ""
say '```'
say "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "kernel:  $(uname -srm)"
say "module:  $(head -n1 "${root:-}/proc/driver/nvidia/version")"
say "gpus:    $gpus"
say "runc:    $("$runc_bin" --version | head -n1)"
say '```'
say ""

# --- image, specs, configs ---------------------------------------------------------
# shellcheck source=lib/gpu-image.sh
. "$repo/scripts/lib/gpu-image.sh"
bundle="$work/bundle"
build_gpu_image "$bundle/rootfs" "$repo" >/dev/null || { echo "check-real-host-containers: could not build the image" >&2; exit 2; }
cp -a "$bundle/rootfs" "$work/rootfs.pristine"

# The container's report: one key=value per line. No double quote or
# backslash: the script goes into a JSON string.
probe='export PATH=$PATH:/usr/local/nvidia/bin
echo smi=$(nvidia-smi -L 2>/dev/null | grep -c ^GPU)
cudaprobe init >/tmp/probe 2>&1
echo libcuda=$(grep -c ^libcuda: /tmp/probe)
sed -n -e s/^cuInit:./cuinit=/p -e s/^cuDeviceGetCount:.*count=/count=/p /tmp/probe
echo nodes=$(ls /dev | grep -c ^nvidia[0-9])
echo params=$(sed -n s/^ModifyDeviceFiles:.//p /proc/driver/nvidia/params 2>/dev/null)
echo writable=$(grep nvidia /proc/mounts | grep -v -e ^[^[:space:]]*[[:space:]]/dev/ -e [[:space:]]ro,nosuid,nodev | grep -c .)'
probe_json=$(printf '%s' "$probe" | sed ':a;N;$!ba;s/\n/; /g')

# write_bundle ARGS_JSON ENV...: a fresh config.json (and a fresh rootfs:
# runtimes leave mount points and links in it).
write_bundle() {
	local args=$1 env='"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"' v
	shift
	for v in "$@"; do env="$env, \"$v\""; done
	rm -rf "$bundle/rootfs" && cp -a "$work/rootfs.pristine" "$bundle/rootfs"
	cat >"$bundle/config.json" <<EOF
{"ociVersion": "1.0.2",
 "process": {"terminal": false, "user": {"uid": 0, "gid": 0}, "args": $args, "env": [$env], "cwd": "/",
  "capabilities": {"bounding": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"],
   "effective": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"],
   "permitted": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"]},
  "noNewPrivileges": true},
 "root": {"path": "rootfs", "readonly": false},
 "hostname": "gpu",
 "mounts": [
  {"destination": "/proc", "type": "proc", "source": "proc"},
  {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
  {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
  {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
  {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}],
 "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
  "resources": {"devices": [{"allow": false, "access": "rwm"}]},
  "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
  "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]}}
EOF
}

# add_prestart_hook: what docker --gpus adds to the bundle: the prestart
# hook, with an explicit minimal environment (its config: legacy.toml).
add_prestart_hook() {
	sed -i "s|^ \"hostname\"| \"hooks\": {\"prestart\": [{\"path\": \"$bin/nvidia-container-runtime-hook\", \"args\": [\"nvidia-container-runtime-hook\", \"prestart\"], \"env\": [\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\", \"NVIDIA_CTK_CONFIG_FILE_PATH=$work/legacy.toml\"]}]},\n \"hostname\"|" "$bundle/config.json"
}

# ask_cdi_all: the bundle asks for nvidia.com/gpu=all instead of all.
ask_cdi_all() { sed -i 's/"NVIDIA_VISIBLE_DEVICES=all"/"NVIDIA_VISIBLE_DEVICES=nvidia.com\/gpu=all"/' "$bundle/config.json"; }

# write_config NAME MODE SPECDIR: a config.toml for the runtime and hook.
debug_line=""
[ -n "$debug_log" ] && debug_line="debug = \"$debug_log\""
write_config() {
	cat >"$work/$1.toml" <<EOF
[nvidia-container-cli]
root = "${root:-/}"
$debug_line
path = "$bin/nvidia-container-cli"
ldconfig = "@$ldconfig_bin"
load-kmods = false
[nvidia-container-runtime]
runtimes = ["$runc_bin"]
mode = "$2"
log-level = "error"
[nvidia-container-runtime.modes.cdi]
spec-dirs = ["$3"]
EOF
}

mkdir -p "$work/cdi-nctk" "$work/cdi-sep" "$work/cdi-nv" "$work/cdi-nvh"
"$bin/nvidia-ctk" -q cdi generate --driver-root "${root:-/}" --output "$work/cdi-nctk/nvidia.yaml" || fail=1
"$bin/nvidia-ctk" -q cdi generate --driver-root "${root:-/}" --separate-hooks --output "$work/cdi-sep/nvidia.yaml" || fail=1
if [ -n "$nv_ctk" ]; then
	"$nv_ctk" cdi generate --nvidia-cdi-hook-path "$bin/nvidia-cdi-hook" --output "$work/cdi-nv/nvidia.yaml" >/dev/null 2>&1 || fail=1
	if [ -n "$nv_hook" ]; then
		"$nv_ctk" cdi generate --nvidia-cdi-hook-path "$nv_hook" --output "$work/cdi-nvh/nvidia.yaml" >/dev/null 2>&1 || fail=1
	fi
fi
for m in legacy cdi jit-cdi; do write_config "$m" "$m" "$work/cdi-nctk"; done
write_config cdi-sep cdi "$work/cdi-sep"
write_config cdi-nv cdi "$work/cdi-nv"
write_config cdi-nvh cdi "$work/cdi-nvh"
# The engine-applied paths' spec directories: nctk's spec as written, its
# --separate-hooks spec, and nctk's spec with GOMAXPROCS=1 left out of its
# hooks' environment (what that line saves, measured).
native_paths=""
rt_paths=""
if [ -n "$inject" ]; then
	mkdir -p "$work/cdi-gmp"
	grep -v '^ *- GOMAXPROCS=1$' "$work/cdi-nctk/nvidia.yaml" >"$work/cdi-gmp/nvidia.yaml"
	native_paths="native:cdi-nctk sep-native:cdi-sep native-gmp:cdi-gmp"
	# NVIDIA's own spec naming nctk's hook (what the GPU Operator's and the
	# device plugin's specs do on a host with nctk): its hooks' environment
	# has no GOMAXPROCS.
	[ -n "$nv_ctk" ] && native_paths="$native_paths nvspec-native:cdi-nv"
	[ -n "$nv_ctk" ] && [ -n "$nv_hook" ] && native_paths="$native_paths nv-native:cdi-nvh"
	# The engine applies the spec, then runs nctk's runtime (a Kubernetes
	# runtime class naming it): NAME:SPECDIR:CONFIG.
	rt_paths="native-rt:cdi-nctk:cdi sep-native-rt:cdi-sep:cdi-sep"
	# NVIDIA's own spec so, then nctk's runtime: the GPU Operator's
	# runtime class with CDI devices on a host with nctk.
	[ -n "$nv_ctk" ] && rt_paths="$rt_paths nvspec-native-rt:cdi-nv:cdi-nv"
fi
# inject_spec DIR [-drop-hooks]: the bundle's config.json as an engine with
# native CDI support makes it from the specs in DIR (all GPUs).
inject_spec() {
	"$inject" ${2:+"$2"} "$work/$1" nvidia.com/gpu=all <"$bundle/config.json" >"$work/injected.json" &&
		mv "$work/injected.json" "$bundle/config.json"
}

# run_path NAME CONFIG ENV...: run the probe through the runtime (create with
# --pid-file, then start, as engines do); prints the
# container's report, or "error=<first line>" when the runtime refuses.
# With NAME:SPECDIR, the bundle's config.json is first what an engine makes
# of it with the specs in SPECDIR (inject_spec).
run_path() {
	local name=${1%%:*} cfg=$2 outp rc
	write_bundle "[\"/bin/sh\", \"-c\", \"$probe_json\"]" "${@:3}"
	case $1 in *:*) inject_spec "${1#*:}" || { echo "error=cdiinject failed"; return; } ;; esac
	shift 2
	# create (with --pid-file, as every engine's) and start, as engines
	# do: the container's output comes through create's stdout.
	outp=$({ NVIDIA_CTK_CONFIG_FILE_PATH="$work/$cfg.toml" timeout 120 "$bin/nvidia-container-runtime" --root "$state" create \
		--bundle "$bundle" --pid-file "$work/c-$name.pid" "c-$name" && timeout 60 "$runc_bin" --root "$state" start "c-$name"; } 2>&1)
	rc=$?
	"$runc_bin" --root "$state" delete --force "c-$name" >/dev/null 2>&1
	if [ $rc -ne 0 ]; then
		echo "error=$(printf '%s\n' "$outp" | grep -v '^$' | head -n1)"
	else
		printf '%s\n' "$outp"
	fi
}
# expect NAME REPORT KEY=VALUE...: check the report's values.
expect() {
	local name=$1 rep=$2 kv k
	shift 2
	case $rep in error=*)
		say "MISMATCH  $name: ${rep#error=}"
		fail=1
		return ;;
	esac
	for kv in "$@"; do
		k=${kv%%=*}
		check "$name $k" "${kv#*=}" "$(printf '%s\n' "$rep" | sed -n "s/^$k=//p" | head -n1)"
	done
}
# gpu_ok N: what a container with N GPUs reports; a driver root without a
# kernel driver gives the nodes and libraries but no GPU to use.
gpu_ok() {
	if [ -n "$root" ]; then
		echo "smi=0" "cuinit=100" "count=0" "libcuda=1" "nodes=$1" "writable=0"
	else
		echo "smi=$1" "cuinit=0" "count=$1" "libcuda=1" "nodes=$1" "params=0" "writable=0"
	fi
}

say "## Containers"
say '```'
# shellcheck disable=SC2046 # gpu_ok's words are separate arguments
{
	expect "legacy all" "$(run_path legacy-all legacy NVIDIA_VISIBLE_DEVICES=all)" $(gpu_ok "$ngpus")
	expect "legacy $uuid0" "$(run_path legacy-uuid legacy "NVIDIA_VISIBLE_DEVICES=$uuid0" NVIDIA_DRIVER_CAPABILITIES=compute,utility)" $(gpu_ok 1)
	# none: the driver's libraries and tools, no GPU.
	expect "legacy none" "$(run_path legacy-none legacy NVIDIA_VISIBLE_DEVICES=none)" smi=0 libcuda=1 nodes=0 writable=0
	expect "legacy void" "$(run_path legacy-void legacy NVIDIA_VISIBLE_DEVICES=void)" smi=0 libcuda=0 nodes=0
	host_cuda=$("$bin/nvidia-container-cli" --root "${root:-/}" info --csv 2>/dev/null | sed -n 2p | cut -d, -f2)
	expect "legacy cuda>=$host_cuda" "$(run_path legacy-req legacy NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=$host_cuda")" $(gpu_ok "$ngpus")
	rep=$(run_path legacy-req99 legacy NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=99.0")
	check "legacy cuda>=99.0 refused" "yes" "$(printf '%s' "$rep" | grep -q 'requirement error: unsatisfied condition: cuda>=99.0' && echo yes || echo "no: $rep")"
	rep=$(run_path legacy-bad legacy NVIDIA_VISIBLE_DEVICES=99)
	check "legacy device 99 refused" "yes" "$(printf '%s' "$rep" | grep -q 'unknown device' && echo yes || echo "no: $rep")"
	expect "cdi all (nctk spec)" "$(run_path cdi-all cdi NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all)" $(gpu_ok "$ngpus")
	expect "cdi gpu=0 (nctk --separate-hooks spec)" "$(run_path cdi-sep cdi-sep NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0)" $(gpu_ok 1)
	expect "jit-cdi all" "$(run_path jit jit-cdi NVIDIA_VISIBLE_DEVICES=all)" $(gpu_ok "$ngpus")
	if [ -n "$nv_ctk" ]; then
		expect "cdi all (NVIDIA's spec, nctk's hooks)" "$(run_path cdi-nv cdi-nv NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all)" $(gpu_ok "$ngpus")
	fi
	if [ -n "$nv_ctk" ] && [ -n "$nv_hook" ]; then
		# NVIDIA's disable-device-node-modification mounts its params file
		# without nosuid,nodev: writable is not checked here.
		expect "cdi all (NVIDIA's spec and hooks)" "$(run_path cdi-nvh cdi-nvh NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all)" $(gpu_ok "$ngpus" | sed 's/ *writable=0//')
	fi
	# docker --gpus: runc runs the prestart hook.
	write_bundle "[\"/bin/sh\", \"-c\", \"$probe_json\"]" NVIDIA_VISIBLE_DEVICES=all
	add_prestart_hook
	rep=$(timeout 120 "$runc_bin" --root "$state" run --bundle "$bundle" c-hook 2>&1) || rep="error=$(printf '%s\n' "$rep" | head -n1)"
	"$runc_bin" --root "$state" delete --force c-hook >/dev/null 2>&1
	expect "docker --gpus hook" "$rep" $(gpu_ok "$ngpus")
	# An engine applying the spec: runc runs the spec's hooks. nctk's hook
	# starts once per container, whatever the spec's layout: one chained
	# entry, or NVIDIA's one entry per hook, the first doing the others'
	# work (hook-starts: cdiinject counts its starts).
	for np in $native_paths; do
		write_bundle "[\"/bin/sh\", \"-c\", \"$probe_json\"]"
		if inject_spec "${np#*:}"; then
			rep=$(timeout 120 "$inject" -count-starts "$bin/nvidia-cdi-hook" "$runc_bin" --root "$state" run --bundle "$bundle" c-native 2>&1) || rep="error=$(printf '%s\n' "$rep" | head -n1)"
		else
			rep="error=cdiinject failed"
		fi
		"$runc_bin" --root "$state" delete --force c-native >/dev/null 2>&1
		# NVIDIA's disable-device-node-modification mounts its params file
		# without nosuid,nodev: writable is not checked there.
		case $np in
		nv-*) expect "engine applies ${np%%:*}" "$rep" $(gpu_ok "$ngpus" | sed 's/ *writable=0//') ;;
		*) expect "engine applies ${np%%:*}" "$rep" $(gpu_ok "$ngpus") hook-starts=1 ;;
		esac
	done
	# An engine applying the spec, then nctk's runtime.
	for rp in $rt_paths; do
		IFS=: read -r p dir cfg <<<"$rp"
		expect "engine applies ${dir#cdi-}'s spec, then the runtime ($p)" "$(run_path "$p:$dir" "$cfg")" $(gpu_ok "$ngpus")
	done
}
say '```'

say ""
say "## nvidia-ctk doctor"
say '```'
doctor_root=()
[ -n "$root" ] && doctor_root=(--host-root "$root")
if [ -z "$root" ]; then
	doc=$("$bin/nvidia-ctk" doctor --spec-dir "$work/cdi-nctk" 2>&1)
	say "$doc"
	# Engines are not this script's concern (none need be installed): the
	# driver, device node, config and CDI checks must find no error.
	check "doctor on the host: driver, devices, config, CDI errors" 0 "$(printf '%s\n' "$doc" | grep -cE '^ERROR +(driver|devices|config|cdi)\.')"
fi
write_bundle '["/bin/true"]' NVIDIA_VISIBLE_DEVICES=all "NVIDIA_REQUIRE_CUDA=cuda>=99.0"
doc=$("$bin/nvidia-ctk" doctor "${doctor_root[@]}" --bundle "$bundle" --spec-dir "$work/cdi-nctk" 2>&1)
rc=$?
check "doctor on a bundle needing CUDA 99: exit status" 1 "$rc"
check "doctor on a bundle needing CUDA 99: finding" yes "$(printf '%s' "$doc" | grep -q '^ERROR *container.requirements' && echo yes || echo no)"
say '```'

# --- timing ----------------------------------------------------------------------------
if [ "$rounds" -gt 0 ]; then
	# legacy-hook, cdi-hook: the same creates without --pid-file, where the
	# runtime leaves the work a created container needs (the
	# /proc/driver/nvidia view, the params mask) to a hook process.
	paths="legacy cdi hook legacy-hook cdi-hook"
	[ -n "$nv_runtime" ] && [ -n "$nv_hook" ] && [ -n "$nv_ctk" ] && paths="$paths nvidia-cdi"
	: >"$work/times"
	timed() { # timed LABEL CMD...: one create, its wall time in µs appended to times
		local label=$1 s e
		shift
		s=$(date +%s%N)
		"$@" >/dev/null 2>&1 || echo "$label: create failed" >&2
		e=$(date +%s%N)
		echo "$label $(((e - s) / 1000))" >>"$work/times"
	}
	# Every create starts from a fresh copy of the image (outside the timed
	# part): runc makes the mount points in the rootfs, and a path that found
	# them made by the one before would be timed without that work. The
	# copy is synced first: on a file system mounted with discard, the
	# journal commit of the removal would otherwise land inside the timed
	# create (an engine unpacks an image well before it starts it).
	fresh() { rm -rf "$bundle/rootfs" && cp -a "$work/rootfs.pristine" "$bundle/rootfs" && sync -f "$bundle"; }
	write_bundle '["/bin/true"]' NVIDIA_VISIBLE_DEVICES=all
	cp "$bundle/config.json" "$work/config.pristine.json"
	# The engine-applied paths' config.json, made once (an engine's own
	# work, not timed), and its floor without the spec's hooks.
	for np in $native_paths; do
		p=${np%%:*}
		cp "$work/config.pristine.json" "$bundle/config.json"
		inject_spec "${np#*:}" && cp "$bundle/config.json" "$work/config.$p.json" || continue
		cp "$work/config.pristine.json" "$bundle/config.json"
		inject_spec "${np#*:}" -drop-hooks && cp "$bundle/config.json" "$work/config.floor-$p.json" || continue
		paths="$paths $p"
	done
	for rp in $rt_paths; do
		IFS=: read -r p dir cfg <<<"$rp"
		cp "$work/config.pristine.json" "$bundle/config.json"
		inject_spec "$dir" && cp "$bundle/config.json" "$work/config.$p.json" || continue
		echo "$cfg" >"$work/config.$p.cfg"
		paths="$paths $p"
	done
	for i in $(seq 1 "$rounds"); do
		fresh
		cp "$work/config.pristine.json" "$bundle/config.json"
		timed runc "$runc_bin" --root "$state" create --bundle "$bundle" --pid-file "$work/pid" "t$i-runc"
		"$runc_bin" --root "$state" delete --force "t$i-runc" >/dev/null 2>&1
		for p in $paths; do
			fresh
			cp "$work/config.pristine.json" "$bundle/config.json"
			case $p in
			legacy | cdi)
				[ $p = cdi ] && ask_cdi_all
				NVIDIA_CTK_CONFIG_FILE_PATH="$work/$p.toml" timed "$p" "$bin/nvidia-container-runtime" --root "$state" create --bundle "$bundle" --pid-file "$work/pid" "t$i-$p" ;;
			legacy-hook | cdi-hook)
				[ $p = cdi-hook ] && ask_cdi_all
				NVIDIA_CTK_CONFIG_FILE_PATH="$work/${p%-hook}.toml" timed "$p" "$bin/nvidia-container-runtime" --root "$state" create --bundle "$bundle" "t$i-$p" ;;
			hook)
				add_prestart_hook
				timed hook "$runc_bin" --root "$state" create --bundle "$bundle" --pid-file "$work/pid" "t$i-$p" ;;
			nvidia-cdi)
				ask_cdi_all
				NVIDIA_CTK_CONFIG_FILE_PATH="$work/cdi-nvh.toml" timed "$p" "$nv_runtime" --root "$state" create --bundle "$bundle" --pid-file "$work/pid" "t$i-$p" ;;
			*native-rt)
				cp "$work/config.$p.json" "$bundle/config.json"
				NVIDIA_CTK_CONFIG_FILE_PATH="$work/$(cat "$work/config.$p.cfg").toml" timed "$p" "$bin/nvidia-container-runtime" --root "$state" create --bundle "$bundle" --pid-file "$work/pid" "t$i-$p" ;;
			*native*)
				cp "$work/config.$p.json" "$bundle/config.json"
				timed "$p" "$runc_bin" --root "$state" create --bundle "$bundle" --pid-file "$work/pid" "t$i-$p" ;;
			esac
			"$runc_bin" --root "$state" delete --force "t$i-$p" >/dev/null 2>&1
			# The floor: runc alone on the config.json this path wrote, on a
			# fresh image (the hook path's is legacy-hook's, the same plan's
			# mounts and devices in config.json: the report takes it from
			# there; an engine-applied path's is its config.json without the
			# hooks).
			if [ $p != hook ]; then
				case $p in
				*native-rt) cp "$bundle/config.json" "$work/config.floor-$p.json" ;;
				*native*) ;;
				*) cp "$bundle/config.json" "$work/config.floor-$p.json" ;;
				esac
				fresh
				cp "$work/config.floor-$p.json" "$bundle/config.json"
				timed "floor-$p" "$runc_bin" --root "$state" create --bundle "$bundle" --pid-file "$work/pid" "f$i-$p"
				"$runc_bin" --root "$state" delete --force "f$i-$p" >/dev/null 2>&1
			fi
		done
	done
	median() { awk -v p="$1" '$1 == p {print $2}' "$work/times" | sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "-"}'; }
	say ""
	say "## Create timing ($rounds rounds, alternating; medians in ms; own share = median - floor)"
	say ""
	say "| path | create | over runc | floor (runc on its config.json) | own share | own share over runc making the same container |"
	say "|---|---|---|---|---|---|"
	r=$(median runc)
	say "| plain runc | $(awk -v a="$r" 'BEGIN {printf "%.1f", a / 1000}') | — | — | — | — |"
	for p in $paths; do
		m=$(median "$p")
		f=$(median "floor-$p")
		of=""
		# The hook makes its plan's mounts and devices itself: its floor
		# is legacy-hook's, runc on the config.json holding that same plan
		# (the hook reads legacy.toml).
		if [ "$p" = hook ]; then
			f=$(median floor-legacy-hook)
			of=" (legacy-hook's)"
		fi
		# The runtime makes the driver's mounts itself after a create with
		# a pid file: the config.json runc gets, and so that floor, lacks
		# them. The last column takes the share over runc on a config.json
		# that holds them (issue 12's floor: the same container made by runc
		# alone): legacy-hook's and cdi-hook's (no pid file: the mounts left
		# to runc), and for an engine-applied spec then the runtime, the
		# engine-applied config.json without its hooks.
		mf=$f mof=""
		case $p in
		legacy | cdi) mf=$(median "floor-$p-hook") mof=" (over $p-hook's floor)" ;;
		*native-rt) mf=$(median "floor-${p%-rt}") mof=" (over ${p%-rt}'s floor)" ;;
		esac
		awk -v p="$p" -v m="$m" -v r="$r" -v f="$f" -v of="$of" -v mf="$mf" -v mof="$mof" 'BEGIN {
			if (f == "-") printf "| %s | %.1f | %+.1f | — | — |", p, m / 1000, (m - r) / 1000
			else printf "| %s | %.1f | %+.1f | %.1f%s | %.1f |", p, m / 1000, (m - r) / 1000, f / 1000, of, (m - f) / 1000
			if (mf == "-") printf " — |\n"
			else printf " %.1f%s |\n", (m - mf) / 1000, mof
		}' | tee -a "$report"
	done
fi

say ""
if [ "$fail" = 0 ]; then say "RESULT: every container got what it asked for"; else say "RESULT: MISMATCHES above"; fi
[ -n "$out" ] && cp "$report" "$out"
exit "$fail"
