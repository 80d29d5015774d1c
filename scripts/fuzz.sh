#!/usr/bin/env bash
# Runs every `go test -fuzz` target of the module for FUZZTIME each (default
# 10m), one after another. Inputs that crash a target are written by Go under
# the package's testdata/fuzz/<Target>/ (commit them: they become seeds that
# every `go test` run replays). Exits non-zero if any target fails.
#   FUZZTIME=30s scripts/fuzz.sh            # all targets, 30 s each
#   scripts/fuzz.sh ./internal/ldcache      # the targets of some packages
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10m}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
mapfile -t dirs < <(go list -f '{{.Dir}}' "${pkgs[@]}")
failed=()
total=0
for dir in "${dirs[@]}"; do
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u)
  for t in $targets; do
    total=$((total + 1))
    rel=./${dir#"$PWD"/}
    start=$(date +%s)
    if go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$rel" >"/tmp/nctk-fuzz-$t.log" 2>&1; then
      echo "ok    $rel $t ($(( $(date +%s) - start )) s)"
    else
      echo "FAIL  $rel $t (log: /tmp/nctk-fuzz-$t.log)"
      failed+=("$rel $t")
    fi
  done
done
echo "fuzz: $total targets, ${#failed[@]} failed, $fuzztime each"
[ ${#failed[@]} -eq 0 ]
