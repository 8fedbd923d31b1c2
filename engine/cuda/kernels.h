// The GPU backend's kernels, as host-callable launchers on a stream. All
// pointers are device memory; shapes are row-major as in engine/model/backend.h.
// Each launcher returns the launch's error (cudaGetLastError), not the
// kernel's outcome: synchronize the stream to see that. Compiled by nvcc
// (kernels.cu, attention.cu) for sm_80 and sm_90; this header is plain C++.
#ifndef TANDEM_ENGINE_CUDA_KERNELS_H_
#define TANDEM_ENGINE_CUDA_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace tandem::engine::cuda {

// cudaSuccess when this binary holds code that `device` can run (machine
// code for its architecture, or PTX its driver can compile); otherwise the
// error, e.g. cudaErrorNoKernelImageForDevice for a GPU older than the
// build's CMAKE_CUDA_ARCHITECTURES. Makes `device` current on this thread.
cudaError_t CheckKernelImage(int device);

// Warps a GEMV (gemv16.cu, quant_kernels.cu) gives each row of a `rows`-row
// matrix: doubled from 1 up to `max_split` until rows x split reaches
// kGemvTargetWarps, so that a matrix of few rows still puts enough loads in
// flight over the GPU (one warp a row left a 2048-row matrix short of them).
inline constexpr int64_t kGemvTargetWarps = 8192;
constexpr int GemvRowSplit(int64_t rows, int max_split) {
  int split = 1;
  while (split < max_split && rows * split < kGemvTargetWarps) split *= 2;
  return split;
}

// One of the products a GEMV launch may take together (LaunchGemv16Group,
// LaunchMatMulQuantGroup): y [n_tokens][rows] = x w^T, w [rows][cols], every
// product of a launch reading the same x. Q, K and V, one launch instead of
// three: the small K and V products alone were too short to reach the
// bandwidth.
struct GemvProduct {
  const void* w = nullptr;
  int64_t rows = 0;
  float* y = nullptr;
  bool add = false;  // y += x w^T rather than y = (the same for every product of a launch)
};
inline constexpr int kMaxGemvProducts = 3;

// An RMSNorm folded into a GEMV launch's products (LaunchGemv16Group,
// LaunchMatMulQuantGroup and their SwiGLU pairs): they take x[t, :] /
// sqrt(mean(x[t, :]^2) + eps) * weight[:] (LaunchRmsNorm's) rather than x,
// with no launch or buffer for the normed rows; each launch sums its own
// tokens' squares as it reads x. `weight` [cols], 16-byte aligned.
struct GemvNorm {
  const float* weight = nullptr;
  float eps = 0.0f;
};

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight[:]; y may alias x.
cudaError_t LaunchRmsNorm(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                          float eps, float* y, cudaStream_t stream);
// LaunchRmsNorm's rows rounded to f16 (or bf16 when `bf16`) as they are
// stored, for the tensor-core GEMMs: bit for bit LaunchRmsNorm then
// LaunchToF16 (LaunchToBf16), in one launch, with no f32 rows written.
// `y` [n_tokens][dim] of 16-bit values; must not alias x.
cudaError_t LaunchRmsNorm16(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                            float eps, bool bf16, void* y, cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i]; out may alias gate.
cudaError_t LaunchSwiGlu(const float* gate, const float* up, int64_t n, float* out,
                         cudaStream_t stream);
// LaunchSwiGlu's values rounded to f16 (or bf16 when `bf16`) as they are
// stored: bit for bit LaunchSwiGlu then LaunchToF16 (LaunchToBf16), in one
// launch. `out` [n] of 16-bit values.
cudaError_t LaunchSwiGlu16(const float* gate, const float* up, int64_t n, bool bf16, void* out,
                           cudaStream_t stream);

// x[i] += y[i].
cudaError_t LaunchAdd(float* x, const float* y, int64_t n, cudaStream_t stream);

