#!/usr/bin/env bash
# KV transfer bandwidth through the real processes: `tandem up` on a model,
# N sequential requests with an N-token prompt and 2 generated tokens, then
# the decode worker's tandem_kv_transfer_bytes_total{direction="received"}
# divided by tandem_kv_transfer_seconds_sum{side="decode"} (fetch + verify +
# decode per request). Prints one line; reports, never fails on speed.
# Usage: bench/kv_transfer_e2e.sh BIN_DIR MODEL [PROMPT_TOKENS] [REQUESTS]
set -euo pipefail
bin=$1 model=$2 tokens=${3:-2000} requests=${4:-10}
. "$(dirname "$0")/tandem_up.sh"
trap stop_tandem_up EXIT
start_tandem_up "$bin" "$model"
"$bin/tandem-load" --addr "$addr" --concurrency 1 --requests "$requests" \
  --prompt-tokens "$tokens" --max-tokens 2 >/dev/null
metrics=$(grep -o 'tandem-decode.*metrics[= ][0-9.:]*' "$up_log" | grep -o '[0-9.]*:[0-9]*$' | head -1)
text=$(curl -s "http://$metrics/metrics")
bytes=$(echo "$text" | awk '/^tandem_kv_transfer_bytes_total\{direction="received"\}/ {print $2}')
secs=$(echo "$text" | awk '/^tandem_kv_transfer_seconds_sum\{side="decode"\}/ {print $2}')
awk -v b="$bytes" -v s="$secs" -v n="$requests" -v t="$tokens" \
  'BEGIN { printf "kv transfer e2e: %d requests x %d tokens: %.1f MB in %.3f s = %.2f GB/s\n", n, t, b/1e6, s, b/s/1e9 }'
