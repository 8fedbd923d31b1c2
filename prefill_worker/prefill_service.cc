#include "prefill_worker/prefill_service.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kvtransfer/kv_snapshot_codec.h"
#include "rpc/convert.h"
#include "worker/worker_stats.h"
#include "rpc/metrics.h"
#include "rpc/status.h"

namespace tandem::prefill {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

PrefillService::PrefillService(worker::EngineLoop& loop, prometheus::Registry& registry,
                               const PrefillServiceOptions& options)
    : loop_(loop),
      options_(options),
      leases_(options.lease_ttl, options.max_leases),
      requests_(rpc::CounterFamily(registry, "tandem_requests_total",
                                      "RPCs served, by method and final status code")),
      prompt_tokens_(rpc::CounterMetric(registry, "tandem_prompt_tokens_total",
                                           "Prompt tokens prefilled")),
      blocks_sent_(rpc::CounterMetric(registry, "tandem_kv_transfer_blocks_total",
                                         "KV blocks moved between workers",
                                         {{"direction", "sent"}})),
      bytes_sent_(rpc::CounterMetric(registry, "tandem_kv_transfer_bytes_total",
                                        "KV bytes moved between workers (wire format)",
                                        {{"direction", "sent"}})),
      leases_expired_(rpc::CounterMetric(registry, "tandem_kv_leases_expired_total",
                                            "KV leases dropped because their TTL lapsed")),
      transfer_failures_(rpc::CounterMetric(
          registry, "tandem_kv_transfer_failures_total",
          "KV transfers that failed: broken off, or reported failed by the decode worker",
          {{"side", "prefill"}})),
      queue_seconds_(rpc::LatencyHistogram(registry, "tandem_queue_seconds",
                                              "Time from arrival to the first engine step")),
      prefill_seconds_(rpc::LatencyHistogram(registry, "tandem_prefill_seconds",
                                                "Time computing a prompt's KV and first token")),
      transfer_seconds_(rpc::LatencyHistogram(
          registry, "tandem_kv_transfer_seconds", "Time streaming a lease's KV blocks",
          {{"side", "prefill"}})),
      leases_held_(rpc::GaugeMetric(registry, "tandem_kv_leases", "KV leases held")),
      blocks_leased_(rpc::GaugeMetric(registry, "tandem_kv_blocks_leased",
                                         "KV blocks held under leases")) {
  reaper_ = std::thread([this] { ReapLeases(); });
}

PrefillService::~PrefillService() {
  stop_.Notify();
  reaper_.join();
}

void PrefillService::ReapLeases() {
  // Expiry needs no precision finer than a fraction of the TTL.
  const absl::Duration period = std::max(options_.lease_ttl / 4, absl::Milliseconds(10));
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    const int32_t n = leases_.Expire(absl::Now());
    if (n > 0) leases_expired_.Increment(n);
    UpdateLeaseGauges();
  }
}

void PrefillService::UpdateLeaseGauges() {
  const LeaseStats s = leases_.stats();
  leases_held_.Set(s.leases);
  blocks_leased_.Set(s.blocks);
}

