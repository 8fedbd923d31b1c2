// Llama (and Mistral-style) models: interleaved-pair RoPE, no QKV bias.
#include "engine/gguf/model_config.h"

namespace tandem::engine {

extern const ArchTraits kLlamaArch = {
    .name = "llama",
    .rope_type = RopeType::kNormal,
    .qkv_bias = false,
};

}  // namespace tandem::engine
