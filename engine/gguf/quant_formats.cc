#include "engine/gguf/quant_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/gguf/tensor_type.h"

namespace tandem::engine {
namespace {

float H(uint16_t h) { return Fp16ToFp32(h); }
uint16_t ToH(float f) { return Fp32ToFp16(f); }

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void StoreU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

void PackScaleMinK4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

void PackScalesQ3K(const int8_t* scales, uint8_t* packed) {
  std::memset(packed, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int l = scales[j] + 32;  // 0..63
    if (j < 8) {
      packed[j] = static_cast<uint8_t>(l & 0xF);
    } else {
      packed[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
    }
    packed[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
  }
}

int RoundInt(float v) { return static_cast<int>(std::lround(v)); }

// x ~ scale * q - min with q in [0, nmax], scale >= 0, min >= 0 (the
// block's low end at or below zero): a grid of candidate ranges, each
// refined by least squares on its q, the lowest squared error kept.
void FitScaleMin(const float* x, int n, int nmax, float* scale, float* min) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);
  if (hi <= lo) {
    *scale = 0;
    *min = -lo;
    return;
  }
  float best_err = INFINITY, best_scale = (hi - lo) / nmax, best_min = -lo;
  for (int step = 0; step <= 10; ++step) {
    // Shrink the range a little from either end: outliers cost one level.
    const float shrink = 1.0f - 0.02f * step;
    float s = (hi - lo) * shrink / nmax;
    float m = -lo;
    for (int iter = 0; iter < 2 && s > 0; ++iter) {
      // Least squares for (s, m) given q: x = s q - m.
      double sq = 0, sqq = 0, sx = 0, sqx = 0;
      for (int i = 0; i < n; ++i) {
        const int q = std::clamp(RoundInt((x[i] + m) / s), 0, nmax);
        sq += q;
        sqq += double{1} * q * q;
        sx += x[i];
        sqx += double{1} * q * x[i];
      }
      const double det = n * sqq - sq * sq;
      if (det <= 0) break;
      const double ns = (n * sqx - sq * sx) / det;
      const double nm = (sq * sqx - sqq * sx) / det;  // x = ns q + (-nm)
      if (ns <= 0 || nm < 0) break;
      s = static_cast<float>(ns);
      m = static_cast<float>(nm);
    }
    if (s <= 0) continue;
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(RoundInt((x[i] + m) / s), 0, nmax);
      const float e = s * q - m - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_scale = s;
      best_min = m;
    }
  }
  *scale = best_scale;
  *min = best_min;
}

// x ~ scale * q with q in [-(nmax + 1), nmax]: the value of largest
// magnitude maps to -(nmax + 1) (ggml's sign trick), then least squares on
// q refines the scale. Returns the signed scale.
float FitSymmetric(const float* x, int n, int nmax) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0) return 0;
  float best_s = max / -(nmax + 1), best_err = INFINITY;
  for (int step = 0; step <= 8; ++step) {
    float s = max / -(nmax + 1) * (1.0f - 0.015f * step);
    double sqx = 0, sqq = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(RoundInt(x[i] / s), -(nmax + 1), nmax);
      sqx += double{1} * q * x[i];
      sqq += double{1} * q * q;
    }
    if (sqq > 0) s = static_cast<float>(sqx / sqq);
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(RoundInt(x[i] / s), -(nmax + 1), nmax);
      const float e = s * q - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_s = s;
    }
  }
  return best_s;
}

// Legacy blocks: the value of largest magnitude and the range.
void AbsMax(const float* x, int n, float* amax, float* max) {
  *amax = 0;
  *max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > *amax) {
      *amax = std::fabs(x[i]);
      *max = x[i];
    }
  }
}

void MinMax(const float* x, int n, float* lo, float* hi) {
  *lo = x[0];
  *hi = x[0];
  for (int i = 1; i < n; ++i) {
    *lo = std::min(*lo, x[i]);
    *hi = std::max(*hi, x[i]);
  }
}

// Element e (0..255) of a Q2_K / Q3_K super-block: its qs byte and shift.
int PlaneByte(int e) { return 32 * (e / 128) + e % 32; }
int PlaneShift(int e) { return 2 * ((e % 128) / 32); }

}  // namespace

void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void UnpackQuantsQ6K(const BlockQ6_K& block, uint8_t* q) {
  // Two halves of 128 weights, each from 64 bytes of low nibbles and 32 of
  // high bit pairs.
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = block.ql + 64 * half;
    const uint8_t* qh = block.qh + 32 * half;
    uint8_t* out = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l] = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
      out[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
      out[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
      out[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
    }
  }
}

