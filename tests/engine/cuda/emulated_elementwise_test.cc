// engine/cuda/kernels.cu's RMSNorms, SwiGLU and conversions to 16 bits,
// their own source run on the CPU under the CUDA emulation (emulation/):
// the f32 rows against RmsNorm in double, and the 16-bit rows the
// tensor-core products take (LaunchRmsNorm16, x normed and rounded in one
// launch; LaunchSwiGlu16, the down product's x) bit for bit the f32 rows
// rounded, as LaunchRmsNorm (LaunchSwiGlu) then LaunchToF16 / LaunchToBf16
// give them and as the CPU rounds. Rows of whole float4s (one thread per
// float4, and rows longer than the 1024 threads' kept registers, their
// output aligned for four values a store or not: the same sums, so the
// same scale) and rows of any length (the scalar kernel). In every build:
// no GPU or nvcc needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/gguf/tensor_type.h"
#include "tests/engine/cuda/emulated_test_util.h"
#include "tests/engine/cuda/emulation/emulated_kernels.h"

namespace tandem::engine::cuda {
namespace {

namespace emu = emulation;

constexpr float kEps = 1e-5f;

// Lengths of a row: whole float4s with fewer threads than the block's
// most, 130 floats (not whole float4s: the scalar kernel) and past the
// 1024 threads' four kept float4s each.
const int64_t kDims[] = {256, 130, 4 * (4 * 1024 + 40)};

uint16_t Rounded(float v, bool bf16) { return bf16 ? Fp32ToBf16(v) : Fp32ToFp16(v); }

TEST(EmulatedElementwiseTest, RmsNormMatchesTheReference) {
  std::mt19937 rng(11);
  for (const int64_t dim : kDims) {
    const int64_t tokens = dim > 4096 ? 2 : 5;
    SCOPED_TRACE(testing::Message() << "dim " << dim << " tokens " << tokens);
    const std::vector<float> x = TokensOfManySizes(tokens, dim, rng);
    const std::vector<float> weight = RandomVector(dim, rng, 1.5f);
    std::vector<float> y(x.size(), -7.0f);
    ASSERT_EQ(emu::RunRmsNorm(x.data(), weight.data(), tokens, dim, kEps, y.data()), 0);
    const std::vector<float> want = Normed(x, dim, weight, kEps);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], want[i], 1e-5 * std::abs(want[i]) + 1e-7) << "at " << i;
    }
    // In place, as the forward pass may ask.
    std::vector<float> in_place = x;
    ASSERT_EQ(emu::RunRmsNorm(in_place.data(), weight.data(), tokens, dim, kEps, in_place.data()),
              0);
    EXPECT_EQ(in_place, y);
  }
}

TEST(EmulatedElementwiseTest, SixteenBitRowsAreTheF32RowsRounded) {
  std::mt19937 rng(12);
  for (const bool bf16 : {false, true}) {
    for (const int64_t dim : kDims) {
      const int64_t tokens = dim > 4096 ? 2 : 5;
      SCOPED_TRACE(testing::Message() << (bf16 ? "bf16" : "f16") << " dim " << dim);
      const std::vector<float> x = TokensOfManySizes(tokens, dim, rng);
      const std::vector<float> weight = RandomVector(dim, rng, 1.5f);
      std::vector<float> normed(x.size());
      ASSERT_EQ(emu::RunRmsNorm(x.data(), weight.data(), tokens, dim, kEps, normed.data()), 0);
      // Rounded in a launch of their own, as the products did before.
      std::vector<uint16_t> converted(x.size(), 0xdead);
      ASSERT_EQ(emu::RunTo16(normed.data(), std::ssize(normed), bf16, converted.data()), 0);
      // In the norm's launch, aligned for four values a store; and one
      // value past that (a store a value, the same sums).
      std::vector<uint16_t> fused(x.size() + 1, 0xdead);
      ASSERT_EQ(emu::RunRmsNorm16(x.data(), weight.data(), tokens, dim, kEps, bf16, fused.data()),
                0);
      std::vector<uint16_t> shifted(x.size() + 1, 0xdead);
      ASSERT_EQ(
          emu::RunRmsNorm16(x.data(), weight.data(), tokens, dim, kEps, bf16, shifted.data() + 1),
          0);
      EXPECT_EQ(fused.back(), 0xdead) << "written past the rows";
      EXPECT_EQ(shifted.front(), 0xdead) << "written before the rows";
      for (size_t i = 0; i < x.size(); ++i) {
        const uint16_t want = Rounded(normed[i], bf16);
        ASSERT_EQ(converted[i], want) << "converted, at " << i;
        ASSERT_EQ(fused[i], want) << "normed and rounded in one launch, at " << i;
        ASSERT_EQ(shifted[i + 1], want) << "one value past aligned, at " << i;
      }
    }
  }
}

// silu(gate) * up against the CPU's formula, and rounded to 16 bits in the
// same launch bit for bit as converted after it; over several blocks and a
// partial last one.
TEST(EmulatedElementwiseTest, SwiGlu16IsTheSwiGluRounded) {
  std::mt19937 rng(14);
  const int64_t n = 3 * 256 + 77;
  const std::vector<float> gate = RandomVector(n, rng, 8.0f), up = RandomVector(n, rng, 3.0f);
  std::vector<float> out(n, -7.0f);
  ASSERT_EQ(emu::RunSwiGlu(gate.data(), up.data(), n, out.data()), 0);
  for (int64_t i = 0; i < n; ++i) {
    const double want = gate[i] / (1.0 + std::exp(-double{gate[i]})) * up[i];
    ASSERT_NEAR(out[i], want, 1e-6 * std::abs(want) + 1e-7) << "at " << i;
  }
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    std::vector<uint16_t> converted(n), fused(n + 1, 0xdead);
    ASSERT_EQ(emu::RunTo16(out.data(), n, bf16, converted.data()), 0);
    ASSERT_EQ(emu::RunSwiGlu16(gate.data(), up.data(), n, bf16, fused.data()), 0);
    EXPECT_EQ(fused.back(), 0xdead) << "written past the values";
    fused.pop_back();
    EXPECT_EQ(fused, converted);
  }
}

// Values where rounding to 16 bits is decided by the last bits: halfway
// cases either way, the largest finite values and past them, subnormals.
TEST(EmulatedElementwiseTest, ConversionsRoundToNearestEven) {
  std::vector<float> x;
  for (const uint32_t bits :
       {0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3f807fffu, 0x7f7fffffu, 0x477fefffu, 0x477ff000u,
        0x00000001u, 0x33800000u, 0x387fc000u, 0xbf808000u, 0x80000000u}) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    x.push_back(f);
  }
  std::mt19937 rng(13);
  for (const float v : RandomVector(1000, rng, 70000.0f)) x.push_back(v);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    std::vector<uint16_t> out(x.size());
    ASSERT_EQ(emu::RunTo16(x.data(), std::ssize(x), bf16, out.data()), 0);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(out[i], Rounded(x[i], bf16)) << "at " << i << " (" << x[i] << ")";
    }
  }
}

}  // namespace
}  // namespace tandem::engine::cuda
