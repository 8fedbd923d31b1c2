// What one KV block is, for whoever ships, stores or checks one without an
// engine (kvtransfer's block format, the cache tiers): the fingerprint its
// hashes and bytes are keyed by and its shape. Plain data.
#ifndef TANDEM_ENGINE_KV_KV_LAYOUT_H_
#define TANDEM_ENGINE_KV_KV_LAYOUT_H_

#include <cstdint>

#include "engine/gguf/tensor_type.h"

namespace tandem::engine {

// The fingerprint is the model's, or the model and draft pair's
// (PairFingerprint).
struct KvLayout {
  uint64_t fingerprint = 0;
  int32_t block_size = 0;
  int32_t n_layer = 0;  // every layer a block holds, a draft's included
  int32_t kv_dim = 0;
  GgmlType dtype = GgmlType::kF32;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_KV_LAYOUT_H_
