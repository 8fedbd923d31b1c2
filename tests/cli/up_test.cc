// `tandem up` supervising fake children: a copy of the real `tandem` binary
// sits in a temp directory next to shell scripts named tandem-prefill,
// tandem-decode and tandem-gateway that record their flags, print a READY
// line and wait for SIGTERM (or fail on cue). Checks the READY line, the
// flags each child gets, the stop order's outcome, and the exit codes.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "process/subprocess.h"
#include "tests/test_paths.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Plays one Tandem server. Ports are fixed per role (nothing binds them).
// FAKE_FAIL_ROLE names the role that misbehaves; FAKE_FAIL_WHEN=before exits
// 5 before READY, =after exits 3 once a line can be read from ./trigger,
// =hang writes a line to ./trigger and never prints READY.
constexpr char kFakeScript[] = R"sh(#!/bin/sh
dir=$(dirname "$0")
role=$(basename "$0")
role=${role#tandem-}
echo "$@" > "$dir/$role.args"
echo "$OMP_WAIT_POLICY:$GOMP_SPINCOUNT" > "$dir/$role.wait"
echo $$ > "$dir/$role.pid"
case $role in prefill) port=1001 ;; decode) port=1002 ;; *) port=1003 ;; esac
echo "log line from $role"
trap 'exit 0' TERM
if [ "$FAKE_FAIL_ROLE" = "$role" ] && [ "$FAKE_FAIL_WHEN" = before ]; then exit 5; fi
if [ "$FAKE_FAIL_ROLE" = "$role" ] && [ "$FAKE_FAIL_WHEN" = hang ]; then
  echo started > "$dir/trigger"
  while :; do sleep 3600 & wait $!; done
fi
echo "READY grpc=127.0.0.1:$port metrics=127.0.0.1:$((port + 100))"
if [ "$FAKE_FAIL_ROLE" = "$role" ] && [ "$FAKE_FAIL_WHEN" = after ]; then
  read line < "$dir/trigger"
  exit 3
fi
while :; do sleep 3600 & wait $!; done
)sh";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class UpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem_up_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // A copy, not a link: SiblingBinary resolves /proc/self/exe, which
    // follows links back to build/bin.
    fs::copy_file(fs::path(tandem::test_paths::BinDir()) / "tandem", dir_ / "tandem");
    fs::permissions(dir_ / "tandem", fs::perms::owner_all);
    for (const char* role : {"prefill", "decode", "gateway"}) WriteFake(role);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void WriteFake(const std::string& role) {
    const fs::path path = dir_ / ("tandem-" + role);
    std::ofstream(path) << kFakeScript;
    fs::permissions(path, fs::perms::owner_all);
  }

  std::unique_ptr<tandem::process::Subprocess> StartUp(std::vector<std::string> flags,
                                                      std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {(dir_ / "tandem").string(), "up"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    tandem::process::SubprocessOptions options;
    options.stderr_path = (dir_ / "up.err").string();
    options.extra_env = std::move(env);
    auto up = tandem::process::Subprocess::Start(argv, options);
    EXPECT_TRUE(up.ok()) << up.status();
    return up.ok() ? *std::move(up) : nullptr;
  }

  std::string Args(const std::string& role) { return ReadFile(dir_ / (role + ".args")); }
  std::string Stderr() { return ReadFile(dir_ / "up.err"); }
  // True while the fake `role` recorded a pid that still exists.
  bool Alive(const std::string& role) {
    const int pid = std::atoi(ReadFile(dir_ / (role + ".pid")).c_str());
    return pid > 0 && ::kill(pid, 0) == 0;
  }

  fs::path dir_;
};

