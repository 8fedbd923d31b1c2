// The gateway's request path (GenerateCall) against fake workers served
// in-process over real gRPC: prefill retried on UNAVAILABLE, the KV lease
// released on every way a request can end without the decode worker taking
// it, stop strings and client cancels cancelling the decode call, admission
// refusing with a retry hint. The fakes script their answers; the gateway is
// the real GenerationService.
#include "gateway/calls/generate_call.h"

#include <gmock/gmock.h>
#include <grpcpp/alarm.h>
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/gguf/gguf.h"
#include "engine/model/synthetic_model.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/generation_service.h"
#include "gateway/routing/draft_kv_room.h"
#include "rpc/admission.h"
#include "rpc/bootstrap.h"
#include "tests/engine/test_models.h"
#include "tests/kvtransfer/rpc/release_recorder.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

// Token ids of the tiny synthetic vocabulary: byte b is id 3 + b.
int32_t Byte(char c) { return 3 + static_cast<unsigned char>(c); }

// Answers Prefill from a script of status codes (OK once the script is
// empty), and records every ReleaseKv.
class FakePrefill final : public tandem::v1::Prefill::Service {
 public:
  void Script(std::deque<grpc::StatusCode> codes) {
    absl::MutexLock lock(&mu_);
    codes_ = std::move(codes);
  }
  grpc::Status Prefill(grpc::ServerContext* ctx, const tandem::v1::PrefillRequest* r,
                       tandem::v1::PrefillResponse* out) override {
    absl::Duration delay;
    bool stopped = false;
    {
      absl::MutexLock lock(&mu_);
      delay = delay_;
      stopped = stopped_;
    }
    if (stopped) {
      {
        absl::MutexLock lock(&mu_);
        ++prefills_;
      }
      AwaitCancelled(ctx);
      return grpc::Status::CANCELLED;
    }
    absl::SleepFor(delay);  // the work a slow worker does
    absl::MutexLock lock(&mu_);
    ++prefills_;
    requests_.push_back(*r);
    if (!codes_.empty()) {
      const grpc::StatusCode code = codes_.front();
      codes_.pop_front();
      if (code != grpc::StatusCode::OK) return grpc::Status(code, "scripted failure");
    }
    out->set_lease_id(absl::StrCat("lease-", prefills_));
    out->mutable_first_token()->set_id(Byte('a'));
    out->set_num_blocks(1);
    out->set_num_tokens(r->prompt_token_ids_size());
    if (draft_kv_tokens_.has_value()) out->set_draft_kv_tokens(*draft_kv_tokens_);
    return grpc::Status::OK;
  }
  grpc::Status ReleaseKv(grpc::ServerContext*, const tandem::v1::ReleaseKvRequest* r,
                         tandem::v1::ReleaseKvResponse*) override {
    releases_.Record(*r);
    return grpc::Status::OK;
  }
  // The liveness probe. A stopped worker answers nothing: its calls end only
  // when the caller gives up.
  grpc::Status GetWorkerStats(grpc::ServerContext* ctx, const tandem::v1::WorkerStatsRequest*,
                              tandem::v1::WorkerStats*) override {
    {
      absl::MutexLock lock(&mu_);
      ++probes_;
      if (!stopped_) return grpc::Status::OK;
    }
    AwaitCancelled(ctx);
    return grpc::Status::CANCELLED;
  }
  // Stopped: Prefill and the probe hang until the caller cancels them.
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  // What each response says of a draft model's KV (unset: nothing).
  void SetDraftKvTokens(std::optional<int32_t> tokens) {
    absl::MutexLock lock(&mu_);
    draft_kv_tokens_ = tokens;
  }
  // Each Prefill takes this long (the worker alive and answering probes).
  void SetDelay(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    delay_ = d;
  }
  int probes() {
    absl::MutexLock lock(&mu_);
    return probes_;
  }
  int prefills() {
    absl::MutexLock lock(&mu_);
    return prefills_;
  }
  std::vector<tandem::v1::PrefillRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  std::vector<tandem::v1::ReleaseKvRequest> WaitForReleases(size_t n) {
    return releases_.WaitFor(n);
  }

 private:
  // A sync handler's wait for its caller to give up (the server has no
  // event for it: polled).
  static void AwaitCancelled(grpc::ServerContext* ctx) {
    while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(5));
  }

  absl::Mutex mu_;
  std::deque<grpc::StatusCode> codes_ ABSL_GUARDED_BY(mu_);
  int prefills_ ABSL_GUARDED_BY(mu_) = 0;
  int probes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_);
  std::optional<int32_t> draft_kv_tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<tandem::v1::PrefillRequest> requests_ ABSL_GUARDED_BY(mu_);
  kvtransfer::testing::ReleaseRecorder releases_;
};

