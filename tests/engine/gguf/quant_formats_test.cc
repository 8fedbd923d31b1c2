// ggml's legacy and K-quant formats: each reference dequantizer against a
// second reading of the format written the way ggml's definition walks a
// block (loops over halves, shifts and running scale indices, rather than
// one formula per element); quantizers within each type's expected error;
// the quantized-activation dot products against the dequantized weights;
// the matmul paths on every type; and the GGUF type ids.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/quant_dot.h"
#include "engine/gguf/quant_formats.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine {
namespace {

constexpr GgmlType kNewTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                  GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K,
                                  GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                                  GgmlType::kIQ4_NL};

std::vector<float> Gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Random bytes for a block, with its fp16 scales set to sane values (random
// bits could be NaN or huge).
template <typename Block>
Block RandomBlock(std::mt19937& rng) {
  Block b;
  auto* bytes = reinterpret_cast<uint8_t*>(&b);
  for (size_t i = 0; i < sizeof(Block); ++i) bytes[i] = static_cast<uint8_t>(rng());
  return b;
}

uint16_t Half(float f) { return Fp32ToFp16(f); }

// --- second readings of the K-quant layouts, as ggml's definition loops -----

void LoopQ2K(const BlockQ2_K& x, float* y) {
  const float d = Fp16ToFp32(x.d), min = Fp16ToFp32(x.dmin);
  const uint8_t* q = x.qs;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      uint8_t sc = x.scales[is++];
      float dl = d * (sc & 0xF), ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l] >> shift) & 3) - ml;
      sc = x.scales[is++];
      dl = d * (sc & 0xF);
      ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16] >> shift) & 3) - ml;
      shift += 2;
    }
    q += 32;
  }
}

void LoopQ3K(const BlockQ3_K& x, float* y) {
  // The 12 scale bytes as four u32 words, rearranged into 16 bytes.
  uint32_t aux[4];
  std::memcpy(aux, x.scales, 12);
  const uint32_t tmp = aux[2];
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  const float d_all = Fp16ToFp32(x.d);
  const uint8_t* q = x.qs;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      float dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l) {
        *y++ = dl * (((q[l] >> shift) & 3) - ((x.hmask[l] & m) ? 0 : 4));
      }
      dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l) {
        *y++ = dl * (((q[l + 16] >> shift) & 3) - ((x.hmask[l + 16] & m) ? 0 : 4));
      }
      shift += 2;
      m <<= 1;
    }
    q += 32;
  }
}

