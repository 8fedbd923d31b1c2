// The value types a generation request and its tokens are described with:
// sampling parameters, the sampling part of a request that every hop carries
// whole (SamplingRequest), and sampled tokens with their logprobs. Shared by
// the engine and by processes that load no weights (the gateway validates
// requests with them; rpc/convert.h converts them to and from protos), so this
// file depends on nothing but Abseil. Plain values; thread-compatible.
#ifndef TANDEM_ENGINE_SAMPLE_SAMPLING_PARAMS_H_
#define TANDEM_ENGINE_SAMPLE_SAMPLING_PARAMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tandem::engine {

inline constexpr int kMaxTopLogprobs = 20;
// Bounds of the logit adjustments, as OpenAI's API and vLLM set them.
inline constexpr float kMaxPenalty = 2.0f;       // presence / frequency: [-2, 2]
inline constexpr float kMaxLogitBias = 100.0f;   // each bias: [-100, 100]
inline constexpr float kMaxRepetitionPenalty = 10.0f;  // (0, 10]

struct LogitBias {
  int32_t id = 0;
  float bias = 0.0f;

  friend bool operator==(const LogitBias&, const LogitBias&) = default;
};

// Structured output: what the generated text must be. The engine compiles
// `source` to a grammar (engine/constrain) and, at every step, masks the
// tokens that cannot continue a valid output; end-of-generation only where
// the grammar may end. The sequence's place in the grammar is a function of
// the tokens generated, so a sequence continued in another process (the
// decode worker after the prefill worker, a migrated stream) re-derives it.
struct OutputConstraint {
  enum class Kind : uint8_t {
    kNone = 0,
    kJsonObject,  // any JSON object; `source` empty
    kJsonSchema,  // `source`: a JSON Schema document
    kRegex,       // `source`: a regular expression the whole output matches
    kGrammar,     // `source`: a GBNF-style grammar, start rule `root`
  };
  Kind kind = Kind::kNone;
  std::string source;

  bool active() const { return kind != Kind::kNone; }
  friend bool operator==(const OutputConstraint&, const OutputConstraint&) = default;
};

// "json_object", "json_schema", "regex", "grammar" ("none" for kNone).
const char* OutputConstraintKindName(OutputConstraint::Kind kind);

// Speculative decoding for one request: the worker's default (its
// --speculative), off, or prompt lookup (tokens proposed from the
// sequence's own earlier n-grams, verified in one step, each kept only where
// the model's own pick -- greedy or sampled with this request's seed -- is
// that token, so the output is what decoding one token per step gives), or
// a draft model's greedy proposals (--draft-model), verified the same way.
enum class Speculation : uint8_t { kDefault = 0, kOff, kPromptLookup, kDraft };

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  float top_p = 1.0f;        // (0, 1]; 1 = off
  int32_t top_k = 0;         // 0 = off
  float min_p = 0.0f;        // [0, 1]; 0 = off
  uint64_t seed = 0;
  // Logit adjustments applied before everything above (LogitsProcessor):
  // OpenAI's presence and frequency penalties over the generated tokens,
  // the CTRL / Hugging Face repetition penalty over prompt and generated
  // tokens (1 = off), additive biases (ids unique), and min_tokens: until
  // that many tokens are generated, end-of-generation and stop_token_ids
  // cannot be sampled.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::vector<LogitBias> logit_bias = {};
  int32_t min_tokens = 0;
  // Generating one of these ends the sequence (FinishReason::kStop); the
  // token is reported, as an end-of-generation token is.
  std::vector<int32_t> stop_token_ids = {};
  // Structured output (response_format); kNone: free text.
  OutputConstraint constraint = {};
  Speculation speculation = Speculation::kDefault;

  bool IsStopToken(int32_t id) const;
  bool AdjustsLogits() const;

  friend bool operator==(const SamplingParams&, const SamplingParams&) = default;
};

// What a request asks of sampling and of the logprobs reported with it: the
// fields that travel together across every process boundary (beside
// `sampling` in each request proto). The engine's GenerationRequest and the
// gateway's ValidatedRequest derive from it, so each hop converts it whole
// with one function per direction (rpc/convert.h), and a field added here is
// converted there alone.
struct SamplingRequest {
  SamplingParams sampling;
  // Alternatives reported per generated token, [0, kMaxTopLogprobs].
  int32_t top_logprobs = 0;
  // -1: off. Else, for every prompt token after the first, its logprob and
  // this many alternatives ([0, kMaxTopLogprobs]), reported with the first
  // generated token; the whole prompt is then computed (GenerationRequest).
  int32_t prompt_logprobs = -1;

  friend bool operator==(const SamplingRequest&, const SamplingRequest&) = default;
};

// InvalidArgument naming the field ("temperature", "top_p", ...) when a value
// is out of range or not finite. Token ids are checked against n_vocab when
// it is > 0.
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t n_vocab = 0);

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

#endif  // TANDEM_ENGINE_SAMPLE_SAMPLING_PARAMS_H_
