#!/usr/bin/env bash
# Installs dependencies, builds, and starts the service: `tandem up` runs one
# prefill worker, one decode worker and the gateway, prints
# `READY grpc=HOST:PORT metrics=HOST:PORT` when it serves (gRPC on
# 127.0.0.1:50051 by default) and runs until Ctrl-C / SIGTERM. Without
# --model it serves a synthetic Llama it generates once into
# ${XDG_CACHE_HOME:-~/.cache}/tandem/ (no download needed).
# Usage: scripts/start.sh [tandem up flags], e.g.
#   scripts/start.sh --model ../shared/models/stories260K.gguf --port 0
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec build/bin/tandem up "$@"
