#include "decode_worker/decode_service.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kvtransfer/kv_snapshot_codec.h"
#include "rpc/convert.h"
#include "worker/worker_stats.h"
#include "rpc/metrics.h"
#include "rpc/status.h"

namespace tandem::decode {
namespace {

tandem::v1::FinishReason ToProto(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kLength: return tandem::v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kEos: return tandem::v1::FINISH_REASON_EOS;
    default: return tandem::v1::FINISH_REASON_UNSPECIFIED;
  }
}

}  // namespace

DecodeService::DecodeService(worker::EngineLoop& loop, prometheus::Registry& registry,
                             const DecodeServiceOptions& options)
    : loop_(loop),
      options_(options),
      requests_(rpc::CounterFamily(registry, "tandem_requests_total",
                                      "RPCs served, by method and final status code")),
      generated_tokens_(rpc::CounterMetric(registry, "tandem_generated_tokens_total",
                                              "Tokens generated")),
      blocks_received_(rpc::CounterMetric(registry, "tandem_kv_transfer_blocks_total",
                                             "KV blocks moved between workers",
                                             {{"direction", "received"}})),
      bytes_received_(rpc::CounterMetric(registry, "tandem_kv_transfer_bytes_total",
                                            "KV bytes moved between workers (wire format)",
                                            {{"direction", "received"}})),
      transfer_failures_(rpc::CounterMetric(
          registry, "tandem_kv_transfer_failures_total",
          "KV transfers that failed on this side", {{"side", "decode"}})),
      transfer_seconds_(rpc::LatencyHistogram(registry, "tandem_kv_transfer_seconds",
                                                 "Time fetching and verifying KV blocks",
                                                 {{"side", "decode"}})),
      first_decode_seconds_(rpc::LatencyHistogram(
          registry, "tandem_first_decode_seconds",
          "Time from a Decode call's arrival to its first decoded token")) {}

absl::Status DecodeService::Validate(const tandem::v1::DecodeRequest& r) const {
  if (r.prefill_address().empty()) {
    return absl::InvalidArgumentError("prefill_address: empty");
  }
  if (r.lease_id().empty()) return absl::InvalidArgumentError("lease_id: empty");
  if (r.prompt_token_ids_size() == 0) {
    return absl::InvalidArgumentError("prompt_token_ids: empty");
  }
  if (r.num_blocks() < 1 || r.num_blocks() > r.prompt_token_ids_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_blocks: ", r.num_blocks(), " is out of range for a ",
                     r.prompt_token_ids_size(), "-token prompt"));
  }
  return absl::OkStatus();
}

