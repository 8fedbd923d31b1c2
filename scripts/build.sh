#!/usr/bin/env bash
# Configures and builds Tandem into build/ (executables in build/bin/).
# Usage: scripts/build.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${TANDEM_BUILD_JOBS:-2}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build build -j "$jobs"
