// The CPU matrix multiply behind Backend::MatMul: picks the row-parallel
// matrix-vector kernels (decode, small batches) or oneDNN sgemm over
// dequantized weight tiles (prefill), and owns the scratch both need.
// Callers: CpuBackend and the kernel tests/benchmarks. Thread-compatible:
// one caller thread at a time; each call fans out to `threads` OpenMP threads.
#ifndef TANDEM_ENGINE_CPU_MATMUL_H_
#define TANDEM_ENGINE_CPU_MATMUL_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/packed_weights.h"
#include "engine/model/backend.h"

namespace tandem::engine::cpu {

enum class MatMulPath {
  kAuto,  // ChoosePath
  kGemv,
  kGemm,
};

// The strategy kAuto takes: the gemv kernels up to a few dozen tokens (they
// read each weight once per call and reach ~250 GFLOP/s from L2 by n = 16),
// sgemm beyond (it blocks x for cache; f32 weights need no dequantization,
// so it wins earlier for them). Crossovers measured on the 2-core AVX-512
// dev machine with tandem-kernels-bench. Block-quantized weights (integer
// dots against activations quantized per block, as llama.cpp computes them)
// stay on the gemv path for any n unless their rows are short (`cols` <=
// kShortRowCols): the gemm path dequantizes tiles of a fixed size, so long
// rows make short tiles and sgemm repacks x for each one (a 1B model's
// 64-token prompt at Q8_0: 52 tok/s through gemm, 160 through gemv; at 512
// tokens 115 vs 136). Numerics differ slightly between the two: the gemv
// path quantizes x per block, the gemm path keeps x in f32. A matrix with
// tiles of its own (`tiles`: the table's Q8_0 / Q4_0 VNNI gemv, or a packed
// copy) stays on the gemv path at any length (the 25.7M model's 512-token
// prompt, row-at-a-time VNNI tiles: Q4_0 2973 -> 3224 tok/s, Q8_0 3047 ->
// 3340 against sgemm; packed ones are faster still).
inline constexpr int64_t kShortRowCols = 512;
MatMulPath ChoosePath(GgmlType type, int64_t n_tokens, int64_t cols, bool tiles = false);

// Below this many multiply-adds a call runs on the calling thread: an OpenMP
// fork/join costs ~0.9 us on the dev machine, more than it saves (the
// stories260K model's 64x64 matmuls take ~0.4 us on one thread).
inline constexpr int64_t kMinParallelMacs = 1 << 16;

// A 64-byte aligned, growable, uninitialized byte buffer.
class ScratchBuffer {
 public:
  // Returns at least `bytes` bytes; contents are not preserved on growth.
  void* Get(size_t bytes);

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
};

class MatMulRunner {
 public:
  // threads >= 1.
  MatMulRunner(const KernelTable& kernels, int threads);

  // y = x * w^T as Backend::MatMul; `path` forces a strategy for tests and
  // benchmarks.
  void Run(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
           MatMulPath path = MatMulPath::kAuto);

  // One product of RunGroup.
  struct Product {
    WeightMatrix w;
    float* y = nullptr;
  };
  // Run for each product, all of the same x (Q, K and V; gate and up), bit
  // for bit. Where every matrix is packed and multiplies the same form of x
  // (packed_weights.h: F32 and F16 plain, BF16 rounded, Q8_0 and Q4_0 as
  // Q8Activations, the K-quants as Q8_K), x is prepared once and one
  // parallel region covers every product's rows: one fork and join, not
  // one per product.
  void RunGroup(std::span<const Product> products, const float* x, int64_t n_tokens);

  // Repacks `w` into this table's packed layout for its type, if it has one
  // (PackedMatrix::Packable and packed_gemv), so that later gemv-path Runs
  // on the same data take it; with `release_source`, w's pages are then
  // given back (ReleasePages: read back if used again). Returns the packed
  // bytes (0: not packed). The packed copy is separate from w's data.
  int64_t Pack(const WeightMatrix& w, bool release_source = false);

  const KernelTable& kernels() const { return kernels_; }
  int threads() const { return threads_; }

 private:
  void RunGemv(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);
  // The packed copy of `w`, if Pack made one.
  const PackedMatrix* PackedOf(const WeightMatrix& w) const;
  // Packed matrices that multiply the same form of x (PackedInputOf; one
  // for Run, a group for RunGroup): x prepared once in that form, then one
  // parallel region running packed_gemv over each matrix's row split.
  void RunPacked(std::span<const PackedMatrix* const> w, std::span<float* const> y, const float* x,
                 int64_t n_tokens);
  void RunGemm(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);
  // The block formats with a quantized-activation dot product
  // (engine/cpu/quant_dot.h).
  void RunQuantGemv(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);
  int ThreadsFor(int64_t macs) const;

  // Carves Q8Activations for n_tokens x cols out of `buffer`.
  static Q8Activations ActivationBuffers(ScratchBuffer& buffer, int64_t n_tokens, int64_t cols);

  struct ThreadScratch {
    ScratchBuffer floats;       // gemv scratch / dequantized gemm tiles
    ScratchBuffer activations;  // this thread's copy of Q8_0-quantized x
  };

  const KernelTable& kernels_;
  const int threads_;
  ScratchBuffer shared_activations_;  // Q8_0-quantized x shared by all threads
  std::vector<ThreadScratch> per_thread_;
  absl::flat_hash_map<const void*, PackedMatrix> packed_;  // by the source's data
};

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_MATMUL_H_
