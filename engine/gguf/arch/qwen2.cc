// Qwen2: Llama layout plus biases on Q, K and V, with NeoX (half-split) RoPE.
#include "engine/gguf/model_config.h"

namespace tandem::engine {

extern const ArchTraits kQwen2Arch = {
    .name = "qwen2",
    .rope_type = RopeType::kNeox,
    .qkv_bias = true,
};

}  // namespace tandem::engine
