// Portable kernels: plain C++ for the baseline target, used on CPUs without
// AVX-512 and as the second implementation the tests compare against. Loops
// keep several independent partial sums so the compiler can vectorize them.
#include <cmath>
#include <cstring>

#include "engine/cpu/kernels.h"
#include "engine/cpu/quant_dot.h"

// -O2's "very cheap" vectorizer cost model skips loops of unknown trip count,
// which is every loop here; ask for the dynamic model in this file only.
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

namespace tandem::engine::cpu {
namespace {

constexpr int kLanes = 8;

float DotF32(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += a[k + j] * b[k + j];
  }
  float tail = 0.0f;
  for (; k < n; ++k) tail += a[k] * b[k];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) +
         tail;
}

float SumSquares(const float* x, int64_t n) { return DotF32(x, x, n); }

// fp16 -> fp32 without branches, so loops over it vectorize: the exponent
// and mantissa shifted into f32 position read as a float 2^112 too small
// (subnormal halves become f32 subnormals, scaled exactly), and inf/NaN keep
// an all-ones exponent. Bit-identical to Fp16ToFp32.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t bits = static_cast<uint32_t>(h & 0x7fff) << 13;
  float scaled;
  std::memcpy(&scaled, &bits, sizeof(scaled));
  scaled *= 0x1p112f;
  uint32_t out;
  std::memcpy(&out, &scaled, sizeof(out));
  const uint32_t special = 0u - static_cast<uint32_t>(bits >= (0x7c00u << 13));  // inf/NaN
  out = (out & ~special) | ((bits | 0x7f800000u) & special) | sign;
  float f;
  std::memcpy(&f, &out, sizeof(f));
  return f;
}

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void DequantizeRowsPortable(GgmlType type, const uint8_t* src, int64_t row_bytes,
                            int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + r * row_bytes;
    float* out = dst + r * cols;
    switch (type) {
      case GgmlType::kF32:
        std::memcpy(out, row, cols * sizeof(float));
        break;
      case GgmlType::kF16:
        for (int64_t c = 0; c < cols; ++c) out[c] = HalfToFloat(LoadU16(row + 2 * c));
        break;
      case GgmlType::kBF16:
        for (int64_t c = 0; c < cols; ++c) out[c] = Bf16ToFp32(LoadU16(row + 2 * c));
        break;
      case GgmlType::kQ8_0:
        for (int64_t b = 0; b < cols / kQ8_0BlockSize; ++b) {
          const uint8_t* block = row + b * sizeof(BlockQ8_0);
          const float d = HalfToFloat(LoadU16(block));
          const auto* qs = reinterpret_cast<const int8_t*>(block + 2);
          for (int i = 0; i < kQ8_0BlockSize; ++i) out[b * kQ8_0BlockSize + i] = d * qs[i];
        }
        break;
      default:  // the other block formats: their reference dequantizers
        DequantizeRow(type, row, out, cols);
        break;
    }
  }
}

// Rows of Q8_0 weights against quantized activations: exact int32 block dot
// products, scaled by d_w * d_x in f32, as the AVX-512 kernel does.
void GemvQ8Portable(const GemvArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t nblocks = a.cols / kQ8_0BlockSize;
  const Q8Activations& xq = *a.xq;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = a.w + r * a.row_bytes;
    for (int64_t t = 0; t < a.n; ++t) {
      const int8_t* xqs = xq.qs + t * xq.pairs * 64;
      const float* xscale = xq.scale + t * xq.pairs * 16;
      float acc = 0.0f;
      for (int64_t b = 0; b < nblocks; ++b) {
        const uint8_t* block = row + b * sizeof(BlockQ8_0);
        const auto* wqs = reinterpret_cast<const int8_t*>(block + 2);
        const int8_t* xb = xqs + b * kQ8_0BlockSize;
        int32_t isum = 0;
        for (int i = 0; i < kQ8_0BlockSize; ++i) isum += int32_t{wqs[i]} * int32_t{xb[i]};
        const float dw = HalfToFloat(LoadU16(block));
        acc += static_cast<float>(isum) * (dw * xscale[b * 8]);
      }
      a.y[t * a.ldy + r] = acc;
    }
  }
}

void GemvPortable(const GemvArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.type == GgmlType::kQ8_0) {
    GemvQ8Portable(a, row_begin, row_end);
    return;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = a.w + r * a.row_bytes;
    const float* wf = a.scratch;
    if (a.type == GgmlType::kF32 && reinterpret_cast<uintptr_t>(row) % alignof(float) == 0) {
      wf = reinterpret_cast<const float*>(row);
    } else {
      DequantizeRowsPortable(a.type, row, a.row_bytes, 1, a.cols, a.scratch);
    }
    for (int64_t t = 0; t < a.n; ++t) {
      a.y[t * a.ldy + r] = DotF32(wf, a.x + t * a.cols, a.cols);
    }
  }
}

void QuantizeQ8Portable(const float* x, int64_t n, int64_t cols, const Q8Activations& out) {
  const int64_t nblocks = cols / kQ8_0BlockSize;
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    int8_t* qs = out.qs + t * out.pairs * 64;
    int32_t* bias = out.bias + t * out.pairs * 16;
    float* scale = out.scale + t * out.pairs * 16;
    for (int64_t b = 0; b < 2 * out.pairs; ++b) {
      int8_t* q = qs + b * kQ8_0BlockSize;
      if (b >= nblocks) {  // padding block of an odd count
        std::memset(q, 0, kQ8_0BlockSize);
        for (int j = 0; j < 8; ++j) {
          bias[b * 8 + j] = 0;
          scale[b * 8 + j] = 0.0f;
        }
        continue;
      }
      const float* xb = xt + b * kQ8_0BlockSize;
      float amax = 0.0f;
      for (int i = 0; i < kQ8_0BlockSize; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
      // The same IEEE operations, in the same order, as the AVX-512 quantizer.
      const float d = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int i = 0; i < kQ8_0BlockSize; ++i) {
        q[i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
        sum += q[i];
      }
      for (int j = 0; j < 8; ++j) {
        bias[b * 8 + j] = -16 * sum;
        scale[b * 8 + j] = d;
      }
    }
  }
}

void RmsNormPortable(const float* x, const float* weight, int64_t n_tokens, int64_t dim,
                     float eps, float* y) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * dim;
    float* yt = y + t * dim;
    const float scale = 1.0f / std::sqrt(SumSquares(xt, dim) / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yt[i] = xt[i] * scale * weight[i];
  }
}

void SwiGluPortable(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void AddPortable(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

const KernelTable& PortableKernels() {
  static const KernelTable table = {
      .isa = Isa::kPortable,
      .gemv = GemvPortable,
      .quantize_q8 = QuantizeQ8Portable,
      .dequantize_rows = DequantizeRowsPortable,
      .rms_norm = RmsNormPortable,
      .swiglu = SwiGluPortable,
      .add = AddPortable,
      .quant_dot = VecDotRows,
  };
  return table;
}

}  // namespace tandem::engine::cpu
