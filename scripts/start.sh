#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job on the default model:
# a synthetic Llama that `tandem make-model` generates (no download needed).
# Usage: scripts/start.sh [--model PATH] [--prompt TEXT] [other generate flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
model=build/models/synthetic-llama-f32.gguf
args=("$@")
if [[ " $* " != *" --model "* ]]; then
  mkdir -p build/models
  [ -f "$model" ] || build/bin/tandem make-model --out "$model"
  args+=(--model "$model")
fi
if [[ " $* " != *" --prompt "* ]]; then
  args+=(--prompt "Once upon a time")
fi
exec build/bin/tandem generate --max-tokens 64 "${args[@]}"
