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

// Element e (0..255) of a Q2_K / Q3_K super-block: its qs byte and shift.
int PlaneByte(int e) { return 32 * (e / 128) + e % 32; }
int PlaneShift(int e) { return 2 * ((e % 128) / 32); }

float DotQ2K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const BlockQ2_K*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  float sum = 0;
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    int mins = 0;
    for (int j = 0; j < 16; ++j) mins += x[b].bsums[j] * (w[b].scales[j] >> 4);
    int isum = 0;
    for (int e = 0; e < kQKK; ++e) {
      const int q = (w[b].qs[PlaneByte(e)] >> PlaneShift(e)) & 3;
      isum += x[b].qs[e] * q * (w[b].scales[e / 16] & 0xF);
    }
    sum += x[b].d * H(w[b].d) * isum - x[b].d * H(w[b].dmin) * mins;
  }
  return sum;
}

float DotQ3K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const BlockQ3_K*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  float sum = 0;
  float deq[kQKK];
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    // The reference dequantizer with d = 1 gives scale * q exactly (small
    // integers), which the dot needs as integers.
    BlockQ3_K unit = w[b];
    unit.d = Fp32ToFp16(1.0f);
    DequantizeRowQ3_K(&unit, deq, kQKK);
    int isum = 0;
    for (int e = 0; e < kQKK; ++e) isum += x[b].qs[e] * static_cast<int>(deq[e]);
    sum += x[b].d * H(w[b].d) * isum;
  }
  return sum;
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7).
void ScaleMin(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

template <typename Block, bool kFiveBits>
float DotQ45K(const uint8_t* wrow, const void* xq, int64_t cols) {
  const auto* w = reinterpret_cast<const Block*>(wrow);
  const auto* x = static_cast<const BlockQ8K*>(xq);
  float sum = 0;
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    int isum = 0, mins = 0;
    for (int sub = 0; sub < 8; ++sub) {
      int sc, m;
      ScaleMin(sub, w[b].scales, &sc, &m);
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
  for (int64_t b = 0; b < cols / kQKK; ++b) {
    int isum = 0;
    for (int s = 0; s < 16; ++s) {
      int sub_sum = 0;
      for (int i = 0; i < 16; ++i) {
        const int e = 16 * s + i;
        const int half = e / 128, k = (e % 128) / 32, l = e % 32;
        const uint8_t low_byte = w[b].ql[64 * half + l + 32 * (k % 2)];
        const int low = k < 2 ? low_byte & 0xF : low_byte >> 4;
        const int high = (w[b].qh[32 * half + l] >> (2 * k)) & 3;
        sub_sum += ((low | (high << 4)) - 32) * x[b].qs[e];
      }
      isum += w[b].scales[s] * sub_sum;
    }
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
      return true;
    default:
      return false;
  }
}

int64_t QuantActivationBytes(GgmlType type, int64_t cols) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
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
    default:
      TANDEM_CHECK(false, "VecDotRow on a type without a quantized dot product")
          << GgmlTypeName(type);
      return 0;
  }
}

}  // namespace tandem::engine::cpu