void ScaleMin(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void LoopQ45K(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, float d, float min,
              float* y) {
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    ScaleMin(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    ScaleMin(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * ((qs[l] & 0xF) + (qh != nullptr && (qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * ((qs[l] >> 4) + (qh != nullptr && (qh[l] & u2) ? 16 : 0)) - m2;
    }
    qs += 32;
    is += 2;
    u1 <<= 2;
    u2 <<= 2;
  }
}

void LoopQ6K(const BlockQ6_K& x, float* y) {
  const float d = Fp16ToFp32(x.d);
  const uint8_t* ql = x.ql;
  const uint8_t* qh = x.qh;
  const int8_t* sc = x.scales;
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

TEST(QuantFormatsTest, KQuantDequantizersMatchTheDefinitionsLoops) {
  std::mt19937 rng(3);
  float got[256], want[256];
  for (int trial = 0; trial < 50; ++trial) {
    BlockQ2_K q2 = RandomBlock<BlockQ2_K>(rng);
    q2.d = Half(0.01f * (trial + 1));
    q2.dmin = Half(0.003f * trial);
    DequantizeRowQ2_K(&q2, got, 256);
    LoopQ2K(q2, want);
    ASSERT_EQ(std::memcmp(got, want, sizeof(got)), 0) << "Q2_K trial " << trial;

    BlockQ3_K q3 = RandomBlock<BlockQ3_K>(rng);
    q3.d = Half(-0.02f * (trial + 1));
    DequantizeRowQ3_K(&q3, got, 256);
    LoopQ3K(q3, want);
    ASSERT_EQ(std::memcmp(got, want, sizeof(got)), 0) << "Q3_K trial " << trial;

    BlockQ4_K q4 = RandomBlock<BlockQ4_K>(rng);
    q4.d = Half(0.01f * (trial + 1));
    q4.dmin = Half(0.004f * trial);
    DequantizeRowQ4_K(&q4, got, 256);
    LoopQ45K(q4.scales, q4.qs, nullptr, Fp16ToFp32(q4.d), Fp16ToFp32(q4.dmin), want);
    ASSERT_EQ(std::memcmp(got, want, sizeof(got)), 0) << "Q4_K trial " << trial;

    BlockQ5_K q5 = RandomBlock<BlockQ5_K>(rng);
    q5.d = Half(0.01f * (trial + 1));
    q5.dmin = Half(0.004f * trial);
    DequantizeRowQ5_K(&q5, got, 256);
    LoopQ45K(q5.scales, q5.qs, q5.qh, Fp16ToFp32(q5.d), Fp16ToFp32(q5.dmin), want);
    ASSERT_EQ(std::memcmp(got, want, sizeof(got)), 0) << "Q5_K trial " << trial;

    BlockQ6_K q6 = RandomBlock<BlockQ6_K>(rng);
    q6.d = Half(0.001f * (trial + 1));
    DequantizeRowQ6_K(&q6, got, 256);
    LoopQ6K(q6, want);
    ASSERT_EQ(std::memcmp(got, want, sizeof(got)), 0) << "Q6_K trial " << trial;
  }
}

TEST(QuantFormatsTest, LegacyDequantizersFollowTheirDefinitions) {
  BlockQ4_0 q4;
  q4.d = Half(0.5f);
  for (int j = 0; j < 16; ++j) q4.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  BlockQ5_1 q5;
  q5.d = Half(0.25f);
  q5.m = Half(-1.0f);
  const uint32_t qh = 0x80000001u;  // element 0's and element 31's fifth bit
  std::memcpy(q5.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) q5.qs[j] = static_cast<uint8_t>(j | (j << 4));
  float y[32];
  DequantizeRowQ4_0(&q4, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j - 8));
  }
  BlockIQ4_NL nl;
  nl.d = Half(0.5f);
  for (int j = 0; j < 16; ++j) nl.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  DequantizeRowIQ4_NL(&nl, y, 32);
  const float levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * levels[j]);
    EXPECT_EQ(y[j + 16], 0.5f * levels[15 - j]);
  }
  DequantizeRowQ5_1(&q5, y, 32);
  EXPECT_EQ(y[0], 0.25f * 16 - 1.0f);
  EXPECT_EQ(y[1], 0.25f * 1 - 1.0f);
  EXPECT_EQ(y[16], 0.25f * 0 - 1.0f);
  EXPECT_EQ(y[31], 0.25f * (15 + 16) - 1.0f);
}

// Relative RMS error of a quantize -> dequantize round trip of Gaussian
// data, per type: what each format's bits allow.
TEST(QuantFormatsTest, QuantizersStayWithinEachTypesError) {
  const std::vector<float> x = Gaussian(256 * 64, 11);
  const std::vector<std::pair<GgmlType, double>> limits = {
      {GgmlType::kQ8_0, 0.01}, {GgmlType::kQ6_K, 0.03}, {GgmlType::kQ5_0, 0.06},
      {GgmlType::kQ5_1, 0.06}, {GgmlType::kQ5_K, 0.05}, {GgmlType::kQ4_0, 0.12},
      {GgmlType::kIQ4_NL, 0.11},
      {GgmlType::kQ4_1, 0.12}, {GgmlType::kQ4_K, 0.10}, {GgmlType::kQ3_K, 0.22},
      {GgmlType::kQ2_K, 0.45}};
  for (const auto& [type, limit] : limits) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(GgmlRowBytes(type, n));
    QuantizeRow(type, x.data(), q.data(), n);
    std::vector<float> y(n);
    DequantizeRow(type, q.data(), y.data(), n);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (y[i] - x[i]) * (y[i] - x[i]);
      ref += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / ref), limit) << GgmlTypeName(type);
    EXPECT_GT(std::sqrt(err / ref), limit / 20) << GgmlTypeName(type);  // really quantized
  }
}

