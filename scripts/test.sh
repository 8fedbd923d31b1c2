#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (ctest). CI runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
# The official openai Node package, for the HTTP front's SDK test.
npm ci --prefix tests/http --no-audit --no-fund --loglevel=error
npm ci --prefix tests/deploy --no-audit --no-fund --loglevel=error
cd build
# On failure, why each test failed is printed last (a log read from its end
# shows it, not only the names).
ctest --output-on-failure -j "${TANDEM_TEST_JOBS:-2}" --timeout 900 || {
  python3 ../scripts/failed_tests.py .
  exit 1
}
cd ..
# The whole suite again under ASan + UBSan (clang, build-fuzz/).
bash scripts/asan_tests.sh
# libFuzzer targets (ASan + UBSan, the same build), a short fixed run each.
bash scripts/fuzz.sh "${TANDEM_FUZZ_RUNS:-2000}"
