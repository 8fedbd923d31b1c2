#include "worker/request_convert.h"

#include "rpc/convert.h"

namespace tandem::worker {
namespace {

// The fields PrefillRequest and DecodeRequest share, converted the same way
// for both.
template <typename Message>
engine::GenerationRequest CommonFields(const Message& request) {
  engine::GenerationRequest r;
  engine::SamplingRequest& sampling = r;
  sampling = rpc::SamplingRequestFromProto(request);
  r.prompt.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  r.generated.assign(request.generated_token_ids().begin(), request.generated_token_ids().end());
  r.cache_salt = request.cache_salt();
  return r;
}

}  // namespace

engine::GenerationRequest EngineRequestFromProto(const tandem::v1::PrefillRequest& request) {
  engine::GenerationRequest r = CommonFields(request);
  // A resumed stream's tokens are computed with the prompt; the token
  // sampled after them is the answer.
  r.max_tokens = static_cast<int32_t>(r.generated.size()) + 1;
  r.ignore_eos = true;
  r.export_kv = true;
  r.export_without_draft = request.skip_draft_kv();
  return r;
}

engine::GenerationRequest EngineRequestFromProto(const tandem::v1::DecodeRequest& request) {
  engine::GenerationRequest r = CommonFields(request);
  r.max_tokens = request.max_tokens();
  r.ignore_eos = request.ignore_eos();
  // Prompt logprobs come from whoever computes the prompt: with a lease,
  // the prefill worker did.
  if (!request.lease_id().empty()) r.prompt_logprobs = -1;
  r.pin_key = request.session_id();
  r.private_kv = request.private_kv();
  r.shift_from = request.shift_from();
  r.shift_count = request.shift_count();
  r.roll_window = request.roll_window();
  r.roll_keep = request.roll_keep();
  return r;
}

}  // namespace tandem::worker
