// Kernels of engine/cuda compiled for the host against the CUDA emulation
// in include/ (cuda_runtime_api.h says what it is), one translation unit per
// kernel file (emulated_attention.cc, emulated_attention_tiles.cc,
// emulated_gemv16.cc, emulated_elementwise.cc, emulated_quant.cc,
// emulated_quant_gemm.cc, emulated_rope_store_kv.cc), behind plain types: those units rename the
// project's namespace around the kernel's source, so their argument types
// are not ours. All pointers are host memory.
#ifndef TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_KERNELS_H_
#define TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace tandem::engine::cuda::emulation {

// TileMath (engine/cuda/kernels.h).
enum class Tiles { kF32, kSplitF16, kF16 };

// PagedAttentionArgs (engine/cuda/kernels.h).
struct AttentionArgs {
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
  float* split_scratch = nullptr;
  Tiles tiles = Tiles::kF32;
  // The emulated device's shared memory a block with opting in: an A100's
  // by default.
  int64_t shared_bytes_per_block = 166912;
};

// engine/cuda/attention.cu's LaunchPagedAttention, and the split scratch it
// wants; the launch's cudaError_t.
int RunPagedAttention(const AttentionArgs& args);
int64_t PagedAttentionScratchBytes();

struct TileRun {
  bool fit = false;  // TensorCoreTilesFit; nothing ran when false
  int error = 0;     // the launch's cudaError_t
};
// engine/cuda/attention_f16.cu's TensorCoreTilesFit and
// LaunchTensorCoreAttentionTiles (args.tiles not kF32).
TileRun RunTensorCoreTiles(const AttentionArgs& args);

// GemvProduct (engine/cuda/kernels.h).
struct Product {
  const void* w = nullptr;  // rows x cols of f16 or bf16
  int64_t rows = 0;
  float* y = nullptr;  // [n_tokens][rows]
  bool add = false;
};

// engine/cuda/gemv16.cu's LaunchGemv16Group and LaunchGemv16SwiGlu, with
// RmsNorm(x) folded in when `norm_weight` is given (GemvNorm); the launch's
// cudaError_t.
int RunGemv16Group(const Product* products, int count, bool bf16, int64_t cols, const float* x,
                   int64_t n_tokens, const float* norm_weight = nullptr, float eps = 0.0f);
int RunGemv16SwiGlu(const void* gate, const void* up, bool bf16, int64_t rows, int64_t cols,
                    const float* x, int64_t n_tokens, float* out,
                    const float* norm_weight = nullptr, float eps = 0.0f);

// engine/cuda/quant_kernels.cu's launchers for the block-quantized types,
// `type` a GgmlType's value; the launch's cudaError_t. The GEMVs take x's
// RmsNorm folded in when `norm_weight` is given (GemvNorm), in launches of
// QuantGemvNormTokensPerLaunch() tokens.
int RunMatMulQuantGroup(int type, const Product* products, int count, int64_t cols, const float* x,
                        int64_t n_tokens, const float* norm_weight = nullptr, float eps = 0.0f);
int RunMatMulQuantSwiGlu(int type, const void* gate, const void* up, int64_t rows, int64_t cols,
                         const float* x, int64_t n_tokens, float* out,
                         const float* norm_weight = nullptr, float eps = 0.0f);
int64_t QuantGemvNormTokensPerLaunch();
int RunDequantizeToF16(int type, const void* w, int64_t rows, int64_t cols, void* out_f16);
// engine/cuda/quant_gemm.cu's LaunchQuantTileGemm, and the most tokens
// MatMul gives it.
int RunQuantTileGemm(int type, const void* w, int64_t rows, int64_t cols, const float* x,
                     int64_t n_tokens, float* y, bool add);
int64_t QuantTileGemmMaxTokens();
int RunEmbedRows(int type, const void* table, int64_t cols, const int32_t* tokens, int64_t n_tokens,
                 float* out);

// KvRows (engine/cuda/backend_kernels.h).
struct KvPool {
  uint8_t* base = nullptr;
  int64_t block_bytes = 0;
  int64_t k_offset = 0;
  int64_t v_offset = 0;
  int32_t block_size = 0;
  int32_t kv_dim = 0;
  bool f16 = false;
};

// engine/cuda/rope_store_kv.cu's LaunchRopeStoreKv (`neox`: RopeStyle::kNeox);
// the launch's cudaError_t.
int RunRopeStoreKv(float* q, int32_t n_head, float* k, const float* v, int32_t n_head_kv,
                   int32_t head_dim, const int32_t* positions, int32_t n_rot, bool neox,
                   const float* cos_table, const float* sin_table, const KvPool& kv,
                   const int64_t* slots, int64_t n_tokens);

// engine/cuda/kernels.cu's LaunchRmsNorm, LaunchRmsNorm16 (16-bit rows:
// bf16 when `bf16`, else f16), LaunchSwiGlu, LaunchSwiGlu16 and LaunchToF16
// / LaunchToBf16; the launch's cudaError_t.
int RunRmsNorm(const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps,
               float* y);
int RunRmsNorm16(const float* x, const float* weight, int64_t n_tokens, int64_t dim, float eps,
                 bool bf16, void* y);
int RunSwiGlu(const float* gate, const float* up, int64_t n, float* out);
int RunSwiGlu16(const float* gate, const float* up, int64_t n, bool bf16, void* out);
int RunTo16(const float* x, int64_t n, bool bf16, void* out);

// The emulation's f32 -> f16 -> f32 (include/cuda_fp16.h): its bits and
// the value they widen back to.
uint16_t HalfBits(float f);
float HalfValue(uint16_t bits);

}  // namespace tandem::engine::cuda::emulation

#endif  // TANDEM_TESTS_ENGINE_CUDA_EMULATION_EMULATED_KERNELS_H_