void UnpackScalesQ3K(const uint8_t* packed, int8_t* scales) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

// --- dequantizers ------------------------------------------------------------

void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, y += kQK4) {
    const float d = H(x[b].d);
    for (int j = 0; j < kQK4 / 2; ++j) {
      y[j] = d * ((x[b].qs[j] & 0xF) - 8);
      y[j + 16] = d * ((x[b].qs[j] >> 4) - 8);
    }
  }
}

void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, y += kQK4) {
    const float d = H(x[b].d), m = H(x[b].m);
    for (int j = 0; j < kQK4 / 2; ++j) {
      y[j] = d * (x[b].qs[j] & 0xF) + m;
      y[j + 16] = d * (x[b].qs[j] >> 4) + m;
    }
  }
}

void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, y += kQK4) {
    const float d = H(x[b].d);
    const uint32_t qh = LoadU32(x[b].qh);
    for (int j = 0; j < kQK4 / 2; ++j) {
      const int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + 16)) & 1;
      y[j] = d * (((x[b].qs[j] & 0xF) | (hi0 << 4)) - 16);
      y[j + 16] = d * (((x[b].qs[j] >> 4) | (hi1 << 4)) - 16);
    }
  }
}

void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, y += kQK4) {
    const float d = H(x[b].d), m = H(x[b].m);
    const uint32_t qh = LoadU32(x[b].qh);
    for (int j = 0; j < kQK4 / 2; ++j) {
      const int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + 16)) & 1;
      y[j] = d * ((x[b].qs[j] & 0xF) | (hi0 << 4)) + m;
      y[j + 16] = d * ((x[b].qs[j] >> 4) | (hi1 << 4)) + m;
    }
  }
}

void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = H(x[b].d), dmin = H(x[b].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const uint8_t sc = x[b].scales[e / 16];
      const int q = (x[b].qs[PlaneByte(e)] >> PlaneShift(e)) & 3;
      y[e] = d * (sc & 0xF) * q - dmin * (sc >> 4);
    }
  }
}

void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t n) {
  int8_t scales[16];
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = H(x[b].d);
    UnpackScalesQ3K(x[b].scales, scales);
    for (int e = 0; e < kQKK; ++e) {
      const int low = (x[b].qs[PlaneByte(e)] >> PlaneShift(e)) & 3;
      const int hbit = (x[b].hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
      y[e] = d * scales[e / 16] * (low - (hbit ? 0 : 4));
    }
  }
}

void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = H(x[b].d), dmin = H(x[b].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const int sub = e / 32;  // 0..7
      uint8_t sc, m;
      ScaleMinK4(sub, x[b].scales, &sc, &m);
      const uint8_t byte = x[b].qs[32 * (e / 64) + e % 32];
      const int q = sub % 2 == 0 ? byte & 0xF : byte >> 4;
      y[e] = d * sc * q - dmin * m;
    }
  }
}

void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = H(x[b].d), dmin = H(x[b].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const int sub = e / 32;
      uint8_t sc, m;
      ScaleMinK4(sub, x[b].scales, &sc, &m);
      const uint8_t byte = x[b].qs[32 * (e / 64) + e % 32];
      const int hbit = (x[b].qh[e % 32] >> sub) & 1;
      const int q = (sub % 2 == 0 ? byte & 0xF : byte >> 4) | (hbit << 4);
      y[e] = d * sc * q - dmin * m;
    }
  }
}

void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, y += kQKK) {
    const float d = H(x[b].d);
    for (int e = 0; e < kQKK; ++e) {
      const int half = e / 128, k = (e % 128) / 32, l = e % 32;
      const uint8_t low_byte = x[b].ql[64 * half + l + 32 * (k % 2)];
      const int low = k < 2 ? low_byte & 0xF : low_byte >> 4;
      const int high = (x[b].qh[32 * half + l] >> (2 * k)) & 3;
      y[e] = d * x[b].scales[e / 16] * ((low | (high << 4)) - 32);
    }
  }
}

void DequantizeRowIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, y += kQK4) {
    const float d = H(x[b].d);
    for (int j = 0; j < kQK4 / 2; ++j) {
      y[j] = d * kIq4NlValues[x[b].qs[j] & 0xF];
      y[j + 16] = d * kIq4NlValues[x[b].qs[j] >> 4];
    }
  }
}

// --- quantizers --------------------------------------------------------------

