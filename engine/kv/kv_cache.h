// The paged KV cache's geometry: a fixed number of blocks, each holding the
// keys and values of `block_size` consecutive tokens for every layer (the
// model's, then a draft model's when one speculates beside it), carved
// from a byte budget fixed at start. The memory itself is the backend's
// (allocated once through a KvAllocator, held here as a DevicePtr and never
// dereferenced); bookkeeping (who holds which block) is the BlockPool's;
// this class only maps (block, layer, slot) to addresses. Engine-thread only.
#ifndef TANDEM_ENGINE_KV_KV_CACHE_H_
#define TANDEM_ENGINE_KV_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/gguf/model_config.h"
#include "engine/gguf/tensor_type.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/device_ptr.h"
#include "engine/kv/kv_layout.h"

namespace tandem::engine {

struct KvCacheOptions {
  int32_t block_size = 16;              // tokens per block
  int64_t budget_bytes = 256ll << 20;   // all KV memory, fixed at start
  GgmlType dtype = GgmlType::kF32;      // kF32 or kF16
  // Layers after the model's in every block, of the same KV width: a draft
  // model's (Engine::Create), whose KV travels, caches and tiers with the
  // model's as part of the same blocks.
  int32_t extra_layers = 0;
};

// One layer's view of every block, for attention kernels.
// Block b's keys for this layer: base + b * block_bytes + k_offset, laid out
// [block_size][kv_dim] of `dtype`; values likewise at v_offset.
struct PagedKvView {
  GgmlType dtype = GgmlType::kF32;
  DevicePtr<uint8_t> base;
  int64_t block_bytes = 0;
  int64_t k_offset = 0;
  int64_t v_offset = 0;
  int32_t block_size = 0;
  int32_t kv_dim = 0;
};

// The whole pool as whole blocks, for the backend's batched block copies
// (Backend::ReadBlocks / WriteBlocks): block b is block_bytes bytes at
// base + b * block_bytes.
struct KvPoolView {
  DevicePtr<uint8_t> base;
  int64_t block_bytes = 0;
  int32_t num_blocks = 0;
};

// Returns `bytes` of backend memory that outlives the cache (Backend::Allocate).
using KvAllocator = absl::FunctionRef<absl::StatusOr<DevicePtr<uint8_t>>(int64_t bytes)>;

class KvCache {
 public:
  // InvalidArgument naming the flag when the budget holds no block, the block
  // size is not in [1, 1024], the dtype is not f32/f16 or extra_layers is
  // negative; the allocator's
  // error when it cannot give the pool's bytes.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const ModelConfig& config,
                                                         const KvCacheOptions& options,
                                                         KvAllocator allocate);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  int64_t block_bytes() const { return block_bytes_; }
  GgmlType dtype() const { return dtype_; }
  int32_t n_layer() const { return n_layer_; }  // the model's and the extra ones
  int32_t kv_dim() const { return kv_dim_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // Layer `layer` of every block, in [0, n_layer()).
  PagedKvView LayerView(int32_t layer) const;
  KvPoolView pool_view() const {
    return {.base = memory_, .block_bytes = block_bytes_, .num_blocks = num_blocks()};
  }

 private:
  KvCache(const ModelConfig& config, const KvCacheOptions& options, int32_t num_blocks,
          DevicePtr<uint8_t> memory);

  int32_t block_size_;
  int32_t n_layer_;
  int32_t kv_dim_;
  GgmlType dtype_;
  int64_t layer_bytes_;  // keys and values of one layer within a block
  int64_t block_bytes_;
  // num_blocks * block_bytes of backend memory, not owned.
  DevicePtr<uint8_t> memory_;
  BlockPool pool_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_KV_CACHE_H_
