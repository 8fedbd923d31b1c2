#include "gateway/generate_call.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "rpc/convert.h"
#include "rpc/status.h"

namespace tandem::gateway {
namespace {

bool Retryable(const grpc::Status& s) {
  // The worker could not be reached or is overloaded: another may serve.
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

}  // namespace

GenerateCall::GenerateCall(const CallEnv& env, grpc::ServerContext* ctx,
                           grpc::ServerWriter<tandem::v1::GenerateResponse>* writer)
    : env_(env), ctx_(ctx), writer_(writer) {}

absl::Status GenerateCall::Run(const ValidatedRequest& request) {
  usage_.set_prompt_tokens(static_cast<int32_t>(request.prompt_ids.size()));
  env_.metrics->prompt_tokens.Increment(static_cast<double>(request.prompt_ids.size()));

  tandem::v1::PrefillResponse prefill;
  std::string prefill_address;
  if (absl::Status s = Prefill(request, &prefill, &prefill_address); !s.ok()) return s;
  usage_.set_queue_seconds(prefill.queue_seconds());
  usage_.set_prefill_seconds(prefill.prefill_seconds());
  env_.metrics->queue_time.Observe(prefill.queue_seconds());

  TokenEmitter emitter(*env_.tokenizer, {.max_tokens = request.max_tokens,
                                         .ignore_eos = request.ignore_eos,
                                         .stop = request.stop});
  std::vector<tandem::v1::Token> out;
  const bool done = emitter.Push(prefill.first_token(), &out);
  if (!Send(out, emitter)) {
    ReleaseLease(prefill_address, prefill.lease_id(), absl::CancelledError("client went away"));
    return absl::CancelledError("client went away");
  }
  if (done) {
    ReleaseLease(prefill_address, prefill.lease_id(), absl::OkStatus());
    return absl::OkStatus();
  }
  return Decode(request, prefill, prefill_address, emitter);
}

absl::Status GenerateCall::Prefill(const ValidatedRequest& request,
                                   tandem::v1::PrefillResponse* out,
                                   std::string* prefill_address) {
  tandem::v1::PrefillRequest req;
  req.mutable_prompt_token_ids()->Assign(request.prompt_ids.begin(), request.prompt_ids.end());
  rpc::SamplingToProto(request.sampling, req.mutable_sampling());
  req.set_top_logprobs(request.top_logprobs);
  std::vector<int> tried;
  // What the client sees when every worker was tried (or there is none).
  grpc::Status last(grpc::StatusCode::UNAVAILABLE, "no prefill worker is available");
  while (true) {
    WorkerPicker::Pick pick = env_.prefill->Acquire(tried);
    if (!pick.valid()) break;
    tried.push_back(pick.index());
    auto stub = tandem::v1::Prefill::NewStub(env_.channels->Get(pick.address()));
    std::unique_ptr<grpc::ClientContext> cctx = ChildContext();
    last = stub->Prefill(cctx.get(), req, out);
    if (last.ok()) {
      *prefill_address = pick.address();
      return absl::OkStatus();
    }
    if (!Retryable(last) || ctx_->IsCancelled()) break;
    env_.metrics->prefill_retries.Increment();
  }
  return rpc::FromGrpcStatus(last, "prefill");
}

absl::Status GenerateCall::Decode(const ValidatedRequest& request,
                                  const tandem::v1::PrefillResponse& prefill,
                                  const std::string& prefill_address, TokenEmitter& emitter) {
  WorkerPicker::Pick pick = env_.decode->Acquire();
  tandem::v1::DecodeRequest req;
  req.mutable_prompt_token_ids()->Assign(request.prompt_ids.begin(), request.prompt_ids.end());
  *req.mutable_first_token() = prefill.first_token();
  rpc::SamplingToProto(request.sampling, req.mutable_sampling());
  req.set_max_tokens(request.max_tokens);
  req.set_top_logprobs(request.top_logprobs);
  // Stop strings and EOS are judged here, on text; the worker stops at EOS
  // too unless told to ignore it.
  req.set_ignore_eos(request.ignore_eos);
  req.set_prefill_address(prefill_address);
  req.set_lease_id(prefill.lease_id());
  req.set_num_blocks(prefill.num_blocks());

  auto stub = tandem::v1::Decode::NewStub(env_.channels->Get(pick.address()));
  std::unique_ptr<grpc::ClientContext> cctx = ChildContext();
  std::unique_ptr<grpc::ClientReader<tandem::v1::DecodeResponse>> reader =
      stub->Decode(cctx.get(), req);
  tandem::v1::DecodeResponse resp;
  bool first = true;
  bool client_gone = false;
  while (!emitter.finished() && reader->Read(&resp)) {
    if (first) {
      usage_.set_kv_transfer_seconds(resp.kv_transfer_seconds());
      usage_.set_first_decode_seconds(resp.first_decode_seconds());
      first = false;
    }
    std::vector<tandem::v1::Token> out;
    for (const tandem::v1::SampledTokenProto& t : resp.tokens()) {
      if (emitter.Push(t, &out)) break;
    }
    if (!emitter.finished() && resp.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      emitter.Finish(resp.finish_reason(), &out);
    }
    if (!Send(out, emitter)) {
      client_gone = true;
      break;
    }
  }
  if (emitter.finished() || client_gone) cctx->TryCancel();  // e.g. a stop string matched
  const grpc::Status s = reader->Finish();
  if (client_gone) return absl::CancelledError("client went away");
  if (emitter.finished()) return absl::OkStatus();
  // The decode worker failed before finishing. It releases the lease itself
  // once it has tried to fetch; releasing again is harmless and covers
  // failures before that.
  ReleaseLease(prefill_address, prefill.lease_id(), rpc::FromGrpcStatus(s, "decode"));
  if (s.ok()) return absl::InternalError("decode stream ended without a finish reason");
  return rpc::FromGrpcStatus(s, "decode");
}

std::unique_ptr<grpc::ClientContext> GenerateCall::ChildContext() const {
  std::unique_ptr<grpc::ClientContext> cctx = grpc::ClientContext::FromServerContext(*ctx_);
  const auto cap = absl::ToChronoTime(start_ + env_.request_timeout);
  if (cctx->deadline() > cap) cctx->set_deadline(cap);
  return cctx;
}

bool GenerateCall::Send(std::vector<tandem::v1::Token>& tokens, const TokenEmitter& emitter) {
  if (tokens.empty() && !emitter.finished()) return true;
  tandem::v1::GenerateResponse resp;
  const absl::Time now = absl::Now();
  for (tandem::v1::Token& t : tokens) *resp.add_tokens() = std::move(t);
  if (!tokens.empty()) {
    if (last_token_ == absl::InfinitePast()) {
      env_.metrics->time_to_first_token.Observe(absl::ToDoubleSeconds(now - start_));
    } else {
      const double gap = absl::ToDoubleSeconds(now - last_token_) / tokens.size();
      for (size_t i = 0; i < tokens.size(); ++i) env_.metrics->inter_token_latency.Observe(gap);
    }
    last_token_ = now;
    env_.metrics->generated_tokens.Increment(static_cast<double>(tokens.size()));
  }
  if (emitter.finished()) {
    resp.set_finish_reason(emitter.finish_reason());
    usage_.set_completion_tokens(emitter.completion_tokens());
    *resp.mutable_usage() = usage_;
    env_.metrics->e2e_latency.Observe(absl::ToDoubleSeconds(now - start_));
  }
  return writer_->Write(resp);
}

void GenerateCall::ReleaseLease(const std::string& prefill_address, const std::string& lease_id,
                                const absl::Status& why) {
  auto stub = tandem::v1::Prefill::NewStub(env_.channels->Get(prefill_address));
  grpc::ClientContext cctx;  // not the client's: it must run even after a cancel
  cctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  tandem::v1::ReleaseKvRequest req;
  req.set_lease_id(lease_id);
  req.set_ok(why.ok());
  req.set_error(std::string(why.message()));
  tandem::v1::ReleaseKvResponse ignored;
  const grpc::Status s = stub->ReleaseKv(&cctx, req, &ignored);
  if (!s.ok()) {
    std::cerr << "tandem-gateway: ReleaseKv to " << prefill_address << ": " << s.error_message()
              << " (the lease's TTL will free it)\n";
  }
}

}  // namespace tandem::gateway