absl::Status PrefillService::RunPrefill(grpc::ServerContext* ctx,
                                        const tandem::v1::PrefillRequest& request,
                                        tandem::v1::PrefillResponse* response) {
  engine::GenerationRequest r;
  r.prompt.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  r.sampling = rpc::SamplingFromProto(request.sampling());
  r.top_logprobs = request.top_logprobs();
  r.max_tokens = 1;
  r.ignore_eos = true;
  r.export_kv = true;
  const std::vector<int32_t> prompt = r.prompt;
  std::shared_ptr<worker::SequenceStream> stream = loop_.Submit(std::move(r));
  engine::TokenEvent first;
  bool have_first = false;
  while (!have_first) {
    worker::SequenceStream::Batch b = stream->Next(absl::Now() + options_.cancel_poll);
    if (!b.events.empty()) {
      first = std::move(b.events.back());
      have_first = true;
    } else if (b.done) {
      return b.status.ok() ? absl::InternalError("prefill ended without a token") : b.status;
    } else if (ctx->IsCancelled()) {
      loop_.Cancel(stream);
      return absl::CancelledError("prefill cancelled by the caller");
    }
  }
  const absl::Time done = absl::Now();
  if (first.kv == nullptr) return absl::InternalError("prefill produced no KV snapshot");

  auto leased = std::make_shared<LeasedKv>();
  leased->blocks = kvtransfer::EncodeSnapshot(*first.kv, prompt);
  for (const std::string& b : leased->blocks) leased->bytes += static_cast<int64_t>(b.size());
  const int32_t n_blocks = static_cast<int32_t>(leased->blocks.size());
  ASSIGN_OR_RETURN(std::string lease_id, leases_.Create(std::move(leased)));
  UpdateLeaseGauges();

  response->set_lease_id(lease_id);
  rpc::SampledTokenToProto(first.token, response->mutable_first_token());
  response->set_num_blocks(n_blocks);
  response->set_num_tokens(first.kv->n_tokens);
  const absl::Time step = stream->first_step_started();
  response->set_queue_seconds(Seconds(step - stream->submitted()));
  response->set_prefill_seconds(Seconds(done - step));
  queue_seconds_.Observe(response->queue_seconds());
  prefill_seconds_.Observe(response->prefill_seconds());
  prompt_tokens_.Increment(static_cast<double>(prompt.size()));
  return absl::OkStatus();
}

grpc::Status PrefillService::Prefill(grpc::ServerContext* ctx,
                                     const tandem::v1::PrefillRequest* request,
                                     tandem::v1::PrefillResponse* response) {
  const absl::Status s = RunPrefill(ctx, *request, response);
  const grpc::Status g = rpc::ToGrpcStatus(s);
  requests_.Add({{"method", "Prefill"}, {"code", absl::StatusCodeToString(s.code())}})
      .Increment();
  return g;
}

grpc::Status PrefillService::FetchKv(grpc::ServerContext* ctx,
                                     const tandem::v1::FetchKvRequest* request,
                                     grpc::ServerWriter<tandem::v1::KvBlockMessage>* writer) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<const LeasedKv>> kv = leases_.Acquire(request->lease_id());
  if (!kv.ok()) return rpc::ToGrpcStatus(kv.status());
  tandem::v1::KvBlockMessage msg;
  // A transfer that breaks off ends the lease at once: the decode side that
  // asked is gone, and nobody else fetches a lease.
  auto abandon = [&](grpc::StatusCode code, const char* why) {
    transfer_failures_.Increment();
    leases_.Release(request->lease_id());
    UpdateLeaseGauges();
    return grpc::Status(code, why);
  };
  for (size_t i = 0; i < (*kv)->blocks.size(); ++i) {
    if (ctx->IsCancelled()) return abandon(grpc::StatusCode::CANCELLED, "fetch cancelled");
    msg.set_index(static_cast<int32_t>(i));
    msg.set_block((*kv)->blocks[i]);
    if (!writer->Write(msg)) {
      return abandon(grpc::StatusCode::UNAVAILABLE, "decode worker went away mid-fetch");
    }
    leases_.Renew(request->lease_id());  // the transfer is alive
  }
  blocks_sent_.Increment(static_cast<double>((*kv)->blocks.size()));
  bytes_sent_.Increment(static_cast<double>((*kv)->bytes));
  transfer_seconds_.Observe(Seconds(absl::Now() - start));
  return grpc::Status::OK;
}

grpc::Status PrefillService::ReleaseKv(grpc::ServerContext*,
                                       const tandem::v1::ReleaseKvRequest* request,
                                       tandem::v1::ReleaseKvResponse*) {
  if (!request->ok()) {
    transfer_failures_.Increment();
    std::cerr << "tandem-prefill: decode worker failed lease " << request->lease_id() << ": "
              << request->error() << "\n";
  }
  leases_.Release(request->lease_id());
  UpdateLeaseGauges();
  return grpc::Status::OK;
}

grpc::Status PrefillService::GetWorkerStats(grpc::ServerContext*,
                                            const tandem::v1::WorkerStatsRequest*,
                                            tandem::v1::WorkerStats* response) {
  worker::EngineStatsToProto(loop_.stats(), response);
  const LeaseStats l = leases_.stats();
  response->set_leases(l.leases);
  response->set_kv_blocks_leased(l.blocks);
  return grpc::Status::OK;
}

}  // namespace tandem::prefill
