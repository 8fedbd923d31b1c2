// Many Generate streams at once on the callback API, for the overload and
// fault tests: each stream counts its tokens and how it ended, and a burst's
// outcomes are checked against the rule that nothing fails after a first
// token (a stream completes with all its tokens, or is refused
// RESOURCE_EXHAUSTED before any).
#ifndef TANDEM_TESTS_E2E_BURST_H_
#define TANDEM_TESTS_E2E_BURST_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpc/admission.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tests/e2e/synthetic.h"

namespace tandem::testing {

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
  bool AwaitAll(absl::Duration timeout, int streams) {
    absl::MutexLock lock(&mu_);
    auto all = [this, streams]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(all_.size()) == streams;
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

// Starts `streams` streams at once, stream i asking Prompt(8, 8, i) for
// `max_tokens`, and waits up to `timeout` for every one to end (false when
// some did not).
inline bool RunBurst(tandem::v1::Generation::Stub& stub, int streams, int32_t max_tokens,
                     absl::Duration timeout, Outcomes& outcomes) {
  for (int i = 0; i < streams; ++i) {
    new Stream(stub, Request(Prompt(8, 8, i), max_tokens), outcomes);
  }
  return outcomes.AwaitAll(timeout, streams);
}

// Counts a burst's outcomes: every stream completed with all its tokens,
// or was refused RESOURCE_EXHAUSTED before its first token.
inline std::pair<int, int> ExpectCompletedOrRefusedEarly(Outcomes& outcomes, int32_t tokens) {
  int completed = 0, refused = 0;
  for (const Outcome& r : outcomes.Take()) {
    if (r.code == grpc::StatusCode::OK) {
      EXPECT_EQ(r.tokens, tokens);
      ++completed;
    } else {
      EXPECT_EQ(r.code, grpc::StatusCode::RESOURCE_EXHAUSTED) << r.message;
      EXPECT_EQ(r.tokens, 0) << r.message;
      ++refused;
    }
  }
  return {completed, refused};
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_E2E_BURST_H_
