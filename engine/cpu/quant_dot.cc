#include "engine/cpu/quant_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"

namespace tandem::engine::cpu {
namespace {

float H(uint16_t h) { return Fp16ToFp32(h); }

int NearestInt(float v) { return static_cast<int>(std::nearbyint(v)); }

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q8_0 / Q8_1 activations: d = max|x| / 127 (stored fp16), q = round(x / d).
template <typename Block>
void QuantizeQ8Legacy(const float* x, int64_t cols, Block* y) {
  for (int64_t b = 0; b < cols / kQK4; ++b, x += kQK4) {
    float amax = 0;
    for (int i = 0; i < kQK4; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    y[b].d = Fp32ToFp16(d);
    int sum = 0;
    for (int i = 0; i < kQK4; ++i) {
      y[b].qs[i] = static_cast<int8_t>(NearestInt(x[i] * id));
      sum += y[b].qs[i];
    }
    if constexpr (sizeof(Block) == sizeof(BlockQ8_1)) y[b].s = Fp32ToFp16(d * sum);
  }
}

// Q8_K activations: the value of largest magnitude maps to -127.
void QuantizeQ8K(const float* x, int64_t cols, BlockQ8K* y) {
  for (int64_t b = 0; b < cols / kQKK; ++b, x += kQKK) {
    float amax = 0, max = 0;
    for (int i = 0; i < kQKK; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    }
    if (amax == 0) {
      std::memset(&y[b], 0, sizeof(BlockQ8K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQKK; ++i) {
      y[b].qs[i] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[i])));
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * j + i];
      y[b].bsums[j] = static_cast<int16_t>(sum);
    }
    y[b].d = 1.0f / iscale;
  }
}

// Legacy weights: the 32 quants of a block as integers, centred for the
// symmetric types (Q4_0: q - 8, Q5_0: q - 16).
template <typename Block, int kBits, bool kSymmetric>
void UnpackLegacy(const Block& w, int* q) {
  [[maybe_unused]] uint32_t qh = 0;
  if constexpr (kBits == 5) qh = LoadU32(w.qh);
  for (int j = 0; j < kQK4 / 2; ++j) {
    int lo = w.qs[j] & 0xF, hi = w.qs[j] >> 4;
    if constexpr (kBits == 5) {
      lo |= static_cast<int>((qh >> j) & 1) << 4;
      hi |= static_cast<int>((qh >> (j + 16)) & 1) << 4;
    }
    const int centre = kSymmetric ? (1 << (kBits - 1)) : 0;
    q[j] = lo - centre;
    q[j + 16] = hi - centre;
  }
}

template <typename Block, int kBits>
float DotSymmetric(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const Block*>(wrow);
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  float sum = 0;
  int q[kQK4];
  for (int64_t b = 0; b < cols / kQK4; ++b) {
    UnpackLegacy<Block, kBits, true>(w[b], q);
    int isum = 0;
    for (int i = 0; i < kQK4; ++i) isum += q[i] * x[b].qs[i];
    sum += static_cast<float>(isum) * (H(w[b].d) * H(x[b].d));
  }
  return sum;
}

// IQ4_NL: the table's levels times Q8_0 activations.
float DotIq4Nl(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const BlockIQ4_NL*>(wrow);
  const auto* x = static_cast<const BlockQ8_0*>(xq);
  float sum = 0;
  for (int64_t b = 0; b < cols / kQK4; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK4 / 2; ++j) {
      isum += kIq4NlValues[w[b].qs[j] & 0xF] * x[b].qs[j];
      isum += kIq4NlValues[w[b].qs[j] >> 4] * x[b].qs[j + 16];
    }
    sum += static_cast<float>(isum) * (H(w[b].d) * H(x[b].d));
  }
  return sum;
}

template <typename Block, int kBits>
float DotWithMin(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const Block*>(wrow);
  const auto* x = static_cast<const BlockQ8_1*>(xq);
  float sum = 0;
  int q[kQK4];
  for (int64_t b = 0; b < cols / kQK4; ++b) {
    UnpackLegacy<Block, kBits, false>(w[b], q);
    int isum = 0;
    for (int i = 0; i < kQK4; ++i) isum += q[i] * x[b].qs[i];
    sum += static_cast<float>(isum) * (H(w[b].d) * H(x[b].d)) + H(w[b].m) * H(x[b].s);
  }
  return sum;
}


// Q2_K / Q3_K: the 2-bit planes of a super-block as 256 small integers in
// element order (each 128-half: 32 bytes, four planes of 32 elements).
void UnpackPlanes(const uint8_t* qs, int8_t* q) {
  for (int half = 0; half < 2; ++half) {
    for (int plane = 0; plane < 4; ++plane) {
      int8_t* out = q + 128 * half + 32 * plane;
      for (int l = 0; l < 32; ++l) {
        out[l] = static_cast<int8_t>((qs[32 * half + l] >> (2 * plane)) & 3);
      }
    }
  }
}

// sum of q * x over each of the 16 sub-blocks of 16.
void SubBlockSums(const int8_t* q, const int8_t* x, int* sums) {
  for (int s = 0; s < 16; ++s) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += q[16 * s + i] * x[16 * s + i];
    sums[s] = sum;
  }
}

