#include "engine/sample/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::engine {

bool SamplingParams::IsStopToken(int32_t id) const {
  return std::find(stop_token_ids.begin(), stop_token_ids.end(), id) != stop_token_ids.end();
}

const char* OutputConstraintKindName(OutputConstraint::Kind kind) {
  switch (kind) {
    case OutputConstraint::Kind::kNone: return "none";
    case OutputConstraint::Kind::kJsonObject: return "json_object";
    case OutputConstraint::Kind::kJsonSchema: return "json_schema";
    case OutputConstraint::Kind::kRegex: return "regex";
    case OutputConstraint::Kind::kGrammar: return "grammar";
  }
  return "unknown";
}

bool SamplingParams::AdjustsLogits() const {
  return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f ||
         !logit_bias.empty() || min_tokens > 0;
}

namespace {

absl::Status ValidateTokenId(const char* field, size_t index, int32_t id, int32_t n_vocab) {
  if (id < 0 || (n_vocab > 0 && id >= n_vocab)) {
    return absl::InvalidArgumentError(absl::StrCat(field, "[", index, "]: token id ", id,
                                                   " is out of range [0, ", n_vocab, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t n_vocab) {
  if (!std::isfinite(params.temperature) || params.temperature < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0, got ",
                     params.temperature));
  }
  // Written as !(in range) so that NaN fails too.
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1], got ", params.top_p));
  }
  if (params.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0 (0 = off), got ", params.top_k));
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_p must be in [0, 1], got ", params.min_p));
  }
  if (!(std::abs(params.presence_penalty) <= kMaxPenalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "presence_penalty must be in [-", kMaxPenalty, ", ", kMaxPenalty, "], got ",
        params.presence_penalty));
  }
  if (!(std::abs(params.frequency_penalty) <= kMaxPenalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frequency_penalty must be in [-", kMaxPenalty, ", ", kMaxPenalty, "], got ",
        params.frequency_penalty));
  }
  if (!(params.repetition_penalty > 0.0f && params.repetition_penalty <= kMaxRepetitionPenalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repetition_penalty must be in (0, ", kMaxRepetitionPenalty, "] (1 = off), got ",
        params.repetition_penalty));
  }
  for (size_t i = 0; i < params.logit_bias.size(); ++i) {
    const LogitBias& b = params.logit_bias[i];
    if (absl::Status s = ValidateTokenId("logit_bias", i, b.id, n_vocab); !s.ok()) return s;
    if (!(std::abs(b.bias) <= kMaxLogitBias)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias[", b.id, "] must be in [-",
                                                     kMaxLogitBias, ", ", kMaxLogitBias,
                                                     "], got ", b.bias));
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(params.logit_bias.size());
  for (const LogitBias& b : params.logit_bias) ids.push_back(b.id);
  std::sort(ids.begin(), ids.end());
  if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logit_bias: token id ", *dup, " appears twice"));
  }
  if (params.min_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_tokens must be >= 0, got ", params.min_tokens));
  }
  for (size_t i = 0; i < params.stop_token_ids.size(); ++i) {
    if (absl::Status s = ValidateTokenId("stop_token_ids", i, params.stop_token_ids[i], n_vocab);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::engine