// Streams scripted tokens, one per message, then ends with a status or
// (hang) waits until the caller cancels. Counts cancellations.
class FakeDecode final : public tandem::v1::Decode::CallbackService {
 public:
  struct Script {
    std::vector<int32_t> tokens;
    tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;  // on the last
    grpc::Status end = grpc::Status::OK;
    bool hang = false;
    // Refuses the hand-off at admission, as a full decode worker does: the
    // lease stays the gateway's (with a 10 ms retry hint).
    bool refuse_hand_off = false;
    // Ends marked as a failed KV fetch from the prefill worker.
    bool kv_fetch_failed = false;
    // The wait before each message (gaps[i] before message i where given,
    // else `gap`); a token id of kHeartbeat sends a heartbeat message.
    absl::Duration gap = absl::ZeroDuration();
    std::vector<absl::Duration> gaps = {};
  };
  static constexpr int32_t kHeartbeat = -1;
  void Set(Script s) { SetEach({std::move(s)}); }
  // Call i follows scripts[i] (the last one for every call after).
  void SetEach(std::vector<Script> scripts) {
    absl::MutexLock lock(&mu_);
    scripts_ = std::move(scripts);
  }
  grpc::ServerWriteReactor<tandem::v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext* ctx, const tandem::v1::DecodeRequest* r) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(*r);
    const Script& s = scripts_[std::min<size_t>(calls_, scripts_.size() - 1)];
    ++calls_;
    if (s.refuse_hand_off) {
      ctx->AddTrailingMetadata(rpc::kRefusedHandOffKey, "admission");
      rpc::AddRetryHint(*ctx, absl::Milliseconds(10));
    }
    if (s.kv_fetch_failed) ctx->AddTrailingMetadata(rpc::kKvFetchFailedKey, "1");
    return new Writer(this, s);
  }
  std::vector<tandem::v1::DecodeRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(calls_);
  }
  void WaitForCancel() { cancelled_.WaitForNotification(); }
  bool cancelled() const { return cancelled_.HasBeenNotified(); }

 private:
  class Writer final : public grpc::ServerWriteReactor<tandem::v1::DecodeResponse> {
   public:
    Writer(FakeDecode* owner, Script script) : owner_(owner), script_(std::move(script)) {
      Next();
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "gone"));
        return;
      }
      Next();
    }
    void OnCancel() override {
      if (!owner_->cancelled_.HasBeenNotified()) owner_->cancelled_.Notify();
      // OnCancel may run beside a write's completion: whichever of the two
      // sees the other's flag finishes the call.
      cancel_seen_.store(true);
      if (script_.hang && written_all_.load()) {
        FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      }
    }
    void OnDone() override { delete this; }

   private:
    // OnCancel and a failed write may both want to end the call; a reactor
    // finishes once.
    void FinishOnce(const grpc::Status& s) {
      if (!finished_.exchange(true)) Finish(s);
    }
    void Next() {
      const absl::Duration gap =
          next_ < script_.gaps.size() ? script_.gaps[next_] : script_.gap;
      if (gap <= absl::ZeroDuration() || next_ == script_.tokens.size()) {
        WriteNext();
        return;
      }
      alarm_.Set(absl::ToChronoTime(absl::Now() + gap), [this](bool) { WriteNext(); });
    }
    void WriteNext() {
      if (next_ == script_.tokens.size()) {
        written_all_.store(true);
        if (!script_.hang) FinishOnce(script_.end);
        if (script_.hang && cancel_seen_.load()) {
          FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
        }
        return;  // a hanging stream finishes in OnCancel
      }
      msg_.Clear();
      if (script_.tokens[next_] == kHeartbeat) {
        msg_.set_heartbeat(true);
      } else {
        msg_.add_tokens()->set_id(script_.tokens[next_]);
      }
      if (++next_ == script_.tokens.size()) msg_.set_finish_reason(script_.finish);
      StartWrite(&msg_);
    }
    grpc::Alarm alarm_;
    FakeDecode* owner_;
    Script script_;
    size_t next_ = 0;  // reactions only (one at a time)
    std::atomic<bool> written_all_{false};
    std::atomic<bool> cancel_seen_{false};
    std::atomic<bool> finished_{false};
    tandem::v1::DecodeResponse msg_;
  };

  absl::Mutex mu_;
  std::vector<Script> scripts_ ABSL_GUARDED_BY(mu_) = {Script{}};
  std::vector<tandem::v1::DecodeRequest> requests_ ABSL_GUARDED_BY(mu_);
  size_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification cancelled_;
};