// Pairs rotated by RoPE: adjacent (x[2i], x[2i+1]) as llama, or halves
// (x[i], x[i + n_rot/2]) as NeoX / qwen2 (engine/model/rope.h).
enum class RopeStyle : int32_t { kNormal = 0, kNeox = 1 };

// Rotates x, [n_tokens][n_heads][head_dim], token t as position
// positions[t], with the tables cos/sin [max_positions][n_rot / 2]
// (RopeTable's); dimensions past n_rot are left alone.
cudaError_t LaunchRope(float* x, const int32_t* positions, int64_t n_tokens, int32_t n_heads,
                       int32_t head_dim, int32_t n_rot, RopeStyle style, const float* cos_table,
                       const float* sin_table, cudaStream_t stream);

// y[t, r] = sum_c x[t, c] * w[r, c] with w in GGUF's Q8_0 blocks (34 bytes:
// an f16 scale and 32 int8), dequantized on the fly: the decode-time GEMV.
// cols % 32 == 0.
cudaError_t LaunchMatMulQ8_0(const void* w, int64_t rows, int64_t cols, const float* x,
                             int64_t n_tokens, float* y, cudaStream_t stream);

// f32 -> f16 / bf16 (round to nearest even), for the tensor-core GEMMs.
cudaError_t LaunchToF16(const float* x, int64_t n, void* out, cudaStream_t stream);
cudaError_t LaunchToBf16(const float* x, int64_t n, void* out, cudaStream_t stream);

// The tile kernel's arithmetic: f32 on the CUDA cores; or on the tensor
// cores (attention_f16.cu), each f32 operand split into two f16 halves
// (about f32's accuracy), or rounded to f16 (about 1e-3 relative).
enum class TileMath : uint8_t { kF32, kSplitF16, kF16 };

// Paged attention over the block pool for a mixed prefill/decode batch.
// Query row r (of n_rows, [n_rows][n_head * head_dim], RoPE applied)
// attends to its sequence's KV slots [0, kv_len[r]) (causal: a row's own
// slot is the last it sees), whose blocks are block_table[table_offset[r]
// ...], slot s in block s / block_size at row s % block_size. Block b's keys
// are at kv_base + b * block_bytes + k_offset as [block_size][n_head_kv *
// head_dim] of f32 or f16 (kv_f16), values at v_offset likewise; query head
// h reads KV head h / (n_head / n_head_kv). out = softmax(q k^T /
// sqrt(head_dim)) v, online softmax (no score matrix); kv_len 0 gives
// zeros. head_dim <= 256. Rows of one sequence are consecutive and share
// table_offset: runs of them are computed together, each key/value tile
// read once per run (engine/cuda/attention.cu). Capturable in a CUDA graph:
// the launch's shape depends only on n_rows and n_head.
struct PagedAttentionArgs {
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
  const int32_t* kv_len = nullptr;        // [n_rows]
  const int32_t* table_offset = nullptr;  // [n_rows]
  const int32_t* block_table = nullptr;   // every sequence's block ids
  // PagedAttentionScratchBytes() of device memory, zeroed before its first
  // launch (each launch leaves it so), or null. With it, when n_rows *
  // n_head blocks are too few to fill the GPU (small-batch decode), each
  // row's slots are split over several blocks, the last of which merges
  // their partial results; without it, one block per row and head. Launches
  // sharing one scratch must be ordered (one stream).
  float* split_scratch = nullptr;
  // How the tile rows (prefill) are computed; rows the row kernel takes
  // are the same in every case. A tensor-core layout past
  // shared_bytes_per_block (the device's, DeviceInfo) leaves them f32.
  TileMath tiles = TileMath::kF32;
  int64_t shared_bytes_per_block = 0;
};
inline constexpr int32_t kMaxAttentionHeadDim = 256;
cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream);
// The split_scratch any launch needs (any n_rows, n_head, head_dim <= 256):
// a constant of about 2 MiB, so a backend sizes it once at start-up.
int64_t PagedAttentionScratchBytes();

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_KERNELS_H_
