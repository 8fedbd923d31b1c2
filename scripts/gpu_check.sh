#!/usr/bin/env bash
# Builds and tests the engine with CUDA on a machine that has nvcc, CMake and
# ninja but no Debian development packages and no package registry (the lent
# GPU machines), from .deb files fetched beforehand on a Debian 12 machine.
# Everything lives under .gpu-check/ (git-ignored): debs/ (the packages),
# models/ (stories260K.gguf for the tests), prefix/ (the packages unpacked),
# gtest/ (GoogleTest built from the packaged sources by this machine's
# compiler), build/ (the engine-only build), report.txt.
#
# Here (Debian 12, apt):
#   scripts/gpu_check.sh download  # apt-get download the packages below into
#                                  # .gpu-check/debs; copy stories260K.gguf
#   scripts/gpu_check.sh local     # facts, unpack, gtest, an engine-only build
#                                  # against ONLY the prefix (/usr ignored by
#                                  # CMake, then every header and library
#                                  # checked to come from the prefix), engine
#                                  # tests (GPU tests skip), the GPU tests again
#                                  # with TANDEM_REQUIRE_CUDA=1 (they fail
#                                  # without a GPU), a short benchmark
# There (the GPU machine; carry .gpu-check/debs and .gpu-check/models):
#   scripts/gpu_check.sh run       # facts, unpack, gtest, build, every engine
#                                  # test with TANDEM_REQUIRE_CUDA=1, the
#                                  # benchmark; report.txt (and the logs) also
#                                  # copied to $OUT when it is set
#   scripts/gpu_check.sh run facts unpack gtest configure build   # in halves,
#   scripts/gpu_check.sh run test bench                            # if need be
# Steps: facts unpack gtest configure build isolation test require bench,
# and configure-isolated, test-skip (`local`'s configure and test). Each
# appends to the report; a run starts a new one only when it includes facts.
# Environment: GPU_CHECK_DIR (default .gpu-check), GPU_CHECK_JOBS (default
# nproc), GPU_CHECK_BENCH_THREADS (default nproc), GPU_CHECK_PROMPT (prefill
# tokens, default 2048), GPU_CHECK_BATCH (batched decode, default 32),
# GPU_CHECK_BENCH_MODELS (shape:type[:option...], the options pdl for
# --cuda-pdl, split and attn16 for --cuda-attention split-f16 and f16, kv16
# for --kv-type f16; default "25m:f32 1b:f16 1b:f16:pdl 1b:f16:split
# 1b:f16:attn16:kv16 1b:q8_0 1b:q4_k_m"; each 1B model takes the machine
# 30-60 s to write), GPU_CHECK_BENCH_ARGS (more tandem-engine-bench flags). The machine's own C library, C++ runtime,
# OpenMP and CUDA are used; the packages' release is Debian 12.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$(realpath -m "${GPU_CHECK_DIR:-$ROOT/.gpu-check}")"
DEBS="$DIR/debs"
MODELS="$DIR/models"
PREFIX="$DIR/prefix"
GTEST="$DIR/gtest"
BUILD="$DIR/build"
REPORT="$DIR/report.txt"
JOBS="${GPU_CHECK_JOBS:-$(nproc)}"
BENCH_THREADS="${GPU_CHECK_BENCH_THREADS:-$(nproc)}"
ARCH=x86_64-linux-gnu
LIBDIR="$PREFIX/usr/lib/$ARCH"
# The release the packages come from: a machine on another one is told so in
# the report's first lines, since its compiler and C library may not match.
DEB_RELEASE="Debian GNU/Linux 12 (bookworm)"
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
# The binaries find the prefix's libraries by RUNPATH, which covers only
# their direct dependencies: libicuuc's own libicudata, say, is found through
# this (the build runs the tests to list them, so it needs it too).
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# What the engine's CMake looks for (CMakeLists.txt, TANDEM_ENGINE_ONLY):
# Abseil, xxHash, ICU (uc), oneDNN (whose CMake package needs OpenCL's
# headers and loader), GoogleTest. OpenMP comes with the compiler.
DEV_PACKAGES=(libabsl-dev libxxhash-dev libicu-dev libdnnl-dev libgtest-dev libgmock-dev
              ocl-icd-opencl-dev opencl-c-headers)