float DotQ2K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const BlockQ2_K*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  float sum = 0;
  int8_t q[kQKK];
  int sums[16];
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    int mins = 0;
    for (int j = 0; j < 16; ++j) mins += x[b].bsums[j] * (w[b].scales[j] >> 4);
    UnpackPlanes(w[b].qs, q);
    SubBlockSums(q, x[b].qs, sums);
    int isum = 0;
    for (int s = 0; s < 16; ++s) isum += (w[b].scales[s] & 0xF) * sums[s];
    sum += x[b].d * H(w[b].d) * isum - x[b].d * H(w[b].dmin) * mins;
  }
  return sum;
}

float DotQ3K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const BlockQ3_K*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  float sum = 0;
  int8_t q[kQKK];
  int sums[16];
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    UnpackPlanes(w[b].qs, q);
    // The high bit clear means 4 less.
    for (int e = 0; e < kQKK; ++e) {
      const int hbit = (w[b].hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
      q[e] = static_cast<int8_t>(q[e] - (hbit ? 0 : 4));
    }
    SubBlockSums(q, x[b].qs, sums);
    int8_t scales[16];
    UnpackScalesQ3K(w[b].scales, scales);
    int isum = 0;
    for (int s = 0; s < 16; ++s) isum += scales[s] * sums[s];
    sum += x[b].d * H(w[b].d) * isum;
  }
  return sum;
}

template <typename Block, bool kFiveBits>
float DotQ45K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const Block*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  float sum = 0;
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    int isum = 0, mins = 0;
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t sc, m;
      ScaleMinK4(sub, w[b].scales, &sc, &m);
      mins += m * (x[b].bsums[2 * sub] + x[b].bsums[2 * sub + 1]);
      int sub_sum = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = w[b].qs[32 * (sub / 2) + l];
        int q = sub % 2 == 0 ? byte & 0xF : byte >> 4;
        if constexpr (kFiveBits) q |= ((w[b].qh[l] >> sub) & 1) << 4;
        sub_sum += q * x[b].qs[32 * sub + l];
      }
      isum += sc * sub_sum;
    }
    sum += x[b].d * H(w[b].d) * isum - x[b].d * H(w[b].dmin) * mins;
  }
  return sum;
}

float DotQ6K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const BlockQ6_K*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  float sum = 0;
  uint8_t unsigned_q[kQKK];
  int8_t q[kQKK];
  int sums[16];
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    UnpackQuantsQ6K(w[b], unsigned_q);
    for (int e = 0; e < kQKK; ++e) q[e] = static_cast<int8_t>(unsigned_q[e] - 32);
    SubBlockSums(q, x[b].qs, sums);
    int isum = 0;
    for (int s = 0; s < 16; ++s) isum += w[b].scales[s] * sums[s];
    sum += x[b].d * H(w[b].d) * isum;
  }
  return sum;
}

}  // namespace

bool HasQuantDot(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kIQ4_NL:
      return true;
    default:
      return false;
  }
}

int64_t QuantActivationBytes(GgmlType type, int64_t cols) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kIQ4_NL:
      return cols / kQK4 * static_cast<int64_t>(sizeof(BlockQ8_0));
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
      return cols / kQK4 * static_cast<int64_t>(sizeof(BlockQ8_1));
    default:
      return cols / kQKK * static_cast<int64_t>(sizeof(BlockQ8K));
  }
}

void QuantizeActivations(GgmlType type, const float* x, int64_t cols, void* out) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kIQ4_NL:
      QuantizeQ8Legacy(x, cols, static_cast<BlockQ8_0*>(out));
      return;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
      QuantizeQ8Legacy(x, cols, static_cast<BlockQ8_1*>(out));
      return;
    default:
      QuantizeQ8K(x, cols, static_cast<BlockQ8K*>(out));
      return;
  }
}

float VecDotRow(GgmlType type, const uint8_t* w, const void* xq, int64_t cols) {
  switch (type) {
    case GgmlType::kQ4_0: return DotSymmetric<BlockQ4_0, 4>(w, xq, cols);
    case GgmlType::kQ5_0: return DotSymmetric<BlockQ5_0, 5>(w, xq, cols);
    case GgmlType::kQ4_1: return DotWithMin<BlockQ4_1, 4>(w, xq, cols);
    case GgmlType::kQ5_1: return DotWithMin<BlockQ5_1, 5>(w, xq, cols);
    case GgmlType::kQ2_K: return DotQ2K(w, xq, cols);
    case GgmlType::kQ3_K: return DotQ3K(w, xq, cols);
    case GgmlType::kQ4_K: return DotQ45K<BlockQ4_K, false>(w, xq, cols);
    case GgmlType::kQ5_K: return DotQ45K<BlockQ5_K, true>(w, xq, cols);
    case GgmlType::kQ6_K: return DotQ6K(w, xq, cols);
    case GgmlType::kIQ4_NL: return DotIq4Nl(w, xq, cols);
    default:
      TANDEM_CHECK(false, "VecDotRow on a type without a quantized dot product")
          << GgmlTypeName(type);
      return 0;
  }
}

void VecDotRows(GgmlType type, const uint8_t* w, const uint8_t* xq, int64_t x_bytes, int64_t n,
                int64_t cols, float* y, int64_t ldy) {
  for (int64_t t = 0; t < n; ++t) y[t * ldy] = VecDotRow(type, w, xq + t * x_bytes, cols);
}

}  // namespace tandem::engine::cpu
