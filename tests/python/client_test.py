#!/usr/bin/python3
"""A Python client of the public API, end to end.

Generates the Python stubs from proto/ into a temp dir (Debian's protoc with
gRPC's Python plugin),
starts `tandem up` on an ephemeral port with stories260K, waits for its READY
line, checks a greedy streamed completion with top-5 logprobs and an invalid
request, then stops `tandem up` with SIGTERM and checks it exits 0.

Run by ctest (tests/CMakeLists.txt):
  client_test.py --bin-dir BUILD/bin --proto-dir proto --model stories260K.gguf
"""

import argparse
import importlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest

FLAGS = None  # parsed command line, set in main()

READY_TIMEOUT_S = 300
RPC_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60
STORIES_GREEDY = ", there was a little girl named Lily"


def generate_stubs(proto_dir, out_dir):
    """Writes tandem/v1/generation_pb2{,_grpc}.py under out_dir.

    Debian's protoc (protobuf-compiler) with gRPC's Python plugin
    (protobuf-compiler-grpc), as a user would run them: the protoc inside
    python3-grpc-tools predates proto3 `optional` fields."""
    import subprocess

    proto = os.path.join(proto_dir, "tandem", "v1", "generation.proto")
    subprocess.run([
        "protoc",
        "-I" + proto_dir,
        "--python_out=" + out_dir,
        "--grpc_out=" + out_dir,
        "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
        proto,
    ], check=True)


def read_ready_line(proc, timeout_s):
    """Returns the grpc= address of the READY line `proc` prints on stdout.

    Waits on the pipe with select (never sleeps); fails when the process
    exits or closes stdout first, or after timeout_s.
    """
    deadline = time.monotonic() + timeout_s
    fd = proc.stdout.fileno()
    buf = b""
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            words = line.decode("utf-8", "replace").split()
            if words and words[0] == "READY":
                fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
                return fields["grpc"]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("tandem up printed no READY line in %d s" % timeout_s)
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError("tandem up closed stdout before READY (exit code %s)" %
                               proc.wait(timeout=STOP_TIMEOUT_S))
        buf += chunk


class ClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.stub_dir = tempfile.TemporaryDirectory(prefix="tandem_py_stubs_")
        generate_stubs(FLAGS.proto_dir, cls.stub_dir.name)
        sys.path.insert(0, cls.stub_dir.name)
        cls.pb = importlib.import_module("tandem.v1.generation_pb2")
        cls.pb_grpc = importlib.import_module("tandem.v1.generation_pb2_grpc")
        import grpc  # Debian package python3-grpcio
        cls.grpc = grpc

        tandem = os.path.join(FLAGS.bin_dir, "tandem")
        cls.proc = subprocess.Popen(
            [tandem, "up", "--model", FLAGS.model, "--port", "0"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            cls.addr = read_ready_line(cls.proc, READY_TIMEOUT_S)
        except BaseException:
            cls.proc.kill()
            cls.proc.wait()
            raise
        cls.channel = grpc.insecure_channel(cls.addr)
        cls.stub = cls.pb_grpc.GenerationStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.proc.send_signal(signal.SIGTERM)
        try:
            code = cls.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            cls.proc.kill()
            cls.proc.wait()
            raise AssertionError("tandem up did not exit within %d s of SIGTERM" %
                                 STOP_TIMEOUT_S)
        finally:
            cls.proc.stdout.close()
            cls.stub_dir.cleanup()
        if code != 0:
            raise AssertionError("tandem up exited %d after SIGTERM, want 0" % code)

    def test_greedy_stream_with_top_logprobs(self):
        pb = self.pb
        request = pb.GenerateRequest(
            prompt="Once upon a time", max_tokens=16, top_logprobs=5,
            sampling=pb.SamplingParams(temperature=0))
        responses = list(self.stub.Generate(request, timeout=RPC_TIMEOUT_S))
        tokens = [t for r in responses for t in r.tokens]
        self.assertEqual(len(tokens), 16)
        for i, t in enumerate(tokens):
            with self.subTest(token=i):
                self.assertEqual(len(t.top_logprobs), 5)
                logprobs = [a.logprob for a in t.top_logprobs]
                self.assertEqual(logprobs, sorted(logprobs, reverse=True))
                self.assertTrue(all(lp <= 0 for lp in logprobs), logprobs)
                self.assertLessEqual(t.logprob, 0)
                # Greedy: the chosen token is the most likely one.
                self.assertEqual(t.id, t.top_logprobs[0].id)
                self.assertAlmostEqual(t.logprob, t.top_logprobs[0].logprob, places=4)
        text = "".join(t.text for t in tokens)
        self.assertTrue(text.startswith(STORIES_GREEDY), repr(text))
        last = responses[-1]
        self.assertEqual(last.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertEqual(last.usage.completion_tokens, 16)
        for r in responses[:-1]:
            self.assertEqual(r.finish_reason, pb.FINISH_REASON_UNSPECIFIED)

    def test_negative_max_tokens_is_invalid_argument(self):
        request = self.pb.GenerateRequest(prompt="Once upon a time", max_tokens=-1)
        with self.assertRaises(self.grpc.RpcError) as caught:
            list(self.stub.Generate(request, timeout=RPC_TIMEOUT_S))
        self.assertEqual(caught.exception.code(), self.grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("max_tokens", caught.exception.details())

    def test_list_models_names_the_vocabulary(self):
        models = self.stub.ListModels(self.pb.ListModelsRequest(), timeout=RPC_TIMEOUT_S)
        self.assertGreaterEqual(len(models.models), 1)
        self.assertGreater(models.models[0].vocab_size, 0)


def main():
    global FLAGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", required=True, help="directory holding `tandem`")
    parser.add_argument("--proto-dir", required=True, help="the repository's proto/")
    parser.add_argument("--model", required=True, help="stories260K.gguf")
    FLAGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
