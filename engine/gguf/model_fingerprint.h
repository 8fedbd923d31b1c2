// A model's fingerprint: what KV blocks and block hashes are keyed by, so a
// block computed by one model is never used by another. Computed from the
// GGUF file's hyperparameters and tensor layout (names, types, shapes,
// offsets) alone, never from weight bytes, so a process that loads no
// weights (the gateway, which hashes prompts for the block index) computes
// the same value as the workers. Pure; thread-safe.
#ifndef TANDEM_ENGINE_GGUF_MODEL_FINGERPRINT_H_
#define TANDEM_ENGINE_GGUF_MODEL_FINGERPRINT_H_

#include <cstdint>

#include "engine/gguf/gguf.h"
#include "engine/gguf/model_config.h"

namespace tandem::engine {

// FNV-1a over the architecture, every ModelConfig field that shapes the KV
// (and the RoPE that rotates it), then each tensor's name, type, dimensions
// and data offset, in file order. Part of the KV contract: changing it
// orphans every cached block.
uint64_t ModelFingerprint(const ModelConfig& config, const GgufFile& file);

// A model and its draft model's (Engine::Create): what blocks holding both
// models' KV are keyed by, so they never mix with blocks of the model alone
// or of another pair. Order matters.
uint64_t PairFingerprint(uint64_t model, uint64_t draft);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_GGUF_MODEL_FINGERPRINT_H_
