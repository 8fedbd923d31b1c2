#!/usr/bin/env bash
# Installs the Debian 12 packages Tandem builds and tests with. Safe to re-run:
# apt-get skips what is already installed. CUDA is optional and comes from
# /usr/local/cuda when present; nothing here installs it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache lld pkg-config clang libclang-rt-14-dev libomp-dev
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-headers
  libicu-dev libxxhash-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  prometheus-cpp-dev python3-grpcio python3-protobuf python3-grpc-tools python3-jinja2 python3-jsonschema
  libcpp-httplib-dev nlohmann-json3-dev curl
  libssl-dev openssl prometheus iproute2 nftables
)
# Node.js and npm run the OpenAI SDK test; a machine that already has them
# (from any source) keeps its own.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
