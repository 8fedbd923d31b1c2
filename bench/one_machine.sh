#!/usr/bin/env bash
# The one-machine reference workload (32 concurrent clients, 256-token prompts
# sharing 200, 64 tokens out; with LOAD=all also 32 clients without a shared
# prefix and 128 clients with and without one, so each 128-client load has its
# 32-client baseline) against `tandem up` (a prefill and a decode worker),
# `tandem up --mode aggregated` (one worker) and, given llama.cpp's bin folder,
# llama-server (-t 2 -tb 2 -np 4 -c 4096, prompt cache on; tandem-load over its
# /v1/completions, one token per event), in alternating
# rounds on the same machine. Every service starts fresh for each run, which
# gets its own prompts and prefixes. Prints and appends each run's JSON line
# (tandem-load's, with "service" added) to OUT, then the medians per service
# and load.
# Usage: bench/one_machine.sh BIN_DIR MODEL OUT [ROUNDS] [LLAMA_BIN_DIR]
#   LOAD=ref (default) or all; PORT_BASE for llama-server (default 18090);
#   UP_FLAGS: more `tandem up` flags for both Tandem services (e.g. --max-running 8);
#   SERVICES: which to run, of tandem, aggregated, llama-server (given its bin
#   folder), aggregated-capped (aggregated with CAPPED_FLAGS, default
#   "--max-running 8 --max-batch-tokens 12": few sequences and small prompt
#   chunks per step, for inter-token latency), aggregated-itl (aggregated
#   with --itl-target-ms ITL_TARGET_MS, default 8), tandem-spec and
#   aggregated-spec (prompt-lookup speculation on), tandem-draft and
#   aggregated-draft (draft-model speculation with the model DRAFT);
#   WARMUP=1: each service first serves the same load with other prompts and
#   prefixes (not measured), so a run sees a server in its steady state (its
#   KV pool's pages touched, its speculation's costs and acceptance learned).
set -euo pipefail
bin="$1"
model="$2"
out="$3"
rounds="${4:-5}"
llama="${5:-}"
load="${LOAD:-ref}"
port="${PORT_BASE:-18090}"
work="$(mktemp -d)"
pid=""
stop() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=""
}
trap 'stop; rm -rf "$work"' EXIT

# Starts `tandem up` with the given flags; sets addr.
start_tandem() {
  # shellcheck disable=SC2086
  "$bin/tandem" up --model "$model" --port 0 ${UP_FLAGS:-} "$@" >"$work/ready" 2>"$work/log" &
  pid=$!
  for _ in $(seq 600); do grep -q READY "$work/ready" 2>/dev/null && break; sleep 0.2; done
  addr=$(sed -n 's/^READY grpc=\([^ ]*\).*/\1/p' "$work/ready")
  [ -n "$addr" ] || { cat "$work/log" >&2; echo "tandem up did not become ready" >&2; exit 1; }
}

# shellcheck source=bench/llama_server.sh
source "$(dirname "$0")/llama_server.sh"

# Starts llama-server; sets http.
start_llama() {
  start_llama_server "$llama" "$model" "$port" "$work/llama.log" -np 4 || exit 1
  pid=$llama_pid
  http="127.0.0.1:$port"
}

# llama-server's completions fail (HTTP 500 mid-stream) on output that is not
# valid UTF-8, which the synthetic model's byte tokens (ids 131-258) make of
# random text: they are banned for it (LLAMA_BODY overrides, "{}" for none).
llama_body="${LLAMA_BODY:-$(python3 -c 'import json; print(json.dumps({"logit_bias": {str(i): -100 for i in range(131, 259)}}))')}"

