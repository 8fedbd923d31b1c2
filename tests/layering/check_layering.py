#!/usr/bin/env python3
"""Checks that every #include in the project points down the layer graph.

The graph (ARCHITECTURE.md, "Parts and how they depend on each other"):

  prefill_worker, decode_worker -> worker -> rpc
  gateway -> rpc and the tokenizer library (no kernels)
  all of them -> kvtransfer -> engine -> common
  cli may use anything; nothing outside cli/ includes cli/

Each source folder lists the project folders it may include from; `proto`
stands for the generated tandem/v1 headers and `grpc` for gRPC and protobuf
headers. A few folders are narrowed to files: the gateway and rpc see only
the engine's tokenizer library and request types, never its kernels.
Inside engine/, each room (gguf, tokenizer, kv, model, sample, constrain,
sched, cpu, cuda) may include only the rooms ENGINE_ROOMS lists, and outside
engine/cuda only CUDA_INCLUDERS include it (the CUDA runtime stays behind
the backend factory; a kernel benchmark aside).
Usage: check_layering.py PROJECT_ROOT. Prints every violation; exits 1 if any.
"""
import os
import re
import sys

# The engine's tokenizer library and request types (engine/CMakeLists.txt:
# tandem_tokenizer, tandem_engine_api): what a process that loads no weights
# may include.
ENGINE_NO_KERNELS = frozenset({
    "engine/gguf/gguf.h", "engine/gguf/gguf_writer.h", "engine/gguf/tensor_type.h", "engine/tokenizer/tokenizer.h",
    "engine/tokenizer/unicode.h", "engine/sample/sampling_params.h", "engine/gguf/model_fingerprint.h",
    "engine/gguf/model_config.h", "engine/kv/block_hash.h", "engine/tokenizer/chat_template.h",
    # tandem_constrain: the gateway compiles a response format to refuse a
    # bad one before any worker sees it.
    "engine/constrain/constraint.h", "engine/constrain/grammar.h",
})
# The files of those two libraries: they may include nothing else of the engine.
TOKENIZER_LIBRARY_DIRS = ("engine/gguf/", "engine/tokenizer/")
TOKENIZER_LIBRARY_FILES = {"engine/kv/block_hash", "engine/sample/sampling_params"}

# Inside the engine, each room (a subfolder) lists the rooms it may include
# from; the engine's own root (engine.h, its flags and validation) may use
# every room. So a tokenizer never reaches for the KV cache, and the
# scheduler never sees a kernel.
ENGINE_ROOMS = {
    "engine/gguf": {"engine/gguf"},
    "engine/tokenizer": {"engine/gguf", "engine/tokenizer"},
    "engine/kv": {"engine/gguf", "engine/kv"},
    "engine/sample": {"engine/sample"},
    "engine/sched": {"engine/kv", "engine/sample", "engine/constrain", "engine/sched"},
    "engine/constrain": {"engine/gguf", "engine/tokenizer", "engine/sample", "engine/constrain"},
    "engine/model": {"engine/gguf", "engine/tokenizer", "engine/kv", "engine/model"},
    "engine/cpu": {"engine/gguf", "engine/sample", "engine/model", "engine/cpu"},
    "engine/cuda": {"engine/gguf", "engine/model", "engine/cuda"},
}

# The files outside engine/cuda that may include from it: the backend
# factory, which turns --device into a backend, and the benchmark that
# times the CUDA backend's matrix products themselves.
CUDA_INCLUDERS = frozenset({"engine/backend_factory.cc", "bench/cuda_products_bench.cc"})

