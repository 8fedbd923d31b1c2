// The narrow compute interface the forward pass runs on. The CPU backend
// (engine/cpu/) is always built and is the reference every other backend
// (CUDA later) is tested against. A backend is engine-thread only: it may use
// its own compute pool inside a call, but calls do not overlap.
// Buffers passed in are host f32 row-major unless stated otherwise.
#ifndef TANDEM_ENGINE_MODEL_BACKEND_H_
#define TANDEM_ENGINE_MODEL_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/gguf/tensor_type.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/device_ptr.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_snapshot.h"

namespace tandem::engine {

// A 2-D weight as GGUF stores it: `rows` rows (output features) of `cols`
// contiguous elements (input features) of `type`. Not owned.
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// One sequence's rows of the batch: query rows [first_row, first_row + n_rows)
// have their keys and values in KV slots [kv_start, kv_start + n_rows) and
// attend to slots [0, their own] (slots, not RoPE positions: rotation is
// already in the stored keys). `blocks` is the sequence's block table,
// covering at least kv_start + n_rows slots.
struct AttentionSequence {
  int32_t first_row = 0;
  int32_t n_rows = 0;
  int32_t kv_start = 0;
  std::span<const BlockId> blocks;
};

struct AttentionArgs {
  const float* q = nullptr;  // [n_tokens, n_head * head_dim], RoPE applied
  float* out = nullptr;      // [n_tokens, n_head * head_dim]
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  PagedKvView kv;
  std::span<const AttentionSequence> seqs;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int threads() const = 0;

  // --- Memory. The backend owns all of it; it is freed with the backend. ---

  // `bytes` of backend memory, uninitialized, 64-byte aligned. Start-up only
  // (weights, scratch, the KV pool): nothing is allocated inside a step.
  // `what` names the use in the error. ResourceExhausted when out of memory.
  virtual absl::StatusOr<DevicePtr<uint8_t>> Allocate(int64_t bytes, std::string_view what) = 0;
  // Copies host bytes in / out. Each returns once the copy is complete (ops
  // issued before a Download have finished when it returns).
  virtual void Upload(DevicePtr<uint8_t> dst, std::span<const uint8_t> src) = 0;
  virtual void Download(DevicePtr<const uint8_t> src, std::span<uint8_t> dst) = 0;
  // Waits for every op issued so far (benchmarks; the copies above wait
  // themselves).
  virtual void Synchronize() = 0;

  // --- KV blocks, in batches: one call per step, never one per block. ---

  // out[i * pool.block_bytes, ...) = block ids[i], whole (every layer).
  virtual void ReadBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                          std::span<uint8_t> out) = 0;
  // Block ids[i] = blocks[i] (each exactly pool.block_bytes).
  virtual void WriteBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                           std::span<const KvBlockBytes> blocks) = 0;

  // y[t, r] = sum_c x[t, c] * w[r, c] for t < n_tokens.
  // x: [n_tokens, w.cols], y: [n_tokens, w.rows]; y does not alias x.
  virtual void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens,
                      float* y) = 0;

  // y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight[:]
  // x, y: [n_tokens, dim]; y may alias x.
  virtual void RmsNorm(const float* x, const float* weight, int64_t n_tokens,
                       int64_t dim, float eps, float* y) = 0;

  // out[i] = silu(gate[i]) * up[i] for i < n; out may alias gate.
  virtual void SwiGlu(const float* gate, const float* up, int64_t n, float* out) = 0;

  // x[i] += y[i] for i < n.
  virtual void Add(float* x, const float* y, int64_t n) = 0;

  // Causal attention of args.q over each sequence's paged KV (whose keys
  // and values for these rows are already stored) into args.out.
  virtual void PagedAttention(const AttentionArgs& args) = 0;
};

struct CpuBackendOptions {
  int threads = 2;  // size of the compute pool (OpenMP); 0 = all cores
  // The kernel table: "portable", "avx2" or "avx512", which this CPU must
  // have; empty: the best it has (or the one TANDEM_ISA names).
  std::string isa = "";
};

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options);

// A KV cache whose pool `backend` allocates; the backend must outlive it.
inline absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(Backend& backend,
                                                              const ModelConfig& config,
                                                              const KvCacheOptions& options) {
  return KvCache::Create(config, options,
                         [&backend](int64_t bytes) { return backend.Allocate(bytes, "KV pool"); });
}

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_BACKEND_H_
