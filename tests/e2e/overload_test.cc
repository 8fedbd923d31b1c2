// Overload is refused before any work, never after a first token: 2048
// streams at once against one prefill and one decode worker whose KV pool
// holds a few dozen of them (1 MiB). Every stream either completes with all
// its tokens or ends RESOURCE_EXHAUSTED, with a retry hint, before its first
// token; the gateway's KV admission is what refuses.
#include <atomic>
#include <memory>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "rpc/admission.h"
#include "tests/e2e/stack.h"
#include "tests/e2e/synthetic.h"

namespace tandem::testing {
namespace {

constexpr int kStreams = 2048;
constexpr int32_t kTokens = 16;

struct Outcome {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;
  int tokens = 0;
  bool retry_hint = false;
};

// The streams' end, counted.
class Outcomes {
 public:
  void Add(Outcome o) {
    absl::MutexLock lock(&mu_);
    all_.push_back(std::move(o));
  }
  bool AwaitAll(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto all = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(all_.size()) == kStreams;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
  }
  std::vector<Outcome> Take() {
    absl::MutexLock lock(&mu_);
    return std::move(all_);
  }

 private:
  absl::Mutex mu_;
  std::vector<Outcome> all_ ABSL_GUARDED_BY(mu_);
};

// One Generate stream on the callback API; deletes itself when done.
class Stream final : public grpc::ClientReadReactor<tandem::v1::GenerateResponse> {
 public:
  Stream(tandem::v1::Generation::Stub& stub, tandem::v1::GenerateRequest request,
         Outcomes& outcomes)
      : request_(std::move(request)), outcomes_(outcomes) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    stub.async()->Generate(&ctx_, &request_, this);
    StartRead(&message_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    tokens_ += message_.tokens_size();
    StartRead(&message_);
  }
  void OnDone(const grpc::Status& status) override {
    Outcome o{.code = status.error_code(),
              .message = status.error_message(),
              .tokens = tokens_,
              .retry_hint = ctx_.GetServerTrailingMetadata().count(rpc::kRetryAfterMsKey) > 0};
    Outcomes& outcomes = outcomes_;
    delete this;
    outcomes.Add(std::move(o));
  }

 private:
  grpc::ClientContext ctx_;
  tandem::v1::GenerateRequest request_;
  tandem::v1::GenerateResponse message_;
  Outcomes& outcomes_;
  int tokens_ = 0;
};

TEST(OverloadTest, EveryStreamCompletesOrIsRefusedBeforeItsFirstToken) {
  StackOptions o;
  o.model = ModelPath();
  o.decode_flags = {"--kv-budget-mb", "1"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::string gateway = stack->gateway_info().metrics_address;
  // The decode worker's KV is known to the gateway before the burst.
  EXPECT_GT(AwaitMetric(gateway, "tandem_decode_kv_capacity_tokens",
                        [](double v) { return v > 0; }, absl::Seconds(30)),
            0);
  Outcomes outcomes;
  for (int i = 0; i < kStreams; ++i) {
    new Stream(stack->gateway(), Request(Prompt(8, 8, i), kTokens), outcomes);
  }
  ASSERT_TRUE(outcomes.AwaitAll(absl::Seconds(600)));
  int completed = 0, refused = 0, refused_for_kv = 0;
  for (const Outcome& r : outcomes.Take()) {
    if (r.code == grpc::StatusCode::OK) {
      EXPECT_EQ(r.tokens, kTokens);
      ++completed;
    } else {
      EXPECT_EQ(r.code, grpc::StatusCode::RESOURCE_EXHAUSTED) << r.message;
      EXPECT_EQ(r.tokens, 0) << r.message;
      EXPECT_TRUE(r.retry_hint) << r.message;
      ++refused;
      if (r.message.find("decode KV:") != std::string::npos) ++refused_for_kv;
    }
  }
  std::cout << "overload: " << completed << " completed, " << refused << " refused\n";
  EXPECT_GT(completed, 0);
  EXPECT_GT(refused, 0);
  // The KV budget refused them (the stream counts alone would admit 1024),
  // and nothing is charged after the burst.
  EXPECT_GT(refused_for_kv, 0);
  EXPECT_EQ(MetricValue(gateway, "tandem_decode_kv_charged_tokens"), 0);
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
