#include "decode_worker/decode_service.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>

#include <grpcpp/alarm.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "rpc/convert.h"
#include "rpc/metrics.h"
#include "rpc/status.h"
#include "worker/request_convert.h"
#include "worker/worker_stats.h"

namespace tandem::decode {
namespace {

tandem::v1::FinishReason ToProto(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kLength: return tandem::v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kEos: return tandem::v1::FINISH_REASON_EOS;
    case engine::FinishReason::kStop: return tandem::v1::FINISH_REASON_STOP;
    default: return tandem::v1::FINISH_REASON_UNSPECIFIED;
  }
}

}  // namespace

// One Decode stream: fetch -> submit -> relay. Owned by itself (self_) until
// gRPC's OnDone; the fetch callback and the engine listener hold weak
// references, so late events never touch a finished call. One write is
// outstanding at a time; `mu_` orders the engine thread's Pump against
// OnWriteDone and OnCancel.
class DecodeService::DecodeCall final : public grpc::ServerWriteReactor<tandem::v1::DecodeResponse>,
                                        public std::enable_shared_from_this<DecodeCall> {
 public:
  static DecodeCall* Start(DecodeService* service, grpc::CallbackServerContext* ctx,
                           const tandem::v1::DecodeRequest* request) {
    std::shared_ptr<DecodeCall> call(new DecodeCall(service, ctx));
    call->self_ = call;
    call->Begin(*request);
    return call.get();
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> deferred;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      last_write_ = absl::Now();
      // Done ran while this write was out: its Finish waited for it.
      if (finished_) deferred = std::move(deferred_finish_);
    }
    if (deferred.has_value()) {
      Finish(*deferred);
      return;
    }
    if (!ok) {
      CancelWork();
      Done(absl::CancelledError("the gateway went away"));
      return;
    }
    Pump();
  }

  void OnCancel() override {
    CancelWork();
    Done(absl::FromChrono(ctx_->deadline()) <= absl::Now()
             ? absl::DeadlineExceededError("decode: the request's deadline passed")
             : absl::CancelledError("decode cancelled by the caller"));
  }

  void OnDone() override { self_.reset(); }

 private:
  DecodeCall(DecodeService* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx) {}

  void Begin(const tandem::v1::DecodeRequest& request) {
    local_ = request.prefill_address().empty() && request.lease_id().empty();
    if (absl::Status s = service_->Validate(request); !s.ok()) {
      // The lease, if named, is of no use to anyone now.
      if (!request.prefill_address().empty() && !request.lease_id().empty()) {
        service_->releases_.Release(request.prefill_address(), request.lease_id(), s);
      }
      Done(s);
      return;
    }
    absl::StatusOr<rpc::Admission::Ticket> ticket = service_->admission_.TryAdmit(0);
    if (!ticket.ok()) {
      // Full: the lease (or, for a local prefill, the prompt) is left to the
      // caller, who may hand it to another decode worker or wait for room.
      ctx_->AddTrailingMetadata(rpc::kRefusedHandOffKey, "admission");
      Done(ticket.status());
      return;
    }
    StartHeartbeat();
    if (local_) {
      ticket_ = std::move(*ticket);
      SubmitLocal(request);
      return;
    }
    // The positions the lease's blocks hold: the prompt, then any tokens a
    // resumed stream produced before.
    std::vector<int32_t> held_tokens(request.prompt_token_ids().begin(),
                                     request.prompt_token_ids().end());
    held_tokens.insert(held_tokens.end(), request.generated_token_ids().begin(),
                       request.generated_token_ids().end());
    // Private KV takes nothing from this worker's shared cache: every block
    // is fetched.
    absl::StatusOr<int32_t> held = request.private_kv()
                                       ? absl::StatusOr<int32_t>(0)
                                       : service_->BlocksHeld(request, held_tokens);
    if (!held.ok()) {
      service_->releases_.Release(request.prefill_address(), request.lease_id(), held.status());
      Done(held.status());
      return;
    }
    ticket_ = std::move(*ticket);
    request_ = worker::EngineRequestFromProto(request);
    first_ = rpc::SampledTokenFromProto(request.first_token());

    const auto limit = absl::Now() + service_->options_.fetch_timeout;
    const absl::Time client = absl::FromChrono(ctx_->deadline());
    std::weak_ptr<DecodeCall> weak = weak_from_this();
    absl::MutexLock lock(&mu_);
    keep_lease_ = service_->lease_keeper_.Keep(request.prefill_address(), request.lease_id());
    fetch_ = service_->fetcher_.Start(
        {.address = request.prefill_address(),
         .lease_id = request.lease_id(),
         .num_blocks = request.num_blocks(),
         .first_block = *held,
         .token_ids = std::move(held_tokens),
         .cache_salt = request.cache_salt(),
         .deadline = std::min(limit, client),
         .stall_timeout = service_->options_.fetch_stall_timeout,
         .draft_tokens = request.has_draft_kv_tokens()
                             ? std::optional<int32_t>(request.draft_kv_tokens())
                             : std::nullopt},
        [weak](kvtransfer::FetchResult result) {
          if (std::shared_ptr<DecodeCall> call = weak.lock()) call->OnFetched(std::move(result));
        });
  }

  // Conditional disaggregation: the engine computes the prompt (its prefix
  // cache supplies what it holds) and samples the first token.
  void SubmitLocal(const tandem::v1::DecodeRequest& request) {
    std::weak_ptr<DecodeCall> weak = weak_from_this();
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    stream_ = service_->loop_.Submit(worker::EngineRequestFromProto(request), [weak] {
      if (auto call = weak.lock()) call->Pump();
    });
  }

  // gRPC thread: the blocks arrived (or did not).
  void OnFetched(kvtransfer::FetchResult result) {
    {
      absl::MutexLock lock(&mu_);
      keep_lease_.Reset();  // fetched (and released) or failed: nothing left to keep
    }
    if (!result.kv.ok()) {
      // The gateway resumes the stream; it prefers another prefill worker
      // than the one the blocks did not come from.
      Done(result.kv.status(),
           absl::IsCancelled(result.kv.status()) ? nullptr : rpc::kKvFetchFailedKey);
      return;
    }
    transfer_ = result.took;
    std::weak_ptr<DecodeCall> weak = weak_from_this();
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;  // OnCancel already finished the call
    stream_ = service_->loop_.SubmitWithKv(std::move(request_), first_, std::move(*result.kv),
                                           [weak] {
                                             if (auto call = weak.lock()) call->Pump();
                                           });
  }

  // From admission to the end: an alarm every stream_heartbeat writes a
  // heartbeat when nothing was written for that long and no write is out,
  // so the gateway hears from this worker while the KV is fetched or a long
  // step runs. It stops with the call.
  void StartHeartbeat() {
    const absl::Duration every = service_->options_.stream_heartbeat;
    if (every <= absl::ZeroDuration()) return;
    absl::MutexLock lock(&mu_);
    last_write_ = absl::Now();
    ArmHeartbeat(last_write_ + every);
  }
  void ArmHeartbeat(absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    heartbeat_alarm_ = std::make_unique<grpc::Alarm>();
    std::weak_ptr<DecodeCall> weak = weak_from_this();
    heartbeat_alarm_->Set(absl::ToChronoTime(at), [weak](bool ok) {
      if (std::shared_ptr<DecodeCall> call = weak.lock(); ok && call != nullptr) {
        call->Heartbeat();
      }
    });
  }
  void Heartbeat() {
    const absl::Duration every = service_->options_.stream_heartbeat;
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || cancelled_) return;
      const absl::Time now = absl::Now();
      if (writing_ || now - last_write_ < every) {
        ArmHeartbeat(std::max(now, last_write_) + every);
        return;
      }
      response_.Clear();
      response_.set_heartbeat(true);
      writing_ = true;
      ArmHeartbeat(now + every);
    }
    StartWrite(&response_);
  }

  // Engine thread (listener) or gRPC thread (after a write): writes what the
  // engine produced, or finishes when the sequence ended.
  void Pump() {
    absl::Status end;
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || stream_ == nullptr || finished_) return;
      worker::SequenceStream::Batch b = stream_->Take();
      if (b.events.empty()) {
        if (!b.done) return;
        end = b.status;
      } else {
        response_.Clear();
        if (first_write_) {
          const double first_decode = absl::ToDoubleSeconds(absl::Now() - start_);
          response_.set_kv_transfer_seconds(absl::ToDoubleSeconds(transfer_));
          response_.set_first_decode_seconds(first_decode);
          if (local_) {
            response_.set_cached_prompt_tokens(b.events.front().cached_tokens);
            for (const engine::SampledToken& t : b.events.front().prompt_logprobs) {
              rpc::SampledTokenToProto(t, response_.add_prompt_logprobs());
            }
          }
          service_->first_decode_seconds_.Observe(first_decode);
          first_write_ = false;
        }
        for (const engine::TokenEvent& ev : b.events) {
          rpc::SampledTokenToProto(ev.token, response_.add_tokens());
          if (ev.spec_proposed > 0) {
            response_.set_speculative_proposed_tokens(response_.speculative_proposed_tokens() +
                                                      ev.spec_proposed);
            response_.set_speculative_accepted_tokens(response_.speculative_accepted_tokens() +
                                                      ev.spec_accepted);
          }
          if (ev.finish != engine::FinishReason::kNone) {
            response_.set_finish_reason(ToProto(ev.finish));
          }
        }
        service_->generated_tokens_.Increment(static_cast<double>(b.events.size()));
        writing_ = write = true;
      }
    }
    if (write) {
      StartWrite(&response_);
    } else {
      Done(end);
    }
  }

  void CancelWork() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (stream_ != nullptr) service_->loop_.Cancel(stream_);
    if (fetch_ != nullptr) fetch_->Cancel();
  }

  // Ends the call once: at once, or when the write out (a heartbeat racing
  // a failed fetch, say) completes, since Finish may not overtake a
  // StartWrite already decided on.
  // `trailer`, when given, is added to the trailing metadata (as "1").
  void Done(const absl::Status& status, const char* trailer = nullptr) {
    bool finish_now = false;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      if (trailer != nullptr) ctx_->AddTrailingMetadata(trailer, "1");
      // Under the lock: before either Finish (here or OnWriteDone's).
      if (absl::IsResourceExhausted(status)) {
        rpc::AddRetryHint(*ctx_, service_->admission_.retry_after());
      }
      keep_lease_.Reset();
      if (heartbeat_alarm_ != nullptr) heartbeat_alarm_->Cancel();
      if (writing_) {
        deferred_finish_ = rpc::ToGrpcStatus(status);
      } else {
        finish_now = true;
      }
    }
    service_->Count(status);
    ticket_ = rpc::Admission::Ticket();
    if (finish_now) Finish(rpc::ToGrpcStatus(status));
  }

  DecodeService* const service_;
  grpc::CallbackServerContext* const ctx_;
  const absl::Time start_ = absl::Now();
  std::shared_ptr<DecodeCall> self_;
  rpc::Admission::Ticket ticket_;
  engine::GenerationRequest request_;
  engine::SampledToken first_;
  absl::Duration transfer_;
  tandem::v1::DecodeResponse response_;  // the write outstanding, if any
  bool first_write_ = true;  // guarded by the one-writer rule (mu_ in Pump)
  bool local_ = false;        // set in Begin: this worker prefills the prompt

  absl::Mutex mu_;
  std::shared_ptr<kvtransfer::KvFetcher::Fetch> fetch_ ABSL_GUARDED_BY(mu_);
  kvtransfer::LeaseKeeper::Handle keep_lease_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<worker::SequenceStream> stream_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_write_ ABSL_GUARDED_BY(mu_);  // the last write's end (or the start)
  std::unique_ptr<grpc::Alarm> heartbeat_alarm_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Done's status while a write was out; OnWriteDone finishes with it.
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

