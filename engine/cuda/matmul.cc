#include "engine/cuda/matmul.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/cuda/kernels.h"

namespace tandem::engine::cuda {

int64_t MatMulScratchBytes(const DeviceWeight& w, int64_t n_tokens) {
  switch (w.type) {
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return n_tokens * w.cols * 2;  // x in the weight's 16-bit type
    default:
      return 0;
  }
}

absl::Status MatMul(const Stream& stream, const DeviceWeight& w, const float* x,
                    int64_t n_tokens, float* y, DeviceBuffer& scratch) {
  if (n_tokens == 0 || w.rows == 0) return absl::OkStatus();
  const float alpha = 1.0f;
  const float beta = 0.0f;
  // Row-major y[n_tokens][rows] is column-major y^T[rows][n_tokens]: with w
  // row-major [rows][cols] read as column-major [cols][rows] and
  // transposed, y^T = w * x^T.
  const int m = static_cast<int>(w.rows);
  const int n = static_cast<int>(n_tokens);
  const int k = static_cast<int>(w.cols);
  switch (w.type) {
    case GgmlType::kF32:
      return Check(stream.blas_api().gemm_ex(stream.blas(), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data,
                                CUDA_R_32F, k, x, CUDA_R_32F, k, &beta, y, CUDA_R_32F, m,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (f32)");
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      const bool f16 = w.type == GgmlType::kF16;
      if (static_cast<int64_t>(scratch.bytes()) < MatMulScratchBytes(w, n_tokens)) {
        return absl::InvalidArgumentError("MatMul: scratch smaller than MatMulScratchBytes");
      }
      const int64_t count = n_tokens * w.cols;
      absl::Status s = Check(f16 ? LaunchToF16(x, count, scratch.data(), stream.stream())
                                 : LaunchToBf16(x, count, scratch.data(), stream.stream()),
                             "activations to 16 bits");
      if (!s.ok()) return s;
      const cudaDataType type = f16 ? CUDA_R_16F : CUDA_R_16BF;
      return Check(stream.blas_api().gemm_ex(stream.blas(), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data,
                                type, k, scratch.data(), type, k, &beta, y, CUDA_R_32F, m,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   f16 ? "cublasGemmEx (f16)" : "cublasGemmEx (bf16)");
    }
    case GgmlType::kQ8_0:
      return Check(LaunchMatMulQ8_0(w.data, w.rows, w.cols, x, n_tokens, y, stream.stream()),
                   "MatMulQ8_0");
    default:
      return absl::UnimplementedError(
          absl::StrCat("MatMul: no GPU kernel for weight type ", std::string(GgmlTypeName(w.type))));
  }
}

}  // namespace tandem::engine::cuda
