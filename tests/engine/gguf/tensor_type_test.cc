#include "engine/gguf/tensor_type.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace tandem::engine {
namespace {

TEST(TensorTypeTest, Fp16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(Fp32ToFp16(f), h) << "half bits " << h;
  }
}

TEST(TensorTypeTest, Fp16KnownValues) {
  EXPECT_EQ(Fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0xc000), -2.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
}

TEST(TensorTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFp32(0x3f80), 1.0f);
  EXPECT_EQ(Fp32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

TEST(TensorTypeTest, Q8_0RoundTripIsWithinHalfAStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(256);
  for (float& v : x) v = dist(rng);
  std::vector<BlockQ8_0> q(x.size() / 32);
  QuantizeRowQ8_0(x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  DequantizeRowQ8_0(q.data(), y.data(), x.size());
  for (size_t b = 0; b < q.size(); ++b) {
    const float d = Fp16ToFp32(q[b].d);
    for (int j = 0; j < 32; ++j) {
      EXPECT_NEAR(x[b * 32 + j], y[b * 32 + j], d * 0.5f + 1e-3f);
    }
  }
}

TEST(TensorTypeTest, UnsupportedTypesAreNamed) {
  auto s = GgmlTypeFromId(23);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("IQ4_XS"), std::string::npos);
  EXPECT_FALSE(GgmlTypeFromId(999).ok());
  EXPECT_EQ(*GgmlTypeFromId(8), GgmlType::kQ8_0);
  EXPECT_EQ(*GgmlTypeFromId(12), GgmlType::kQ4_K);
}

}  // namespace
}  // namespace tandem::engine
