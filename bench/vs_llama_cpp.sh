#!/usr/bin/env bash
# Tandem's CPU engine against llama.cpp on the same GGUF files, in one run
# (reports, never fails on speed). Builds nothing of llama.cpp: LLAMA_BIN is
# a folder holding its llama-bench and llama-quantize. Writes a synthetic
# Llama with TANDEM_BIN's `tandem make-model` (F32), has llama-quantize write
# every other type from it (so the quantization mixes are llama.cpp's own),
# then, ROUNDS times in alternation, runs llama-bench (pp/tg, one repetition)
# and tandem-engine-bench (batch 1) on each file, and prints the medians and
# the ratio Tandem / llama.cpp: the table docs/benchmarks.md and the README
# hold. Every figure goes to OUT as a JSON line; the table names the
# llama.cpp commit and the CPU.
# Usage: bench/vs_llama_cpp.sh TANDEM_BIN LLAMA_BIN [OUT] [ROUNDS]
#   env: SHAPE (make-model flags; default the 25.7M model), TYPES (default
#   "F32 F16 BF16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K"), PROMPT (512), GEN (128),
#   THREADS (2), KEEP (a folder to keep the model files in, reused when there),
#   LLAMA_COMMIT (names the llama.cpp commit where its build does not: a
#   source tree without .git reports "unknown")
#   e.g. bench/vs_llama_cpp.sh build/bin ~/llama.cpp/build/bin vs_llama.jsonl 3
#   The 1B-class model: SHAPE="--n-vocab 32000 --n-embd 2048 --n-layer 16
#   --n-head 32 --n-head-kv 8 --n-ff 5632" PROMPT=64 GEN=32
set -euo pipefail
tandem=$1 llama=$2 out=${3:-/dev/null} rounds=${4:-3}
shape=${SHAPE:-}
types=${TYPES:-F32 F16 BF16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K}
prompt=${PROMPT:-512} gen=${GEN:-128} threads=${THREADS:-2}
for tool in "$tandem/tandem" "$tandem/tandem-engine-bench" "$llama/llama-bench" \
  "$llama/llama-quantize"; do
  [ -x "$tool" ] || { echo "vs_llama_cpp: $tool is missing" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
models=${KEEP:-$work/models}
mkdir -p "$models"

# shellcheck disable=SC2086  # SHAPE is a list of flags
[ -f "$models/F32.gguf" ] ||
  "$tandem/tandem" make-model --out "$models/F32.gguf" --type f32 $shape >/dev/null
for t in $types; do
  [ "$t" = F32 ] || [ -f "$models/$t.gguf" ] ||
    "$llama/llama-quantize" "$models/F32.gguf" "$models/$t.gguf" "$t" >"$work/quantize.log" 2>&1 ||
    { cat "$work/quantize.log" >&2; exit 1; }
done

for ((i = 0; i < rounds; i++)); do
  for t in $types; do
    "$llama/llama-bench" -m "$models/$t.gguf" -p "$prompt" -n "$gen" -t "$threads" -r 1 \
      -o jsonl >>"$work/llama-$t.jsonl" 2>"$work/llama.err" ||
      { cat "$work/llama.err" >&2; exit 1; }
    "$tandem/tandem-engine-bench" --model "$models/$t.gguf" --threads "$threads" \
      --prompt-tokens "$prompt" --gen-tokens "$gen" --batch 1 --repeats 1 \
      --out "$work/tandem-$t.jsonl" >/dev/null
  done
done

cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
python3 - "$work" "$out" "$cpu" "$threads" "$prompt" "$gen" "${LLAMA_COMMIT:-}" $types <<'PY'
import json, statistics, sys
work, out, cpu, threads, prompt, gen, named, *types = sys.argv[1:]
rows, commit = [], "?"
for t in types:
    llama = [json.loads(l) for l in open(f"{work}/llama-{t}.jsonl")]
    tandem = [json.loads(l) for l in open(f"{work}/tandem-{t}.jsonl")]
    commit = named or llama[0].get("build_commit", commit)
    lp = statistics.median(r["avg_ts"] for r in llama if r["n_prompt"] > 0)
    lg = statistics.median(r["avg_ts"] for r in llama if r["n_gen"] > 0)
    tp = statistics.median(r["prefill_tokens_per_s"] for r in tandem)
    tg = statistics.median(r["decode_tokens_per_s"] for r in tandem)
    rows.append((t, tp, lp, tg, lg))
print(f"Tandem vs llama.cpp {commit}, {cpu}, {threads} threads, pp{prompt} / tg{gen}, "
      f"medians of {len(tandem)} rounds")
print(f"| weights | prefill tok/s | llama.cpp | ratio | decode tok/s | llama.cpp | ratio |")
print(f"| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
with open(out, "a") as f:
    for t, tp, lp, tg, lg in rows:
        print(f"| {t} | {tp:.0f} | {lp:.0f} | {tp / lp:.2f}x "
              f"| {tg:.1f} | {lg:.1f} | {tg / lg:.2f}x |")
        f.write(json.dumps({"type": t, "cpu": cpu, "llama_commit": commit, "threads": int(threads),
                            "prompt_tokens": int(prompt), "gen_tokens": int(gen),
                            "tandem_prefill_tok_s": tp, "llama_prefill_tok_s": lp,
                            "tandem_decode_tok_s": tg, "llama_decode_tok_s": lg,
                            "prefill_ratio": tp / lp, "decode_ratio": tg / lg}) + "\n")
PY