void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, x += kQK4) {
    float amax, max;
    AbsMax(x, kQK4, &amax, &max);
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = ToH(d);
    for (int j = 0; j < kQK4 / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

namespace {

// Index of the IQ4_NL level nearest to v (the levels ascend).
int NearestIq4NlLevel(float v) {
  int best = 0;
  for (int i = 1; i < 16; ++i) {
    if (std::fabs(v - kIq4NlValues[i]) < std::fabs(v - kIq4NlValues[best])) best = i;
  }
  return best;
}

}  // namespace

void QuantizeRowIQ4_NL(const float* x, BlockIQ4_NL* y, int64_t n) {
  constexpr int kTries = 7;  // candidate scales each side of the extreme's
  for (int64_t b = 0; b < n / kQK4; ++b, x += kQK4) {
    float amax, max;
    AbsMax(x, kQK4, &amax, &max);
    uint8_t best_q[kQK4] = {};
    float best_d = 0, best_err = std::numeric_limits<float>::infinity();
    for (int t = -kTries; t <= kTries && amax > 0; ++t) {
      // The extreme value lands on the table's first level (-127) moved by t.
      const float inv = static_cast<float>(kIq4NlValues[0] + t) / max;
      uint8_t q[kQK4];
      double sum_xv = 0, sum_vv = 0;
      for (int j = 0; j < kQK4; ++j) {
        q[j] = static_cast<uint8_t>(NearestIq4NlLevel(inv * x[j]));
        const double v = kIq4NlValues[q[j]];
        sum_xv += x[j] * v;
        sum_vv += v * v;
      }
      // The least-squares scale for these levels, rounded as it is stored.
      const float d = H(ToH(static_cast<float>(sum_xv / sum_vv)));
      float err = 0;
      for (int j = 0; j < kQK4; ++j) {
        const float e = x[j] - d * kIq4NlValues[q[j]];
        err += e * e;
      }
      if (err < best_err) {
        best_err = err;
        best_d = d;
        std::memcpy(best_q, q, kQK4);
      }
    }
    y[b].d = ToH(best_d);
    for (int j = 0; j < kQK4 / 2; ++j) {
      y[b].qs[j] = static_cast<uint8_t>(best_q[j] | (best_q[j + 16] << 4));
    }
  }
}

void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, x += kQK4) {
    float lo, hi;
    MinMax(x, kQK4, &lo, &hi);
    const float d = (hi - lo) / 15;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = ToH(d);
    y[b].m = ToH(lo);
    for (int j = 0; j < kQK4 / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, x += kQK4) {
    float amax, max;
    AbsMax(x, kQK4, &amax, &max);
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = ToH(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK4 / 2; ++j) {
      const int q0 = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int q1 = std::min(31, static_cast<int>(x[j + 16] * id + 16.5f));
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    StoreU32(y[b].qh, qh);
  }
}

void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4; ++b, x += kQK4) {
    float lo, hi;
    MinMax(x, kQK4, &lo, &hi);
    const float d = (hi - lo) / 31;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = ToH(d);
    y[b].m = ToH(lo);
    uint32_t qh = 0;
    for (int j = 0; j < kQK4 / 2; ++j) {
      const int q0 = std::min(31, static_cast<int>((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(31, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    StoreU32(y[b].qh, qh);
  }
}

void QuantizeRowQ2_K(const float* x, BlockQ2_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float scale[16], min[16], max_scale = 0, max_min = 0;
    for (int s = 0; s < 16; ++s) {
      FitScaleMin(x + 16 * s, 16, 3, &scale[s], &min[s]);
      max_scale = std::max(max_scale, scale[s]);
      max_min = std::max(max_min, min[s]);
    }
    const float d = max_scale / 15, dmin = max_min / 15;
    y[b].d = ToH(d);
    y[b].dmin = ToH(dmin);
    const float dq = H(y[b].d), dminq = H(y[b].dmin);
    std::memset(y[b].qs, 0, sizeof(y[b].qs));
    for (int s = 0; s < 16; ++s) {
      const int ls = dq > 0 ? std::clamp(RoundInt(scale[s] / dq), 0, 15) : 0;
      const int lm = dminq > 0 ? std::clamp(RoundInt(min[s] / dminq), 0, 15) : 0;
      y[b].scales[s] = static_cast<uint8_t>(ls | (lm << 4));
      const float dl = dq * ls, ml = dminq * lm;
      for (int i = 0; i < 16; ++i) {
        const int e = 16 * s + i;
        const int q = dl > 0 ? std::clamp(RoundInt((x[e] + ml) / dl), 0, 3) : 0;
        y[b].qs[PlaneByte(e)] |= static_cast<uint8_t>(q << PlaneShift(e));
      }
    }
  }
}

void QuantizeRowQ3_K(const float* x, BlockQ3_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float scale[16], max_scale = 0;
    for (int s = 0; s < 16; ++s) {
      scale[s] = FitSymmetric(x + 16 * s, 16, 3);
      if (std::fabs(scale[s]) > std::fabs(max_scale)) max_scale = scale[s];
    }
    const float d = max_scale / -32;
    y[b].d = ToH(d);
    const float dq = H(y[b].d);
    int8_t ls[16];
    for (int s = 0; s < 16; ++s) {
      ls[s] = static_cast<int8_t>(dq != 0 ? std::clamp(RoundInt(scale[s] / dq), -32, 31) : 0);
    }
    PackScalesQ3K(ls, y[b].scales);
    std::memset(y[b].qs, 0, sizeof(y[b].qs));
    std::memset(y[b].hmask, 0, sizeof(y[b].hmask));
    for (int e = 0; e < kQKK; ++e) {
      const float dl = dq * ls[e / 16];
      const int q = dl != 0 ? std::clamp(RoundInt(x[e] / dl), -4, 3) + 4 : 4;  // 0..7
      y[b].qs[PlaneByte(e)] |= static_cast<uint8_t>((q & 3) << PlaneShift(e));
      if (q >> 2) {
        y[b].hmask[e % 32] |= static_cast<uint8_t>(1 << (4 * (e / 128) + (e % 128) / 32));
      }
    }
  }
}

namespace {

// Q4_K and Q5_K share their scales: 8 sub-blocks of 32, 6-bit scale and
// min each under the super-block's d and dmin. Returns the q of each
// element (0..nmax) and fills d, dmin and the packed scales.
void QuantizeK4Scales(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out,
                      uint8_t* packed, uint8_t* q) {
  float scale[8], min[8], max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    FitScaleMin(x + 32 * s, 32, nmax, &scale[s], &min[s]);
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, min[s]);
  }
  *d_out = ToH(max_scale / 63);
  *dmin_out = ToH(max_min / 63);
  const float dq = H(*d_out), dminq = H(*dmin_out);
  uint8_t ls[8], lm[8];
  for (int s = 0; s < 8; ++s) {
    ls[s] = static_cast<uint8_t>(dq > 0 ? std::clamp(RoundInt(scale[s] / dq), 0, 63) : 0);
    lm[s] = static_cast<uint8_t>(dminq > 0 ? std::clamp(RoundInt(min[s] / dminq), 0, 63) : 0);
    const float dl = dq * ls[s], ml = dminq * lm[s];
    for (int i = 0; i < 32; ++i) {
      const int e = 32 * s + i;
      q[e] = static_cast<uint8_t>(dl > 0 ? std::clamp(RoundInt((x[e] + ml) / dl), 0, nmax) : 0);
    }
  }
  PackScaleMinK4(ls, lm, packed);
}

}  // namespace

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    QuantizeK4Scales(x, 15, &y[b].d, &y[b].dmin, y[b].scales, q);
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        y[b].qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
      }
    }
  }
}