TEST_F(UpTest, PrintsGatewayReadyLineAndStopsCleanlyOnSigterm) {
  auto up = StartUp({"--model", "/models/m.gguf", "--port", "0", "--prefill-threads", "3",
                     "--decode-threads", "2", "--max-context", "1024", "--kv-budget-mb", "64",
                     "--drain-timeout-s", "7", "--host-cache-mb", "256",
                     "--disk-cache-dir", "/cache", "--disk-cache-mb", "900", "--hot-cache-only"});
  ASSERT_NE(up, nullptr);
  absl::StatusOr<tandem::common::ReadyInfo> ready = up->WaitReady(absl::Seconds(60));
  ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << Stderr();
  EXPECT_EQ(ready->grpc_address, "127.0.0.1:1003");
  EXPECT_EQ(ready->metrics_address, "127.0.0.1:1103");

  // The cache tier flags go to both workers, each with a directory of its
  // own.
  EXPECT_EQ(Args("prefill"),
            "--listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --model /models/m.gguf "
            "--device cpu --threads 3 --max-context 1024 --kv-budget-mb 64 --host-cache-mb 256 "
            "--disk-cache-mb 900 --drain-timeout-s 7 --disk-cache-dir /cache/prefill "
            "--hot-cache-only\n");
  EXPECT_EQ(Args("decode"),
            "--listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --model /models/m.gguf "
            "--device cpu --threads 2 --max-context 1024 --kv-budget-mb 64 --host-cache-mb 256 "
            "--disk-cache-mb 900 --drain-timeout-s 7 --disk-cache-dir /cache/decode "
            "--hot-cache-only\n");
  EXPECT_EQ(Args("gateway"),
            "--listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --model /models/m.gguf "
            "--prefill 127.0.0.1:1001 --decode 127.0.0.1:1002 --max-context 1024 "
            "--drain-timeout-s 7\n");

  // The workers' own step budget unless asked; OpenMP's wait policy set
  // only where the environment does not.
  EXPECT_THAT(Args("prefill"), Not(HasSubstr("--max-batch-tokens")));
  EXPECT_EQ(ReadFile(dir_ / "prefill.wait"), ":10000\n");

  up->Signal(SIGTERM);
  absl::StatusOr<int> code = up->WaitFor(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << Stderr();
  for (const char* role : {"prefill", "decode", "gateway"}) EXPECT_FALSE(Alive(role)) << role;
  const std::string err = Stderr();
  EXPECT_THAT(err, HasSubstr("[tandem-decode] log line from decode"));
  EXPECT_THAT(err, HasSubstr("tandem-prefill  pid"));
  EXPECT_THAT(err, HasSubstr("grpc=127.0.0.1:1001 metrics=127.0.0.1:1101"));
}

TEST_F(UpTest, MetricsPortBaseAndHostReachTheChildren) {
  auto up = StartUp({"--model", "m.gguf", "--host", "localhost", "--port", "6000",
                     "--metrics-port-base", "7000"});
  ASSERT_NE(up, nullptr);
  ASSERT_TRUE(up->WaitReady(absl::Seconds(60)).ok()) << Stderr();
  EXPECT_THAT(Args("prefill"), HasSubstr("--metrics-listen 127.0.0.1:7001 "));
  EXPECT_THAT(Args("decode"), HasSubstr("--metrics-listen 127.0.0.1:7002 "));
  EXPECT_THAT(Args("gateway"),
              HasSubstr("--listen localhost:6000 --metrics-listen localhost:7000 "));
  up->Signal(SIGHUP);
  EXPECT_EQ(up->Wait(), 0) << Stderr();
}

TEST_F(UpTest, AnExplicitWaitPolicyAndBatchSizeReachTheWorkers) {
  auto up = StartUp({"--model", "m.gguf", "--max-batch-tokens", "256"},
                    {"OMP_WAIT_POLICY=active"});
  ASSERT_NE(up, nullptr);
  ASSERT_TRUE(up->WaitReady(absl::Seconds(60)).ok()) << Stderr();
  EXPECT_THAT(Args("prefill"), HasSubstr(" --max-batch-tokens 256"));
  EXPECT_THAT(Args("decode"), HasSubstr(" --max-batch-tokens 256"));
  EXPECT_EQ(ReadFile(dir_ / "decode.wait"), "active:\n");
  up->Signal(SIGTERM);
  EXPECT_EQ(up->Wait(), 0) << Stderr();
}

// --max-running caps the decode worker and tells the gateway, whose
// admission queue holds the rest; the prefill worker is not capped.
TEST_F(UpTest, MaxRunningReachesTheDecodeWorkerAndTheGateway) {
  auto up = StartUp({"--model", "m.gguf", "--max-running", "8"});
  ASSERT_NE(up, nullptr);
  ASSERT_TRUE(up->WaitReady(absl::Seconds(60)).ok()) << Stderr();
  EXPECT_THAT(Args("decode"), HasSubstr(" --max-running 8"));
  EXPECT_THAT(Args("prefill"), Not(HasSubstr("--max-running")));
  EXPECT_THAT(Args("gateway"), HasSubstr(" --decode-worker-streams 8"));
  up->Signal(SIGTERM);
  EXPECT_EQ(up->Wait(), 0) << Stderr();
}

// --speculative is the decoding worker's, passed on only when asked for
// (the worker's default is off); in aggregated mode that worker is the
// only one.
TEST_F(UpTest, SpeculativeReachesTheWorkerThatDecodes) {
  for (const bool aggregated : {false, true}) {
    std::vector<std::string> flags = {"--model", "m.gguf", "--speculative", "prompt-lookup"};
    if (aggregated) flags.insert(flags.end(), {"--mode", "aggregated"});
    auto up = StartUp(flags);
    ASSERT_NE(up, nullptr);
    ASSERT_TRUE(up->WaitReady(absl::Seconds(60)).ok()) << Stderr();
    EXPECT_THAT(Args("decode"), HasSubstr(" --speculative prompt-lookup"));
    if (!aggregated) {
      EXPECT_THAT(Args("prefill"), Not(HasSubstr("--speculative")));
    }
    EXPECT_THAT(Args("gateway"), Not(HasSubstr("--speculative")));
    up->Signal(SIGTERM);
    EXPECT_EQ(up->Wait(), 0) << Stderr();
  }
  auto up = StartUp({"--model", "m.gguf"});
  ASSERT_NE(up, nullptr);
  ASSERT_TRUE(up->WaitReady(absl::Seconds(60)).ok()) << Stderr();
  EXPECT_THAT(Args("decode"), Not(HasSubstr("--speculative")));  // the worker's default: off
  up->Signal(SIGTERM);
  EXPECT_EQ(up->Wait(), 0) << Stderr();
}

TEST_F(UpTest, DeviceReachesBothWorkers) {
  auto up = StartUp({"--model", "m.gguf", "--device", "cuda:1"});
  ASSERT_NE(up, nullptr);
  ASSERT_TRUE(up->WaitReady(absl::Seconds(60)).ok()) << Stderr();
  EXPECT_THAT(Args("prefill"), HasSubstr(" --device cuda:1 "));
  EXPECT_THAT(Args("decode"), HasSubstr(" --device cuda:1 "));
  EXPECT_THAT(Args("gateway"), Not(HasSubstr("--device")));
  up->Signal(SIGTERM);
  EXPECT_EQ(up->Wait(), 0) << Stderr();
}

// Aggregated: one worker, with the threads of both, and a gateway with no
// prefill worker (its decode worker prefills every request).
TEST_F(UpTest, AggregatedModeStartsOneWorkerWithEveryThread) {
  auto up = StartUp({"--model", "m.gguf", "--mode", "aggregated", "--prefill-threads", "3",
                     "--decode-threads", "2"});
  ASSERT_NE(up, nullptr);
  absl::StatusOr<tandem::common::ReadyInfo> ready = up->WaitReady(absl::Seconds(60));
  ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << Stderr();
  EXPECT_EQ(ready->grpc_address, "127.0.0.1:1003");
  EXPECT_FALSE(fs::exists(dir_ / "prefill.args"));
  EXPECT_THAT(Args("decode"), HasSubstr(" --threads 5 "));
  // Prompt chunks of 128 tokens between decode steps, and OpenMP threads
  // that spin only briefly when they wait (the processes share the cores).
  EXPECT_THAT(Args("decode"), HasSubstr(" --max-batch-tokens 128"));
  EXPECT_EQ(ReadFile(dir_ / "decode.wait"), ":10000\n");
  EXPECT_THAT(Args("gateway"), Not(HasSubstr("--prefill")));
  EXPECT_THAT(Args("gateway"), HasSubstr(" --decode 127.0.0.1:1002 "));
  // No cap unless asked for: the workers' and the gateway's defaults.
  EXPECT_THAT(Args("decode"), Not(HasSubstr("--max-running")));
  EXPECT_THAT(Args("gateway"), Not(HasSubstr("--decode-worker-streams")));
  up->Signal(SIGTERM);
  EXPECT_EQ(up->Wait(), 0) << Stderr();
  EXPECT_FALSE(Alive("decode"));
  EXPECT_FALSE(Alive("gateway"));
}

TEST_F(UpTest, InterruptDuringStartUpStopsTheChildren) {
  ASSERT_EQ(::mkfifo((dir_ / "trigger").c_str(), 0600), 0);
  auto up = StartUp({"--model", "m.gguf"}, {"FAKE_FAIL_ROLE=decode", "FAKE_FAIL_WHEN=hang"});
  ASSERT_NE(up, nullptr);
  std::string started;
  std::getline(std::ifstream(dir_ / "trigger"), started);  // the decode fake is loading
  ASSERT_EQ(started, "started");
  up->Signal(SIGINT);
  absl::StatusOr<int> code = up->WaitFor(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Stderr(), HasSubstr("interrupted by Interrupt while waiting for tandem-"));
  EXPECT_FALSE(Alive("prefill"));
  EXPECT_FALSE(Alive("decode"));
  EXPECT_FALSE(fs::exists(dir_ / "gateway.args"));
}

TEST_F(UpTest, ChildExitStopsTheOthersAndFails) {
  ASSERT_EQ(::mkfifo((dir_ / "trigger").c_str(), 0600), 0);
  auto up = StartUp({"--model", "m.gguf", "--port", "0"},
                    {"FAKE_FAIL_ROLE=decode", "FAKE_FAIL_WHEN=after"});
  ASSERT_NE(up, nullptr);
  ASSERT_TRUE(up->WaitReady(absl::Seconds(60)).ok()) << Stderr();
  std::ofstream(dir_ / "trigger") << "go\n";  // the fake decode worker exits 3
  absl::StatusOr<int> code = up->WaitFor(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Stderr(), HasSubstr("tandem-decode (pid"));
  EXPECT_THAT(Stderr(), HasSubstr("exited with code 3"));
  EXPECT_FALSE(Alive("prefill"));
  EXPECT_FALSE(Alive("gateway"));
}

TEST_F(UpTest, WorkerFailingBeforeReadyIsReported) {
  auto up = StartUp({"--model", "m.gguf"}, {"FAKE_FAIL_ROLE=prefill", "FAKE_FAIL_WHEN=before"});
  ASSERT_NE(up, nullptr);
  EXPECT_FALSE(up->WaitReady(absl::Seconds(60)).ok());
  EXPECT_EQ(up->Wait(), 1);
  EXPECT_THAT(Stderr(), HasSubstr("exited with code 5 before READY"));
  EXPECT_THAT(Stderr(), HasSubstr("log line from prefill"));
  EXPECT_FALSE(Alive("decode"));
  EXPECT_FALSE(fs::exists(dir_ / "gateway.args"));
}

TEST_F(UpTest, MissingGatewayBinaryIsReported) {
  fs::remove(dir_ / "tandem-gateway");
  auto up = StartUp({"--model", "m.gguf"});
  ASSERT_NE(up, nullptr);
  EXPECT_FALSE(up->WaitReady(absl::Seconds(60)).ok());
  EXPECT_EQ(up->Wait(), 1);
  EXPECT_THAT(Stderr(), HasSubstr("cannot start tandem-gateway"));
  EXPECT_FALSE(Alive("prefill"));
  EXPECT_FALSE(Alive("decode"));
}

TEST_F(UpTest, BadFlagsExitTwoNamingTheFlag) {
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--port", "70000"},
                                                        {"--prefill-threads", "0"},
                                                        {"--max-context", "x"},
                                                        {"--device", "gpu"},
                                                        {"--mode", "split"},
                                                        {"--max-running", "-1"},
                                                        {"--speculative", "draft"},
                                                        {"--no-such-flag", "1"}}) {
    auto up = StartUp({flag, value});
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->Wait(), 2) << flag;
    EXPECT_THAT(Stderr(), HasSubstr(flag));
  }
  EXPECT_FALSE(fs::exists(dir_ / "prefill.args"));
}