void DecodeService::ReleaseLease(const tandem::v1::DecodeRequest& request,
                                 const absl::Status& outcome) {
  auto stub = tandem::v1::Prefill::NewStub(channels_.Get(request.prefill_address()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  tandem::v1::ReleaseKvRequest release;
  release.set_lease_id(request.lease_id());
  release.set_ok(outcome.ok());
  release.set_error(std::string(outcome.message()));
  tandem::v1::ReleaseKvResponse ignored;
  const grpc::Status s = stub->ReleaseKv(&ctx, release, &ignored);
  if (!s.ok()) {
    // The lease's TTL frees the blocks anyway; nothing else to do.
    std::cerr << "tandem-decode: ReleaseKv to " << request.prefill_address()
              << " failed: " << s.error_message() << "\n";
  }
}

absl::StatusOr<std::shared_ptr<const engine::KvSnapshot>> DecodeService::FetchKv(
    grpc::ServerContext* server_ctx, const tandem::v1::DecodeRequest& request) {
  auto stub = tandem::v1::Prefill::NewStub(channels_.Get(request.prefill_address()));
  // Cancelling this call (or its deadline) cancels the fetch too.
  std::unique_ptr<grpc::ClientContext> ctx = grpc::ClientContext::FromServerContext(*server_ctx);
  const auto limit = std::chrono::system_clock::now() +
                     absl::ToChronoMilliseconds(options_.fetch_timeout);
  if (ctx->deadline() > limit) ctx->set_deadline(limit);
  tandem::v1::FetchKvRequest fetch;
  fetch.set_lease_id(request.lease_id());
  std::unique_ptr<grpc::ClientReader<tandem::v1::KvBlockMessage>> reader =
      stub->FetchKv(ctx.get(), fetch);
  std::vector<std::string> blocks;
  tandem::v1::KvBlockMessage msg;
  int64_t bytes = 0;
  while (reader->Read(&msg)) {
    if (msg.index() != static_cast<int32_t>(blocks.size())) {
      ctx->TryCancel();
      reader->Finish();
      return absl::DataLossError(absl::StrCat("kv block index ", msg.index(), " arrived at position ",
                                              blocks.size()));
    }
    bytes += static_cast<int64_t>(msg.block().size());
    blocks.push_back(std::move(*msg.mutable_block()));
  }
  const grpc::Status fetched = reader->Finish();
  if (!fetched.ok()) {
    return rpc::FromGrpcStatus(fetched,
                               absl::StrCat("fetching KV from ", request.prefill_address()));
  }
  if (static_cast<int32_t>(blocks.size()) != request.num_blocks()) {
    return absl::DataLossError(absl::StrCat("received ", blocks.size(), " KV blocks, expected ",
                                            request.num_blocks()));
  }
  const engine::Model& model = loop_.model();
  const kvtransfer::BlockExpectation expect = kvtransfer::ExpectationFor(
      model.config(), model.fingerprint(), loop_.kv_block_size(), loop_.kv_dtype());
  const std::vector<int32_t> prompt(request.prompt_token_ids().begin(),
                                    request.prompt_token_ids().end());
  ASSIGN_OR_RETURN(engine::KvSnapshot kv, kvtransfer::DecodeSnapshot(blocks, expect, prompt));
  blocks_received_.Increment(static_cast<double>(blocks.size()));
  bytes_received_.Increment(static_cast<double>(bytes));
  return std::make_shared<const engine::KvSnapshot>(std::move(kv));
}

absl::Status DecodeService::Stream(grpc::ServerContext* ctx,
                                   const tandem::v1::DecodeRequest& request,
                                   std::shared_ptr<const engine::KvSnapshot> kv, absl::Time start,
                                   absl::Duration transfer,
                                   grpc::ServerWriter<tandem::v1::DecodeResponse>* writer) {
  engine::GenerationRequest r;
  r.prompt.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  r.sampling = rpc::SamplingFromProto(request.sampling());
  r.max_tokens = request.max_tokens();
  r.top_logprobs = request.top_logprobs();
  r.ignore_eos = request.ignore_eos();
  std::shared_ptr<worker::SequenceStream> stream = loop_.SubmitWithKv(
      std::move(r), rpc::SampledTokenFromProto(request.first_token()), std::move(kv));
  bool first = true;
  while (true) {
    worker::SequenceStream::Batch b = stream->Next(absl::Now() + options_.cancel_poll);
    if (!b.events.empty()) {
      tandem::v1::DecodeResponse resp;
      if (first) {
        const double first_decode = absl::ToDoubleSeconds(absl::Now() - start);
        resp.set_kv_transfer_seconds(absl::ToDoubleSeconds(transfer));
        resp.set_first_decode_seconds(first_decode);
        first_decode_seconds_.Observe(first_decode);
        first = false;
      }
      for (const engine::TokenEvent& ev : b.events) {
        rpc::SampledTokenToProto(ev.token, resp.add_tokens());
        if (ev.finish != engine::FinishReason::kNone) resp.set_finish_reason(ToProto(ev.finish));
      }
      generated_tokens_.Increment(static_cast<double>(b.events.size()));
      if (!writer->Write(resp)) {
        loop_.Cancel(stream);
        return absl::CancelledError("the gateway went away");
      }
    }
    if (b.done) return b.status;
    if (ctx->IsCancelled()) {
      loop_.Cancel(stream);
      return absl::CancelledError("decode cancelled by the caller");
    }
  }
}

grpc::Status DecodeService::Decode(grpc::ServerContext* ctx,
                                   const tandem::v1::DecodeRequest* request,
                                   grpc::ServerWriter<tandem::v1::DecodeResponse>* writer) {
  const absl::Time start = absl::Now();
  absl::Status status = Validate(*request);
  if (!status.ok() && !request->prefill_address().empty() && !request->lease_id().empty()) {
    ReleaseLease(*request, status);
  } else if (status.ok()) {
    absl::StatusOr<std::shared_ptr<const engine::KvSnapshot>> kv = FetchKv(ctx, *request);
    // Report the outcome to the prefill worker at once, either way: it frees
    // the blocks now instead of waiting for the lease to lapse.
    ReleaseLease(*request, kv.status());
    if (!kv.ok()) {
      transfer_failures_.Increment();
      status = kv.status();
    } else {
      const absl::Duration transfer = absl::Now() - start;
      transfer_seconds_.Observe(absl::ToDoubleSeconds(transfer));
      status = Stream(ctx, *request, std::move(*kv), start, transfer, writer);
    }
  }
  requests_.Add({{"method", "Decode"}, {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
  return rpc::ToGrpcStatus(status);
}

grpc::Status DecodeService::GetWorkerStats(grpc::ServerContext*,
                                           const tandem::v1::WorkerStatsRequest*,
                                           tandem::v1::WorkerStats* response) {
  worker::EngineStatsToProto(loop_.stats(), response);
  return grpc::Status::OK;
}

}  // namespace tandem::decode