void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n) {
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    QuantizeK4Scales(x, 31, &y[b].d, &y[b].dmin, y[b].scales, q);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        const int q0 = q[64 * g + l], q1 = q[64 * g + 32 + l];
        y[b].qs[32 * g + l] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
        y[b].qh[l] |= static_cast<uint8_t>(((q0 >> 4) << (2 * g)) | ((q1 >> 4) << (2 * g + 1)));
      }
    }
  }
}

void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float scale[16], max_scale = 0;
    for (int s = 0; s < 16; ++s) {
      scale[s] = FitSymmetric(x + 16 * s, 16, 31);
      if (std::fabs(scale[s]) > std::fabs(max_scale)) max_scale = scale[s];
    }
    const float d = max_scale / -128;
    y[b].d = ToH(d);
    const float dq = H(y[b].d);
    for (int s = 0; s < 16; ++s) {
      y[b].scales[s] =
          static_cast<int8_t>(dq != 0 ? std::clamp(RoundInt(scale[s] / dq), -128, 127) : 0);
    }
    std::memset(y[b].ql, 0, sizeof(y[b].ql));
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int e = 0; e < kQKK; ++e) {
      const float dl = dq * y[b].scales[e / 16];
      const int q = (dl != 0 ? std::clamp(RoundInt(x[e] / dl), -32, 31) : 0) + 32;  // 0..63
      const int half = e / 128, k = (e % 128) / 32, l = e % 32;
      uint8_t& low = y[b].ql[64 * half + l + 32 * (k % 2)];
      low |= static_cast<uint8_t>(k < 2 ? (q & 0xF) : (q & 0xF) << 4);
      y[b].qh[32 * half + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    }
  }
}

}  // namespace tandem::engine
