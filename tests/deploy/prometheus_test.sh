#!/usr/bin/env bash
# A real Prometheus (Debian's) scraping the three processes of `tandem up`:
# every /metrics page passes `promtool check metrics`, the rules load, and
# after some load (good requests with shared prefixes, and some refused
# ones) every dashboard panel's and every rule's query returns data.
# Usage: prometheus_test.sh BIN_DIR MODEL
set -euo pipefail
bin="$1"
model="$2"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Waits (up to $2 s) until file $1 holds a line matching $3.
await_line() {
  for _ in $(seq 1 $(( $2 * 10 ))); do
    grep -q "$3" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "timed out waiting for '$3' in $1" >&2
  cat "$1" >&2 || true
  return 1
}

"$bin/tandem" up --model "$model" --port 0 --http-port 0 >"$work/up.out" 2>"$work/up.err" &
pids+=($!)
await_line "$work/up.out" 120 '^READY '
await_line "$work/up.err" 10 'tandem up: tandem-gateway '
addr_of() { grep "tandem up: $1 " "$work/up.err" | sed -E "s/.* $2=([^ ]+).*/\1/"; }
gateway="$(addr_of tandem-gateway grpc)"
http="$(sed -E 's/.* http=([^ ]+).*/\1/' "$work/up.out")"
declare -A metrics=(
  [gateway]="$(addr_of tandem-gateway metrics)"
  [prefill]="$(addr_of tandem-prefill metrics)"
  [decode]="$(addr_of tandem-decode metrics)"
)

for component in gateway prefill decode; do
  curl -fsS "http://${metrics[$component]}/metrics" >"$work/$component.prom"
  if ! promtool check metrics <"$work/$component.prom" >"$work/lint" 2>&1; then
    echo "promtool check metrics: $component" >&2
    cat "$work/lint" >&2
    exit 1
  fi
done
echo "promtool check metrics: clean for gateway, prefill and decode"

{
  echo "global: {scrape_interval: 1s, evaluation_interval: 1s}"
  echo "rule_files: ['$root/deploy/prometheus/rules.yaml']"
  echo "scrape_configs:"
  echo "  - job_name: tandem"
  echo "    static_configs:"
  for component in gateway prefill decode; do
    echo "      - {targets: ['${metrics[$component]}'], labels: {component: $component}}"
  done
} >"$work/prometheus.yml"
promtool check config "$work/prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:0 >"$work/prometheus.log" 2>&1 &
prom_pid=$!
pids+=("$prom_pid")
# Port 0: the kernel's pick, read back from the listening socket.
prom=""
for _ in $(seq 1 300); do
  prom="$(ss -Hltnp 2>/dev/null | grep "pid=$prom_pid," | awk '{print $4}' | head -1 || true)"
  [ -n "$prom" ] && curl -fsS "http://$prom/-/ready" >/dev/null 2>&1 && break
  prom=""
  sleep 0.1
done
[ -n "$prom" ] || { echo "prometheus did not start" >&2; cat "$work/prometheus.log" >&2; exit 1; }
echo "prometheus on $prom"

# Load: shared prefixes (cache hits, KV transfers), then refused requests
# (an error code on the gRPC and HTTP counters).
"$bin/tandem-load" --addr "$gateway" --concurrency 4 --requests 24 --prompt-tokens 96 \
  --shared-prefix-tokens 64 --max-tokens 8 --out "$work/load.json"
# A model the gateway does not serve passes the HTTP front and is refused by
# the Generation service.
for _ in 1 2 3; do
  code="$(curl -s -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
    -d '{"model": "no-such-model", "prompt": "Once upon a time", "max_tokens": 4}' \
    "http://$http/v1/completions")"
  case "$code" in
    4??) ;;
    *) echo "a request for an unknown model got HTTP $code" >&2; exit 1 ;;
  esac
done

# Every target up; prometheus_queries.mjs then waits for the queries' data.
up_targets() {
  curl -fsS "http://$prom/api/v1/query" --data-urlencode 'query=count(up{job="tandem"} == 1)' |
    sed -nE 's/.*"value":\[[^,]*,"([0-9]+)"\].*/\1/p'
}
for _ in $(seq 1 300); do
  [ "$(up_targets)" = 3 ] && break
  sleep 0.1
done
[ "$(up_targets)" = 3 ] || { echo "prometheus does not see the three targets up" >&2; exit 1; }

node "$here/prometheus_queries.mjs" "http://$prom"