loads=("32 256 200")
[ "$load" = all ] && loads+=("32 256 0" "128 256 200" "128 256 0")
services=(tandem aggregated aggregated-capped aggregated-itl)
[ -n "$llama" ] && services+=(llama-server)
# SERVICES="tandem aggregated" runs a subset; tandem-spec and aggregated-spec
# (not run unless named) are the two with prompt-lookup speculation on, and
# tandem-draft and aggregated-draft those with DRAFT's proposals.
[ -n "${SERVICES:-}" ] && read -r -a services <<<"$SERVICES"
seed=0
for round in $(seq "$rounds"); do
  # Alternate the order so no service always runs on a machine warmed by another.
  order=("${services[@]}")
  [ $((round % 2)) = 0 ] && order=($(printf '%s\n' "${services[@]}" | tac))
  for service in "${order[@]}"; do
    for shape in "${loads[@]}"; do
      read -r clients prompt shared <<<"$shape"
      seed=$((seed + 1))
      # The load's shape; its prompts and prefixes come from the seeds after it.
      shape_args=(--concurrency "$clients" --requests "$((clients * 2))" --prompt-tokens "$prompt"
                  --shared-prefix-tokens "$shared" --max-tokens 64)
      case "$service" in
        tandem) start_tandem; target=(--addr "$addr") ;;
        aggregated) start_tandem --mode aggregated; target=(--addr "$addr") ;;
        aggregated-itl)
          start_tandem --mode aggregated --itl-target-ms "${ITL_TARGET_MS:-8}"
          target=(--addr "$addr") ;;
        aggregated-capped)
          # shellcheck disable=SC2086
          start_tandem --mode aggregated ${CAPPED_FLAGS:---max-running 8 --max-batch-tokens 12}
          target=(--addr "$addr") ;;
        tandem-spec) start_tandem --speculative prompt-lookup; target=(--addr "$addr") ;;
        aggregated-spec)
          start_tandem --mode aggregated --speculative prompt-lookup; target=(--addr "$addr") ;;
        tandem-draft)
          start_tandem --speculative draft --draft-model "${DRAFT:?DRAFT names the draft model}"
          target=(--addr "$addr") ;;
        aggregated-draft)
          start_tandem --mode aggregated --speculative draft \
            --draft-model "${DRAFT:?DRAFT names the draft model}"
          target=(--addr "$addr") ;;
        llama-server)
          start_llama
          vocab=$(curl -s "http://$http/v1/models" |
                  python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["meta"]["n_vocab"])')
          target=(--http-addr "$http" --vocab-size "$vocab" --http-body "$llama_body") ;;
      esac
      if [ "${WARMUP:-0}" = 1 ]; then
        "$bin/tandem-load" "${target[@]}" "${shape_args[@]}" --seed $((seed + 100000)) \
          --prefix-seed $((seed + 200000)) >/dev/null
      fi
      line=$("$bin/tandem-load" "${target[@]}" "${shape_args[@]}" --seed "$seed" \
        --prefix-seed $((1000 + seed)) | tail -n 1)
      stop
      line="{\"service\": \"$service\", ${line#\{}"
      echo "$line" | tee -a "$out"
    done
  done
done

# Medians per service and load, from this run's lines.
python3 - "$out" "$rounds" "${#services[@]}" "${#loads[@]}" <<'EOF'
import json, statistics, sys
path, rounds, n_services, n_loads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = [json.loads(l) for l in open(path) if l.startswith('{"service"')]
lines = lines[-rounds * n_services * n_loads:]
groups = {}
for l in lines:
    key = (l["service"], l["concurrency"], l["shared_prefix_tokens"])
    groups.setdefault(key, []).append(l)
print(f"{'service':<17} {'clients':>7} {'shared':>6} {'TTFT p50':>9} {'ITL p50':>8} {'ITL p99':>8} "
      f"{'stall p99':>9} {'tok/s':>7} {'errors':>6}")
for (service, clients, shared), ls in sorted(groups.items()):
    med = lambda k: statistics.median(l[k] for l in ls)
    errors = sum(sum(l["errors"].values()) for l in ls)
    print(f"{service:<17} {clients:>7} {shared:>6} {med('ttft_p50_s') * 1e3:>7.0f}ms "
          f"{med('itl_p50_s') * 1e3:>6.1f}ms {med('itl_p99_s') * 1e3:>6.1f}ms "
          f"{med('stall_p99_s') * 1e3:>7.1f}ms {med('output_tokens_per_s'):>7.0f} {errors:>6}")
EOF
