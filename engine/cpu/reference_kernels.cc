#include "engine/cpu/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/gguf/quant_formats.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cpu {
namespace {

std::vector<float> DequantizedRow(const WeightMatrix& w, int64_t r) {
  std::vector<float> row(w.cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  DequantizeRow(w.type, base + r * GgmlRowBytes(w.type, w.cols), row.data(), w.cols);
  return row;
}

}  // namespace

void MatMulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  for (int64_t r = 0; r < w.rows; ++r) {
    const std::vector<float> row = DequantizedRow(w, r);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double sum = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) sum += double{row[c]} * double{x[t * w.cols + c]};
      y[t * w.rows + r] = static_cast<float>(sum);
    }
  }
}

void QuantizeActivationsReference(const float* x, int64_t cols, std::vector<int8_t>* q,
                                  std::vector<float>* d) {
  q->assign(cols, 0);
  d->assign(cols / kQ8_0BlockSize, 0.0f);
  for (int64_t b = 0; b < cols / kQ8_0BlockSize; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < kQ8_0BlockSize; ++i) {
      amax = std::max(amax, std::fabs(x[b * kQ8_0BlockSize + i]));
    }
    (*d)[b] = amax / 127.0f;
    const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < kQ8_0BlockSize; ++i) {
      const float scaled = x[b * kQ8_0BlockSize + i] * inverse;
      (*q)[b * kQ8_0BlockSize + i] = static_cast<int8_t>(std::nearbyint(scaled));
    }
  }
}

void MatMulQ8Reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = GgmlRowBytes(w.type, w.cols);
  std::vector<int8_t> q;
  std::vector<float> d;
  for (int64_t t = 0; t < n_tokens; ++t) {
    QuantizeActivationsReference(x + t * w.cols, w.cols, &q, &d);
    for (int64_t r = 0; r < w.rows; ++r) {
      double sum = 0.0;
      for (int64_t b = 0; b < w.cols / kQ8_0BlockSize; ++b) {
        // The block's integer weights and scale.
        int32_t wi[kQ8_0BlockSize];
        uint16_t scale = 0;
        if (w.type == GgmlType::kQ4_0) {
          BlockQ4_0 block;
          std::memcpy(&block, base + r * row_bytes + b * sizeof(BlockQ4_0), sizeof(block));
          for (int i = 0; i < kQK4 / 2; ++i) {
            wi[i] = (block.qs[i] & 0x0F) - 8;
            wi[i + kQK4 / 2] = (block.qs[i] >> 4) - 8;
          }
          scale = block.d;
        } else {
          BlockQ8_0 block;
          std::memcpy(&block, base + r * row_bytes + b * sizeof(BlockQ8_0), sizeof(block));
          for (int i = 0; i < kQ8_0BlockSize; ++i) wi[i] = block.qs[i];
          scale = block.d;
        }
        int64_t isum = 0;
        for (int i = 0; i < kQ8_0BlockSize; ++i) {
          isum += int64_t{wi[i]} * int64_t{q[b * kQ8_0BlockSize + i]};
        }
        sum += double{Fp16ToFp32(scale)} * double{d[b]} * static_cast<double>(isum);
      }
      y[t * w.rows + r] = static_cast<float>(sum);
    }
  }
}

void RmsNormReference(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                      float eps, float* y) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double{x[t * dim + i]} * x[t * dim + i];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      y[t * dim + i] = static_cast<float>(x[t * dim + i] * scale * weight[i]);
    }
  }
}

void SwiGluReference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void AddReference(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace tandem::engine::cpu
