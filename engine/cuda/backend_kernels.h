// The CUDA backend's data-movement kernels (engine/cuda/cuda_backend.cc):
// bias, the KV store by slot mapping, row gathers, the logits reduction and
// the KV slot moves of a SHIFT window. Same conventions as kernels.h: device
// pointers, row-major shapes, launchers returning the launch's error.
#ifndef TANDEM_ENGINE_CUDA_BACKEND_KERNELS_H_
#define TANDEM_ENGINE_CUDA_BACKEND_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace tandem::engine::cuda {

// x[t, :] += bias[:] for t < n_rows; x: [n_rows, dim].
cudaError_t LaunchAddBias(float* x, const float* bias, int64_t n_rows, int64_t dim,
                          cudaStream_t stream);

// Where a layer's K and V rows live in the block pool (PagedKvView's
// fields): slot s is row s % block_size of block s / block_size, its key at
// base + block * block_bytes + k_offset + row * kv_dim * elem, its value at
// v_offset likewise; elem is 4 (f32) or 2 (f16).
struct KvRows {
  uint8_t* base = nullptr;
  int64_t block_bytes = 0;
  int64_t k_offset = 0;
  int64_t v_offset = 0;
  int32_t block_size = 0;
  int32_t kv_dim = 0;
  bool f16 = false;
};

// k[t] and v[t] ([n_tokens, kv_dim] f32) into slot slots[t], converted to
// the pool's element type (f16: round to nearest even); rows whose slot is
// negative (a padded batch's) store nothing.
cudaError_t LaunchStoreKv(const KvRows& kv, const float* k, const float* v,
                          const int64_t* slots, int64_t n_tokens, cudaStream_t stream);

// out[r, :] = x[rows[r], :] for r < n_rows.
cudaError_t LaunchGatherRows(const float* x, int64_t dim, const int32_t* rows, int64_t n_rows,
                             float* out, cudaStream_t stream);

// The largest top-k a reduced row holds (kMaxReducedTop, engine/model/backend.h).
inline constexpr int32_t kReducedTop = 20;

// One logits row reduced (LogitsSummary's fields, in its layout).
struct ReducedRow {
  float max;
  float log_sum;
  float target_logit;
  int32_t n_top;
  int32_t top_ids[kReducedTop];
  float top_logprobs[kReducedTop];
};

// For each row r of logits [n_rows, vocab] with top_k[r] >= 0: max and
// log_sum = log(sum(exp(logit - max))) (the sum in double; a row of -inf
// gives max 0 and log_sum +inf, as the CPU's ComputeLogSoftmaxStats), the
// top_k[r] largest logits as ids and logprobs (logit - max - log_sum),
// largest first, ties to the lower id, and the logit of target[r] (when
// >= 0). Rows with top_k[r] < 0 are left alone. Two launches: each row's
// slices (of 4096 logits or more, at most 32) reduced by a block each into
// `scratch`, then merged by a warp per row; scratch holds
// ReduceLogitsScratchBytes(n_rows).
cudaError_t LaunchReduceLogits(const float* logits, int64_t n_rows, int64_t vocab,
                               const int32_t* top_k, const int32_t* target, void* scratch,
                               ReducedRow* out, cudaStream_t stream);
int64_t ReduceLogitsScratchBytes(int64_t n_rows);

// The KV rows of slots[i] (i < n), every one of a layer, copied out: the
// keys as f32 into keys [n, kv_dim], the values as they are (kv_dim * elem
// bytes each) into values.
cudaError_t LaunchGatherKvRows(const KvRows& kv, const int64_t* slots, int64_t n, float* keys,
                               uint8_t* values, cudaStream_t stream);
// The reverse: keys (f32, converted to the pool's type) and values into
// slots[i].
cudaError_t LaunchScatterKvRows(const KvRows& kv, const int64_t* slots, int64_t n,
                                const float* keys, const uint8_t* values, cudaStream_t stream);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_BACKEND_KERNELS_H_
