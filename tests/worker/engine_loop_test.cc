// EngineLoop: the engine thread's inbox, its listeners and how streams end
// (finished, cancelled before admission, on shutdown, on a failed step),
// with a real engine on the tiny synthetic model behind a gate that can hold
// or fail a step.
#include "worker/engine_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "prometheus/registry.h"
#include "tests/engine/test_models.h"
#include "worker/stall_watchdog.h"

namespace tandem::worker {
namespace {

using ::testing::HasSubstr;

// Forwards to a real Engine; Step can be held at a gate or made to fail.
// Engine-thread only, like the engine, except for the gate controls.
class GatedEngine final : public engine::StepEngine {
 public:
  explicit GatedEngine(std::unique_ptr<engine::Engine> engine) : engine_(std::move(engine)) {}

  absl::StatusOr<int64_t> Add(engine::GenerationRequest r) override { return engine_->Add(r); }
  absl::StatusOr<int64_t> AddWithKv(engine::GenerationRequest r, const engine::SampledToken& f,
                                    std::shared_ptr<const engine::KvSnapshot> kv) override {
    return engine_->AddWithKv(std::move(r), f, std::move(kv));
  }
  void Cancel(int64_t id) override { engine_->Cancel(id); }
  absl::StatusOr<engine::StepOutput> Step() override {
    if (hold_.load()) {
      in_step_.Notify();
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&released_));
    }
    if (fail_.load()) return absl::InternalError("injected step failure");
    return engine_->Step();
  }
  bool HasWork() const override { return engine_->HasWork(); }
  engine::EngineStats stats() const override { return engine_->stats(); }
  const engine::Model& model() const override { return engine_->model(); }
  int32_t max_context() const override { return engine_->max_context(); }
  int32_t kv_block_size() const override { return engine_->kv_block_size(); }
  engine::GgmlType kv_dtype() const override { return engine_->kv_dtype(); }

  // The next Step waits at the gate; WaitInStep returns once it does.
  void Hold() { hold_.store(true); }
  void WaitInStep() { in_step_.WaitForNotification(); }
  void Release() {
    hold_.store(false);
    absl::MutexLock lock(&mu_);
    released_ = true;
  }
  void FailSteps() { fail_.store(true); }

 private:
  std::unique_ptr<engine::Engine> engine_;
  std::atomic<bool> hold_{false};
  std::atomic<bool> fail_{false};
  absl::Notification in_step_;
  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

class EngineLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = engine::testing::LoadSynthetic(engine::testing::TinyOptions());
    auto eng = engine::Engine::Create(*model_, engine::MakeCpuBackend({.threads = 1}), {});
    ASSERT_TRUE(eng.ok()) << eng.status();
    auto gated = std::make_unique<GatedEngine>(std::move(*eng));
    gate_ = gated.get();
    loop_ = std::make_unique<EngineLoop>(std::move(gated));
  }

  static engine::GenerationRequest Request(int32_t max_tokens) {
    engine::GenerationRequest r;
    for (int i = 0; i < 20; ++i) r.prompt.push_back(3 + i);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }

  // Everything the stream delivers until it ends (10 s at most).
  struct Outcome {
    int tokens = 0;
    bool done = false;
    absl::Status status;
  };
  static Outcome Drain(SequenceStream& stream) {
    Outcome o;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!o.done && absl::Now() < deadline) {
      SequenceStream::Batch b = stream.Next(deadline);
      o.tokens += static_cast<int>(b.events.size());
      o.done = b.done;
      o.status = b.status;
    }
    return o;
  }

  std::unique_ptr<engine::Model> model_;
  // What listeners touch lives here, declared before loop_: the engine
  // thread may still be inside a listener when a test body returns, and
  // loop_ (destroyed first) joins it.
  std::atomic<int> calls_{0};
  absl::Notification first_token_;
  GatedEngine* gate_ = nullptr;
  std::unique_ptr<EngineLoop> loop_;
};

TEST_F(EngineLoopTest, ListenerHearsEveryBatchAndTheEnd) {
  auto stream = loop_->Submit(Request(5), [this] { calls_.fetch_add(1); });
  const Outcome o = Drain(*stream);
  EXPECT_TRUE(o.done);
  EXPECT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.tokens, 5);
  EXPECT_EQ(loop_->stats().blocks_used, 0);
  // The listener runs after the events are queued, so the last call may
  // still be under way when Drain returns; joining the engine thread ends it.
  loop_.reset();
  EXPECT_GE(calls_.load(), 5);  // at least one call per step that produced a token
}

