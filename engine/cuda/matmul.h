// The GPU backend's matrix products: y[t, r] = sum_c x[t, c] * w[r, c] on a
// Stream, every pointer device memory. F32 weights through cuBLAS in full
// f32; F16 and BF16 weights through a GEMV that streams the weight at 1-8
// tokens (engine/cuda/gemv16.h), else cublasGemmEx on the tensor cores (the
// activations converted to the weight's type, accumulation in f32); the
// block-quantized types (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) through the
// dequantize-on-the-fly GEMV for decode-sized batches, the tile GEMM that
// dequantizes into shared memory for the tensor cores up to
// kQuantTileGemmMaxTokens (engine/cuda/quant_gemm.h), and above that
// dequantized to f16 in scratch and multiplied as F16.
#ifndef TANDEM_ENGINE_CUDA_MATMUL_H_
#define TANDEM_ENGINE_CUDA_MATMUL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/device.h"
#include "engine/cuda/kernels.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cuda {

// A weight resident on the device, laid out as GGUF stores it.
struct DeviceWeight {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Up to this many tokens a quantized weight goes through the GEMV, which
// reads it once per launch but does its f32 math on the CUDA cores, so its
// cost grows with the tokens; past it the tensor cores take the products.
inline constexpr int64_t kQuantGemvMaxTokens = 16;

// Bytes of scratch MatMul needs for `n_tokens` rows of x against `w`.
int64_t MatMulScratchBytes(const DeviceWeight& w, int64_t n_tokens);

// MatMul's tensor-core path at any n_tokens, for a 16-bit or block-quantized
// `w`: x rounded to the weight's 16-bit type at the scratch's front (f16
// for the quantized ones, whose weight is then dequantized whole to f16
// after it) and cuBLAS,
// with `add` y += the product. MatMul takes it past the GEMVs' sizes (and
// the tile GEMM's); the products bench times it at every size.
int64_t TensorCoreScratchBytes(const DeviceWeight& w, int64_t n_tokens);
absl::Status MatMulOnTensorCores(const Stream& stream, const DeviceWeight& w, const float* x,
                                 int64_t n_tokens, float* y, DeviceBuffer& scratch,
                                 bool add = false);

// Queues the product on `stream`; `scratch` holds MatMulScratchBytes. With
// `add`, y += x w^T (the GEMV adds to y as it stores, cuBLAS with beta 1).
// Unimplemented for weight types without a GPU kernel yet.
absl::Status MatMul(const Stream& stream, const DeviceWeight& w, const float* x, int64_t n_tokens,
                    float* y, DeviceBuffer& scratch, bool add = false);

// An RMSNorm of the products' x (Backend::NormMatMuls): its weight
// ([cols]) and eps, and where the normed rows go when the products do not
// fold it in (`normed`, [n_tokens][cols], may be x).
struct RmsNormed {
  const float* weight = nullptr;
  float eps = 0.0f;
  float* normed = nullptr;
};

// The products of one x (Q, K and V): y[i] = x w[i]^T for i < count. Each
// run of consecutive weights that one GEMV launch takes together (the same
// type and columns, at most kMaxGemvProducts, a GEMV-sized n_tokens) is one
// launch; the rest go through MatMul. Where every product goes to the
// tensor cores in one 16-bit type, x is rounded to it once for all of them
// rather than once a product. `scratch` as MatMul's for each. With `norm`,
// the products of RmsNorm(x): folded into the GEMV launches (kernels.h's
// GemvNorm, each launch summing x's squares itself) where GEMVs take every
// product, the quantized one up to kQuantGemvNormTokensPerLaunch tokens;
// on the tensor cores normed as x is rounded to 16 bits, in the same launch
// (LaunchRmsNorm16); else normed into norm->normed first. Only that last
// case writes norm->normed.
absl::Status MatMulGroup(const Stream& stream, const DeviceWeight* w, float* const* y, int count,
                         const float* x, int64_t n_tokens, DeviceBuffer& scratch,
                         const RmsNormed* norm = nullptr);

// gate_out = silu(x gate^T) * (x up^T), [n_tokens][gate.rows]: one GEMV
// launch reading the two side by side where it takes both, else the two
// products (the up product into `up_out`; on the tensor cores as a
// MatMulGroup of two) and SwiGLU, with equal results. With `norm`, of
// RmsNorm(x), as MatMulGroup.
absl::Status MatMulSwiGlu(const Stream& stream, const DeviceWeight& gate, const DeviceWeight& up,
                          const float* x, int64_t n_tokens, float* gate_out, float* up_out,
                          DeviceBuffer& scratch, const RmsNormed* norm = nullptr);

// The feed-forward block (Backend::FeedForward): y += SwiGLU(x) down^T,
// SwiGLU(x) = silu(x gate^T) * (x up^T), with `norm` of RmsNorm(x). Where
// gate, up and down all go to the tensor cores, the SwiGLU is rounded to
// down's 16-bit type as it is stored (LaunchSwiGlu16), which is what down
// multiplies: no f32 SwiGLU rows are written, and gate_out holds the gate
// product. Otherwise MatMulSwiGlu into gate_out (up_out as its), then MatMul
// adding into y. Either way bit for bit the same y. `scratch` as MatMul's
// for each weight; y may be x.
absl::Status FeedForward(const Stream& stream, const DeviceWeight& gate, const DeviceWeight& up,
                         const DeviceWeight& down, const float* x, int64_t n_tokens,
                         float* gate_out, float* up_out, float* y, DeviceBuffer& scratch,
                         const RmsNormed* norm = nullptr);

}  // namespace tandem::engine::cuda

#endif  // TANDEM_ENGINE_CUDA_MATMUL_H_