TEST(QuantFormatsTest, TypesRoundTripThroughTheirIdsAndNames) {
  for (GgmlType type : kNewTypes) {
    absl::StatusOr<GgmlType> by_id = GgmlTypeFromId(static_cast<uint32_t>(type));
    ASSERT_TRUE(by_id.ok()) << by_id.status();
    EXPECT_EQ(*by_id, type);
    absl::StatusOr<GgmlType> by_name = GgmlTypeFromName(GgmlTypeName(type));
    ASSERT_TRUE(by_name.ok());
    EXPECT_EQ(*by_name, type);
    EXPECT_TRUE(GgmlIsQuantized(type));
  }
  EXPECT_EQ(GgmlBlockBytes(GgmlType::kQ4_K), 144);
  EXPECT_EQ(GgmlBlockSize(GgmlType::kQ4_K), 256);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kQ5_0, 64), 44);
  // Types no kernel here reads are refused by name, never misread.
  absl::StatusOr<GgmlType> iq = GgmlTypeFromId(23);
  ASSERT_FALSE(iq.ok());
  EXPECT_EQ(iq.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(iq.status().message(), ::testing::HasSubstr("IQ4_XS"));
}

// The quantized-activation dot product equals the f32 dot of the
// dequantized weights with the dequantized activations (only f32 rounding
// differs), and lies within the activation quantization's reach of the
// exact one.
TEST(QuantDotTest, MatchesTheDequantizedDot) {
  constexpr int64_t kCols = 512;
  for (GgmlType type : kNewTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    for (uint32_t seed = 1; seed <= 8; ++seed) {
      const std::vector<float> w = Gaussian(kCols, seed, 0.05f);
      const std::vector<float> x = Gaussian(kCols, 100 + seed);
      std::vector<uint8_t> wq(GgmlRowBytes(type, kCols));
      QuantizeRow(type, w.data(), wq.data(), kCols);
      std::vector<float> wd(kCols);
      DequantizeRow(type, wq.data(), wd.data(), kCols);
      std::vector<uint8_t> xq(cpu::QuantActivationBytes(type, kCols));
      cpu::QuantizeActivations(type, x.data(), kCols, xq.data());
      // The activations as the kernel sees them.
      std::vector<float> xd(kCols);
      const int64_t qk = GgmlBlockSize(type);
      for (int64_t b = 0; b < kCols / qk; ++b) {
        for (int64_t i = 0; i < qk; ++i) {
          float d;
          int8_t q;
          if (qk == kQKK) {
            const auto& blk = reinterpret_cast<const cpu::BlockQ8K*>(xq.data())[b];
            d = blk.d;
            q = blk.qs[i];
          } else if (type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1) {
            const auto& blk = reinterpret_cast<const cpu::BlockQ8_1*>(xq.data())[b];
            d = Fp16ToFp32(blk.d);
            q = blk.qs[i];
          } else {
            const auto& blk = reinterpret_cast<const BlockQ8_0*>(xq.data())[b];
            d = Fp16ToFp32(blk.d);
            q = blk.qs[i];
          }
          xd[b * qk + i] = d * q;
        }
      }
      double quantized = 0, exact = 0, magnitude = 0, drift = 0;
      for (int64_t c = 0; c < kCols; ++c) {
        quantized += double{wd[c]} * xd[c];
        exact += double{wd[c]} * x[c];
        magnitude += std::fabs(double{wd[c]} * x[c]);
        drift += std::fabs(double{wd[c]}) * std::fabs(xd[c] - x[c]);
      }
      const float got = cpu::VecDotRow(type, wq.data(), xq.data(), kCols);
      // Q4_1 / Q5_1 add the min through fp16 d * sum(q): a little more.
      const double slack = (type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1) ? 2e-3 : 2e-5;
      EXPECT_NEAR(got, quantized, slack * magnitude) << "seed " << seed;
      EXPECT_NEAR(got, exact, drift + slack * magnitude) << "seed " << seed;
    }
  }
}

