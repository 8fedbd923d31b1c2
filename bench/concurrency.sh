#!/usr/bin/env bash
# N concurrent streams against one gateway: starts `tandem up` on MODEL, runs
# tandem-load with N requests N at a time, samples every process's thread
# count and RSS every 100 ms while it runs, and prints the peaks next to the
# load's TTFT and errors by status code. Reports; never fails on speed.
# Usage: bench/concurrency.sh BIN_DIR MODEL [N] [PROMPT_TOKENS] [MAX_TOKENS]
set -euo pipefail
bin=$1 model=$2 n=${3:-1000} prompt=${4:-32} gen=${5:-16}
. "$(dirname "$0")/tandem_up.sh"
load_out=$(mktemp)
trap 'stop_tandem_up; rm -f "$load_out"' EXIT
start_tandem_up "$bin" "$model"
declare -A pid
for name in tandem-gateway tandem-prefill tandem-decode; do
  pid[$name]=$(sed -n "s/^tandem up: $name *pid \([0-9]*\).*/\1/p" "$up_log" | head -1)
done
"$bin/tandem-load" --addr "$addr" --concurrency "$n" --requests "$n" --prompt-tokens "$prompt" \
  --max-tokens "$gen" >"$load_out" 2>&1 &
load=$!
declare -A threads rss
while kill -0 $load 2>/dev/null; do
  for name in "${!pid[@]}"; do
    s=/proc/${pid[$name]}/status
    [ -r "$s" ] || continue
    t=$(awk '/^Threads:/ {print $2}' "$s"); r=$(awk '/^VmRSS:/ {print $2}' "$s")
    [ "${t:-0}" -gt "${threads[$name]:-0}" ] && threads[$name]=$t
    [ "${r:-0}" -gt "${rss[$name]:-0}" ] && rss[$name]=$r
  done
  sleep 0.1
done
wait $load || true
echo "== $n concurrent streams ($prompt-token prompts, $gen tokens each) on $(basename "$model")"
for name in tandem-gateway tandem-prefill tandem-decode; do
  printf '%-15s peak threads %5s  peak RSS %6.1f MiB\n' "$name" "${threads[$name]:-?}" \
    "$(awk -v k="${rss[$name]:-0}" 'BEGIN {print k/1024}')"
done
grep -v '^{' "$load_out"