class GenerateCallTest : public ::testing::Test {
 protected:
  void StartGateway(int n_prefill, rpc::AdmissionLimits admission = {},
                    int32_t max_migrations = 3, int32_t decode_streams = 1024) {
    for (int i = 0; i < n_prefill; ++i) {
      prefills_.push_back(std::make_unique<FakePrefill>());
      auto s = rpc::StartGrpcServer({}, {prefills_.back().get()});
      ASSERT_TRUE(s.ok()) << s.status();
      servers_.push_back(std::move(*s));
    }
    auto d = rpc::StartGrpcServer({}, {&decode_});
    ASSERT_TRUE(d.ok()) << d.status();
    servers_.push_back(std::move(*d));

    const std::string path = ::testing::TempDir() + "/generate_call_test.gguf";
    ASSERT_TRUE(engine::WriteSyntheticModel(engine::testing::TinyOptions(), path).ok());
    auto file = engine::GgufFile::Open(path, {.require_tensor_data = false});
    ASSERT_TRUE(file.ok()) << file.status();
    auto tokenizer = engine::Tokenizer::FromGguf(**file);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

    GatewayOptions options;
    options.model_name = "tiny";
    options.limits.max_context = 512;
    for (int i = 0; i < n_prefill; ++i) options.prefill_workers.push_back(servers_[i].address);
    options.decode_workers = {servers_.back().address};
    options.admission = admission;
    options.max_migrations = max_migrations;
    options.streams_per_decode_worker = decode_streams;
    // Refusals at once, as these tests check them (the queue's own tests:
    // admission_queue_test, e2e/admission_queue_test).
    options.admission_queue.max_waiting = 0;
    options.unavailable_wait = unavailable_wait_;
    options.progress_floor = progress_floor_;
    service_ = std::make_unique<GenerationService>(std::move(*tokenizer), options, registry_);
    auto g = rpc::StartGrpcServer({}, {service_.get()});
    ASSERT_TRUE(g.ok()) << g.status();
    gateway_ = std::move(*g);
    stub_ = tandem::v1::Generation::NewStub(
        grpc::CreateChannel(gateway_.address, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (gateway_.server != nullptr) gateway_.server->Shutdown();
    for (rpc::StartedServer& s : servers_) s.server->Shutdown();
  }

  static tandem::v1::GenerateRequest Request(int32_t max_tokens) {
    tandem::v1::GenerateRequest r;
    for (char c : std::string("once upon")) r.add_prompt_token_ids(Byte(c));
    r.set_max_tokens(max_tokens);
    return r;
  }

  // A stream admitted and left open (the decode worker hangs after one
  // token); cancelled and finished when it goes out of scope.
  struct HeldStream {
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReader<tandem::v1::GenerateResponse>> reader;
    bool streaming = false;
    HeldStream() = default;
    HeldStream(HeldStream&&) = default;
    ~HeldStream() {
      if (reader == nullptr) return;
      ctx->TryCancel();
      reader->Finish();
    }
  };
  HeldStream Hold() {
    decode_.Set({.tokens = {Byte('b')}, .hang = true});
    HeldStream h;
    h.reader = stub_->Generate(h.ctx.get(), Request(16));
    tandem::v1::GenerateResponse msg;
    h.streaming = h.reader->Read(&msg);
    return h;
  }

  struct Result {
    grpc::Status status;
    std::string text;
    tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;
    tandem::v1::Usage usage;
    std::map<std::string, std::string> trailers;  // copied: the context dies
  };
  Result Generate(const tandem::v1::GenerateRequest& request) {
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, request);
    Result r;
    tandem::v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
      for (const tandem::v1::Token& t : msg.tokens()) r.text += t.text();
      if (msg.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
        r.finish = msg.finish_reason();
        r.usage = msg.usage();
      }
    }
    r.status = reader->Finish();
    for (const auto& [key, value] : ctx.GetServerTrailingMetadata()) {
      r.trailers[std::string(key.data(), key.size())] = std::string(value.data(), value.size());
    }
    return r;
  }

  // The value of the unlabeled counter `name` in the gateway's registry.
  double Counter(const std::string& name) {
    for (const prometheus::MetricFamily& family : registry_.Collect()) {
      if (family.name == name && !family.metric.empty()) return family.metric[0].counter.value;
    }
    return -1;
  }

  absl::Duration unavailable_wait_ = absl::ZeroDuration();  // per test
  absl::Duration progress_floor_ = absl::Seconds(1);        // per test
  std::vector<std::unique_ptr<FakePrefill>> prefills_;
  FakeDecode decode_;
  std::vector<rpc::StartedServer> servers_;
  prometheus::Registry registry_;
  std::unique_ptr<GenerationService> service_;
  rpc::StartedServer gateway_;
  std::unique_ptr<tandem::v1::Generation::Stub> stub_;
};

