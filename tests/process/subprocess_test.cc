#include "process/subprocess.h"
#include "process/http_get.h"

#include <signal.h>

#include <fstream>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "rpc/bootstrap.h"
#include "rpc/health.h"
#include "rpc/metrics.h"

namespace tandem::process {
namespace {

// The helper is built next to this test binary.
std::string Child() { return SiblingBinary("tandem_ready_child"); }

TEST(SiblingBinaryTest, LivesNextToThisBinary) {
  const std::string path = SiblingBinary("some_tool");
  EXPECT_EQ(path.front(), '/');
  EXPECT_TRUE(absl::EndsWith(path, "/some_tool")) << path;
  EXPECT_EQ(access(Child().c_str(), X_OK), 0) << Child();
}

TEST(SubprocessTest, RealServerChildIsReachableAndStopsOnSigterm) {
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({Child(), "serve"});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<common::ReadyInfo> ready = (*child)->WaitReady(absl::Seconds(30));
  ASSERT_TRUE(ready.ok()) << ready.status();
  ASSERT_FALSE(ready->metrics_address.empty());

  absl::StatusOr<rpc::HealthState> health = rpc::CheckHealth(grpc::CreateChannel(
      ready->grpc_address, grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, rpc::HealthState::kServing);

  absl::StatusOr<std::string> metrics =
      process::HttpGet(ready->metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(absl::StrContains(*metrics, "tandem_ready_child_starts_total 1"))
      << *metrics;

  // A second WaitReady returns the same answer at once.
  absl::StatusOr<common::ReadyInfo> again = (*child)->WaitReady(absl::ZeroDuration());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->grpc_address, ready->grpc_address);

  EXPECT_TRUE((*child)->Running());
  (*child)->Terminate();
  EXPECT_FALSE((*child)->Running());
  EXPECT_EQ((*child)->Wait(), 0);  // it shut down cleanly on SIGTERM
}

TEST(SubprocessTest, ChildThatExitsFirstReportsItsCodeAndOutput) {
  SubprocessOptions options;
  options.stderr_path = ::testing::TempDir() + "/ready_child_fail.stderr";
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({Child(), "fail"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<common::ReadyInfo> ready = (*child)->WaitReady(absl::Seconds(30));
  ASSERT_EQ(ready.status().code(), absl::StatusCode::kFailedPrecondition)
      << ready.status();
  EXPECT_TRUE(absl::StrContains(ready.status().message(), "exited with code 3"))
      << ready.status();
  EXPECT_TRUE(absl::StrContains(ready.status().message(), "bad magic"))
      << ready.status();
  EXPECT_EQ((*child)->Wait(), 3);

  std::ifstream in(options.stderr_path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(), "failing on purpose")) << text.str();
}

TEST(SubprocessTest, SilentChildTimesOutAndTerminateKillsIt) {
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({Child(), "hang"});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<common::ReadyInfo> ready =
      (*child)->WaitReady(absl::Milliseconds(300));
  EXPECT_EQ(ready.status().code(), absl::StatusCode::kDeadlineExceeded)
      << ready.status();
  EXPECT_TRUE((*child)->Running());
  (*child)->Terminate();
  EXPECT_EQ((*child)->Wait(), 128 + SIGTERM);
}

TEST(SubprocessTest, ChildIgnoringSigtermGetsSigkillAfterGrace) {
  SubprocessOptions options;
  options.terminate_grace = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({Child(), "ignore_term"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE((*child)->WaitReady(absl::Seconds(30)).ok());
  (*child)->Terminate();
  EXPECT_EQ((*child)->Wait(), 128 + SIGKILL);
}

TEST(SubprocessTest, ChildSeesExtraEnvironment) {
  SubprocessOptions options;
  options.extra_env = {"READY_CHILD_ADDRESS=10.1.2.3:4567"};
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({Child(), "env"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<common::ReadyInfo> ready = (*child)->WaitReady(absl::Seconds(30));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->grpc_address, "10.1.2.3:4567");
  EXPECT_EQ(ready->metrics_address, "");
}

TEST(SubprocessTest, OutputAfterReadyIsDrainedSoTheChildNeverBlocks) {
  absl::Mutex mu;
  int lines = 0;
  SubprocessOptions options;
  options.on_stdout_line = [&](const std::string& line) {
    absl::MutexLock lock(&mu);
    if (line.size() == 1023) ++lines;
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({Child(), "flood"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE((*child)->WaitReady(absl::Seconds(30)).ok());
  // 4 MiB is far past a pipe's 64 KiB; without draining it would never exit.
  absl::StatusOr<int> code = (*child)->WaitFor(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  child->reset();  // joins the reader, so every line has been delivered
  absl::MutexLock lock(&mu);
  EXPECT_EQ(lines, 4096);
}

TEST(SubprocessTest, ClosingStdoutWithoutReadyIsAnError) {
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({Child(), "close_stdout"});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<common::ReadyInfo> ready = (*child)->WaitReady(absl::Seconds(30));
  EXPECT_EQ(ready.status().code(), absl::StatusCode::kFailedPrecondition)
      << ready.status();
  EXPECT_TRUE(absl::StrContains(ready.status().message(), "closed its stdout"))
      << ready.status();
}

TEST(SubprocessTest, MissingBinaryFailsToStart) {
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({SiblingBinary("no_such_binary_here")});
  EXPECT_FALSE(child.ok());
  EXPECT_EQ(Subprocess::Start({}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, DestructorTerminatesTheChild) {
  pid_t pid = 0;
  {
    absl::StatusOr<std::unique_ptr<Subprocess>> child =
        Subprocess::Start({Child(), "hang"});
    ASSERT_TRUE(child.ok()) << child.status();
    pid = (*child)->pid();
  }
  // Reaped by the destructor: the pid no longer names our child.
  EXPECT_EQ(::kill(pid, 0), -1);
}

// Last, because it blocks SIGTERM in this test process for good: a parent
// that ran BlockShutdownSignals (as `tandem up` does) must still start
// children that die by SIGTERM, so Start must clear the inherited mask.
TEST(SubprocessTest, ParentsBlockedSignalsAreNotInherited) {
  rpc::BlockShutdownSignals();
  SubprocessOptions options;
  options.terminate_grace = absl::Seconds(60);  // a SIGKILL would show as 137
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start({Child(), "hang"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  (*child)->Terminate();
  EXPECT_EQ((*child)->Wait(), 128 + SIGTERM);
}

}  // namespace
}  // namespace tandem::process
