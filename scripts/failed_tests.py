#!/usr/bin/env python3
"""Prints, last and short, why each failed test of a ctest run failed.

ctest --output-on-failure prints a failed test's output where it happens,
hundreds of lines before the run's end; a CI log read from its tail shows
only the names. This reads the run's Testing/Temporary/LastTest.log and
prints, per failed test, its gtest failure messages (or, with none, e.g. a
sanitizer report or a crash, its output's last lines).

Usage: scripts/failed_tests.py BUILD_DIR [--max-tests N] [--max-lines N]
"""

import argparse
import os
import re
import sys

HEADER = re.compile(r"^\d+/\d+ Testing: (.+)$")
FAILURE = re.compile(r"^.*:\d+: Failure$|^unknown file: Failure$")


def sections(lines):
    """Yields (name, output lines, status) for each test in the log."""
    name, output, status, state = None, [], None, None
    for line in lines:
        m = HEADER.match(line)
        if m:
            if name is not None:
                yield name, output, status
            name, output, status, state = m.group(1), [], None, "header"
        elif name is None:
            continue
        elif state == "header" and line.startswith("Output:"):
            state = "dashes"
        elif state == "dashes":
            state = "output"
        elif state == "output":
            if line.startswith("<end of output>"):
                state = "trailer"
            else:
                output.append(line)
        elif state == "trailer" and line.startswith("-----"):
            state = "status"
        elif state == "status" and line.strip():
            status = line.strip()
            state = "done"
    if name is not None:
        yield name, output, status


def excerpt(output, max_lines):
    """The gtest failure messages in `output`, or its last lines."""
    picked = []
    for i, line in enumerate(output):
        if not FAILURE.match(line):
            continue
        picked.append(line)
        for follow in output[i + 1:i + 8]:  # the message, up to the next one
            if follow.startswith("[") or FAILURE.match(follow):
                break
            picked.append(follow)
    if not picked:
        picked = [l for l in output if l.strip()][-max_lines:]
    return picked[:max_lines]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("--max-tests", type=int, default=5)
    parser.add_argument("--max-lines", type=int, default=16)
    args = parser.parse_args()
    log = os.path.join(args.build_dir, "Testing", "Temporary", "LastTest.log")
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"failed_tests: {e}", file=sys.stderr)
        return 1
    # "Test Passed.", or "Test Pass Reason:" (a required or skip pattern).
    failed = [(n, o, s) for n, o, s in sections(lines)
              if s is None or not s.startswith("Test Pass")]
    if not failed:
        return 0
    print(f"==== why they failed ({len(failed)} in {log}) ====")
    for name, output, status in failed[:args.max_tests]:
        print(f"---- {name}: {status or 'no status (killed?)'}")
        for line in excerpt(output, args.max_lines):
            print(line[:300])
    if len(failed) > args.max_tests:
        print(f"---- and {len(failed) - args.max_tests} more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
