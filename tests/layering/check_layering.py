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
Usage: check_layering.py PROJECT_ROOT. Prints every violation; exits 1 if any.
"""
import os
import re
import sys

# The engine's tokenizer library and request types (engine/CMakeLists.txt:
# tandem_tokenizer, tandem_engine_api): what a process that loads no weights
# may include.
ENGINE_NO_KERNELS = frozenset({
    "engine/gguf.h", "engine/gguf_writer.h", "engine/tensor_type.h", "engine/tokenizer.h",
    "engine/unicode.h", "engine/sampling_params.h", "engine/model_fingerprint.h",
    "engine/model_config.h", "engine/block_hash.h", "engine/chat_template.h",
})
TOKENIZER_LIBRARY_SOURCES = {
    "tensor_type", "gguf", "gguf_parser", "gguf_writer", "tokenizer", "tokenizer_vocab",
    "tokenizer_spm", "tokenizer_bpe", "pretokenizer", "pretokenizer_regex", "unicode",
    "symbol_merge", "sampling_params", "model_fingerprint", "model_config", "block_hash",
    "chat_template", "quant_formats",
}

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
    "bench": {"common", "engine", "kvtransfer", "kvtransfer/rpc", "rpc", "process", "worker",
              "bench", "proto", "grpc"},
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
    stem = os.path.splitext(os.path.basename(path))[0]
    in_tokenizer_library = (layer == "engine" and os.path.dirname(path) == "engine"
                            and stem in TOKENIZER_LIBRARY_SOURCES)
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
            elif in_tokenizer_library and target == "engine" and not (
                    os.path.splitext(os.path.basename(include))[0] in TOKENIZER_LIBRARY_SOURCES):
                problems.append(f"{where}: the tokenizer library may not include engine kernels")
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
