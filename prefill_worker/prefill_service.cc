#include "prefill_worker/prefill_service.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "rpc/convert.h"
#include "rpc/metrics.h"
#include "rpc/status.h"
#include "worker/request_convert.h"
#include "worker/worker_stats.h"

namespace tandem::prefill {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

// One Prefill call: admitted, submitted to the engine thread, finished by
// the stream's listener once the first token and its KV snapshot exist.
// Owned by itself (self_) until gRPC's OnDone; the listener holds a weak
// reference, so a late engine event never touches a finished call.
class PrefillService::PrefillCall final : public grpc::ServerUnaryReactor,
                                          public std::enable_shared_from_this<PrefillCall> {
 public:
  static PrefillCall* Start(PrefillService* service, grpc::CallbackServerContext* ctx,
                            const tandem::v1::PrefillRequest* request,
                            tandem::v1::PrefillResponse* response) {
    std::shared_ptr<PrefillCall> call(new PrefillCall(service, ctx, response));
    call->self_ = call;
    call->Begin(*request);
    return call.get();
  }

  void OnCancel() override {
    std::shared_ptr<PrefixPuller::Pull> pull;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (stream_ != nullptr) service_->loop_.Cancel(stream_);  // the stream then ends
      pull = pull_;
    }
    if (pull != nullptr) pull->Cancel();  // its callback then ends the call
  }
  void OnDone() override { self_.reset(); }

 private:
  PrefillCall(PrefillService* service, grpc::CallbackServerContext* ctx,
              tandem::v1::PrefillResponse* response)
      : service_(service), ctx_(ctx), response_(response) {}

  void Begin(const tandem::v1::PrefillRequest& request) {
    absl::StatusOr<rpc::Admission::Ticket> ticket =
        service_->admission_.TryAdmit(request.prompt_token_ids_size());
    if (!ticket.ok()) {
      Done(ticket.status());
      return;
    }
    ticket_ = std::move(*ticket);
    engine::GenerationRequest r = worker::EngineRequestFromProto(request);
    prompt_ = r.prompt;  // the positions the lease holds
    cache_salt_ = r.cache_salt;
    prompt_.insert(prompt_.end(), r.generated.begin(), r.generated.end());
    if (request.prefix_holder().empty() || request.prefix_blocks() == 0 ||
        r.prompt_logprobs >= 0) {
      Submit(std::move(r));
      return;
    }
    // The block holding the last prompt token is computed here, always.
    const int32_t bs = service_->loop_.kv_block_size();
    const int32_t n = static_cast<int32_t>(r.prompt.size());
    if (request.prefix_blocks() < 0 || (n == 0 ? 0 : (n - 1) / bs) < request.prefix_blocks()) {
      Done(absl::InvalidArgumentError(absl::StrCat(
          "prefix_blocks: ", request.prefix_blocks(), " is out of range for a ", n,
          "-token prompt in blocks of ", bs)));
      return;
    }
    const absl::Time deadline =
        std::min(absl::Now() + service_->options_.pull_timeout, absl::FromChrono(ctx_->deadline()));
    std::vector<int32_t> prefix(r.prompt.begin(), r.prompt.begin() + request.prefix_blocks() * bs);
    std::weak_ptr<PrefillCall> weak = weak_from_this();
    auto pending = std::make_shared<engine::GenerationRequest>(std::move(r));
    absl::MutexLock lock(&mu_);
    pull_ = service_->puller_.Start(
        request.prefix_holder(), std::move(prefix), r.cache_salt, deadline,
        [weak, pending](absl::StatusOr<std::shared_ptr<const engine::KvSnapshot>> kv) {
          std::shared_ptr<PrefillCall> call = weak.lock();
          if (call == nullptr) return;
          // A failed pull costs only the compute it meant to save.
          if (kv.ok()) pending->prefix_kv = std::move(*kv);
          call->Submit(std::move(*pending));
        });
  }

  // Hands the request to the engine thread (after a pull, on a gRPC thread).
  void Submit(engine::GenerationRequest r) {
    std::weak_ptr<PrefillCall> weak = weak_from_this();
    absl::MutexLock lock(&mu_);
    if (cancelled_) {
      Done(absl::CancelledError("prefill cancelled by the caller"));
      return;
    }
    stream_ = service_->loop_.Submit(std::move(r), [weak] {
      if (std::shared_ptr<PrefillCall> call = weak.lock()) call->OnEngineEvent();
    });
  }

