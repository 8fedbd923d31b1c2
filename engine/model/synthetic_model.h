// Writes a valid Llama-family GGUF with deterministic pseudo-random weights
// and a working SentencePiece-style tokenizer, so the project runs and is
// benchmarked without any downloaded file. Called by `tandem make-model`,
// `tandem up` (default model) and tests. Thread-compatible.
#ifndef TANDEM_ENGINE_MODEL_SYNTHETIC_MODEL_H_
#define TANDEM_ENGINE_MODEL_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine {

// Defaults: the 25.7M-parameter shape the engine benchmarks use.
struct SyntheticModelOptions {
  std::string arch = "llama";  // "llama" or "qwen2" (adds QKV biases)
  int32_t n_vocab = 512;       // >= 259 + 16: specials, 256 bytes, pieces
  int32_t n_embd = 512;
  int32_t n_layer = 8;
  int32_t n_head = 8;
  int32_t n_head_kv = 4;
  int32_t n_ff = 1536;
  int32_t context_length = 2048;
  GgmlType type = GgmlType::kF32;  // type of the 2-D weights
  bool tied_output = false;        // omit output.weight
  uint64_t seed = 1;
  std::string chat_template;       // tokenizer.chat_template; empty: none
  // A GGUF (a vocab-only one will do) whose tokenizer.* metadata is copied
  // instead of the generated vocabulary: a model with a real vocabulary for
  // benchmarks. n_vocab must equal its token count. Empty: generated.
  std::string vocab_from;
  // Weights that copy: layer 0 holds previous-token heads and layer 1 an
  // induction head keyed on the last four tokens, so greedy decoding
  // continues any text the context already holds (a summarise or edit
  // request, as a trained model would); every other weight is small noise.
  // The step costs what any model of the shape costs, and the function does
  // not depend on the shape, so a narrower or shallower copying model with
  // the same seed is a draft that agrees with it. Needs arch llama,
  // n_layer >= 2, n_head >= 4, head_dim >= 64, n_embd >= 385, no tied
  // output. See docs/benchmarks.md "A model that copies".
  bool copying = false;
};

// InvalidArgument naming the option when the shape is inconsistent (e.g.
// n_embd not divisible by n_head, Q8_0 with n_embd or n_ff not a multiple
// of 32).
absl::Status ValidateSyntheticModelOptions(const SyntheticModelOptions& options);

absl::Status WriteSyntheticModel(const SyntheticModelOptions& options,
                                 const std::string& path);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_SYNTHETIC_MODEL_H_
