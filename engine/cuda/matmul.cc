#include "engine/cuda/matmul.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/cuda/gemv16.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/quant_gemm.h"
#include "engine/cuda/quant_kernels.h"

namespace tandem::engine::cuda {
namespace {

bool IsBlockQuantized(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

// On the tensor cores the scratch holds x in 16 bits at its front (what
// every product of a group multiplies) and, for a quantized weight above
// kQuantTileGemmMaxTokens, the weight dequantized whole to f16 after it.
int64_t DequantizedWeightBytes(const DeviceWeight& w) { return w.rows * w.cols * 2; }
int64_t SixteenBitActivationBytes(int64_t cols, int64_t n_tokens) { return n_tokens * cols * 2; }

// y = x16 w^T on the tensor cores for a 16-bit weight `w16` (f16, or bf16
// when `bf16`) [rows][cols] and x16 [n_tokens][cols] of the same type,
// accumulation in f32. The one GEMM call site for both stored 16-bit
// weights and dequantized quantized ones. With `add`, y += the product
// (beta 1).
absl::Status Gemm16(const Stream& stream, const void* w16, bool bf16, int64_t rows, int64_t cols,
                    const void* x16, int64_t n_tokens, float* y, bool add) {
  const float alpha = 1.0f;
  const float beta = add ? 1.0f : 0.0f;
  // Row-major y[n_tokens][rows] is column-major y^T[rows][n_tokens]: with w
  // row-major [rows][cols] read as column-major [cols][rows] and
  // transposed, y^T = w * x^T.
  const int m = static_cast<int>(rows);
  const int n = static_cast<int>(n_tokens);
  const int k = static_cast<int>(cols);
  const cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  return Check(stream.blas_api().gemm_ex(stream.blas(), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha,
                                         w16, type, k, x16, type, k, &beta, y, CUDA_R_32F, m,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               bf16 ? "cublasGemmEx (bf16)" : "cublasGemmEx (f16)");
}

// The 16-bit type the tensor cores take `w` in: bf16 for a bf16 weight, f16
// for an f16 one and for a block-quantized one (dequantized to f16).
bool MultipliesInBf16(const DeviceWeight& w) { return w.type == GgmlType::kBF16; }

// x [n_tokens][cols] into the scratch's front in w's 16-bit type, through
// the norm first when there is one (one launch either way; the normed f32
// rows are not written).
absl::Status ActivationsTo16(const Stream& stream, const DeviceWeight& w, const float* x,
                             int64_t n_tokens, const RmsNormed* norm, DeviceBuffer& scratch) {
  const bool bf16 = MultipliesInBf16(w);
  if (norm != nullptr) {
    return Check(LaunchRmsNorm16(x, norm->weight, n_tokens, w.cols, norm->eps, bf16, scratch.data(),
                                 stream.stream()),
                 "RmsNorm to 16 bits");
  }
  const int64_t count = n_tokens * w.cols;
  return Check(bf16 ? LaunchToBf16(x, count, scratch.data(), stream.stream())
                    : LaunchToF16(x, count, scratch.data(), stream.stream()),
               "activations to 16 bits");
}

// Which GEMV takes `w` at n_tokens of x, if any.
enum class Gemv { kNone, k16, kQuant };
Gemv GemvFor(const DeviceWeight& w, const float* x, int64_t n_tokens) {
  if (w.type == GgmlType::kF16 || w.type == GgmlType::kBF16) {
    return Gemv16Takes(w.data, w.cols, x, n_tokens) ? Gemv::k16 : Gemv::kNone;
  }
  return IsBlockQuantized(w.type) && n_tokens >= 1 && n_tokens <= kQuantGemvMaxTokens
             ? Gemv::kQuant
             : Gemv::kNone;
}

// Whether one GEMV launch takes a and b together.
bool OneLaunch(const DeviceWeight& a, const DeviceWeight& b, const float* x, int64_t n_tokens) {
  return a.type == b.type && a.cols == b.cols && GemvFor(a, x, n_tokens) != Gemv::kNone &&
         GemvFor(b, x, n_tokens) != Gemv::kNone;
}

// Whether the GEMV that takes `w` folds a norm in at n_tokens: the 16-bit
// one at every count it takes; the quantized one up to one launch's
// kQuantGemvNormTokensPerLaunch, past which a norm launch costs less than
// reading the weights once more per launch.
bool FoldsNorm(const DeviceWeight& w, const float* x, int64_t n_tokens) {
  switch (GemvFor(w, x, n_tokens)) {
    case Gemv::k16:
      return true;
    case Gemv::kQuant:
      return n_tokens <= kQuantGemvNormTokensPerLaunch;
    default:
      return false;
  }
}

// The norm folded into the GEMV launches, when `fold`; otherwise x
// normed into norm->normed first (when there is a norm), and `x` becomes
// that.
absl::Status NormUnlessFolded(const Stream& stream, const RmsNormed* norm, bool fold, int64_t cols,
                              int64_t n_tokens, const float*& x, GemvNorm& folded) {
  if (norm == nullptr) return absl::OkStatus();
  if (fold && reinterpret_cast<uintptr_t>(norm->weight) % 16 == 0) {
    folded = {.weight = norm->weight, .eps = norm->eps};
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Check(
      LaunchRmsNorm(x, norm->weight, n_tokens, cols, norm->eps, norm->normed, stream.stream()),
      "RmsNorm"));
  x = norm->normed;
  return absl::OkStatus();
}

// Check for a launch on weights of `type`, naming both; the name is built
// only for an error, not on every launch of every step.
absl::Status CheckLaunch(cudaError_t error, const char* launch, GgmlType type) {
  if (error == cudaSuccess) return absl::OkStatus();
  return Check(error, absl::StrCat(launch, " (", std::string(GgmlTypeName(type)), ")").c_str());
}

// The GEMV launch of `count` products whose weights OneLaunch takes
// together, like w's, with `norm` folded in when not null.
absl::Status LaunchGemv(const Stream& stream, const DeviceWeight& w, const GemvProduct* products,
                        int count, const float* x, int64_t n_tokens, const GemvNorm* norm) {
  if (GemvFor(w, x, n_tokens) == Gemv::k16) {
    return CheckLaunch(LaunchGemv16Group(products, count, w.type == GgmlType::kBF16, w.cols, x,
                                         n_tokens, stream.stream(), norm),
                       "LaunchGemv16Group", w.type);
  }
  return CheckLaunch(
      LaunchMatMulQuantGroup(w.type, products, count, w.cols, x, n_tokens, stream.stream(), norm),
      "LaunchMatMulQuantGroup", w.type);
}

// Whether MatMul takes `w` at n_tokens to the tensor cores whatever x's
// alignment: a 16-bit weight past the 16-bit GEMV's tokens, a
// block-quantized one past the tile GEMM's.
bool OnTensorCores(const DeviceWeight& w, int64_t n_tokens) {
  if (w.type == GgmlType::kF16 || w.type == GgmlType::kBF16) return n_tokens > kGemv16MaxTokens;
  return IsBlockQuantized(w.type) && n_tokens > kQuantTileGemmMaxTokens;
}

// Whether the `count` products of one x all go to the tensor cores and
// multiply one 16-bit x: then x goes to 16 bits once (normed on the way),
// not once a product.
bool ShareSixteenBitX(const DeviceWeight* w, int count, int64_t n_tokens) {
  for (int i = 0; i < count; ++i) {
    if (!OnTensorCores(w[i], n_tokens) || w[i].cols != w[0].cols ||
        MultipliesInBf16(w[i]) != MultipliesInBf16(w[0])) {
      return false;
    }
  }
  return count > 0;
}

// Whether gate and up (rows alike, for the SwiGLU of their sums) share
// one 16-bit x on the tensor cores.
bool GateAndUpOnTensorCores(const DeviceWeight& gate, const DeviceWeight& up, int64_t n_tokens) {
  const DeviceWeight both[] = {gate, up};
  return gate.rows == up.rows && ShareSixteenBitX(both, 2, n_tokens);
}

// y = x16 w^T, x16 at the scratch's front (ActivationsTo16), for a weight
// OnTensorCores takes: the 16-bit weight as it is, a quantized one
// dequantized to f16 after x16 first (each call: no f16 copy is kept
// resident, which would undo the quantization's memory saving).
absl::Status ProductFrom16(const Stream& stream, const DeviceWeight& w, int64_t n_tokens, float* y,
                           DeviceBuffer& scratch, bool add) {
  const void* x16 = scratch.data();
  if (!IsBlockQuantized(w.type)) {
    return Gemm16(stream, w.data, MultipliesInBf16(w), w.rows, w.cols, x16, n_tokens, y, add);
  }
  void* w16 = static_cast<uint8_t*>(scratch.data()) + SixteenBitActivationBytes(w.cols, n_tokens);
  RETURN_IF_ERROR(
      CheckLaunch(LaunchDequantizeToF16(w.type, w.data, w.rows, w.cols, w16, stream.stream()),
                  "LaunchDequantizeToF16", w.type));
  return Gemm16(stream, w16, /*bf16=*/false, w.rows, w.cols, x16, n_tokens, y, add);
}

// Every product of a group ShareSixteenBitX takes, of x (normed when
// `norm` is given).
absl::Status ProductsOnTensorCores(const Stream& stream, const DeviceWeight* w, float* const* y,
                                   int count, const float* x, int64_t n_tokens,
                                   DeviceBuffer& scratch, const RmsNormed* norm) {
  for (int i = 0; i < count; ++i) {
    if (static_cast<int64_t>(scratch.bytes()) < TensorCoreScratchBytes(w[i], n_tokens)) {
      return absl::InvalidArgumentError("MatMul: scratch smaller than MatMulScratchBytes");
    }
  }
  RETURN_IF_ERROR(ActivationsTo16(stream, w[0], x, n_tokens, norm, scratch));
  for (int i = 0; i < count; ++i) {
    RETURN_IF_ERROR(ProductFrom16(stream, w[i], n_tokens, y[i], scratch, /*add=*/false));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t MatMulScratchBytes(const DeviceWeight& w, int64_t n_tokens) {
  switch (w.type) {
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return TensorCoreScratchBytes(w, n_tokens);
    default:
      if (IsBlockQuantized(w.type) && n_tokens > kQuantTileGemmMaxTokens) {
        return TensorCoreScratchBytes(w, n_tokens);
      }
      return 0;
  }
}

int64_t TensorCoreScratchBytes(const DeviceWeight& w, int64_t n_tokens) {
  return SixteenBitActivationBytes(w.cols, n_tokens) +
         (IsBlockQuantized(w.type) ? DequantizedWeightBytes(w) : 0);
}

absl::Status MatMulOnTensorCores(const Stream& stream, const DeviceWeight& w, const float* x,
                                 int64_t n_tokens, float* y, DeviceBuffer& scratch, bool add) {
  if (n_tokens == 0 || w.rows == 0) return absl::OkStatus();
  if (static_cast<int64_t>(scratch.bytes()) < TensorCoreScratchBytes(w, n_tokens)) {
    return absl::InvalidArgumentError(
        "MatMulOnTensorCores: scratch smaller than TensorCoreScratchBytes");
  }
  if (w.type != GgmlType::kF16 && w.type != GgmlType::kBF16 && !IsBlockQuantized(w.type)) {
    return absl::InvalidArgumentError(absl::StrCat("MatMulOnTensorCores: weight type ",
                                                   std::string(GgmlTypeName(w.type)),
                                                   " is neither 16-bit nor block-quantized"));
  }
  RETURN_IF_ERROR(ActivationsTo16(stream, w, x, n_tokens, /*norm=*/nullptr, scratch));
  return ProductFrom16(stream, w, n_tokens, y, scratch, add);
}

absl::Status MatMul(const Stream& stream, const DeviceWeight& w, const float* x, int64_t n_tokens,
                    float* y, DeviceBuffer& scratch, bool add) {
  if (n_tokens == 0 || w.rows == 0) return absl::OkStatus();
  if (static_cast<int64_t>(scratch.bytes()) < MatMulScratchBytes(w, n_tokens)) {
    return absl::InvalidArgumentError("MatMul: scratch smaller than MatMulScratchBytes");
  }
  // The one product as a GEMV launch takes it.
  const GemvProduct product{.w = w.data, .rows = w.rows, .y = y, .add = add};
  switch (w.type) {
    case GgmlType::kF32: {
      const float alpha = 1.0f;
      const float beta = add ? 1.0f : 0.0f;
      // Column-major view as in Gemm16: y^T = w * x^T.
      const int m = static_cast<int>(w.rows);
      const int n = static_cast<int>(n_tokens);
      const int k = static_cast<int>(w.cols);
      return Check(
          stream.blas_api().gemm_ex(stream.blas(), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha,
                                    w.data, CUDA_R_32F, k, x, CUDA_R_32F, k, &beta, y, CUDA_R_32F,
                                    m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (f32)");
    }
    case GgmlType::kF16:
    case GgmlType::kBF16:
      // Decode: the weight streamed once, the activations left in f32.
      if (Gemv16Takes(w.data, w.cols, x, n_tokens)) {
        return Check(LaunchGemv16Group(&product, 1, w.type == GgmlType::kBF16, w.cols, x, n_tokens,
                                       stream.stream()),
                     "Gemv16");
      }
      return MatMulOnTensorCores(stream, w, x, n_tokens, y, scratch, add);
    default:
      break;
  }
  if (!IsBlockQuantized(w.type)) {
    return absl::UnimplementedError(
        absl::StrCat("MatMul: no GPU kernel for weight type ", std::string(GgmlTypeName(w.type))));
  }
  if (n_tokens <= kQuantGemvMaxTokens) {
    return CheckLaunch(
        LaunchMatMulQuantGroup(w.type, &product, 1, w.cols, x, n_tokens, stream.stream()),
        "LaunchMatMulQuant", w.type);
  }
  if (n_tokens <= kQuantTileGemmMaxTokens) {
    return CheckLaunch(
        LaunchQuantTileGemm(w.type, w.data, w.rows, w.cols, x, n_tokens, y, add, stream.stream()),
        "LaunchQuantTileGemm", w.type);
  }
  // Prefill: the weight dequantized whole, then cuBLAS.
  return MatMulOnTensorCores(stream, w, x, n_tokens, y, scratch, add);
}

absl::Status MatMulGroup(const Stream& stream, const DeviceWeight* w, float* const* y, int count,
                         const float* x, int64_t n_tokens, DeviceBuffer& scratch,
                         const RmsNormed* norm) {
  if (count == 0 || n_tokens == 0) return absl::OkStatus();
  // On the tensor cores, x goes to 16 bits once for all (normed on the
  // way).
  if (ShareSixteenBitX(w, count, n_tokens)) {
    return ProductsOnTensorCores(stream, w, y, count, x, n_tokens, scratch, norm);
  }
  // Folded where every product goes to a GEMV that folds it: each launch
  // (Q4_K_M's Q and K, then its Q6_K V) sums x's squares for itself.
  bool fold = true;
  for (int i = 0; i < count; ++i) fold = fold && FoldsNorm(w[i], x, n_tokens);
  GemvNorm folded;
  RETURN_IF_ERROR(NormUnlessFolded(stream, norm, fold, w[0].cols, n_tokens, x, folded));
  const GemvNorm* launch_norm = folded.weight != nullptr ? &folded : nullptr;
  for (int i = 0; i < count;) {
    if (GemvFor(w[i], x, n_tokens) == Gemv::kNone) {
      RETURN_IF_ERROR(MatMul(stream, w[i], x, n_tokens, y[i], scratch));
      ++i;
      continue;
    }
    int n = 1;
    while (i + n < count && n < kMaxGemvProducts && OneLaunch(w[i], w[i + n], x, n_tokens)) ++n;
    GemvProduct products[kMaxGemvProducts];
    for (int k = 0; k < n; ++k) {
      products[k] = {.w = w[i + k].data, .rows = w[i + k].rows, .y = y[i + k]};
    }
    RETURN_IF_ERROR(LaunchGemv(stream, w[i], products, n, x, n_tokens, launch_norm));
    i += n;
  }
  return absl::OkStatus();
}

absl::Status MatMulSwiGlu(const Stream& stream, const DeviceWeight& gate, const DeviceWeight& up,
                          const float* x, int64_t n_tokens, float* gate_out, float* up_out,
                          DeviceBuffer& scratch, const RmsNormed* norm) {
  if (n_tokens == 0 || gate.rows == 0) return absl::OkStatus();
  if (GateAndUpOnTensorCores(gate, up, n_tokens)) {
    const DeviceWeight both[] = {gate, up};
    float* const outs[] = {gate_out, up_out};
    RETURN_IF_ERROR(ProductsOnTensorCores(stream, both, outs, 2, x, n_tokens, scratch, norm));
    return Check(LaunchSwiGlu(gate_out, up_out, n_tokens * gate.rows, gate_out, stream.stream()),
                 "SwiGlu");
  }
  const bool one_launch = gate.rows == up.rows && OneLaunch(gate, up, x, n_tokens);
  GemvNorm folded;
  RETURN_IF_ERROR(NormUnlessFolded(stream, norm, one_launch && FoldsNorm(gate, x, n_tokens),
                                   gate.cols, n_tokens, x, folded));
  const GemvNorm* launch_norm = folded.weight != nullptr ? &folded : nullptr;
  if (one_launch) {
    if (GemvFor(gate, x, n_tokens) == Gemv::k16) {
      return CheckLaunch(
          LaunchGemv16SwiGlu(gate.data, up.data, gate.type == GgmlType::kBF16, gate.rows, gate.cols,
                             x, n_tokens, gate_out, stream.stream(), launch_norm),
          "LaunchGemv16SwiGlu", gate.type);
    }
    return CheckLaunch(LaunchMatMulQuantSwiGlu(gate.type, gate.data, up.data, gate.rows, gate.cols,
                                               x, n_tokens, gate_out, stream.stream(), launch_norm),
                       "LaunchMatMulQuantSwiGlu", gate.type);
  }
  RETURN_IF_ERROR(MatMul(stream, gate, x, n_tokens, gate_out, scratch));
  RETURN_IF_ERROR(MatMul(stream, up, x, n_tokens, up_out, scratch));
  return Check(LaunchSwiGlu(gate_out, up_out, n_tokens * gate.rows, gate_out, stream.stream()),
               "SwiGlu");
}

absl::Status FeedForward(const Stream& stream, const DeviceWeight& gate, const DeviceWeight& up,
                         const DeviceWeight& down, const float* x, int64_t n_tokens,
                         float* gate_out, float* up_out, float* y, DeviceBuffer& scratch,
                         const RmsNormed* norm) {
  if (n_tokens == 0) return absl::OkStatus();
  if (GateAndUpOnTensorCores(gate, up, n_tokens) && OnTensorCores(down, n_tokens) &&
      down.cols == gate.rows) {
    if (static_cast<int64_t>(scratch.bytes()) < TensorCoreScratchBytes(down, n_tokens)) {
      return absl::InvalidArgumentError("FeedForward: scratch smaller than MatMulScratchBytes");
    }
    const DeviceWeight both[] = {gate, up};
    float* const outs[] = {gate_out, up_out};
    RETURN_IF_ERROR(ProductsOnTensorCores(stream, both, outs, 2, x, n_tokens, scratch, norm));
    // Down's x, in its 16-bit type at the scratch's front, once gate and up
    // are done with theirs.
    RETURN_IF_ERROR(Check(LaunchSwiGlu16(gate_out, up_out, n_tokens * gate.rows,
                                         MultipliesInBf16(down), scratch.data(), stream.stream()),
                          "SwiGlu to 16 bits"));
    return ProductFrom16(stream, down, n_tokens, y, scratch, /*add=*/true);
  }
  RETURN_IF_ERROR(MatMulSwiGlu(stream, gate, up, x, n_tokens, gate_out, up_out, scratch, norm));
  return MatMul(stream, down, gate_out, n_tokens, y, scratch, /*add=*/true);
}

}  // namespace tandem::engine::cuda
