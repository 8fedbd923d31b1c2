#!/usr/bin/env bash
# Pulling a prompt's prefix from another prefill worker vs computing it:
# starts two prefill workers (one compute thread each) on MODEL and runs
# tandem-prefix-pull-bench against them. Reports; never fails on speed.
# Usage: bench/prefix_pull.sh BIN_DIR MODEL [PREFIX_TOKENS] [REPEATS] [OUT]
set -euo pipefail
bin=$1 model=$2 prefix=${3:-2000} repeats=${4:-3} out=${5:-}
logs=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; rm -rf "$logs"' EXIT
addr=()
for w in holder target; do
  "$bin/tandem-prefill" --model "$model" --threads 1 >"$logs/$w.out" 2>"$logs/$w.err" &
  pids+=($!)
  for _ in $(seq 600); do grep -q READY "$logs/$w.out" 2>/dev/null && break; sleep 0.1; done
  a=$(sed -n 's/^READY grpc=\([^ ]*\).*/\1/p' "$logs/$w.out")
  [ -n "$a" ] || { echo "$w did not become ready:" >&2; cat "$logs/$w.err" >&2; exit 1; }
  addr+=("$a")
done
"$bin/tandem-prefix-pull-bench" --holder "${addr[0]}" --target "${addr[1]}" \
  --prefix-tokens "$prefix" --repeats "$repeats" ${out:+--out "$out"}
