#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; build-fuzz/, where
# scripts/asan_tests.sh also builds and runs the test suite) and runs
# each for RUNS inputs from its seed corpus in tests/fuzz/corpus/ (copied:
# the repository is not written). Fails on any crash, leak or sanitizer
# report. The tokenizer and request targets run with stories260K from
# ../shared (when present) and with a synthetic model, which the main build
# (build/bin/tandem) writes; the tokenizer target also with two byte-level
# BPE vocabularies it writes itself.
# Usage: scripts/fuzz.sh [RUNS]   (CI: 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-2000}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
ninja -C build-fuzz -j2 block_fuzz gguf_fuzz tokenizer_fuzz request_fuzz chat_template_fuzz \
  jinja_fuzz constrain_fuzz tool_call_fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
models=()
[ -f ../shared/models/stories260K.gguf ] && models+=("$(realpath ../shared/models/stories260K.gguf)")
build/bin/tandem make-model --out "$work/synthetic.gguf" --n-embd 64 --n-layer 1 --n-head 2 \
  --n-head-kv 1 --n-ff 64 --n-vocab 512 >/dev/null
models+=("$work/synthetic.gguf")
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run() {  # run TARGET [MODEL]
  local corpus="$work/corpus-$1-$RANDOM" log="$work/$1.log"
  mkdir -p "$corpus"
  cp tests/fuzz/corpus/"$1"/* "$corpus"/ 2>/dev/null || true
  [ "$1" = gguf ] && for m in "${models[@]}"; do cp "$m" "$corpus"/; done
  echo "fuzz: $1${2:+ (model ${2##*/})}, $runs runs"
  if ! TANDEM_FUZZ_MODEL=${2:-} build-fuzz/bin/"$1"_fuzz -runs="$runs" -max_len=65536 -seed=1 \
      -print_final_stats=1 -artifact_prefix="$work/" "$corpus" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $1 failed; the input is in $(ls "$work"/crash-* "$work"/leak-* 2>/dev/null)"
    exit 1
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^#[0-9]+ +DONE" "$log" || true
}
run block
run gguf
run chat_template
run jinja
run constrain
run tool_call
for m in "${models[@]}"; do
  run tokenizer "$m"
  run request "$m"
done
# Byte-level BPE vocabularies (GPT-2 and Llama 3 pre-tokenizers), written by
# the target itself.
for pre in gpt-2 llama3; do
  run tokenizer "bpe:$pre"
done
