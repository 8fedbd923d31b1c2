// Turns a public GenerateRequest into a ValidatedRequest once, at the edge of
// the gateway ("parse, don't validate"): everything after takes the validated
// type and never re-checks the proto. Called by the Generation service for
// each Generate call. Pure functions; thread-safe.
#ifndef TANDEM_GATEWAY_CALLS_VALIDATED_REQUEST_H_
#define TANDEM_GATEWAY_CALLS_VALIDATED_REQUEST_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/constrain/grammar.h"
#include "engine/sample/sampling_params.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::gateway {

// What one gateway accepts; set from flags.
struct GatewayLimits {
  // Longest sequence (prompt + completion) in tokens.
  int32_t max_context = 4096;
  // Entries of GenerateRequest.stop, and bytes of each entry.
  int32_t max_stop_strings = 16;
  int32_t max_stop_bytes = 256;
  // Bytes of GenerateRequest.prompt, checked before tokenizing it.
  int32_t max_prompt_bytes = 1 << 20;
  // Tokens generated for a request that sets no max_tokens (within what
  // max_context leaves).
  int32_t default_max_tokens = 4096;
  // Entries of sampling.logit_bias and of sampling.stop_token_ids.
  int32_t max_logit_bias = 1024;
  int32_t max_stop_token_ids = 64;
  // Completions per request (GenerateRequest.n).
  int32_t max_n = 16;
  // Bytes of a response format's schema, regex or grammar, and the bounds on
  // compiling it (the workers compile it again with the same bounds).
  int32_t max_response_format_bytes = 64 << 10;
  engine::constrain::CompileLimits response_format;

  // The largest request message these limits could accept (a prompt of
  // max_prompt_bytes, max_context token ids, every stop string, and room for
  // the other fields): the public port refuses larger ones before reading
  // them into memory.
  int32_t MaxRequestBytes() const {
    const int64_t bytes = int64_t{max_prompt_bytes} + int64_t{max_context} * 6 +
                          int64_t{max_stop_strings} * (max_stop_bytes + 8) +
                          int64_t{max_logit_bias} * 16 + int64_t{max_stop_token_ids} * 6 +
                          int64_t{max_response_format_bytes} +
                          (64 << 10);
    return static_cast<int32_t>(std::min<int64_t>(bytes, 1 << 30));
  }
};

// Longest request id a client may give (GenerateRequest.request_id or the
// x-request-id metadata).
inline constexpr size_t kMaxRequestIdBytes = 128;

// InvalidArgument naming "model" unless `requested` is empty (the default)
// or `served`, the one model this gateway serves.
absl::Status ValidateModel(const std::string& requested, const std::string& served);

// InvalidArgument naming `field` unless `id` is at most kMaxRequestIdBytes
// of printable ASCII without spaces.
absl::Status ValidateRequestId(std::string_view id, std::string_view field);

// The SamplingRequest base holds what travels to the workers as one piece
// (rpc::SamplingRequestToProto): `sampling` passes
// engine::ValidateSamplingParams (the proto's top_p 0, unset, is 1; without
// seed_given the seed is 0 until the caller draws one), `top_logprobs` is in
// [0, engine::kMaxTopLogprobs], `prompt_logprobs` -1 (not asked for) or in
// that range.
struct ValidatedRequest : engine::SamplingRequest {
  // Never empty; every id is valid for the tokenizer. Either the request's
  // prompt_token_ids as given, or its prompt tokenized the way llama.cpp's
  // server does (BOS added where the tokenizer adds it, special-token text
  // read as those tokens). size() < max_context.
  std::vector<int32_t> prompt_ids;
  // >= 1 and <= max_context - prompt_ids.size(): a request that asks for more
  // than fits is clamped to what fits (as llama.cpp does) rather than refused
  // (as vLLM does); only a prompt that leaves no room at all is refused. An
  // unset (0) max_tokens is default_max_tokens, clamped the same way.
  int32_t max_tokens = 0;
  // The request's sampling.seed was set (otherwise the caller draws one).
  bool seed_given = false;
  // The request's request_id (empty: none given; the caller makes one).
  std::string request_id;
  // Each non-empty, valid UTF-8 and within GatewayLimits.
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // The caller's tenant's prefix-cache salt (set by the service after
  // authentication; 0: none).
  uint64_t cache_salt = 0;
};

// InvalidArgument whose message starts with the offending field, e.g.
// "max_tokens: must be >= 1, got 0", "sampling.top_p: ...",
// "prompt_token_ids[3]: 999 is out of range [0, 512)",
// "model: unknown model \"x\"; this gateway serves \"y\"".
// `model_name` is the one model this gateway serves; an empty
// request.model selects it.
// `chat` renders request.messages (null: the plain rendering).
absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(
    const tandem::v1::GenerateRequest& request, const engine::Tokenizer& tokenizer,
    const std::string& model_name, const GatewayLimits& limits,
    const engine::ChatTemplate* chat = nullptr);

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_CALLS_VALIDATED_REQUEST_H_
