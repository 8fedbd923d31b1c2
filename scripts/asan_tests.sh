#!/usr/bin/env bash
# Builds everything with clang under ASan + UBSan into build-fuzz/ (the same
# instrumented build the libFuzzer targets come from) and runs the whole test
# suite there: unit tests and the real multi-process ones, whose children
# run instrumented too (a leak or undefined behaviour at any process's exit
# fails its test). The static checks (layering, thread-safety analysis)
# compile nothing instrumented and run in the main build only, as do the
# offline checks of deploy/. The CUDA emulation's engine suites on the
# 25.7M model and on every weight type run in the main build only (tens of
# minutes instrumented); their kernels and tiny models run here too.
# Usage: scripts/asan_tests.sh   (env: TANDEM_SOAK_SECONDS, default 30 here)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_FUZZ=ON \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
ninja -C build-fuzz -j "${TANDEM_BUILD_JOBS:-2}" all
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TANDEM_SOAK_SECONDS=${TANDEM_SOAK_SECONDS:-30}
cd build-fuzz
ctest --output-on-failure -j "${TANDEM_TEST_JOBS:-2}" --timeout 900 \
  -E '^(layering|layering_checker_catches_violations|thread_safety_analysis|thread_safety_analysis_rejects_unguarded_reads|gateway_links_no_kernels|deploy_chart|prometheus_rules|EmulatedCudaBackendTest\.(WeightTypes|The25MModel|SplitF16AttentionTiles|F16AttentionTiles|GraphDecodeSteps|ProgrammaticLaunches|ACudaPrefillFeeds|ACpuPrefillFeeds).*)$' || {
  python3 ../scripts/failed_tests.py .
  exit 1
}
