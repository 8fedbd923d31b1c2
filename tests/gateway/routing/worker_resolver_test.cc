// Worker targets: host:port passes through, dns:///host:port becomes one
// address per IP the name has (sorted, each once, IPv6 bracketed), bad
// targets are refused naming the flag, and the resolver follows a name
// whose addresses change, keeping the last ones when a lookup fails.
#include "gateway/routing/worker_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>

#include "absl/synchronization/mutex.h"

namespace tandem::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ExpandTargetsTest, DnsNamesBecomeOneAddressPerIp) {
  const HostLookup lookup =
      [](const std::string& host) -> absl::StatusOr<std::vector<std::string>> {
    if (host == "prefill.ns.svc")
      return std::vector<std::string>{"10.0.0.9", "10.0.0.3", "fd00::1"};
    if (host == "127.0.0.1") return std::vector<std::string>{"127.0.0.1"};
    return absl::NotFoundError("no such host");
  };
  absl::StatusOr<std::vector<std::string>> a =
      ExpandTargets({"worker-0:50051", "dns:///prefill.ns.svc:7000", "dns:///127.0.0.1:5",
                     "worker-0:50051"},
                    lookup);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("worker-0:50051", "10.0.0.3:7000", "10.0.0.9:7000",
                              "[fd00::1]:7000", "127.0.0.1:5"));
  EXPECT_EQ(ExpandTargets({"dns:///gone:1"}, lookup).status().code(), absl::StatusCode::kNotFound);
}

TEST(ExpandTargetsTest, TheSystemLookupFindsNumericHosts) {
  absl::StatusOr<std::vector<std::string>> a = ExpandTargets({"dns:///127.0.0.1:9"}, LookupHost);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("127.0.0.1:9"));
}

TEST(ValidateTargetsTest, NamesTheFlag) {
  EXPECT_TRUE(ValidateTargets({"a:1", "dns:///b.c:2", "[::1]:3"}, "--prefill").ok());
  absl::Status s = ValidateTargets({"a:1", "dns://8.8.8.8/b:2"}, "--prefill");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--prefill"));
  s = ValidateTargets({"dns:///noport"}, "--decode");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--decode"));
}

// A lookup that answers from a script, one answer per call (the last one
// repeats), and the changes the resolver reported.
class Scripted {
 public:
  explicit Scripted(std::deque<absl::StatusOr<std::vector<std::string>>> answers)
      : answers_(std::move(answers)) {}
  HostLookup lookup() {
    return [this](const std::string&) {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<std::vector<std::string>> a = answers_.front();
      if (answers_.size() > 1) answers_.pop_front();
      return a;
    };
  }
  WorkerResolver::OnChange on_change() {
    return [this](const std::vector<std::string>& a) {
      absl::MutexLock lock(&mu_);
      changes_.push_back(a);
    };
  }
  // Waits for the `n`th change and returns it.
  std::vector<std::string> AwaitChange(size_t n) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return changes_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(10));
    return changes_.size() >= n ? changes_[n - 1] : std::vector<std::string>{};
  }
  size_t changes() {
    absl::MutexLock lock(&mu_);
    return changes_.size();
  }
  bool AwaitDrained() {
    absl::MutexLock lock(&mu_);
    auto drained = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return answers_.size() == 1; };
    return mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(10));
  }

 private:
  absl::Mutex mu_;
  std::deque<absl::StatusOr<std::vector<std::string>>> answers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> changes_ ABSL_GUARDED_BY(mu_);
};

TEST(WorkerResolverTest, FollowsANameWhoseAddressesChange) {
  Scripted script({std::vector<std::string>{"10.0.0.1"},
                   std::vector<std::string>{"10.0.0.1"},  // no change: no call
                   absl::UnavailableError("dns down"),   // kept
                   std::vector<std::string>{"10.0.0.2", "10.0.0.1"},
                   std::vector<std::string>{"10.0.0.2"}});
  WorkerResolver resolver({"dns:///w:1", "static:2"}, absl::Milliseconds(1), script.on_change(),
                          script.lookup());
  // The first expansion happens in the constructor.
  EXPECT_THAT(script.AwaitChange(1), ElementsAre("10.0.0.1:1", "static:2"));
  EXPECT_THAT(script.AwaitChange(2), ElementsAre("10.0.0.1:1", "10.0.0.2:1", "static:2"));
  EXPECT_THAT(script.AwaitChange(3), ElementsAre("10.0.0.2:1", "static:2"));
  ASSERT_TRUE(script.AwaitDrained());
  EXPECT_THAT(resolver.addresses(), ElementsAre("10.0.0.2:1", "static:2"));
  EXPECT_EQ(script.changes(), 3u);
}

TEST(WorkerResolverTest, StaticTargetsNeedNoThread) {
  std::vector<std::string> seen;
  WorkerResolver resolver({"a:1", "b:2"}, absl::Milliseconds(1),
                          [&](const std::vector<std::string>& a) { seen = a; });
  EXPECT_THAT(seen, ElementsAre("a:1", "b:2"));
  EXPECT_THAT(resolver.addresses(), ElementsAre("a:1", "b:2"));
}

}  // namespace
}  // namespace tandem::gateway
