#!/usr/bin/env bash
# Two builds' engines side by side (reports, never fails on speed): for the
# 25.7M synthetic model in F32, Q8_0 and Q4_K_M (made and quantized with
# NEW_BIN's `tandem`), runs BASE_BIN's and NEW_BIN's tandem-engine-bench in
# turn, ROUNDS times each, and prints each figure's median for both and the
# ratio new/base. Alternating in one run keeps a noisy machine fair to both.
# Figures go to stdout and, as JSON lines, to OUT.
# Usage: bench/engine_ab.sh BASE_BIN_DIR NEW_BIN_DIR [ROUNDS] [OUT] [REPEATS]
#   REPEATS (default 1): tandem-engine-bench --repeats, each run's own median.
#   e.g. build a base commit into /tmp/base (git worktree + scripts/build.sh), then
#   bench/engine_ab.sh /tmp/base/build/bin build/bin 3 engine_ab.jsonl
set -euo pipefail
base=$1 new=$2 rounds=${3:-3} out=${4:-/dev/null} repeats=${5:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$new/tandem" make-model --out "$work/f32.gguf" --type f32 >/dev/null
"$new/tandem" quantize --in "$work/f32.gguf" --out "$work/q8_0.gguf" --type Q8_0 >/dev/null
"$new/tandem" quantize --in "$work/f32.gguf" --out "$work/q4_k_m.gguf" --type Q4_K_M >/dev/null

for model in f32 q8_0 q4_k_m; do
  for ((i = 0; i < rounds; i++)); do
    for side in base new; do
      bin=$base
      [ "$side" = new ] && bin=$new
      "$bin/tandem-engine-bench" --model "$work/$model.gguf" --threads 2 --prompt-tokens 512 \
        --gen-tokens 128 --batch 8 --repeats "$repeats" --out "$work/$side-$model.jsonl" >/dev/null
    done
  done
done

python3 - "$work" "$out" <<'PY'
import json, statistics, sys
work, out = sys.argv[1], sys.argv[2]
print(f"{'model':8} {'figure':24} {'base':>10} {'new':>10} {'new/base':>9}")
with open(out, "a") as f:
    for model in ("f32", "q8_0", "q4_k_m"):
        runs = {s: [json.loads(l) for l in open(f"{work}/{s}-{model}.jsonl")] for s in ("base", "new")}
        for key in runs["new"][0]:
            if not key.endswith("_per_s"):
                continue
            b = statistics.median(r[key] for r in runs["base"])
            n = statistics.median(r[key] for r in runs["new"])
            print(f"{model:8} {key:24} {b:10.1f} {n:10.1f} {n / b:9.3f}")
            f.write(json.dumps({"model": model, "figure": key, "base": b, "new": n}) + "\n")
PY
