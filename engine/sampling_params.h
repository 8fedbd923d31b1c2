// The value types a generation request and its tokens are described with:
// sampling parameters and sampled tokens with their logprobs. Shared by the
// engine and by processes that load no weights (the gateway validates
// requests with them), so this file depends on nothing but Abseil. Plain
// values; thread-compatible.
#ifndef TANDEM_ENGINE_SAMPLING_PARAMS_H_
#define TANDEM_ENGINE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace tandem::engine {

inline constexpr int kMaxTopLogprobs = 20;

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  float top_p = 1.0f;        // (0, 1]; 1 = off
  int32_t top_k = 0;         // 0 = off
  float min_p = 0.0f;        // [0, 1]; 0 = off
  uint64_t seed = 0;
};

// InvalidArgument naming the field ("temperature", "top_p", ...) when a value
// is out of range or not finite.
absl::Status ValidateSamplingParams(const SamplingParams& params);

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t id = -1;
  // log softmax of the raw logits (before temperature / truncation) at `id`.
  float logprob = 0.0f;
  // The `top_logprobs` most likely tokens under the same distribution, most
  // likely first (ties by lower id first). Empty when top_logprobs == 0.
  std::vector<TokenLogprob> top;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SAMPLING_PARAMS_H_
