// Kernels of engine/cuda compiled for the host against the CUDA emulation
// in include/ (cuda_runtime_api.h says what it is), one translation unit per
// kernel file (emulated_attention.cc, emulated_gemv16.cc), behind plain
// types: those units rename the project's namespace around the kernel's
// source, so their argument types are not ours. All pointers are host
// memory.
#ifndef TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_KERNELS_H_
#define TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace tandem::engine::cuda::emulation {

// PagedAttentionArgs (engine/cuda/kernels.h) without the split scratch,
// which the tile kernels do not use; host memory.
struct TileArgs {
  const float* q = nullptr;
  float* out = nullptr;
  int32_t n_rows = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  const uint8_t* kv_base = nullptr;
  int64_t block_bytes = 0;
  int64_t k_offset = 0;
  int64_t v_offset = 0;
  int32_t block_size = 0;
  bool kv_f16 = false;
  const int32_t* kv_len = nullptr;
  const int32_t* table_offset = nullptr;
  const int32_t* block_table = nullptr;
  bool split = true;  // TileMath::kSplitF16, else kF16
};

struct TileRun {
  bool fit = false;  // TensorCoreTilesFit; nothing ran when false
  int error = 0;     // the launch's cudaError_t
};

// TensorCoreTilesFit and LaunchTensorCoreAttentionTiles on an emulated
// device of `shared_optin_bytes` of shared memory a block.
TileRun RunTensorCoreTiles(const TileArgs& args, size_t shared_optin_bytes);

// GemvProduct (engine/cuda/kernels.h).
struct Product {
  const void* w = nullptr;  // rows x cols of f16 or bf16
  int64_t rows = 0;
  float* y = nullptr;  // [n_tokens][rows]
  bool add = false;
};

// engine/cuda/gemv16.cu's LaunchGemv16Group and LaunchGemv16SwiGlu; the
// launch's cudaError_t.
int RunGemv16Group(const Product* products, int count, bool bf16, int64_t cols, const float* x,
                   int64_t n_tokens);
int RunGemv16SwiGlu(const void* gate, const void* up, bool bf16, int64_t rows, int64_t cols,
                    const float* x, int64_t n_tokens, float* out);

}  // namespace tandem::engine::cuda::emulation

#endif  // TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_KERNELS_H_