TEST_F(GenerateCallTest, StreamsPrefillTokenThenDecodeTokens) {
  StartGateway(1);
  decode_.Set({.tokens = {Byte('b'), Byte('c')}, .finish = tandem::v1::FINISH_REASON_LENGTH});
  const Result r = Generate(Request(3));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(r.finish, tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(service_->admission().in_flight(), 0);
}

// The prompt's draft KV is asked for where decode will propose with the
// draft: a request naming the draft, or naming no method while the decode
// workers have room (a worker not heard from, as these fakes, counts as
// any). Off or prompt lookup named: skipped. How far the lease's draft KV
// reaches is passed on to the decode worker.
TEST_F(GenerateCallTest, ThePrefillSkipsTheDraftsKvWhereDecodeWillNotUseIt) {
  StartGateway(1);
  prefills_[0]->SetDraftKvTokens(0);
  const std::pair<tandem::v1::Speculation, bool> cases[] = {
      {tandem::v1::SPECULATION_OFF, true},
      {tandem::v1::SPECULATION_PROMPT_LOOKUP, true},
      {tandem::v1::SPECULATION_DEFAULT, false},
      {tandem::v1::SPECULATION_DRAFT, false},
  };
  for (const auto& [method, skipped] : cases) {
    decode_.Set({.tokens = {Byte('b')}, .finish = tandem::v1::FINISH_REASON_LENGTH});
    tandem::v1::GenerateRequest req = Request(2);
    req.mutable_sampling()->set_speculation(method);
    const Result r = Generate(req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(prefills_[0]->requests().back().skip_draft_kv(), skipped) << method;
    ASSERT_TRUE(decode_.requests().back().has_draft_kv_tokens()) << method;
    EXPECT_EQ(decode_.requests().back().draft_kv_tokens(), 0) << method;
  }
}

TEST(DecodeRoomForDraftKvTest, ThePromptsInPrefillMustFitTheDecodeWorkersRoom) {
  using Rooms = std::vector<std::optional<int32_t>>;
  EXPECT_TRUE(DecodeRoomForDraftKv(Rooms{3, 5}, 8));
  EXPECT_FALSE(DecodeRoomForDraftKv(Rooms{3, 5}, 9));
  EXPECT_FALSE(DecodeRoomForDraftKv(Rooms{0}, 1));                 // busy, or no draft
  EXPECT_TRUE(DecodeRoomForDraftKv(Rooms{0, -1}, 100));            // --spec-max-batch 0: any number
  EXPECT_TRUE(DecodeRoomForDraftKv(Rooms{0, std::nullopt}, 100));  // not heard from
  EXPECT_FALSE(DecodeRoomForDraftKv(Rooms{}, 1));                  // no decode worker to propose
}

TEST_F(GenerateCallTest, RetriesPrefillOnAnotherWorkerWhenOneIsUnavailable) {
  StartGateway(2);
  // The picker tries worker 0 first (equal load, lowest index); it fails
  // and worker 1 serves.
  prefills_[0]->Script({grpc::StatusCode::UNAVAILABLE});
  decode_.Set({.tokens = {Byte('b')}, .finish = tandem::v1::FINISH_REASON_LENGTH});
  const Result r = Generate(Request(2));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(prefills_[0]->prefills(), 1);
  EXPECT_EQ(prefills_[1]->prefills(), 1);
}

TEST_F(GenerateCallTest, EveryPrefillWorkerFailingIsUnavailableNeverOk) {
  StartGateway(2);
  prefills_[0]->Script({grpc::StatusCode::UNAVAILABLE});
  prefills_[1]->Script({grpc::StatusCode::UNAVAILABLE});
  // Both scripted failures are used up by one request's two attempts.
  const Result r = Generate(Request(2));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("prefill"));
  EXPECT_EQ(decode_.calls(), 0);
}

TEST_F(GenerateCallTest, WhenEveryPrefillWorkerIsDownTheRequestWaitsForOne) {
  unavailable_wait_ = absl::Seconds(10);
  StartGateway(2);
  decode_.Set({.tokens = {Byte('b')}, .finish = tandem::v1::FINISH_REASON_LENGTH});
  // Both down once (restarting, say), then back: the request waits and
  // tries them again instead of failing.
  prefills_[0]->Script({grpc::StatusCode::UNAVAILABLE});
  prefills_[1]->Script({grpc::StatusCode::UNAVAILABLE});
  const Result r = Generate(Request(2));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(prefills_[0]->prefills() + prefills_[1]->prefills(), 3);
}

TEST_F(GenerateCallTest, NonRetryablePrefillErrorIsNotRetried) {
  StartGateway(2);
  prefills_[0]->Script({grpc::StatusCode::INVALID_ARGUMENT});
  prefills_[1]->Script({grpc::StatusCode::INVALID_ARGUMENT});
  const Result r = Generate(Request(2));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(prefills_[0]->prefills() + prefills_[1]->prefills(), 1);
}

TEST_F(GenerateCallTest, FinishingAtTheFirstTokenReleasesTheLeaseAsDone) {
  StartGateway(1);
  const Result r = Generate(Request(1));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(decode_.calls(), 0);
  const auto releases = prefills_[0]->WaitForReleases(1);
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].lease_id(), "lease-1");
  EXPECT_TRUE(releases[0].ok());
}

