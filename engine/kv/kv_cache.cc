#include "engine/kv/kv_cache.h"

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace tandem::engine {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const ModelConfig& config,
                                                         const KvCacheOptions& options,
                                                         KvAllocator allocate) {
  if (options.block_size < 1 || options.block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size ", options.block_size, " is out of range [1, 1024]"));
  }
  if (options.dtype != GgmlType::kF32 && options.dtype != GgmlType::kF16) {
    return absl::InvalidArgumentError("kv_type must be f32 or f16");
  }
  if (options.extra_layers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("extra_layers ", options.extra_layers, " must be >= 0"));
  }
  const int64_t block_bytes = int64_t{2} * (config.n_layer + options.extra_layers) *
                              options.block_size * config.kv_dim() * GgmlBlockBytes(options.dtype);
  const int64_t num_blocks = options.budget_bytes / block_bytes;
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_budget_bytes ", options.budget_bytes, " holds no KV block (one block needs ",
        block_bytes, " bytes)"));
  }
  if (num_blocks > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("kv_budget_bytes allows more than 2^30 blocks");
  }
  absl::StatusOr<DevicePtr<uint8_t>> memory = allocate(block_bytes * num_blocks);
  if (!memory.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv_budget_bytes: cannot allocate ", block_bytes * num_blocks,
        " bytes: ", memory.status().message()));
  }
  return std::unique_ptr<KvCache>(new KvCache(config, options,
                                              static_cast<int32_t>(num_blocks), *memory));
}

KvCache::KvCache(const ModelConfig& config, const KvCacheOptions& options, int32_t num_blocks,
                 DevicePtr<uint8_t> memory)
    : block_size_(options.block_size),
      n_layer_(config.n_layer + options.extra_layers),
      kv_dim_(config.kv_dim()),
      dtype_(options.dtype),
      layer_bytes_(int64_t{2} * options.block_size * config.kv_dim() *
                   GgmlBlockBytes(options.dtype)),
      block_bytes_(layer_bytes_ * n_layer_),
      memory_(memory),
      pool_(num_blocks) {}

PagedKvView KvCache::LayerView(int32_t layer) const {
  TANDEM_CHECK(layer >= 0 && layer < n_layer_, "a KV layer in range") << layer;
  const int64_t k_offset = layer * layer_bytes_;
  return PagedKvView{
      .dtype = dtype_,
      .base = memory_,
      .block_bytes = block_bytes_,
      .k_offset = k_offset,
      .v_offset = k_offset + layer_bytes_ / 2,
      .block_size = block_size_,
      .kv_dim = kv_dim_,
  };
}

}  // namespace tandem::engine