TEST_F(UpTest, WithoutModelGeneratesTheSyntheticDefaultOnce) {
  const fs::path cache = dir_ / "cache";
  const std::string model = (cache / "tandem" / "synthetic-llama-f32.gguf").string();
  for (int run = 0; run < 2; ++run) {
    auto up = StartUp({"--port", "0"}, {absl::StrCat("XDG_CACHE_HOME=", cache.string())});
    ASSERT_NE(up, nullptr);
    ASSERT_TRUE(up->WaitReady(absl::Seconds(120)).ok()) << Stderr();
    EXPECT_THAT(Args("gateway"), HasSubstr(absl::StrCat("--model ", model, " ")));
    up->Signal(SIGTERM);
    EXPECT_EQ(up->Wait(), 0) << Stderr();
    ASSERT_TRUE(fs::is_regular_file(model));
    if (run == 0) {
      // Mark the file: the second run must reuse it, not rewrite it.
      fs::last_write_time(model, fs::file_time_type::clock::now() - std::chrono::hours(1));
    }
  }
  EXPECT_LT(fs::last_write_time(model), fs::file_time_type::clock::now() - std::chrono::minutes(30));
  std::vector<std::string> leftovers;
  for (const auto& e : fs::directory_iterator(cache / "tandem")) {
    leftovers.push_back(e.path().filename().string());
  }
  EXPECT_THAT(leftovers, ::testing::ElementsAre("synthetic-llama-f32.gguf"));
}

}  // namespace