# Their dependencies, listed rather than resolved at download time so that
# the set is reviewable; `download` checks that it is closed.
DEP_PACKAGES=(libabsl20220623 libxxhash0 libicu72 icu-devtools libdnnl2 googletest
              ocl-icd-libopencl1 opencl-clhpp-headers)
# Taken from the machine itself: the C library and the compiler's runtimes
# must be the ones its compiler links against.
SYSTEM_PACKAGES=(libc6 libc6-dev libc-dev libgcc-s1 libstdc++6 libgomp1)

log() { echo "$*" | tee -a "$REPORT"; }
# Runs a command with its output in the report.
logrun() {
  echo "\$ $*" >> "$REPORT"
  "$@" 2>&1 | tee -a "$REPORT"
  return "${PIPESTATUS[0]}"
}

# --- here -----------------------------------------------------------------

# Every dependency of every package is in the lists, or the machine's own.
check_closure() {
  local known=" ${DEV_PACKAGES[*]} ${DEP_PACKAGES[*]} ${SYSTEM_PACKAGES[*]} " missing=""
  local pkg group alt ok
  for pkg in "${DEV_PACKAGES[@]}" "${DEP_PACKAGES[@]}"; do
    # One line per dependency: its alternatives ("|Depends:" continues).
    while read -r group; do
      ok=0
      for alt in $group; do
        [[ "$known" == *" ${alt%:any} "* ]] && ok=1
      done
      [ "$ok" = 1 ] || missing+=" $pkg->($group)"
    done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
               --no-replaces --no-enhances "$pkg" |
             awk '/^ *\|?(Pre)?Depends:/ {
                    n = $2; gsub(/[<>]/, "", n); g = g " " n
                    if ($1 !~ /^\|/) { print g; g = "" } }')
  done
  if [ -n "$missing" ]; then
    echo "gpu_check: dependencies outside the package lists:$missing" >&2
    return 1
  fi
}

