#!/usr/bin/env bash
# Prompt-lookup speculation beside llama.cpp's n-gram speculation on the same
# model and prompts, one sequence, greedy, in one run on this machine; or,
# with DRAFT set, draft-model speculation beside llama.cpp's on the same
# model and draft. Tandem's side is tandem-spec-bench (the engine in process,
# with and without prompt lookup, k 4, n-grams 3..2; or with DRAFT's
# proposals, k 4, its default cost-aware policy, SPEC_MIN_GAIN to change it);
# llama.cpp's is llama-server (-t 2 -tb 2 -np 1 -c 4096) with and without
# `--spec-type ngram-simple` (lookup 3 tokens, draft 4), or `--spec-type
# draft-simple --model-draft DRAFT --spec-draft-n-max 4 -td 2`, each
# /completion request timed by llama-server itself
# (timings.predicted_per_second: the decode alone, as the Tandem figure is).
# Both workloads of tandem-spec-bench: "edit" (a passage, then "The same,
# again:" and the passage: prompt lookup's case) and "free" (a story
# begun). Builds nothing of llama.cpp. Prints a table and appends one JSON
# line per round to OUT.
# Usage: bench/spec_vs_llama.sh BIN_DIR LLAMA_BIN_DIR MODEL OUT [TOKENS] [ROUNDS]
#   PORT_BASE for llama-server (default 18190); LLAMA_BODY: more JSON fields for
#   llama-server's requests (e.g. a logit_bias), "{}" by default; DRAFT: a draft
#   model (same vocabulary) for both engines instead of prompt lookup.
set -euo pipefail
bin="$1"
llama="$2"
model="$3"
out="$4"
tokens="${5:-256}"
rounds="${6:-3}"
port="${PORT_BASE:-18190}"
extra="${LLAMA_BODY:-}"
[ -n "$extra" ] || extra='{}'
draft="${DRAFT:-}"
method=prompt_lookup
tandem_spec=()
llama_spec=(--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 4)
if [ -n "$draft" ]; then
  method=draft
  tandem_spec=(--draft-model "$draft" --spec-min-gain "${SPEC_MIN_GAIN:-1}")
  llama_spec=(--spec-type draft-simple --model-draft "$draft" --spec-draft-n-max 4 -td 2)
fi
work="$(mktemp -d)"
pid=""
stop() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=""
}
trap 'stop; rm -rf "$work"' EXIT

# shellcheck source=bench/llama_server.sh
source "$(dirname "$0")/llama_server.sh"

# Starts llama-server (one slot) with the given extra flags.
start_llama() {
  start_llama_server "$llama" "$model" "$port" "$work/llama.log" -np 1 "$@" || exit 1
  pid=$llama_pid
}

# One greedy completion of the prompt in $1; prints "tok/s drafted kept".
complete() {
  python3 - "$1" "$tokens" "$extra" "$port" <<'EOF'
import json, sys, urllib.request
prompt_file, tokens, extra, port = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
body = {"prompt": open(prompt_file).read(), "n_predict": tokens, "temperature": 0,
        "ignore_eos": True, "cache_prompt": False}
body.update(extra)
req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
t = json.load(urllib.request.urlopen(req))["timings"]
if t["predicted_n"] != tokens:
    sys.exit(f"llama-server generated {t['predicted_n']} tokens, not {tokens}")
print(t["predicted_per_second"], t.get("draft_n", 0), t.get("draft_n_accepted", 0))
EOF
}

for w in edit free; do "$bin/tandem-spec-bench" --print-prompt "$w" >"$work/$w.txt"; done
for round in $(seq "$rounds"); do
  "$bin/tandem-spec-bench" --model "$model" --tokens "$tokens" --batches 1 --threads 2 \
    "${tandem_spec[@]}" --out "$work/tandem.jsonl" >/dev/null
  declare -A llama_tps=() llama_drafted=() llama_kept=()
  for mode in plain spec; do
    if [ "$mode" = plain ]; then start_llama; else start_llama "${llama_spec[@]}"; fi
    for w in edit free; do
      complete "$work/$w.txt" >/dev/null  # a warm-up request
      read -r tps drafted kept < <(complete "$work/$w.txt")
      llama_tps[$mode.$w]=$tps
      llama_drafted[$mode.$w]=$drafted
      llama_kept[$mode.$w]=$kept
    done
    stop
  done
  python3 - "$work/tandem.jsonl" "$out" "$round" "$tokens" "$model" "$method" "$draft" \
    "${llama_tps[plain.edit]} ${llama_tps[spec.edit]} ${llama_drafted[spec.edit]} ${llama_kept[spec.edit]}" \
    "${llama_tps[plain.free]} ${llama_tps[spec.free]} ${llama_drafted[spec.free]} ${llama_kept[spec.free]}" <<'EOF'
import json, sys
tandem_file, out, round_, tokens, model, method, draft = sys.argv[1:8]
llama = {}
for name, fields in zip(("edit", "free"), sys.argv[8:10]):
    plain, ngram, drafted, kept = fields.split()
    llama[name] = {"plain_tps": float(plain), "spec_tps": float(ngram),
                   "drafted": int(drafted), "accepted": int(kept)}
runs = json.loads(open(tandem_file).read().splitlines()[-1])["runs"]
line = {"bench": "speculation_vs_llama_cpp", "round": int(round_), "model": model,
        "method": method, "draft": draft, "tokens": int(tokens), "tandem": {r["workload"]: r for r in runs}, "llama_cpp": llama}
with open(out, "a") as f:
    f.write(json.dumps(line) + "\n")
print(f"round {round_}: workload | engine | plain t/s | speculative t/s | speedup | kept")
for w in ("edit", "free"):
    t, l = line["tandem"][w], llama[w]
    t_kept = t["accepted"] / t["proposed"] if t["proposed"] else 0
    l_kept = l["accepted"] / l["drafted"] if l["drafted"] else 0
    print(f"  {w} | tandem | {t['plain_tps']:.1f} | {t['spec_tps']:.1f} | "
          f"{t['spec_tps'] / t['plain_tps']:.2f}x | {t_kept:.0%} of {t['proposed']}")
    print(f"  {w} | llama.cpp | {l['plain_tps']:.1f} | {l['spec_tps']:.1f} | "
          f"{l['spec_tps'] / l['plain_tps']:.2f}x | {l_kept:.0%} of {l['drafted']}")
EOF
done
