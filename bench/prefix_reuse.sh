#!/usr/bin/env bash
# Prefix reuse through real processes (reports, never fails on speed):
#  1. system prompt: one prefill + one decode worker; one request of a
#     SYSTEM-token shared prompt plus a 50-token question (cold), then the
#     same prompt with another question (warm). TTFT of each.
#  2. routing: two prefill workers + one decode worker; 64 requests in 8
#     groups of a ROUTING-token shared prompt plus 50 tokens of their own,
#     8 at a time, once with --router kv and once with --router least-loaded
#     (fresh processes each time). Prefix hit rate (cached / prompt tokens)
#     and TTFT p50/p99 of each.
# The model needs a context of SYSTEM + 66 tokens (`tandem make-model
# --context-length 4096` for the synthetic one).
# Usage: bench/prefix_reuse.sh BIN_DIR MODEL [SYSTEM_TOKENS] [ROUTING_TOKENS] [OUT]
set -euo pipefail
bin=$1 model=$2 system=${3:-2000} routing=${4:-1000} out=${5:-/dev/null}
pids=()
logs=$(mktemp -d)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'cleanup; rm -rf "$logs"' EXIT

# start NAME BINARY ARGS...: starts a process, waits for its READY line and
# sets $grpc to its address.
start() {
  local name=$1
  shift
  "$@" >"$logs/$name.out" 2>"$logs/$name.err" &
  pids+=($!)
  for _ in $(seq 600); do grep -q READY "$logs/$name.out" 2>/dev/null && break; sleep 0.1; done
  grpc=$(sed -n 's/^READY grpc=\([^ ]*\).*/\1/p' "$logs/$name.out")
  [ -n "$grpc" ] || { echo "$name did not become ready:" >&2; cat "$logs/$name.err" >&2; exit 1; }
}

# stack PREFILL_WORKERS ROUTER: workers and a gateway; sets $addr.
stack() {
  local prefill=()
  for i in $(seq "$1"); do
    start "prefill$i" "$bin/tandem-prefill" --model "$model" --threads 1
    prefill+=("$grpc")
  done
  start decode "$bin/tandem-decode" --model "$model" --threads 1
  local decode=$grpc
  start gateway "$bin/tandem-gateway" --model "$model" --router "$2" \
    --prefill "$(IFS=,; echo "${prefill[*]}")" --decode "$decode"
  addr=$grpc
}

json() { tail -1; }
field() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p"; }

stack 1 kv
cold=$("$bin/tandem-load" --addr "$addr" --concurrency 1 --requests 1 \
  --prompt-tokens $((system + 50)) --shared-prefix-tokens "$system" --prefix-seed 42 --seed 1 \
  --max-tokens 16 | json)
warm=$("$bin/tandem-load" --addr "$addr" --concurrency 1 --requests 1 \
  --prompt-tokens $((system + 50)) --shared-prefix-tokens "$system" --prefix-seed 42 --seed 2 \
  --max-tokens 16 | json)
cleanup
echo "$cold" >>"$out"
echo "$warm" >>"$out"
awk -v s="$system" -v c="$(echo "$cold" | field ttft_p50_s)" -v w="$(echo "$warm" | field ttft_p50_s)" \
  -v cc="$(echo "$warm" | field cached_prompt_tokens)" \
  'BEGIN { printf "system prompt %d + 50 tokens: TTFT cold %.1f ms, warm %.1f ms (%d cached)\n", s, c*1e3, w*1e3, cc }'

for router in kv least-loaded; do
  stack 2 "$router"
  run=$("$bin/tandem-load" --addr "$addr" --concurrency 8 --requests 64 \
    --prompt-tokens $((routing + 50)) --shared-prefix-tokens "$routing" --prefix-groups 8 \
    --max-tokens 16 | json)
  cleanup
  echo "$run" >>"$out"
  awk -v r="$router" -v p="$(echo "$run" | field prompt_tokens_total)" \
    -v c="$(echo "$run" | field cached_prompt_tokens)" \
    -v t50="$(echo "$run" | field ttft_p50_s)" -v t99="$(echo "$run" | field ttft_p99_s)" \
    -v tps="$(echo "$run" | field output_tokens_per_s)" \
    'BEGIN { printf "router %-12s hit rate %5.1f%% (%d of %d prompt tokens), TTFT p50 %.0f ms p99 %.0f ms, %.0f tok/s\n", r, 100*c/p, c, p, t50*1e3, t99*1e3, tps }'
done
