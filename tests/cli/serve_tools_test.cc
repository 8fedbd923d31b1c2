// The client tools against the real service: `tandem up` (real prefill,
// decode and gateway binaries on loopback, stories260K) is started once;
// `tandem chat` and `tandem-load` run against it as a user would run them.
// And the serving binaries' start-up refusal of a --device they cannot use.
// Checks behaviour and output shape, never speed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "process/subprocess.h"
#include "tests/test_paths.h"

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Result {
  int exit_code = -1;
  std::string out;
};

// Runs a shell command and captures its stdout.
Result Shell(const std::string& cmd) {
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Bin(const std::string& name) {
  return absl::StrCat(tandem::test_paths::BinDir(), "/", name);
}

class ServeToolsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto up = tandem::process::Subprocess::Start(
        {Bin("tandem"), "up", "--model", tandem::test_paths::StoriesPath(), "--port", "0"});
    ASSERT_TRUE(up.ok()) << up.status();
    up_ = up->release();
    absl::StatusOr<tandem::common::ReadyInfo> ready = up_->WaitReady(absl::Minutes(5));
    ASSERT_TRUE(ready.ok()) << ready.status();
    addr_ = new std::string(ready->grpc_address);
  }
  static void TearDownTestSuite() {
    if (up_ == nullptr) return;
    up_->Signal(SIGTERM);
    absl::StatusOr<int> code = up_->WaitFor(absl::Minutes(1));
    EXPECT_TRUE(code.ok()) << code.status();
    if (code.ok()) {
      EXPECT_EQ(*code, 0);
    }
    delete up_;
    delete addr_;
  }

  static tandem::process::Subprocess* up_;
  static std::string* addr_;
};

tandem::process::Subprocess* ServeToolsTest::up_ = nullptr;
std::string* ServeToolsTest::addr_ = nullptr;

TEST_F(ServeToolsTest, ChatStreamsRepliesAndReportsStats) {
  ASSERT_NE(addr_, nullptr);
  const Result r = Shell(absl::StrCat(
      "printf 'Once upon a time\\n\\nThen what?\\n/quit\\nnot sent\\n' | ", Bin("tandem"),
      " chat --addr ", *addr_, " --temperature 0 --max-tokens 8 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("serves stories260K"));
  // Two turns (the blank line is skipped, nothing after /quit is sent).
  const std::vector<std::string> stats = absl::StrSplit(r.out, "tokens, finish ");
  EXPECT_EQ(stats.size(), 3u) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cached); TTFT "));
}

TEST_F(ServeToolsTest, ChatNamesTheStatusOfARejectedTurn) {
  ASSERT_NE(addr_, nullptr);
  // Far more prompt than the service's context: INVALID_ARGUMENT, and the
  // chat goes on to the next line.
  std::string system;
  for (int i = 0; i < 6000; ++i) system += "word ";
  const Result r = Shell(absl::StrCat("printf 'hi\\n' | ", Bin("tandem"), " chat --addr ",
                                      *addr_, " --max-tokens 4 --system '", system, "' 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tandem chat: INVALID_ARGUMENT: "));
}

TEST(ChatTest, UnreachableGatewayIsAClearError) {
  const Result r =
      Shell(absl::StrCat("printf 'hi\\n' | ", Bin("tandem"), " chat --addr 127.0.0.1:1 2>&1"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("cannot reach the gateway at 127.0.0.1:1: UNAVAILABLE"));
}

// --device cuda on the real binaries: each refuses it at start-up with the
// reason (here: the driver's, or no CUDA in the build; on a GPU: no CUDA
// forward pass yet), before serving or measuring anything, and exits 1;
// `tandem up` passes it to both workers and exits 1 when they do.
TEST(DeviceFlagTest, CudaIsRefusedAtStartUp) {
  const std::string model = tandem::test_paths::StoriesPath();
  for (const std::string worker : {"tandem-prefill", "tandem-decode"}) {
    const Result r = Shell(absl::StrCat(Bin(worker), " --model ", model,
                                        " --listen 127.0.0.1:0 --device cuda 2>&1"));
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_THAT(r.out, StartsWith(worker + ": --device cuda"));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("READY grpc=")));
  }
  const Result bench = Shell(absl::StrCat(Bin("tandem-engine-bench"), " --model ", model,
                                          " --device cuda 2>&1"));
  EXPECT_EQ(bench.exit_code, 1) << bench.out;
  EXPECT_THAT(bench.out, StartsWith("tandem-engine-bench: --device cuda"));

  const Result up =
      Shell(absl::StrCat(Bin("tandem"), " up --model ", model, " --port 0 --device cuda 2>&1"));
  EXPECT_EQ(up.exit_code, 1) << up.out;
  EXPECT_THAT(up.out, HasSubstr("tandem-prefill: --device cuda"));
  EXPECT_THAT(up.out, HasSubstr("exited with code 1 before READY"));
  EXPECT_THAT(up.out, ::testing::Not(HasSubstr("READY grpc=")));
}

TEST(ChatTest, BadFlagExitsTwo) {
  const Result r = Shell(Bin("tandem") + " chat --top-p 2 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--top-p"));
}

TEST_F(ServeToolsTest, LoadPrintsTableAndJsonAndAppendsToOut) {
  ASSERT_NE(addr_, nullptr);
  char tmpl[] = "/tmp/tandem_load_test_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const std::string cmd =
      absl::StrCat(Bin("tandem-load"), " --addr ", *addr_,
                   " --concurrency 3 --requests 5 --prompt-tokens 40 --shared-prefix-tokens 32"
                   " --max-tokens 6 --seed 3 --out ",
                   tmpl);
  const Result r = Shell(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("TTFT"));
  EXPECT_THAT(r.out, HasSubstr("inter-token latency"));
  EXPECT_THAT(r.out, HasSubstr("5 ok; errors: none"));
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  const std::string& json = lines.back();
  EXPECT_THAT(json, StartsWith("{\"bench\": \"load\""));
  EXPECT_THAT(json, HasSubstr("\"ok\": 5, \"errors\": {}"));
  EXPECT_THAT(json, HasSubstr("\"output_tokens\": 30,"));  // 5 requests x 6, EOS ignored
  EXPECT_THAT(json, HasSubstr("\"prompt_tokens_total\": 200,"));

  ASSERT_EQ(Shell(cmd + " >/dev/null").exit_code, 0);
  std::ifstream in(tmpl);
  std::stringstream file;
  file << in.rdbuf();
  const std::vector<std::string> appended = absl::StrSplit(file.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(appended.size(), 2u);
  EXPECT_EQ(appended[0], json);
  std::remove(tmpl);
}

TEST_F(ServeToolsTest, LoadRefusesPromptsLongerThanTheContext) {
  ASSERT_NE(addr_, nullptr);
  const Result r = Shell(absl::StrCat(Bin("tandem-load"), " --addr ", *addr_,
                                      " --prompt-tokens 5000 --max-tokens 10 2>&1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("--prompt-tokens + --max-tokens"));
}

}  // namespace
