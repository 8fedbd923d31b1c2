#!/usr/bin/env bash
# The cache tiers (reports, never fails on speed): tandem-tier-bench on MODEL
# (TTFT of a 2000-token cached prefix from the pool, host RAM and disk
# against recomputing it; the disk tier's write throughput), then the
# reference workload (tandem-load --concurrency 32 --requests 32
# --prompt-tokens 256 --shared-prefix-tokens 200 --max-tokens 64) on a fresh
# `tandem up` twice, with a disk tier and with --hot-cache-only, sampling
# each process's RSS every 100 ms. Figures go to stdout and OUT.
# Usage: bench/tiers.sh BIN_DIR MODEL [OUT]
set -euo pipefail
bin=$1 model=$2 out=${3:-/dev/null}
. "$(dirname "$0")/tandem_up.sh"
cache_dir=$(mktemp -d)
load_out=$(mktemp)
trap 'stop_tandem_up 2>/dev/null || true; rm -rf "$cache_dir" "$load_out"' EXIT

"$bin/tandem-tier-bench" --model "$model" --disk-cache-dir "$cache_dir/bench" --out "$out" \
  2> >(grep -v '^disk-tier:' >&2)

for mode in disk hot-cache-only; do
  if [ "$mode" = disk ]; then
    flags=(--disk-cache-dir "$cache_dir/up")
  else
    flags=(--disk-cache-dir "$cache_dir/up" --hot-cache-only)
  fi
  start_tandem_up "$bin" "$model" "${flags[@]}"
  declare -A pid=() rss=()
  for name in tandem-gateway tandem-prefill tandem-decode; do
    pid[$name]=$(sed -n "s/^tandem up: $name *pid \([0-9]*\).*/\1/p" "$up_log" | head -1)
  done
  "$bin/tandem-load" --addr "$addr" --concurrency 32 --requests 32 --prompt-tokens 256 \
    --shared-prefix-tokens 200 --max-tokens 64 >"$load_out" 2>&1 &
  load=$!
  while kill -0 $load 2>/dev/null; do
    for name in "${!pid[@]}"; do
      s=/proc/${pid[$name]}/status
      [ -r "$s" ] || continue
      r=$(awk '/^VmRSS:/ {print $2}' "$s")
      [ "${r:-0}" -gt "${rss[$name]:-0}" ] && rss[$name]=$r
    done
    sleep 0.1
  done
  wait $load || true
  files=$({ find "$cache_dir/up" -name '*.kvb' 2>/dev/null || true; } | wc -l)
  stop_tandem_up
  line="== reference workload, $mode ($files block files written):"
  for name in tandem-gateway tandem-prefill tandem-decode; do
    line+=$(printf ' %s peak RSS %.1f MiB;' "$name" \
      "$(awk -v k="${rss[$name]:-0}" 'BEGIN {print k/1024}')")
  done
  echo "$line"
  echo "$line" >>"$out"
  grep -v '^{' "$load_out" | head -3
  rm -rf "$cache_dir/up"
done
