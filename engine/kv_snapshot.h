// An immutable copy of a sequence's KV blocks, for handing to another
// process (prefill -> decode). Values, not views: it never aliases memory a
// running sequence writes. Thread-safe once built (read-only).
#ifndef TANDEM_ENGINE_KV_SNAPSHOT_H_
#define TANDEM_ENGINE_KV_SNAPSHOT_H_

#include <cstdint>
#include <vector>

#include "engine/tensor_type.h"

namespace tandem::engine {

struct KvSnapshot {
  uint64_t model_fingerprint = 0;
  int32_t n_tokens = 0;  // positions held, [0, n_tokens)
  int32_t block_size = 0;
  int32_t n_layer = 0;
  int32_t kv_dim = 0;
  GgmlType dtype = GgmlType::kF32;
  // ceil(n_tokens / block_size) blocks, each in the engine's block layout
  // ([layer][k|v][slot][kv_dim]) and size.
  std::vector<std::vector<uint8_t>> blocks;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_SNAPSHOT_H_
