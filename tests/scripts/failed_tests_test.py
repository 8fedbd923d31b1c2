#!/usr/bin/env python3
"""scripts/failed_tests.py on a ctest log made here: passed and skipped tests
are left out; a failed gtest test shows each failure with its message, and
one without gtest failures (a crash, a sanitizer report) its last lines."""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import failed_tests  # noqa: E402

DASHES = "-" * 58


def section(n, name, output, status):
    return "\n".join([
        f"{n}/4 Testing: {name}", f"{n}/4 Test: {name}", 'Command: "x"', "Directory: /x",
        f'"{name}" start time: Nov 26 16:01 UTC', "Output:", DASHES, *output,
        "<end of output>", "Test time =   0.64 sec", DASHES, status,
        f'"{name}" end time: Nov 26 16:01 UTC', DASHES, ""])


LOG = "\n".join([
    "Start testing: Nov 26 16:01 UTC", DASHES,
    section(1, "A.Passes", ["[ RUN      ] A.Passes", "[       OK ] A.Passes"], "Test Passed."),
    section(2, "A.Skips", ["[  SKIPPED ] A.Skips"],
            "Test Pass Reason:\nSkip regular expression found in output."),
    section(3, "A.Fails", [
        "[ RUN      ] A.Fails",
        "full queue: 2 completed, 62 refused",
        "/src/a_test.cc:10: Failure",
        "Expected: (completed) >= (3), actual: 2 vs 3",
        "tandem_synced_workers{role=\"decode\"} 0",
        "/src/a_test.cc:12: Failure",
        "Value of: ok",
        "[  FAILED  ] A.Fails (640 ms)",
    ], "Test Failed."),
    section(4, "B.Crashes", ["line 1", "", "==1==ERROR: LeakSanitizer: detected memory leaks"],
            "Exception: SegFault"),
])


class FailedTestsTest(unittest.TestCase):

    def run_on(self, log, *flags):
        with tempfile.TemporaryDirectory() as build:
            os.makedirs(os.path.join(build, "Testing", "Temporary"))
            with open(os.path.join(build, "Testing", "Temporary", "LastTest.log"), "w") as f:
                f.write(log)
            out = io.StringIO()
            sys.argv = ["failed_tests.py", build, *flags]
            with contextlib.redirect_stdout(out):
                self.assertEqual(failed_tests.main(), 0)
            return out.getvalue().splitlines()

    def test_each_failure_with_its_message_and_a_crash_with_its_last_lines(self):
        lines = self.run_on(LOG)
        self.assertIn("why they failed (2 in", lines[0])
        self.assertEqual(lines[1:], [
            "---- A.Fails: Test Failed.",
            "/src/a_test.cc:10: Failure",
            "Expected: (completed) >= (3), actual: 2 vs 3",
            "tandem_synced_workers{role=\"decode\"} 0",
            "/src/a_test.cc:12: Failure",
            "Value of: ok",
            "---- B.Crashes: Exception: SegFault",
            "line 1",
            "==1==ERROR: LeakSanitizer: detected memory leaks",
        ])

    def test_limits(self):
        lines = self.run_on(LOG, "--max-tests", "1", "--max-lines", "2")
        self.assertEqual(lines[1:], [
            "---- A.Fails: Test Failed.",
            "/src/a_test.cc:10: Failure",
            "Expected: (completed) >= (3), actual: 2 vs 3",
            "---- and 1 more",
        ])

    def test_a_run_that_passed_prints_nothing(self):
        self.assertEqual(self.run_on(LOG.split("3/4 Testing")[0]), [])


if __name__ == "__main__":
    unittest.main()
