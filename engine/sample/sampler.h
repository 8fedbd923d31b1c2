// Token selection from one row of logits, and the log-probabilities reported
// with each token. A Sampler belongs to one sequence (it owns that sequence's
// RNG) and is thread-compatible. Logits are read during the call and never
// retained: what survives a step is O(k) per sequence.
#ifndef TANDEM_ENGINE_SAMPLE_SAMPLER_H_
#define TANDEM_ENGINE_SAMPLE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/sample/sampling_params.h"

namespace tandem::engine {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token from `logits` (one row, n_vocab values) and reports
  // logprobs. `top_logprobs` must be in [0, kMaxTopLogprobs].
  // Deterministic for a given seed and sequence of calls.
  SampledToken Sample(std::span<const float> logits, int top_logprobs);

  // Whether Sample's result follows from the row's log-softmax stats and its
  // top max(1, top_logprobs) tokens alone (greedy: temperature 0 or too small
  // to invert), so the row itself need not leave the backend.
  bool SamplesFromTop() const;
  // What Sample returns for the row whose top tokens are `top` (TopLogprobs
  // of at least max(1, top_logprobs), or of the whole row when it is
  // shorter), bit for bit, RNG included. Only when SamplesFromTop().
  SampledToken SampleFromTop(std::span<const TokenLogprob> top, int top_logprobs);

  // Advances the RNG past `calls` Sample calls made elsewhere (the prefill
  // worker samples a request's first token), so a sequence continued in
  // another process draws exactly what it would have drawn in one.
  void Skip(int calls);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  // Scratch reused across calls; holds at most the candidates that survive
  // top-k (or the vocabulary when sampling without top-k), never logits of
  // past steps.
  std::vector<TokenLogprob> candidates_;
};

// Log-softmax statistics of one logits row: max and log(sum(exp(l - max))),
// so that logprob(i) = logits[i] - max - log_sum.
struct LogSoftmaxStats {
  float max = 0.0f;
  float log_sum = 0.0f;
};
LogSoftmaxStats ComputeLogSoftmaxStats(std::span<const float> logits);

// The k largest logits' ids and logprobs (k <= kMaxTopLogprobs), most likely
// first, ties broken by lower id. O(n_vocab) time, O(k) memory.
std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits,
                                      const LogSoftmaxStats& stats, int k);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SAMPLE_SAMPLER_H_
