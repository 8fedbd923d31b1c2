#include "engine/cuda/matmul.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/cuda/gemv16.h"
#include "engine/cuda/kernels.h"
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

// A quantized weight above kQuantGemvMaxTokens is first dequantized whole
// into the scratch's front, the f16 activations after it.
int64_t DequantizedWeightBytes(const DeviceWeight& w) { return w.rows * w.cols * 2; }

// y = x w^T on the tensor cores for a 16-bit weight `w16` (f16, or bf16
// when `bf16`) [rows][cols]: x converted to the weight's type into `x16`
// (n_tokens * cols * 2 bytes), accumulation in f32. The one GEMM call site
// for both stored 16-bit weights and dequantized quantized ones.
absl::Status Gemm16(const Stream& stream, const void* w16, bool bf16, int64_t rows, int64_t cols,
                    const float* x, int64_t n_tokens, void* x16, float* y) {
  const int64_t count = n_tokens * cols;
  absl::Status s = Check(bf16 ? LaunchToBf16(x, count, x16, stream.stream())
                              : LaunchToF16(x, count, x16, stream.stream()),
                         "activations to 16 bits");
  if (!s.ok()) return s;
  const float alpha = 1.0f;
  const float beta = 0.0f;
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

}  // namespace

int64_t MatMulScratchBytes(const DeviceWeight& w, int64_t n_tokens) {
  switch (w.type) {
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return n_tokens * w.cols * 2;  // x in the weight's 16-bit type
    default:
      if (IsBlockQuantized(w.type) && n_tokens > kQuantGemvMaxTokens) {
        return DequantizedWeightBytes(w) + n_tokens * w.cols * 2;
      }
      return 0;
  }
}

absl::Status MatMul(const Stream& stream, const DeviceWeight& w, const float* x,
                    int64_t n_tokens, float* y, DeviceBuffer& scratch) {
  if (n_tokens == 0 || w.rows == 0) return absl::OkStatus();
  if (static_cast<int64_t>(scratch.bytes()) < MatMulScratchBytes(w, n_tokens)) {
    return absl::InvalidArgumentError("MatMul: scratch smaller than MatMulScratchBytes");
  }
  switch (w.type) {
    case GgmlType::kF32: {
      const float alpha = 1.0f;
      const float beta = 0.0f;
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
        return Check(LaunchGemv16(w.data, w.type == GgmlType::kBF16, w.rows, w.cols, x, n_tokens,
                                  y, stream.stream()),
                     "Gemv16");
      }
      return Gemm16(stream, w.data, w.type == GgmlType::kBF16, w.rows, w.cols, x, n_tokens,
                    scratch.data(), y);
    default:
      break;
  }
  if (!IsBlockQuantized(w.type)) {
    return absl::UnimplementedError(
        absl::StrCat("MatMul: no GPU kernel for weight type ", std::string(GgmlTypeName(w.type))));
  }
  if (n_tokens <= kQuantGemvMaxTokens) {
    const std::string what =
        absl::StrCat("LaunchMatMulQuant (", std::string(GgmlTypeName(w.type)), ")");
    return Check(LaunchMatMulQuant(w.type, w.data, w.rows, w.cols, x, n_tokens, y,
                                   stream.stream()),
                 what.c_str());
  }
  // Prefill: the weight dequantized to f16 (each call: no f16 copy is kept
  // resident, which would undo the quantization's memory saving), then the
  // tensor cores.
  void* w16 = scratch.data();
  void* x16 = static_cast<uint8_t*>(scratch.data()) + DequantizedWeightBytes(w);
  const std::string what =
      absl::StrCat("LaunchDequantizeToF16 (", std::string(GgmlTypeName(w.type)), ")");
  const absl::Status s = Check(
      LaunchDequantizeToF16(w.type, w.data, w.rows, w.cols, w16, stream.stream()), what.c_str());
  if (!s.ok()) return s;
  return Gemm16(stream, w16, /*bf16=*/false, w.rows, w.cols, x, n_tokens, x16, y);
}

}  // namespace tandem::engine::cuda
