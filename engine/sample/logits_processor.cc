#include "engine/sample/logits_processor.h"

#include <limits>

namespace tandem::engine {

LogitsProcessor::LogitsProcessor(const SamplingParams& params, std::span<const int32_t> end_ids)
    : active_(params.AdjustsLogits()),
      presence_(params.presence_penalty),
      frequency_(params.frequency_penalty),
      repetition_(params.repetition_penalty),
      min_tokens_(params.min_tokens),
      bias_(params.logit_bias) {
  if (min_tokens_ > 0) {
    held_back_.assign(end_ids.begin(), end_ids.end());
    held_back_.insert(held_back_.end(), params.stop_token_ids.begin(),
                      params.stop_token_ids.end());
  }
}

void LogitsProcessor::ObservePrompt(std::span<const int32_t> ids) {
  if (repetition_ == 1.0f) return;
  seen_.insert(ids.begin(), ids.end());
}

void LogitsProcessor::ObserveGenerated(int32_t id) {
  ++n_generated_;
  if (repetition_ != 1.0f) seen_.insert(id);
  if (presence_ != 0.0f || frequency_ != 0.0f) ++generated_counts_[id];
}

void LogitsProcessor::Apply(std::span<float> logits) const {
  if (!active_) return;
  const auto n = static_cast<int64_t>(logits.size());
  auto in_row = [n](int32_t id) { return id >= 0 && id < n; };
  for (int32_t id : seen_) {
    if (!in_row(id)) continue;
    float& l = logits[id];
    l = l > 0.0f ? l / repetition_ : l * repetition_;
  }
  for (const auto& [id, count] : generated_counts_) {
    if (!in_row(id)) continue;
    logits[id] -= static_cast<float>(count) * frequency_ + presence_;
  }
  for (const LogitBias& b : bias_) {
    if (in_row(b.id)) logits[b.id] += b.bias;
  }
  if (n_generated_ < min_tokens_) {
    for (int32_t id : held_back_) {
      if (in_row(id)) logits[id] = -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace tandem::engine