# folder -> folders (or "folder/file.h" sets) it may include from.
ALLOWED = {
    "common": {"common"},
    "engine": {"common", "engine"},
    "kvtransfer": {"common", "engine", "kvtransfer"},
    "kvtransfer/rpc": {"common", "engine", "kvtransfer", "kvtransfer/rpc", "rpc", "proto", "grpc"},
    "rpc": {"common", "rpc", "proto", "grpc", ENGINE_NO_KERNELS},
    "process": {"common", "process"},
    "worker": {"common", "engine", "kvtransfer", "kvtransfer/rpc", "rpc", "worker", "proto",
               "grpc"},
    "gateway": {"common", "kvtransfer", "kvtransfer/rpc", "rpc", "gateway", "proto", "grpc",
                ENGINE_NO_KERNELS},
    "prefill_worker": {"common", "engine", "kvtransfer", "kvtransfer/rpc", "rpc", "worker",
                       "prefill_worker", "proto", "grpc"},
    "decode_worker": {"common", "engine", "kvtransfer", "kvtransfer/rpc", "rpc", "worker",
                      "decode_worker", "proto", "grpc"},
    # Benchmarks measure any part (the fleet simulator drives the gateway's
    # index and router); nothing depends on them.
    "bench": {"common", "engine", "kvtransfer", "kvtransfer/rpc", "rpc", "process", "worker",
              "gateway", "bench", "proto", "grpc"},
    "cli": None,  # may use anything
}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
RPC_HEADER = re.compile(r"^(grpcpp?/|grpc/|google/protobuf/)|\.pb\.h$")


def layer_of(path):
    """The ALLOWED key for a project-relative source path, or None."""
    if path.startswith("kvtransfer/rpc/"):
        return "kvtransfer/rpc"
    top = path.split("/", 1)[0]
    return top if top in ALLOWED else None


def target_of(include):
    """What an include names: 'grpc', 'proto', a project folder, or None."""
    if include.startswith("tandem/v1/"):
        return "proto"
    if RPC_HEADER.search(include):
        return "grpc"
    if include.startswith("kvtransfer/rpc/"):
        return "kvtransfer/rpc"
    top = include.split("/", 1)[0]
    return top if top in ALLOWED else None


def engine_room(path):
    """'engine/<room>' for a path under an engine subfolder, else 'engine'."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def in_library(path):
    """Whether an engine path belongs to tandem_tokenizer or tandem_engine_api."""
    return (path.startswith(TOKENIZER_LIBRARY_DIRS)
            or os.path.splitext(path)[0] in TOKENIZER_LIBRARY_FILES)


def allowed(layer, include, target):
    rules = ALLOWED[layer]
    if rules is None or target in rules:
        return True
    # A folder narrowed to some files of another: those files only.
    return any(isinstance(r, frozenset) and include in r for r in rules)


def check_file(root, path):
    layer = layer_of(path)
    if layer is None:
        return []
    problems = []
    in_tokenizer_library = in_library(path)
    room = engine_room(path) if layer == "engine" else None
    with open(os.path.join(root, path), encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            include = m.group(1)
            target = target_of(include)
            if target is None:
                continue  # system, Abseil, prometheus, gtest: not a layer
            where = f"{path}:{lineno}: {include}"
            if target == "cli" and layer != "cli":
                problems.append(f"{where}: nothing outside cli/ includes cli/")
            elif not allowed(layer, include, target):
                problems.append(f"{where}: {layer}/ may not depend on {target}")
            elif (include.startswith("engine/cuda/") and not path.startswith("engine/cuda/")
                  and path not in CUDA_INCLUDERS):
                problems.append(f"{where}: only {', '.join(sorted(CUDA_INCLUDERS))} "
                                "includes engine/cuda/")
            elif in_tokenizer_library and target == "engine" and not in_library(include):
                problems.append(f"{where}: the tokenizer library may not include engine kernels")
            elif room in ENGINE_ROOMS and target == "engine" and (
                    engine_room(include) not in ENGINE_ROOMS[room]):
                problems.append(f"{where}: {room}/ may not depend on {engine_room(include)}/")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = []
    checked = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and not d.startswith("build")]
        for name in filenames:
            if not name.endswith((".h", ".cc", ".cu")):
                continue
            path = os.path.relpath(os.path.join(dirpath, name), root)
            if path.startswith("tests/"):
                continue
            checked += 1
            problems.extend(check_file(root, path))
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} layering violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