cmd_download() {
  command -v apt-get > /dev/null || { echo "gpu_check: download needs apt-get" >&2; return 1; }
  check_closure || return 1
  rm -rf "$DEBS" && mkdir -p "$DEBS" "$MODELS"
  # As root apt fetches without its sandbox user; say so instead of warning.
  (cd "$DEBS" && apt-get download -o APT::Sandbox::User=root \
      "${DEV_PACKAGES[@]}" "${DEP_PACKAGES[@]}") || return 1
  for deb in "$DEBS"/*.deb; do
    echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)"
  done > "$DEBS/packages.txt"
  local model="$ROOT/../shared/models/stories260K.gguf"
  if [ -f "$model" ]; then
    cp "$model" "$MODELS/"
  else
    echo "gpu_check: no $model; the tests that read it will fail there" >&2
  fi
  echo "gpu_check: $(ls "$DEBS"/*.deb | wc -l) packages, $(du -sh "$DEBS" | cut -f1) in $DEBS"
  cat "$DEBS/packages.txt"
}

# --- steps (both machines) --------------------------------------------------

step_facts() {
  : > "$REPORT"
  rm -f "$DIR/bench.jsonl" "$DIR/products.jsonl"
  log "== tandem gpu_check report, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(uname -n)"
  log "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  local os
  os="$( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo unknown)"
  if [ "$os" = "$DEB_RELEASE" ]; then
    log "os: $os (the packages' release: match)"
  else
    log "os: $os -- MISMATCH: the packages are from $DEB_RELEASE; C library and C++"
    log "    runtime differences below are the first suspects if a step fails"
  fi
  log "libc: $(ldd --version 2>&1 | head -1)"
  local stdcxx
  stdcxx="$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')"
  log "libstdc++: ${stdcxx:-not found} (newest $(grep -ao 'GLIBCXX_3\.4\.[0-9]*' \
      "${stdcxx:-/dev/null}" 2>/dev/null | sort -t. -k3 -n | tail -1))"
  log "c++: $(c++ --version 2>&1 | head -1)"
  log "nvcc: $(nvcc --version 2>&1 | grep -E 'release' || echo 'not found')"
  log "cmake: $(cmake --version 2>&1 | head -1); ninja: $(ninja --version 2>&1)"
  if command -v nvidia-smi > /dev/null; then
    log "gpu: $(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total \
        --format=csv,noheader 2>&1 | paste -sd';')"
  else
    log "gpu: no nvidia-smi; /dev/nvidia*: $(ls /dev/nvidia* 2>/dev/null | paste -sd' ' ||
        true)"
  fi
  log "cpu: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  log "packages: $( (cat "$DEBS/packages.txt" 2>/dev/null || echo none) | paste -sd',')"
  log ""
  logrun cat /etc/os-release
  command -v nvidia-smi > /dev/null && logrun nvidia-smi
  log ""
}

# A .deb is an ar archive whose data.tar.* holds the files: dpkg-deb where
# there is one, ar and tar elsewhere.
unpack_deb() {
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb -x "$1" "$PREFIX"
  else
    local tmp
    tmp="$(mktemp -d)"
    (cd "$tmp" && ar x "$1" && tar -xf data.tar.* -C "$PREFIX")
    local rc=$?
    rm -rf "$tmp"
    return $rc
  fi
}

# The packages into $PREFIX, made to name the prefix instead of /usr.
step_unpack() {
  ls "$DEBS"/*.deb > /dev/null 2>&1 || { log "no packages in $DEBS (run download)"; return 1; }
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"
  local deb link target
  for deb in "$DEBS"/*.deb; do unpack_deb "$deb" || return 1; done
  # Absolute links would leave the prefix.
  while IFS= read -r link; do
    target="$(readlink "$link")"
    ln -sfn "$PREFIX$target" "$link"
  done < <(find "$PREFIX" -type l -lname '/*')
  # pkg-config files and CMake packages say /usr; the CMake packages compute
  # their prefix from where they are, and compare it to /usr only to follow
  # links, but rewrite both kinds so no file names the system's copy.
  find "$PREFIX" -name '*.pc' -exec sed -i -E \
    "s#^(prefix|libdir|includedir)=/usr#\\1=$PREFIX/usr#" {} +
  grep -rlZ --include='*.cmake' '"/usr/' "$PREFIX" | xargs -0 -r sed -i "s#\"/usr/#\"$PREFIX/usr/#g"
  log "unpacked $(ls "$DEBS"/*.deb | wc -l) packages into $PREFIX ($(du -sh "$PREFIX" | cut -f1))"
}

# GoogleTest from the packaged sources, by this machine's compiler: its
# static libraries are C++ and must match the compiler that links the tests.
step_gtest() {
  rm -rf "$DIR/gtest-build" "$GTEST"
  logrun cmake -S "$PREFIX/usr/src/googletest" -B "$DIR/gtest-build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$GTEST" -DCMAKE_INSTALL_LIBDIR=lib \
    -DBUILD_GMOCK=ON > /dev/null || return 1
  cmake --build "$DIR/gtest-build" -j "$JOBS" > "$DIR/gtest-build.log" 2>&1 &&
    cmake --install "$DIR/gtest-build" >> "$DIR/gtest-build.log" 2>&1 ||
    { tail -20 "$DIR/gtest-build.log" | tee -a "$REPORT"; return 1; }
  log "GoogleTest built into $GTEST"
}

# The engine-only build, every package named by path in the prefix.
# --isolated (here, where the same packages are installed in /usr): CMake
# may not search /usr at all.
step_configure() {
  local isolated=()
  if [ "${1:-}" = --isolated ]; then
    isolated=(-DCMAKE_IGNORE_PREFIX_PATH=/usr -DCMAKE_SYSTEM_IGNORE_PREFIX_PATH=/usr)
  fi
  rm -rf "$BUILD"
  logrun cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTANDEM_ENGINE_ONLY=ON "${isolated[@]}" \
    -DCMAKE_PREFIX_PATH="$PREFIX/usr;$GTEST" \
    -Dabsl_DIR="$LIBDIR/cmake/absl" \
    -Ddnnl_DIR="$LIBDIR/cmake/dnnl" \
    -DGTest_DIR="$GTEST/lib/cmake/GTest" \
    -DICU_ROOT="$PREFIX/usr" \
    -DICU_INCLUDE_DIR="$PREFIX/usr/include" \
    -DICU_UC_LIBRARY_RELEASE="$LIBDIR/libicuuc.so" \
    -DTANDEM_XXHASH_INCLUDE_DIR="$PREFIX/usr/include" \
    -DTANDEM_XXHASH_LIBRARY="$LIBDIR/libxxhash.so" \
    -DOpenCL_INCLUDE_DIR="$PREFIX/usr/include" \
    -DOpenCL_LIBRARY="$LIBDIR/libOpenCL.so" \
    -DCMAKE_BUILD_RPATH="$LIBDIR" \
    -DTANDEM_SHARED_MODELS_DIR="$MODELS"
}

step_build() {
  local start=$SECONDS
  cmake --build "$BUILD" -j "$JOBS" > "$DIR/build.log" 2>&1
  local rc=$?
  log "build: exit $rc in $((SECONDS - start)) s ($(grep -c '^\[' "$DIR/build.log") steps;" \
      "log $DIR/build.log)"
  [ $rc = 0 ] || { grep -E -B2 -A8 'error|FAILED' "$DIR/build.log" | head -60 | tee -a "$REPORT"; }
  return $rc
}

# Proof that the build used the prefix: no compiled file included, no link
# named and no binary loads a copy of these libraries from outside it.
step_isolation() {
  local libs='absl|unicode/|gtest|gmock|dnnl|oneapi|xxhash|CL/' mine="^($PREFIX|$GTEST)/"
  local headers outside links loads
  # ninja keeps each object's headers, relative to the build when inside the
  # source tree (the prefix is): make them absolute.
  headers="$(ninja -C "$BUILD" -t deps | awk '/^    / {print $1}' | sort -u |
             (cd "$BUILD" && xargs realpath -m) | sort -u)"
  outside="$(grep -E "($libs)" <<< "$headers" | grep -vE "$mine" || true)"
  links="$(ninja -C "$BUILD" -t commands |
           grep -oE '[^ ]*lib(absl|icu|dnnl|xxhash|gtest|gmock|OpenCL)[^ ]*\.(so|a)[^ ]*' |
           sort -u)"
  loads="$(LD_LIBRARY_PATH="$LIBDIR" ldd "$BUILD"/bin/* |
           grep -E 'lib(absl|icu|dnnl|xxhash|OpenCL)' | awk '{print $3}' | sort -u)"
  log "headers of those libraries included: $(grep -cE "$mine" <<< "$headers") from the" \
      "prefix, $(grep -c . <<< "$outside") from elsewhere"
  log "their libraries linked: $(grep -cE "$mine" <<< "$links") from the prefix," \
      "$(grep -vcE "$mine" <<< "$links") from elsewhere"
  log "their libraries loaded (LD_LIBRARY_PATH=$LIBDIR, every binary):" \
      "$(grep -cE "$mine" <<< "$loads") from the prefix, $(grep -vcE "$mine" <<< "$loads")" \
      "from elsewhere"
  log "cudart and cuBLAS loaded: $(LD_LIBRARY_PATH="$LIBDIR" ldd "$BUILD"/bin/* |
      grep -oE '=> [^ ]*lib(cudart|cublas)[^ ]*' | sort | uniq -c | paste -sd';')"
  outside+="$(grep -vE "$mine" <<< "$links$(printf '\n')$loads" | grep . || true)"
  [ -z "$outside" ] || { log "from elsewhere:"; log "$outside"; return 1; }
}

# Every engine test, with TANDEM_REQUIRE_CUDA=1 unless told otherwise: a
# GPU test that cannot find its device fails instead of skipping. Not the
# CUDA emulation's (Emulated*: the CPU only, minutes of it, run by every
# other build's tests).
step_test() {
  local require="${1:-1}"
  local log_file="$DIR/ctest-require$require.log"
  TANDEM_REQUIRE_CUDA="$require" ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure \
    -E '^Emulated' > "$log_file" 2>&1
  local rc=$?
  log "ctest (TANDEM_REQUIRE_CUDA=$require): exit $rc (log $log_file)"
  grep -E 'tests passed|tests failed|\((Failed|Skipped|Timeout)\)' "$log_file" |
    tee -a "$REPORT"
  # The GPU tests one by one, in their own words (the device, or why none).
  local t
  for t in cuda_kernels_test cuda_products_test; do
    [ -x "$BUILD/bin/$t" ] || continue
    log "$t (TANDEM_REQUIRE_CUDA=$require):"
    TANDEM_REQUIRE_CUDA="$require" "$BUILD/bin/$t" 2>&1 |
      grep -E '^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z0-9.]+ \(|cudaGetDeviceCount|TANDEM_REQUIRE' |
      sort -u | head -30 | tee -a "$REPORT"
  done
  return $rc
}

# Here: the GPU and CUDA factory tests with TANDEM_REQUIRE_CUDA=1 must fail.
step_require() {
  local log_file="$DIR/ctest-require-here.log"
  TANDEM_REQUIRE_CUDA=1 ctest --test-dir "$BUILD" -R '^(CudaKernelsTest|BackendFactoryTest\.Cuda)' \
    --output-on-failure > "$log_file" 2>&1
  local rc=$?
  log "GPU tests with TANDEM_REQUIRE_CUDA=1: exit $rc (log $log_file)"
  grep -E 'tests passed|tests failed|TANDEM_REQUIRE_CUDA=1:' "$log_file" | sort -u | head -5 |
    tee -a "$REPORT"
  # Without a GPU they must fail; with one they must pass.
  if nvidia-smi -L > /dev/null 2>&1; then return $rc; fi
  [ $rc != 0 ]
}

# The engine on the GPU: the 25.7M model in F32 and the 1B-class one in
# F16 (again with --cuda-pdl, with split-f16 attention tiles, and with f16
# tiles and KV), Q8_0 and Q4_K_M (each written by the benchmark itself),
# prefill of GPU_CHECK_PROMPT tokens, decode at batch 1 and GPU_CHECK_BATCH,
# and the fractions of the device's measured limits; one JSON line per run
# in bench.jsonl. Then tandem-cuda-products-bench: every product path of
# the 1B model's 2048 x 2048 and 5632 x 2048 matrices at 1-128 tokens, per
# weight type (products.jsonl; where MatMul's thresholds should sit). Without
# a GPU (`local`): the 25.7M model on the CPU, and both CUDA runs' refusals.
step_bench() {
  local bench="$BUILD/bin/tandem-engine-bench" rc=0 shape type
  local products="$BUILD/bin/tandem-cuda-products-bench"
  local prompt="${GPU_CHECK_PROMPT:-2048}" batch="${GPU_CHECK_BATCH:-32}"
  if ! nvidia-smi -L > /dev/null 2>&1; then
    logrun "$bench" --model "$DIR/synthetic-f32.gguf" --make-synthetic f32 \
      --threads "$BENCH_THREADS" --device cpu ${GPU_CHECK_BENCH_ARGS:-} || rc=1
    logrun "$bench" --model "$DIR/synthetic-f32.gguf" --device cuda
    log "tandem-engine-bench --device cuda: exit $? (1 expected: no GPU here)"
    logrun "$products"
    log "tandem-cuda-products-bench: exit $? (1 expected: no GPU here)"
    return $rc
  fi
  local -a runs=(${GPU_CHECK_BENCH_MODELS:-25m:f32 1b:f16 1b:f16:pdl 1b:f16:split 1b:f16:attn16:kv16 1b:q8_0 1b:q4_k_m})
  local i model option
  for ((i = 0; i < ${#runs[@]}; ++i)); do
    # SHAPE:TYPE, then options, each adding flags.
    local -a fields=() flags=()
    IFS=: read -r -a fields <<< "${runs[i]}"
    shape="${fields[0]}"
    type="${fields[1]}"
    for option in "${fields[@]:2}"; do
      case "$option" in
        pdl) flags+=(--cuda-pdl) ;;
        split) flags+=(--cuda-attention split-f16) ;;
        attn16) flags+=(--cuda-attention f16) ;;
        kv16) flags+=(--kv-type f16) ;;
        *) log "GPU_CHECK_BENCH_MODELS: unknown option $option in ${runs[i]}"; rc=1; continue 2 ;;
      esac
    done
    model="$DIR/synthetic-$shape-$type.gguf"
    local -a make=(--make-synthetic "$type" --synthetic-shape "$shape")
    [ -f "$model" ] && make=()  # written for the run before
    logrun "$bench" --model "$model" "${make[@]}" --device cuda \
      --prompt-tokens "$prompt" --gen-tokens 128 \
      --batch "$batch" --repeats "${GPU_CHECK_REPEATS:-2}" --kv-budget-mb 4096 --out "$DIR/bench.jsonl" \
      "${flags[@]}" ${GPU_CHECK_BENCH_ARGS:-} || rc=1
    # Kept while the next run uses the same model.
    [[ "${runs[i + 1]:-}" == "$shape:$type"* ]] || rm -f "$model"
  done
  logrun "$products" --out "$DIR/products.jsonl" || rc=1
  return $rc
}

# --- driver ---------------------------------------------------------------

declare -a SUMMARY=()
step() {
  local name="$1"
  shift
  log ""
  log "== $name"
  local start=$SECONDS
  "step_$name" "$@"
  local rc=$?
  SUMMARY+=("$(printf '%-10s %s (%d s)' "$name" "$([ $rc = 0 ] && echo ok || echo FAILED)" \
                $((SECONDS - start)))")
  return $rc
}

finish() {
  log ""
  log "== summary"
  local line
  for line in "${SUMMARY[@]}"; do log "$line"; done
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$REPORT" "$OUT/gpu-check-report.txt"
    cp "$DIR"/*.log "$OUT/" 2>/dev/null
    cp "$DIR/bench.jsonl" "$DIR/products.jsonl" "$OUT/" 2>/dev/null
  fi
  echo "gpu_check: report $REPORT"
}

run_steps() {
  local s rc failed=0 broken=0
  for s in "$@"; do
    # Nothing to build on, or to run, after a failed unpack, gtest,
    # configure or build; a failed test or benchmark stops nothing.
    if [ $broken = 1 ] && [[ " facts unpack " != *" $s "* ]]; then
      SUMMARY+=("$(printf '%-10s skipped' "$s")")
      continue
    fi
    case "$s" in
      configure-isolated) step configure --isolated ;;
      test-skip) step test 0 ;;
      facts|unpack|gtest|configure|build|isolation|test|require|bench) step "$s" ;;
      *) echo "gpu_check: unknown step $s" >&2; return 2 ;;
    esac
    rc=$?
    [ $rc = 0 ] && continue
    failed=1
    case "$s" in unpack|gtest|configure*|build) broken=1 ;; esac
  done
  finish
  return $failed
}

mkdir -p "$DIR"
mode="${1:-}"
shift || true
case "$mode" in
  download) cmd_download ;;
  local)
    [ -d "$DEBS" ] || cmd_download || exit 1
    GPU_CHECK_BENCH_ARGS="${GPU_CHECK_BENCH_ARGS:---prompt-tokens 64 --gen-tokens 16 --repeats 1}"
    run_steps facts unpack gtest configure-isolated build isolation test-skip require bench ;;
  run)
    if [ $# = 0 ]; then set -- facts unpack gtest configure build test bench; fi
    run_steps "$@" ;;
  *)
    sed -n '2,/^set -uo/p' "$0" | sed '$d'
    exit 2 ;;
esac
