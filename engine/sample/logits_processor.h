// The per-sequence logit adjustments of SamplingParams (penalties,
// logit_bias, min_tokens), applied in place to one logits row before the
// Sampler reads it. Sparse: it touches only the tokens it has seen or been
// given a bias for, and its state is the sequence's distinct tokens, never a
// vocabulary-sized array. The state is a function of the prompt and the
// tokens generated so far, so a sequence continued in another process (the
// decode worker after the prefill worker sampled the first token) rebuilds
// exactly the state the first process had. One per sequence;
// thread-compatible.
#ifndef TANDEM_ENGINE_SAMPLE_LOGITS_PROCESSOR_H_
#define TANDEM_ENGINE_SAMPLE_LOGITS_PROCESSOR_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/sample/sampling_params.h"

namespace tandem::engine {

class LogitsProcessor {
 public:
  LogitsProcessor() = default;
  // `params` must pass ValidateSamplingParams. `end_ids` are the tokens
  // min_tokens holds back besides stop_token_ids (the tokenizer's
  // end-of-generation ids; empty with ignore_eos).
  LogitsProcessor(const SamplingParams& params, std::span<const int32_t> end_ids);

  // Whether Apply changes anything at all; when false the row can be sampled
  // as it is.
  bool active() const { return active_; }

  void ObservePrompt(std::span<const int32_t> ids);
  void ObserveGenerated(int32_t id);

  // Adjusts `logits` (one row, n_vocab values) for the next token, in this
  // order (vLLM's): repetition penalty (logit / p when positive, * p when
  // not) on every token seen in the prompt or generated; frequency and
  // presence penalties (logit -= count * frequency + presence) on generated
  // tokens; logit_bias added; then, while fewer than min_tokens are
  // generated, end and stop tokens set to -inf.
  void Apply(std::span<float> logits) const;

 private:
  bool active_ = false;
  float presence_ = 0.0f;
  float frequency_ = 0.0f;
  float repetition_ = 1.0f;
  int32_t min_tokens_ = 0;
  std::vector<LogitBias> bias_;
  std::vector<int32_t> held_back_;  // suppressed while n_generated_ < min_tokens_
  int32_t n_generated_ = 0;
  // Generated tokens and their counts (frequency / presence), and every
  // token of the prompt or the output (repetition); kept only when the
  // matching penalty is on.
  absl::flat_hash_map<int32_t, int32_t> generated_counts_;
  absl::flat_hash_set<int32_t> seen_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SAMPLE_LOGITS_PROCESSOR_H_
