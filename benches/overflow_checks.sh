#!/usr/bin/env bash
# What overflow checks cost: two release builds of routeval, one with
# `overflow-checks = true` for routeval's own code and one without, run
# alternately on the same inputs (5 runs each, medians); prints the ratio.
#
#   benches/overflow_checks.sh WRAPPING_BINARY CHECKED_BINARY DIR
#
# DIR holds the inputs: sim.parquet (`routeval simulate --requests 5000000`),
# records.jsonl (a million request records), records.parquet and
# route-config.v1.json with its key (the drift_records bench leaves these in
# $CARGO_TARGET_TMPDIR/bench-drift-records), and trace.jsonl (Mooncake's
# conversation trace).
set -euo pipefail
wrapping=$1 checked=$2 dir=$3
runs=${RUNS:-5}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || [ $? -eq 1 ]
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

workload() {
  local name=$1; shift
  local ours=() theirs=()
  for _ in $(seq "$runs"); do
    theirs+=("$(seconds "$wrapping" "$@")")
    ours+=("$(seconds "$checked" "$@")")
  done
  local w c
  w=$(printf '%s\n' "${theirs[@]}" | median)
  c=$(printf '%s\n' "${ours[@]}" | median)
  printf '%-28s wrapping %6.3f s  checked %6.3f s  checked/wrapping %.3f\n' \
    "$name" "$w" "$c" "$(echo "$c / $w" | bc -l)"
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
workload "calibrate, 5M rows" calibrate --target 0.9 --json --results "$dir/sim.parquet"
workload "drift --records, 10M" drift --json --window 1h --config "$dir/route-config.v1.json" --records "$dir/records.parquet"
workload "records import, 1M lines" records import --from generic --input "$dir/records.jsonl" --out "$out/records.parquet"
workload "replay replicas, Mooncake" replay replicas --json --replicas 8 --trace "$dir/trace.jsonl"
workload "replay hedge, 1M records" replay hedge --json --records "$dir/records.jsonl"
