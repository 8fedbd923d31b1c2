#!/usr/bin/env bash
# The reference tandem-load workload through the gateway's gRPC port and
# through its OpenAI-compatible HTTP front, alternating, RUNS times each on
# one `tandem up` (every run with its own prompts and prefixes, so neither
# front reuses the other's cache). Prints and appends each run's JSON line
# to OUT.
# Usage: bench/http_vs_grpc.sh BIN_DIR MODEL OUT [RUNS]
set -euo pipefail
bin="$1"
model="$2"
out="$3"
runs="${4:-3}"
work="$(mktemp -d)"
"$bin/tandem" up --model "$model" --port 0 --http-port 0 >"$work/ready" 2>"$work/log" &
up=$!
trap 'kill "$up" 2>/dev/null; wait "$up" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 600); do grep -q READY "$work/ready" 2>/dev/null && break; sleep 0.2; done
addr=$(sed -n 's/^READY grpc=\([^ ]*\).*/\1/p' "$work/ready")
http=$(grep -o 'http=[^ ]*' "$work/ready" | cut -d= -f2)
[ -n "$http" ] || { cat "$work/log" >&2; echo "tandem up did not become ready" >&2; exit 1; }
seed=0
for _ in $(seq "$runs"); do
  for front in grpc http; do
    extra=()
    [ "$front" = http ] && extra=(--http-addr "$http")
    seed=$((seed + 1))
    "$bin/tandem-load" --addr "$addr" "${extra[@]}" --concurrency 32 --requests 32 \
      --prompt-tokens 256 --shared-prefix-tokens 200 --max-tokens 64 --seed "$seed" \
      --prefix-seed $((1000 + seed)) --out "$out" | tail -n 1
  done
done
