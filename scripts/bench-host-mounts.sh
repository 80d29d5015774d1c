#!/usr/bin/env bash
# bench-host-mounts.sh — run BenchmarkCreateCDI as on a busy host: with N
# more mounts in the mount namespace that runc, the hooks and the runtime
# see (a host running many containers has an overlay and a few volumes per
# container). The mounts are tmpfs in a private mount namespace of this
# script (unshare -m): the host's own table is not touched, and everything
# the benchmark starts runs in that namespace.
#
# Usage (as root, from the repository): scripts/bench-host-mounts.sh [N] [go test flags...]
#
#   N          extra mounts (default 1000)
#   flags      passed to `go test ./test/e2e` after the defaults
#              (-run '^$' -bench BenchmarkCreateCDI/gpus=1 -benchtime 30x)
#
# The benchmark's own variables apply (NCTK_BENCH_ONLY, NCTK_BENCH_BASELINE_BIN,
# NCTK_BENCH_NVIDIA_BIN; see test/e2e/bench_cdi_test.go). Example, the --gpus
# hook path against another build:
#
#   NCTK_BENCH_ONLY=hook,base-hook NCTK_BENCH_BASELINE_BIN=/tmp/base/bin \
#       scripts/bench-host-mounts.sh 1000
set -euo pipefail

n=${1:-1000}
shift || true
[[ $n =~ ^[0-9]+$ ]] || { echo "bench-host-mounts: N must be a number, got '$n'" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "bench-host-mounts: needs root (mounts, runc)" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
test=$(mktemp -d /tmp/nctk-bench-mounts-XXXXXX)
trap 'rm -rf "$test"' EXIT
go -C "$repo" test -c -o "$test/e2e.test" ./test/e2e

# shellcheck disable=SC2016 # expanded by the inner shell
unshare -m --propagation private bash -c '
set -euo pipefail
n=$1 dir=$2/mounts repo=$3
shift 3
mkdir -p "$dir"
mount -t tmpfs nctk-bench "$dir"
for ((i = 0; i < n; i++)); do
	mkdir "$dir/$i"
	mount -t tmpfs nctk-bench "$dir/$i"
done
echo "mounts in this namespace: $(wc -l </proc/self/mountinfo)"
cd "$repo/test/e2e"
"$(dirname "$dir")/e2e.test" -test.run "^\$" -test.bench BenchmarkCreateCDI/gpus=1 -test.benchtime 30x "$@"
' bench-host-mounts "$n" "$test" "$repo" "$@"
