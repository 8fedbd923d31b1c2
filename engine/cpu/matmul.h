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
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/kernels.h"

namespace tandem::engine::cpu {

enum class MatMulPath {
  kAuto,  // gemv below kGemmMinTokens tokens, gemm from there on
  kGemv,
  kGemm,
};

// From this many tokens on, kAuto uses sgemm (the matrix-vector kernels
// re-read each weight tile per 4 tokens; sgemm blocks for cache).
inline constexpr int64_t kGemmMinTokens = 16;

// Below this many multiply-adds a call runs on the calling thread: forking
// the pool costs more than it saves (tiny models decode at >10k tokens/s).
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

  const KernelTable& kernels() const { return kernels_; }
  int threads() const { return threads_; }

 private:
  void RunGemv(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);
  void RunGemm(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);
  int ThreadsFor(int64_t macs) const;

  const KernelTable& kernels_;
  const int threads_;
  ScratchBuffer activations_;             // Q8_0-quantized x
  std::vector<ScratchBuffer> per_thread_;  // gemv scratch / dequantized tiles
};

}  // namespace tandem::engine::cpu

#endif  // TANDEM_ENGINE_CPU_MATMUL_H_
