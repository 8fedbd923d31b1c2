// The engine's checks of what callers hand it: requests, KV snapshots to
// import and pulled prefixes (engine.h). Every message names the field.
#include "engine/engine.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::engine {

absl::Status Engine::ValidateRequest(const GenerationRequest& request) const {
  const Tokenizer& tok = model_.tokenizer();
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError("prompt: must hold at least one token");
  }
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (!tok.IsValidId(request.prompt[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt_token_ids[", i, "] = ", request.prompt[i], " is out of range [0, ",
          tok.n_vocab(), ")"));
    }
  }
  for (size_t i = 0; i < request.generated.size(); ++i) {
    if (!tok.IsValidId(request.generated[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "generated[", i, "] = ", request.generated[i], " is out of range [0, ", tok.n_vocab(),
          ")"));
    }
  }
  if (request.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: ", request.max_tokens, " must be at least 1"));
  }
  if (static_cast<int64_t>(request.generated.size()) >= request.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generated: ", request.generated.size(), " tokens leave nothing of max_tokens ",
        request.max_tokens));
  }
  if (request.sampling.speculation == Speculation::kDraft && draft_.model == nullptr) {
    return absl::InvalidArgumentError(
        "speculation: draft needs a worker started with --draft-model; this one has none");
  }
  if (request.roll_window != 0 &&
      (request.roll_keep < 0 ||
       request.roll_window < request.roll_keep + 2 * kv_->block_size() + 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "roll_window: ", request.roll_window, " must leave two blocks of ", kv_->block_size(),
        " tokens after roll_keep ", request.roll_keep, " (or be 0)"));
  }
  if (request.top_logprobs < 0 || request.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_logprobs: ", request.top_logprobs, " is out of range [0, ", kMaxTopLogprobs, "]"));
  }
  RETURN_IF_ERROR(ValidateSamplingParams(request.sampling, tok.n_vocab()));
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_logprobs: ", request.prompt_logprobs,
                                                   " is out of range [-1, ", kMaxTopLogprobs,
                                                   "]"));
  }
  if (request.prompt_logprobs >= 0 && (!request.generated.empty() || request.private_kv)) {
    return absl::InvalidArgumentError(
        "prompt_logprobs: needs a fresh prompt (no generated tokens, no private KV)");
  }
  const int64_t n = static_cast<int64_t>(request.prompt.size() + request.generated.size());
  if (n > options_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", n, " tokens exceed max_context ", options_.max_context));
  }
  if (n >= MaxSequenceLength()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt: ", n, " tokens leave no room in the KV pool (", kv_->num_blocks(),
        " blocks of ", kv_->block_size(), " tokens)"));
  }
  if (scheduler_.num_waiting() >= options_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat("waiting queue is full (max_waiting ", options_.max_waiting, ")"));
  }
  return absl::OkStatus();
}

absl::Status Engine::ValidateSnapshot(const GenerationRequest& request,
                                      const KvSnapshot& kv) const {
  RETURN_IF_ERROR(ValidateShape(kv));
  // The KV holds the prompt and any tokens generated before it was taken.
  const size_t held = request.prompt.size() + request.generated.size();
  if (kv.n_tokens != static_cast<int32_t>(held)) {
    return absl::InvalidArgumentError(absl::StrCat("kv.n_tokens ", kv.n_tokens,
                                                   " differs from the prompt and generated "
                                                   "tokens' ",
                                                   held));
  }
  // Only leading full blocks can be held already, and not the one holding
  // the last position.
  const int32_t max_skip = kv.n_tokens > 0 ? (kv.n_tokens - 1) / kv.block_size : 0;
  if (kv.first_block < 0 || kv.first_block > max_skip) {
    return absl::InvalidArgumentError(absl::StrCat("kv.first_block ", kv.first_block,
                                                   " is out of range [0, ", max_skip, "]"));
  }
  const size_t want_blocks =
      (kv.n_tokens + kv.block_size - 1) / kv.block_size - static_cast<size_t>(kv.first_block);
  if (kv.blocks.size() != want_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv.blocks has ", kv.blocks.size(), " blocks; ", kv.n_tokens, " tokens from block ",
        kv.first_block, " need ", want_blocks));
  }
  return absl::OkStatus();
}

absl::Status Engine::ValidateShape(const KvSnapshot& kv) const {
  auto mismatch = [](const char* field, int64_t got, int64_t want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv.", field, " is ", got, " but this worker uses ", want));
  };
  if (kv.model_fingerprint != kv_fingerprint_) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv.model_fingerprint ", kv.model_fingerprint, " differs from this worker's ",
                     draft_.model != nullptr ? "model and draft model pair" : "model", " (",
                     kv_fingerprint_, ")"));
  }
  if (kv.block_size != kv_->block_size())
    return mismatch("block_size", kv.block_size, kv_->block_size());
  if (kv.n_layer != kv_->n_layer()) return mismatch("n_layer", kv.n_layer, kv_->n_layer());
  if (kv.kv_dim != kv_->kv_dim()) return mismatch("kv_dim", kv.kv_dim, kv_->kv_dim());
  if (kv.dtype != kv_->dtype()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv.dtype is ", std::string(GgmlTypeName(kv.dtype)), " but this worker uses ",
        std::string(GgmlTypeName(kv_->dtype()))));
  }
  for (size_t i = 0; i < kv.blocks.size(); ++i) {
    if (static_cast<int64_t>(kv.blocks[i].size()) != kv_->block_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("kv.blocks[", i, "] has ",
                                                     kv.blocks[i].size(), " bytes, expected ",
                                                     kv_->block_bytes()));
    }
  }
  if (kv.draft_tokens.has_value() && (*kv.draft_tokens < 0 || *kv.draft_tokens > kv.n_tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("kv.draft_tokens ", *kv.draft_tokens,
                                                   " is out of range [0, ", kv.n_tokens, "]"));
  }
  return absl::OkStatus();
}

absl::Status Engine::ValidatePrefix(const GenerationRequest& request, const KvSnapshot& kv) const {
  RETURN_IF_ERROR(ValidateShape(kv));
  const int32_t bs = kv_->block_size();
  const int32_t n = static_cast<int32_t>(request.prompt.size());
  if (kv.first_block != 0 || kv.n_tokens % bs != 0 || kv.n_tokens < bs || kv.n_tokens >= n ||
      kv.blocks.size() != static_cast<size_t>(kv.n_tokens / bs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix_kv: ", kv.blocks.size(), " blocks from block ", kv.first_block, " for ",
        kv.n_tokens, " tokens must be whole blocks from position 0 that leave some of the ", n,
        "-token prompt to compute"));
  }
  return absl::OkStatus();
}

}  // namespace tandem::engine