  // Engine thread: the first token (with the KV snapshot), or the end.
  void OnEngineEvent() {
    std::shared_ptr<worker::SequenceStream> stream;
    {
      absl::MutexLock lock(&mu_);
      stream = stream_;
    }
    worker::SequenceStream::Batch b = stream->Take();
    if (b.events.empty()) {
      if (b.done)
        Done(b.status.ok() ? absl::InternalError("prefill ended without a token") : b.status);
      return;
    }
    const engine::TokenEvent& first = b.events.back();
    if (first.kv == nullptr) {
      Done(absl::InternalError("prefill produced no KV snapshot"));
      return;
    }
    const absl::Time done = absl::Now();
    ticket_.DoneQueuing();
    absl::StatusOr<kvtransfer::KvLeaseServer::Held> held =
        service_->export_.leases().Hold(first.kv, std::move(prompt_), cache_salt_);
    if (!held.ok()) {
      Done(held.status());
      return;
    }
    response_->set_lease_id(held->lease_id);
    rpc::SampledTokenToProto(first.token, response_->mutable_first_token());
    for (const engine::SampledToken& t : first.prompt_logprobs) {
      rpc::SampledTokenToProto(t, response_->add_prompt_logprobs());
    }
    response_->set_num_blocks(held->num_blocks);
    response_->set_num_tokens(first.kv->n_tokens);
    response_->set_cached_prompt_tokens(first.cached_tokens);
    if (first.kv->draft_tokens.has_value()) {
      response_->set_draft_kv_tokens(*first.kv->draft_tokens);
    }
    for (const engine::BlockHash& h : held->full_block_hashes) {
      rpc::BlockHashToProto(h, response_->add_block_hashes());
    }
    const absl::Time step = stream->first_step_started();
    response_->set_queue_seconds(Seconds(step - stream->submitted()));
    response_->set_prefill_seconds(Seconds(done - step));
    service_->queue_seconds_.Observe(response_->queue_seconds());
    service_->prefill_seconds_.Observe(response_->prefill_seconds());
    service_->prompt_tokens_.Increment(first.kv->n_tokens);
    Done(absl::OkStatus());
  }

  void Done(const absl::Status& status) {
    if (finished_.exchange(true)) return;
    if (absl::IsResourceExhausted(status)) {
      rpc::AddRetryHint(*ctx_, service_->admission_.retry_after());
    }
    service_->Count("Prefill", status);
    ticket_ = rpc::Admission::Ticket();
    Finish(rpc::ToGrpcStatus(status));
  }

  PrefillService* const service_;
  grpc::CallbackServerContext* const ctx_;
  tandem::v1::PrefillResponse* const response_;
  std::shared_ptr<PrefillCall> self_;
  rpc::Admission::Ticket ticket_;
  std::vector<int32_t> prompt_;
  uint64_t cache_salt_ = 0;
  std::atomic<bool> finished_{false};
  absl::Mutex mu_;
  std::shared_ptr<worker::SequenceStream> stream_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<PrefixPuller::Pull> pull_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

PrefillService::PrefillService(worker::EngineLoop& loop, prometheus::Registry& registry,
                               const PrefillServiceOptions& options)
    : loop_(loop),
      options_(options),
      export_(loop, options.leases, registry,
              [this](const char* method, const absl::Status& s) { Count(method, s); }),
      admission_("prefill worker", options.admission),
      channels_(options.channels),
      releases_(channels_, "tandem-prefill"),
      fetcher_(channels_, releases_, kvtransfer::ExpectationFor(loop.kv_layout()), registry,
               options.kv_transfer_streams, "pull"),
      puller_(channels_, fetcher_, releases_, loop.kv_block_size(), registry),
      requests_(rpc::CounterFamily(registry, "tandem_requests_total",
                                   "RPCs served, by method and final status code")),
      prompt_tokens_(
          rpc::CounterMetric(registry, "tandem_prompt_tokens_total", "Prompt tokens prefilled")),
      queue_seconds_(rpc::LatencyHistogram(registry, "tandem_queue_seconds",
                                           "Time from arrival to the first engine step")),
      prefill_seconds_(rpc::LatencyHistogram(registry, "tandem_prefill_seconds",
                                             "Time computing a prompt's KV and first token")) {}

void PrefillService::Count(const char* method, const absl::Status& status) {
  requests_.Add({{"method", method}, {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
}

grpc::ServerUnaryReactor* PrefillService::Prefill(grpc::CallbackServerContext* ctx,
                                                  const tandem::v1::PrefillRequest* request,
                                                  tandem::v1::PrefillResponse* response) {
  return PrefillCall::Start(this, ctx, request, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* PrefillService::FetchKv(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  return export_.FetchKv(ctx, request);
}

grpc::ServerUnaryReactor* PrefillService::ReleaseKv(grpc::CallbackServerContext* ctx,
                                                    const tandem::v1::ReleaseKvRequest* request,
                                                    tandem::v1::ReleaseKvResponse*) {
  return export_.ReleaseKv(ctx, request);
}

grpc::ServerUnaryReactor* PrefillService::RenewKv(grpc::CallbackServerContext* ctx,
                                                  const tandem::v1::RenewKvRequest* request,
                                                  tandem::v1::RenewKvResponse* response) {
  return export_.RenewKv(ctx, request, response);
}

grpc::ServerUnaryReactor* PrefillService::ExportPrefix(
    grpc::CallbackServerContext* ctx, const tandem::v1::ExportPrefixRequest* request,
    tandem::v1::ExportPrefixResponse* response) {
  return export_.ExportPrefix(ctx, request, response);
}

grpc::ServerUnaryReactor* PrefillService::GetWorkerStats(grpc::CallbackServerContext* ctx,
                                                         const tandem::v1::WorkerStatsRequest*,
                                                         tandem::v1::WorkerStats* response) {
  worker::EngineStatsToProto(loop_.stats(), response);
  const kvtransfer::LeaseStats l = export_.leases().stats();
  response->set_leases(l.leases);
  response->set_kv_blocks_leased(l.blocks);
  response->set_in_flight(admission_.in_flight());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tandem::prefill
