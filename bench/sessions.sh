#!/usr/bin/env bash
# Sessions vs a stateless client over one long conversation (reports, never
# fails on speed), each on a fresh `tandem up` on MODEL (so none finds
# another's blocks cached): tandem-session-bench runs TURNS turns with a
# WINDOW-token session (only each new message sent), REPREFILL then SHIFT,
# then the same
# conversation resent whole each turn through Generate (messages), until it
# no longer fits the context. Prints both curves' summaries and appends
# their per-turn figures to OUT.
# Usage: bench/sessions.sh BIN_DIR MODEL [TURNS] [WINDOW] [OUT]
set -euo pipefail
bin=$1 model=$2 turns=${3:-200} window=${4:-1024} out=${5:-/dev/null}
log=$(mktemp)
up=
trap 'stop; rm -f "$log" "$log.err"' EXIT
stop() {
  [ -z "$up" ] || { kill "$up" 2>/dev/null || true; wait "$up" 2>/dev/null || true; }
  up=
}
for run in sessions:reprefill sessions:shift stateless:reprefill; do
  mode=${run%%:*} policy=${run##*:}
  : >"$log"
  "$bin/tandem" up --model "$model" --port 0 >"$log" 2>"$log.err" &
  up=$!
  for _ in $(seq 600); do grep -q READY "$log" 2>/dev/null && break; sleep 0.1; done
  addr=$(sed -n 's/^READY grpc=\([^ ]*\).*/\1/p' "$log")
  [ -n "$addr" ] || { echo "tandem up did not become ready:" >&2; cat "$log.err" >&2; exit 1; }
  "$bin/tandem-session-bench" --addr "$addr" --mode "$mode" --policy "$policy" --turns "$turns" \
    --window "$window" --label "$(basename "$model")" --out "$out"
  stop
done