DecodeService::DecodeService(worker::EngineLoop& loop, prometheus::Registry& registry,
                             const DecodeServiceOptions& options)
    : loop_(loop),
      options_(options),
      channels_(options.channels),
      releases_(channels_, "tandem-decode"),
      fetcher_(channels_, releases_,
               kvtransfer::ExpectationFor(loop.kv_layout()),
               registry, options.kv_transfer_streams),
      lease_keeper_(channels_, options.lease_heartbeat),
      admission_("decode worker", options.admission),
      sessions_(options.sessions, [&loop](const std::string& id) { loop.Unpin(id); }),
      requests_(rpc::CounterFamily(registry, "tandem_requests_total",
                                   "RPCs served, by method and final status code")),
      generated_tokens_(
          rpc::CounterMetric(registry, "tandem_generated_tokens_total", "Tokens generated")),
      first_decode_seconds_(rpc::LatencyHistogram(
          registry, "tandem_first_decode_seconds",
          "Time from a Decode call's arrival to its first decoded token")) {}

absl::Status DecodeService::Validate(const tandem::v1::DecodeRequest& r) const {
  if (r.prefill_address().empty() && r.lease_id().empty()) {
    // Local prefill: nothing to fetch.
    if (r.prompt_token_ids_size() == 0) {
      return absl::InvalidArgumentError("prompt_token_ids: empty");
    }
    if (r.num_blocks() != 0 || r.block_hashes_size() != 0) {
      return absl::InvalidArgumentError(
          "num_blocks: a local prefill (no prefill_address or lease_id) names no blocks");
    }
    return absl::OkStatus();
  }
  if (r.prefill_address().empty()) {
    return absl::InvalidArgumentError("prefill_address: empty");
  }
  if (r.lease_id().empty()) return absl::InvalidArgumentError("lease_id: empty");
  if (r.prompt_token_ids_size() == 0) {
    return absl::InvalidArgumentError("prompt_token_ids: empty");
  }
  const int held = r.prompt_token_ids_size() + r.generated_token_ids_size();
  if (r.num_blocks() < 1 || r.num_blocks() > held) {
    return absl::InvalidArgumentError(absl::StrCat("num_blocks: ", r.num_blocks(),
                                                   " is out of range for ", held,
                                                   " prompt and generated tokens"));
  }
  if (r.has_draft_kv_tokens() && (r.draft_kv_tokens() < 0 || r.draft_kv_tokens() > held)) {
    return absl::InvalidArgumentError(absl::StrCat("draft_kv_tokens: ", r.draft_kv_tokens(),
                                                   " is out of range for ", held,
                                                   " prompt and generated tokens"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> DecodeService::BlocksHeld(const tandem::v1::DecodeRequest& r,
                                                  std::span<const int32_t> tokens) const {
  const int32_t bs = loop_.kv_block_size();
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (r.block_hashes_size() > n / bs) {
    return absl::InvalidArgumentError(absl::StrCat("block_hashes: ", r.block_hashes_size(),
                                                   " hashes for a ", n, "-token prompt with ",
                                                   n / bs, " full blocks of ", bs));
  }
  if (options_.held_blocks == nullptr && r.block_hashes_size() == 0) return 0;
  // The block holding the last prompt position is always fetched.
  const int32_t skippable = (n - 1) / bs;
  const std::vector<engine::BlockHash> chain = engine::PrefixBlockHashes(
      tokens.first(static_cast<size_t>(std::max(skippable, r.block_hashes_size())) * bs), bs,
      loop_.kv_layout().fingerprint, r.cache_salt());
  for (int32_t i = 0; i < r.block_hashes_size(); ++i) {
    const engine::BlockHash named = rpc::BlockHashFromProto(r.block_hashes(i));
    if (named != chain[i]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "block_hashes[", i, "]: ", named.ToHex(), " differs from this worker's ",
          chain[i].ToHex(), " (another model, block size or cache salt)"));
    }
  }
  if (options_.held_blocks == nullptr) return 0;
  return options_.held_blocks->LeadingHeld(std::span(chain).first(skippable));
}

void DecodeService::Count(const absl::Status& status) {
  requests_.Add({{"method", "Decode"}, {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
}

grpc::ServerWriteReactor<tandem::v1::DecodeResponse>* DecodeService::Decode(
    grpc::CallbackServerContext* ctx, const tandem::v1::DecodeRequest* request) {
  return DecodeCall::Start(this, ctx, request);
}

grpc::ServerUnaryReactor* DecodeService::GetWorkerStats(grpc::CallbackServerContext* ctx,
                                                        const tandem::v1::WorkerStatsRequest*,
                                                        tandem::v1::WorkerStats* response) {
  worker::EngineStatsToProto(loop_.stats(), response);
  response->set_in_flight(admission_.in_flight());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DecodeService::Answer(grpc::CallbackServerContext* ctx,
                                                const char* method, const absl::Status& status) {
  requests_.Add({{"method", method}, {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(rpc::ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* DecodeService::PutSession(grpc::CallbackServerContext* ctx,
                                                    const tandem::v1::PutSessionRequest* request,
                                                    tandem::v1::PutSessionResponse*) {
  const std::string& id = request->record().session_id();
  absl::Status status = sessions_.Put(request->record());
  if (status.ok() && request->release_kv()) loop_.Unpin(id);
  return Answer(ctx, "PutSession", status);
}

grpc::ServerUnaryReactor* DecodeService::GetSession(grpc::CallbackServerContext* ctx,
                                                    const tandem::v1::SessionKey* request,
                                                    tandem::v1::SessionRecord* response) {
  absl::StatusOr<tandem::v1::SessionRecord> record = sessions_.Get(request->session_id());
  if (record.ok()) *response = std::move(*record);
  return Answer(ctx, "GetSession", record.status());
}

grpc::ServerUnaryReactor* DecodeService::DropSession(grpc::CallbackServerContext* ctx,
                                                     const tandem::v1::SessionKey* request,
                                                     tandem::v1::DropSessionResponse*) {
  sessions_.Drop(request->session_id());
  return Answer(ctx, "DropSession", absl::OkStatus());
}

grpc::ServerUnaryReactor* DecodeService::ListSessions(
    grpc::CallbackServerContext* ctx, const tandem::v1::ListSessionRecordsRequest*,
    tandem::v1::ListSessionRecordsResponse* response) {
  for (tandem::v1::SessionRecord& r : sessions_.List()) *response->add_records() = std::move(r);
  return Answer(ctx, "ListSessions", absl::OkStatus());
}

}  // namespace tandem::decode
