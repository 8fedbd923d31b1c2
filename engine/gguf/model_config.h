// Hyperparameters of a Llama-family model, read from GGUF metadata the way
// llama.cpp reads them. Immutable value; thread-safe. Architecture-specific
// defaults live in engine/arch/<name>.cc, one file per architecture.
#ifndef TANDEM_ENGINE_GGUF_MODEL_CONFIG_H_
#define TANDEM_ENGINE_GGUF_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"

namespace tandem::engine {

enum class RopeType {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]): llama
  kNeox,    // rotate halves (x[i], x[i + n_rot/2]): qwen2, NeoX
};

struct ModelConfig {
  std::string arch;           // general.architecture
  int32_t n_vocab = 0;        // rows of token_embd
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;       // key/value length per head
  int32_t n_ff = 0;
  int32_t n_ctx_train = 0;    // context length the model was trained with
  int32_t n_rot = 0;          // rotated dimensions per head (<= head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  RopeType rope_type = RopeType::kNormal;
  float rms_eps = 1e-5f;
  bool qkv_bias = false;

  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }
};

// What differs between supported architectures. One instance per file in
// engine/arch/.
struct ArchTraits {
  const char* name;
  RopeType rope_type;
  bool qkv_bias;
};
const ArchTraits* FindArch(std::string_view name);  // nullptr if unsupported

// Reads and checks hyperparameters. An unsupported architecture is refused by
// name; missing or inconsistent keys name the key.
absl::StatusOr<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_GGUF_MODEL_CONFIG_H_