// The AVX2 kernels compute the portable kernels' integer sums: equal up to
// f32 summation order, on rows of many super-blocks, for one token and for
// batches that fill a chunk of tokens and leave a partial one.
TEST(QuantDotTest, Avx2MatchesPortable) {
  if (!cpu::QuantDotAvx2Supported()) GTEST_SKIP() << "no AVX2 + FMA + F16C here";
  constexpr int64_t kCols = 4096;
  for (GgmlType type : kNewTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    for (int64_t n : {1, 11}) {
      const std::vector<float> w = Gaussian(kCols, 3 + static_cast<uint32_t>(n), 0.05f);
      std::vector<uint8_t> wq(GgmlRowBytes(type, kCols));
      QuantizeRow(type, w.data(), wq.data(), kCols);
      const int64_t x_bytes = cpu::QuantActivationBytes(type, kCols);
      std::vector<uint8_t> xq(n * x_bytes);
      std::vector<double> magnitude(n);
      for (int64_t t = 0; t < n; ++t) {
        // Token 5 is large: the scales must not overflow.
        const std::vector<float> x =
            Gaussian(kCols, 50 + static_cast<uint32_t>(t), t == 5 ? 100.0f : 1.0f);
        cpu::QuantizeActivations(type, x.data(), kCols, xq.data() + t * x_bytes);
        for (int64_t c = 0; c < kCols; ++c) magnitude[t] += std::fabs(double{w[c]} * x[c]);
      }
      std::vector<float> avx2(n * 3, -1.0f);
      cpu::VecDotRowsAvx2(type, wq.data(), xq.data(), x_bytes, n, kCols, avx2.data(), 3);
      for (int64_t t = 0; t < n; ++t) {
        const float portable = cpu::VecDotRow(type, wq.data(), xq.data() + t * x_bytes, kCols);
        EXPECT_NEAR(avx2[t * 3], portable, 1e-5 * magnitude[t]) << "n " << n << " token " << t;
        EXPECT_EQ(avx2[t * 3 + 1], -1.0f);  // only its column is written
      }
    }
  }
}

// Every matmul path on every new type: against f32 math on the dequantized
// weights, within what quantizing the activations may move.
TEST(QuantDotTest, EveryMatMulPathOnEveryType) {
  constexpr int64_t kRows = 37, kCols = 768;
  for (GgmlType type : kNewTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    const std::vector<float> wf = Gaussian(kRows * kCols, 5, 0.05f);
    const int64_t row_bytes = GgmlRowBytes(type, kCols);
    std::vector<uint8_t> wq(kRows * row_bytes);
    for (int64_t r = 0; r < kRows; ++r) {
      QuantizeRow(type, wf.data() + r * kCols, wq.data() + r * row_bytes, kCols);
    }
    std::vector<float> wd(kRows * kCols);
    for (int64_t r = 0; r < kRows; ++r) {
      DequantizeRow(type, wq.data() + r * row_bytes, wd.data() + r * kCols, kCols);
    }
    const WeightMatrix matrix = {type, wq.data(), kRows, kCols};
    for (int64_t n : {1, 3, 70}) {
      const std::vector<float> x = Gaussian(n * kCols, 9 + static_cast<uint32_t>(n));
      for (cpu::Isa isa : {cpu::Isa::kPortable, cpu::DetectIsa()}) {
        for (int threads : {1, 2}) {
          for (cpu::MatMulPath path : {cpu::MatMulPath::kGemv, cpu::MatMulPath::kGemm}) {
            cpu::MatMulRunner runner(cpu::Kernels(isa), threads);
            std::vector<float> y(n * kRows);
            runner.Run(matrix, x.data(), n, y.data(), path);
            for (int64_t t = 0; t < n; ++t) {
              for (int64_t r = 0; r < kRows; ++r) {
                double want = 0, mag = 0;
                for (int64_t c = 0; c < kCols; ++c) {
                  want += double{wd[r * kCols + c]} * x[t * kCols + c];
                  mag += std::fabs(double{wd[r * kCols + c]} * x[t * kCols + c]);
                }
                // Activation quantization moves each product by at most
                // about 1% of its size (8 bits per block).
                const double tol = path == cpu::MatMulPath::kGemm ? 2e-5 * mag : 1.2e-2 * mag;
                ASSERT_NEAR(y[t * kRows + r], want, tol)
                    << "n " << n << " isa " << cpu::IsaName(isa) << " threads " << threads
                    << " path " << static_cast<int>(path) << " t " << t << " r " << r;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem::engine
