#!/usr/bin/env python3
"""Runs clang's thread-safety analysis over the classes annotated with
ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED (the main build is gcc, which
ignores the annotations). Takes each file's flags from compile_commands.json,
swaps the compiler for clang++ and checks syntax only, with -Wthread-safety as
an error. Usage: check.py BUILD_DIR PROJECT_ROOT FILE...
"""
import json
import os
import shlex
import shutil
import subprocess
import sys


def main():
    build, root, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    clang = shutil.which("clang++") or shutil.which("clang++-14")
    if clang is None:
        print("clang++ not found (scripts/install_deps.sh installs it)")
        return 1
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        commands = {os.path.realpath(e["file"]): e for e in json.load(f)}
    failed = 0
    for rel in files:
        path = os.path.realpath(os.path.join(root, rel))
        entry = commands.get(path)
        if entry is None:
            print(f"{rel}: not in compile_commands.json")
            failed += 1
            continue
        args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
        # Drop the launcher (`cmake -E env ... ccache`, CMakeLists.txt) and the
        # compiler, then the output and dependency files.
        compiler = next((i for i, a in enumerate(args)
                         if a.endswith(("c++", "g++", "clang++"))), None)
        if compiler is None:
            print(f"{rel}: no compiler in its compile command")
            failed += 1
            continue
        args = args[compiler + 1:]
        kept, skip = [], False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("-o", "-MF", "-MT", "-MQ"):
                skip = True
                continue
            # gcc's -Werror stays with gcc: clang warns about other things
            # (e.g. -Woverloaded-virtual in generated gRPC code); here only
            # the thread-safety analysis is an error.
            if a in ("-MD", "-MMD", "-c", "-Werror") or a == path or a == entry["file"]:
                continue
            kept.append(a)
        cmd = [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
               "-Wno-unknown-warning-option"] + kept + [path]
        result = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
        if result.returncode != 0:
            failed += 1
            print(f"== {rel}\n{result.stdout}{result.stderr}")
        else:
            print(f"ok {rel}")
    print(f"{len(files)} files analysed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