TEST_F(GenerateCallTest, ADecodeFailureReleasesTheLeaseAsFailed) {
  StartGateway(1, {}, /*max_migrations=*/0);
  decode_.Set({.tokens = {}, .end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode died")});
  const Result r = Generate(Request(4));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(), HasSubstr("decode: decode died"));
  const auto releases = prefills_[0]->WaitForReleases(1);
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_FALSE(releases[0].ok());
  EXPECT_FALSE(releases[0].cancelled());
  EXPECT_EQ(service_->admission().in_flight(), 0);
}

TEST_F(GenerateCallTest, ADecodeFailureMidStreamMigratesWithTheTokensSoFar) {
  StartGateway(1);
  // The first decode worker dies after two tokens; the stream resumes.
  decode_.SetEach({{.tokens = {Byte('b'), Byte('c')},
                    .end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode died")},
                   {.tokens = {Byte('e'), Byte('f')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  const Result r = Generate(Request(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  // Prefill's 'a', decode's "bc", the resumed prefill's 'a', decode's "ef".
  EXPECT_EQ(r.text, "abcaef");
  EXPECT_EQ(r.usage.migrations(), 1);
  const auto prefills = prefills_[0]->requests();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_EQ(prefills[0].generated_token_ids_size(), 0);
  EXPECT_THAT(prefills[1].generated_token_ids(),
              ::testing::ElementsAre(Byte('a'), Byte('b'), Byte('c')));
  const auto decodes = decode_.requests();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_THAT(decodes[1].generated_token_ids(),
              ::testing::ElementsAre(Byte('a'), Byte('b'), Byte('c')));
  EXPECT_EQ(decodes[1].lease_id(), "lease-2");
  // The dead stream's lease is released as failed.
  const auto releases = prefills_[0]->WaitForReleases(1);
  EXPECT_EQ(releases[0].lease_id(), "lease-1");
  EXPECT_FALSE(releases[0].ok());
}

// The decode worker could not fetch the KV from the prefill worker (cut off
// from it, or it from the network): the stream resumes on another prefill
// worker, where the first one's cache would have drawn it back; with one
// prefill worker it resumes there.
TEST_F(GenerateCallTest, AFailedKvFetchResumesOnAnotherPrefillWorker) {
  StartGateway(2);
  decode_.SetEach({{.tokens = {},
                    .end = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                        "fetching KV from a: no block arrived in 1s"),
                    .kv_fetch_failed = true},
                   {.tokens = {Byte('e')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  const Result r = Generate(Request(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "aae");
  EXPECT_EQ(r.usage.migrations(), 1);
  // Both idle: the first prefill goes to worker 0 (the lowest index), the
  // resumption to worker 1.
  EXPECT_EQ(prefills_[0]->prefills(), 1);
  EXPECT_EQ(prefills_[1]->prefills(), 1);
}

TEST_F(GenerateCallTest, AFailedKvFetchWithOnePrefillWorkerResumesThere) {
  StartGateway(1);
  decode_.SetEach({{.tokens = {},
                    .end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "fetch failed"),
                    .kv_fetch_failed = true},
                   {.tokens = {Byte('e')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  const Result r = Generate(Request(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "aae");
  EXPECT_EQ(prefills_[0]->prefills(), 2);
}

// A fetch the holder refused with a code that would be final for a request
// (a lease another fetch holds in another layout, blocks of another model)
// is still a fault between workers: the stream resumes. The same failure
// past the request's deadline is final.
TEST_F(GenerateCallTest, AKvFetchRefusedByTheHolderResumesWhateverItsCode) {
  StartGateway(2);
  decode_.SetEach({{.tokens = {},
                    .end = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        "fetching KV from a: stripes: got 1, lease \"l\" is "
                                        "fetched in 2"),
                    .kv_fetch_failed = true},
                   {.tokens = {},
                    .end = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                        "fetching KV from b: blocks of another model"),
                    .kv_fetch_failed = true},
                   {.tokens = {Byte('e')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  const Result r = Generate(Request(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "aaae");  // each resumption's prefill gives a token
  EXPECT_EQ(r.usage.migrations(), 2);

  decode_.Set({.tokens = {},
               .end = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "fetching KV from a"),
               .kv_fetch_failed = true});
  const Result late = Generate(Request(16));
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(late.usage.migrations(), 0);
}

// A decode worker full at the hand-off refuses it without touching the
// lease: the stream, whose first token is out, waits for room and goes on
// with the same lease; no migration, no second prefill, no error.
TEST_F(GenerateCallTest, AHandOffRefusedForCapacityWaitsForRoomWithTheSameLease) {
  StartGateway(1);
  const grpc::Status full(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "decode worker: 1024 requests in flight");
  decode_.SetEach({{.tokens = {}, .end = full, .refuse_hand_off = true},
                   {.tokens = {}, .end = full, .refuse_hand_off = true},
                   {.tokens = {Byte('b'), Byte('c')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  const Result r = Generate(Request(3));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(r.usage.migrations(), 0);
  EXPECT_EQ(prefills_[0]->prefills(), 1);
  const auto decodes = decode_.requests();
  ASSERT_EQ(decodes.size(), 3u);
  for (const auto& d : decodes) EXPECT_EQ(d.lease_id(), "lease-1");
  EXPECT_EQ(Counter("tandem_hand_off_refusals_total"), 2);
  EXPECT_EQ(Counter("tandem_migrations_total"), 0);
  EXPECT_EQ(service_->admission().in_flight(), 0);
}

// A decode worker that cannot be reached at the hand-off (its Decode call
// fails UNAVAILABLE before it sent anything: restarting) is waited for with
// the same lease: no migration, no second prefill, no error.
TEST_F(GenerateCallTest, AnUnreachableDecodeWorkerIsWaitedForWithTheSameLease) {
  unavailable_wait_ = absl::Seconds(10);
  StartGateway(1);
  const grpc::Status refused(grpc::StatusCode::UNAVAILABLE, "failed to connect: refused");
  decode_.SetEach({{.tokens = {}, .end = refused},
                   {.tokens = {}, .end = refused},
                   {.tokens = {Byte('b'), Byte('c')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  const Result r = Generate(Request(3));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(r.usage.migrations(), 0);
  EXPECT_EQ(prefills_[0]->prefills(), 1);
  const auto decodes = decode_.requests();
  ASSERT_EQ(decodes.size(), 3u);
  for (const auto& d : decodes) EXPECT_EQ(d.lease_id(), "lease-1");
  EXPECT_EQ(Counter("tandem_decode_retries_total"), 2);
  EXPECT_EQ(Counter("tandem_migrations_total"), 0);
  EXPECT_EQ(service_->admission().in_flight(), 0);
}

// Past --unavailable-wait-ms the request fails UNAVAILABLE, saying why, and
// the lease is released as failed.
TEST_F(GenerateCallTest, AnUnreachableDecodeWorkerPastTheWaitIsUnavailable) {
  unavailable_wait_ = absl::Milliseconds(300);
  StartGateway(1);
  decode_.Set({.tokens = {}, .end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused")});
  const Result r = Generate(Request(3));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(),
              HasSubstr("no decode worker could be reached (waited 300ms in all); the last: "
                        "decode: refused"));
  // Tried at once, then after 100 and 200 ms.
  EXPECT_EQ(decode_.calls(), 3);
  EXPECT_EQ(prefills_[0]->prefills(), 1);
  const auto releases = prefills_[0]->WaitForReleases(1);
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_FALSE(releases[0].ok());
  EXPECT_EQ(Counter("tandem_migrations_total"), 0);
  EXPECT_EQ(service_->admission().in_flight(), 0);
}

// When no decode worker has room before the request's deadline, the client
// gets RESOURCE_EXHAUSTED saying so, and the lease is released.
TEST_F(GenerateCallTest, AHandOffNoWorkerTakesBeforeTheDeadlineIsResourceExhausted) {
  StartGateway(1);
  decode_.Set({.tokens = {},
               .end = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"),
               .refuse_hand_off = true});
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(600)));
  auto reader = stub_->Generate(&ctx, Request(4));
  tandem::v1::GenerateResponse msg;
  int tokens = 0;
  while (reader->Read(&msg)) tokens += msg.tokens_size();
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(tokens, 1);  // the prefill's
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("refused the stream for capacity"));
  EXPECT_GE(decode_.calls(), 2);
  const auto releases = prefills_[0]->WaitForReleases(1);
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].lease_id(), "lease-1");
  EXPECT_FALSE(releases[0].ok());
  EXPECT_EQ(service_->admission().in_flight(), 0);
}

// A RESOURCE_EXHAUSTED without the refusal mark (the worker failed under
// the stream) migrates as any failure does.
TEST_F(GenerateCallTest, AnUnmarkedResourceExhaustedMigrates) {
  StartGateway(1);
  decode_.SetEach({{.tokens = {Byte('b')},
                    .end = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "out of blocks")},
                   {.tokens = {Byte('e')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  const Result r = Generate(Request(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.usage.migrations(), 1);
  EXPECT_EQ(Counter("tandem_hand_off_refusals_total"), 0);
}

// A migrated stream (its client has tokens already) refused by every
// prefill worker for capacity waits for room instead of failing late.
TEST_F(GenerateCallTest, AResumedPrefillRefusedForCapacityWaitsForRoom) {
  StartGateway(1);
  decode_.SetEach({{.tokens = {Byte('b')},
                    .end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode died")},
                   {.tokens = {Byte('e')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  prefills_[0]->Script({grpc::StatusCode::OK, grpc::StatusCode::RESOURCE_EXHAUSTED,
                        grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::OK});
  const Result r = Generate(Request(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "abae");
  EXPECT_EQ(r.usage.migrations(), 1);
  EXPECT_EQ(prefills_[0]->prefills(), 4);
}

// Before its first token a request refused by every prefill worker is
// refused at once, as before: the client may retry elsewhere.
TEST_F(GenerateCallTest, AFirstPrefillRefusedForCapacityIsRefusedAtOnce) {
  StartGateway(1);
  prefills_[0]->Script({grpc::StatusCode::RESOURCE_EXHAUSTED});
  const Result r = Generate(Request(4));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(r.text.empty());
  EXPECT_EQ(prefills_[0]->prefills(), 1);
}

// The progress deadline adapts to the worker's pace: a worker that has been
// quick (5 ms a token) and goes silent is given up on after the floor, not
// the 20 s flag, and the stream goes on elsewhere.
TEST_F(GenerateCallTest, AQuickWorkerGoneSilentIsGivenUpOnAfterTheFloor) {
  progress_floor_ = absl::Milliseconds(200);
  StartGateway(1);
  FakeDecode::Script quick{.tokens = std::vector<int32_t>(40, Byte('b')),
                           .hang = true,
                           .gap = absl::Milliseconds(5)};
  decode_.SetEach({quick, {.tokens = {Byte('e')}, .finish = tandem::v1::FINISH_REASON_LENGTH}});
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));  // < the 20 s flag
  auto reader = stub_->Generate(&ctx, Request(64));
  tandem::v1::GenerateResponse msg;
  int tokens = 0;
  while (reader->Read(&msg)) tokens += msg.tokens_size();
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tokens, 1 + 40 + 1 + 1);  // prefill, the quick worker, the resumed prefill, decode
  EXPECT_EQ(Counter("tandem_progress_timeouts_total"), 1);
  EXPECT_EQ(Counter("tandem_migrations_total"), 1);
}

// A worker whose steps are slow but steady is not given up on, nor is one
// that sends heartbeats through a step far longer than its pace (a long
// prefill chunk): no false migration.
TEST_F(GenerateCallTest, SlowStepsAndHeartbeatsThroughALongOneAreNotGivenUpOn) {
  progress_floor_ = absl::Milliseconds(50);
  StartGateway(1);
  FakeDecode::Script s{.tokens = std::vector<int32_t>(24, Byte('b')),
                       .finish = tandem::v1::FINISH_REASON_LENGTH,
                       .gap = absl::Milliseconds(40)};
  // A step of 1.2 s in the middle, covered by heartbeats every 100 ms (the
  // pace allows 5 x 40 ms of silence).
  s.tokens.insert(s.tokens.begin() + 20, 12, FakeDecode::kHeartbeat);
  s.gaps.assign(s.tokens.size(), absl::Milliseconds(40));
  for (int i = 20; i < 32; ++i) s.gaps[i] = absl::Milliseconds(100);
  decode_.Set(s);
  const Result r = Generate(Request(64));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "a" + std::string(24, 'b'));
  EXPECT_EQ(r.usage.migrations(), 0);
  EXPECT_EQ(Counter("tandem_progress_timeouts_total"), 0);
}

// A prefill worker stopped (or cut off) under a request answers neither the
// prefill nor the probe: after the probe's floor the request is retried on
// the other worker, with no error; a worker that is merely slow answers
// its probes and keeps its prefill.
TEST_F(GenerateCallTest, APrefillOnAWorkerThatAnswersNoProbeMovesToAnother) {
  progress_floor_ = absl::Milliseconds(200);
  StartGateway(2);
  prefills_[0]->Stop();
  decode_.Set({.tokens = {Byte('b')}, .finish = tandem::v1::FINISH_REASON_LENGTH});
  const Result r = Generate(Request(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(prefills_[0]->prefills(), 1);
  EXPECT_EQ(prefills_[1]->prefills(), 1);
  EXPECT_EQ(Counter("tandem_progress_timeouts_total"), 1);
}

TEST_F(GenerateCallTest, ASlowPrefillWhoseWorkerAnswersProbesIsLeftToFinish) {
  progress_floor_ = absl::Milliseconds(100);
  StartGateway(2);
  prefills_[0]->SetDelay(absl::Milliseconds(600));  // several probes' worth
  decode_.Set({.tokens = {Byte('b')}, .finish = tandem::v1::FINISH_REASON_LENGTH});
  const Result r = Generate(Request(16));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(prefills_[0]->prefills(), 1);
  EXPECT_EQ(prefills_[1]->prefills(), 0);
  EXPECT_GE(prefills_[0]->probes(), 2);
  EXPECT_EQ(Counter("tandem_progress_timeouts_total"), 0);
}

TEST_F(GenerateCallTest, MigrationsStopAtTheLimit) {
  StartGateway(1, {}, /*max_migrations=*/2);
  decode_.Set({.tokens = {Byte('b')},
               .end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode died")});
  const Result r = Generate(Request(16));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(prefills_[0]->prefills(), 3);
  EXPECT_EQ(decode_.calls(), 3);
  EXPECT_EQ(service_->admission().in_flight(), 0);
}

TEST_F(GenerateCallTest, AStreamEndingWithoutFinishReasonIsAnError) {
  StartGateway(1);
  decode_.Set({.tokens = {Byte('b')}});  // OK, but no finish reason
  const Result r = Generate(Request(8));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_FALSE(prefills_[0]->WaitForReleases(1).at(0).ok());
}

TEST_F(GenerateCallTest, AStopStringEndsTheRequestAndCancelsDecode) {
  StartGateway(1);
  decode_.Set({.tokens = {Byte('b'), Byte('X'), Byte('Y'), Byte('c')}, .hang = true});
  tandem::v1::GenerateRequest req = Request(16);
  req.add_stop("XY");
  const Result r = Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(r.finish, tandem::v1::FINISH_REASON_STOP);
  decode_.WaitForCancel();  // returns only once the decode call was cancelled
  EXPECT_TRUE(decode_.cancelled());
}

TEST_F(GenerateCallTest, AClientCancelCancelsDecodeAndReleasesTheLease) {
  StartGateway(1);
  decode_.Set({.tokens = {Byte('b')}, .hang = true});
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Request(16));
  tandem::v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));  // "a", from prefill
  ASSERT_TRUE(reader->Read(&msg));  // "b": decode is streaming
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  decode_.WaitForCancel();
  const auto releases = prefills_[0]->WaitForReleases(1);
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_TRUE(releases[0].cancelled());
}

TEST_F(GenerateCallTest, OverTheInFlightBoundIsRefusedAtOnceWithARetryHint) {
  StartGateway(1, {.max_in_flight = 1, .retry_after = absl::Milliseconds(250)});
  HeldStream held = Hold();
  ASSERT_TRUE(held.streaming);

  const Result refused = Generate(Request(4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("max_in_flight"));
  auto hint = refused.trailers.find(rpc::kRetryAfterMsKey);
  ASSERT_NE(hint, refused.trailers.end());
  EXPECT_EQ(hint->second, "250");
  EXPECT_EQ(prefills_[0]->prefills(), 1);  // no work was done for it

}

TEST_F(GenerateCallTest, PastTheDecodeWorkersCapacityIsRefusedBeforeAnyWork) {
  // One decode worker taking one stream: a second request would be refused
  // by the decode worker after its first token, so the gateway refuses it
  // before its prefill.
  StartGateway(1, {.retry_after = absl::Milliseconds(100)}, 3, /*decode_streams=*/1);
  HeldStream held = Hold();
  ASSERT_TRUE(held.streaming);

  const Result refused = Generate(Request(4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("decode capacity"));
  EXPECT_NE(refused.trailers.find(rpc::kRetryAfterMsKey), refused.trailers.end());
  EXPECT_EQ(prefills_[0]->prefills(), 1);  // no work was done for it

}

TEST_F(GenerateCallTest, AnInvalidRequestNamesTheField) {
  StartGateway(1);
  const Result r = Generate(Request(-1));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("max_tokens"));
  EXPECT_EQ(prefills_[0]->prefills(), 0);
}

// A message gRPC's generated code could not parse (invalid UTF-8 in a
// string field; a client's protobuf sends it anyway) is refused before any
// work, naming the field, and counted.
TEST_F(GenerateCallTest, InvalidUtf8IsRefusedNamingTheFieldAndCounted) {
  StartGateway(1);
  tandem::v1::GenerateRequest req = Request(4);
  req.add_stop("fine");
  req.add_stop("bad \xff");
  const Result r = Generate(req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("stop[1]: not valid UTF-8"));

  tandem::v1::TokenizeRequest tokenize;
  tokenize.set_text("overlong \xc0\x80");
  tandem::v1::TokenizeResponse tokens;
  grpc::ClientContext ctx;
  const grpc::Status t = stub_->Tokenize(&ctx, tokenize, &tokens);
  EXPECT_EQ(t.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(t.error_message(), HasSubstr("text: not valid UTF-8"));

  EXPECT_EQ(prefills_[0]->prefills(), 0);
  std::map<std::string, double> malformed;
  for (const prometheus::MetricFamily& family : registry_.Collect()) {
    if (family.name != "tandem_malformed_requests_total") continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      malformed[m.label.at(0).value] = m.counter.value;
    }
  }
  EXPECT_EQ(malformed["Generate"], 1);
  EXPECT_EQ(malformed["Tokenize"], 1);
}

}  // namespace
}  // namespace tandem::gateway
