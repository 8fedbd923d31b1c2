#!/usr/bin/env bash
# Soak benchmark: 64 concurrent sessions (greedy 48-token streams) against
# two prefill and two decode workers for 10 minutes while a seeded killer
# kill -9s a random worker every 0.7-2 s and restarts it (the soak test,
# run long). Prints streams, kills, migrations, client errors by code and
# every process's RSS at start and end, and writes them to OUT.
# Usage: bench/soak.sh BIN_DIR [SECONDS] [CLIENTS] [OUT]
set -euo pipefail
bin=$1 seconds=${2:-600} clients=${3:-64} out=${4:-/dev/null}
TANDEM_SOAK_SECONDS=$seconds TANDEM_SOAK_CLIENTS=$clients "$bin/soak_test" 2>/dev/null |
  grep '^soak:' | tee "$out"