TEST_F(EngineLoopTest, CancelBeforeAdmissionEndsTheStreamWithoutTokens) {
  gate_->Hold();
  auto running = loop_->Submit(Request(3));
  gate_->WaitInStep();  // the engine thread is inside a step: B's ops queue up
  auto queued = loop_->Submit(Request(3));
  loop_->Cancel(queued);
  gate_->Release();
  const Outcome cancelled = Drain(*queued);
  EXPECT_TRUE(cancelled.done);
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cancelled.tokens, 0);
  const Outcome finished = Drain(*running);
  EXPECT_TRUE(finished.status.ok()) << finished.status;
  EXPECT_EQ(finished.tokens, 3);
  EXPECT_EQ(loop_->stats().blocks_used, 0);
}

TEST_F(EngineLoopTest, ShutdownFailsOpenStreams) {
  auto open = loop_->Submit(Request(100000), [this] {
    if (!first_token_.HasBeenNotified()) first_token_.Notify();
  });
  first_token_.WaitForNotification();
  // Pause the engine mid-sequence, start the shutdown, then let the step
  // end: the loop stops after it (hundreds of steps before the sequence
  // could finish on its own).
  gate_->Hold();
  gate_->WaitInStep();
  std::thread shutdown([this] { loop_.reset(); });
  gate_->Release();
  shutdown.join();
  const Outcome o = Drain(*open);
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(o.status.message()), HasSubstr("shutting down"));
}

TEST_F(EngineLoopTest, AFailedStepFailsItsSequencesAndFreesTheirBlocks) {
  auto a = loop_->Submit(Request(100000), [this] {
    if (!first_token_.HasBeenNotified()) first_token_.Notify();
  });
  auto b = loop_->Submit(Request(100000));
  first_token_.WaitForNotification();
  gate_->FailSteps();
  const Outcome oa = Drain(*a);
  const Outcome ob = Drain(*b);
  for (const Outcome& o : {oa, ob}) {
    EXPECT_TRUE(o.done);
    EXPECT_EQ(o.status.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(o.status.message()), HasSubstr("injected step failure"));
  }
  EXPECT_EQ(loop_->stats().running, 0);
  EXPECT_EQ(loop_->stats().blocks_used, 0);
}

// A step that does not end is seen by the watchdog as a stall, reported
// once; when the step ends, the recovery is reported.
TEST_F(EngineLoopTest, TheWatchdogReportsAStuckStepAndItsEnd) {
  EXPECT_EQ(loop_->BusyFor(), absl::ZeroDuration());  // idle
  absl::Mutex mu;
  std::vector<bool> changes;
  absl::Notification stalled;
  absl::Notification moving;
  prometheus::Registry registry;
  StallWatchdog watchdog(
      absl::Milliseconds(50), [this] { return loop_->BusyFor(); },
      [&](bool s) {
        absl::MutexLock lock(&mu);
        changes.push_back(s);
        (s ? stalled : moving).Notify();
      },
      registry);
  gate_->Hold();
  auto stream = loop_->Submit(Request(3));
  gate_->WaitInStep();
  stalled.WaitForNotification();
  EXPECT_GT(loop_->BusyFor(), absl::Milliseconds(50));
  gate_->Release();
  moving.WaitForNotification();
  EXPECT_TRUE(Drain(*stream).status.ok());
  absl::MutexLock lock(&mu);
  EXPECT_EQ(changes, (std::vector<bool>{true, false}));
}

// FailAll ends every open stream at once while the engine thread is stuck
// in a step; once the step ends, the sequences are cancelled and their
// blocks freed, and nothing more reaches the failed streams.
TEST_F(EngineLoopTest, FailAllEndsStreamsWhileAStepIsStuck) {
  gate_->Hold();
  auto running = loop_->Submit(Request(100000));
  gate_->WaitInStep();
  auto queued = loop_->Submit(Request(3));
  loop_->FailAll(absl::UnavailableError("the worker's engine is stalled"));
  for (const auto& stream : {running, queued}) {
    const Outcome o = Drain(*stream);
    EXPECT_TRUE(o.done);
    EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  }
  gate_->Release();
  // The cancels apply after the stuck step, before a later request runs.
  auto after = loop_->Submit(Request(2));
  EXPECT_TRUE(Drain(*after).status.ok());
  EXPECT_EQ(loop_->stats().running, 0);
  EXPECT_EQ(loop_->stats().blocks_used, 0);
  EXPECT_TRUE(running->Take().events.empty());
}

TEST_F(EngineLoopTest, AnInvalidRequestEndsWithItsValidationError) {
  engine::GenerationRequest r = Request(0);  // max_tokens must be >= 1
  auto stream = loop_->Submit(std::move(r));
  const Outcome o = Drain(*stream);
  EXPECT_TRUE(o.done);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status.message()), HasSubstr("max_tokens"));
}

}  // namespace
}  // namespace tandem::worker
