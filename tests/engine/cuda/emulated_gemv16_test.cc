// engine/cuda/gemv16.cu's 16-bit GEMVs, their own source run on the CPU under
// the CUDA emulation (emulation/), against products in double: a group of
// products of different lengths (the launch's rows located in the right
// one), each stored or added to its y (GemvProduct::add, the forward pass's
// MatMulAdd), for launches of 8, 4, 2 and 1 tokens, the fused gate/up
// SwiGLU pair, and both with an RMSNorm of x folded in (GemvNorm); F16 and
// BF16 weights. In every build: no GPU or nvcc needed.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/gguf/tensor_type.h"
#include "tests/engine/cuda/emulated_test_util.h"
#include "tests/engine/cuda/emulation/emulated_kernels.h"

namespace tandem::engine::cuda {
namespace {

struct Matrix {
  std::vector<uint16_t> bits;  // rows x cols, f16 or bf16
  std::vector<float> values;   // the same, widened
};

Matrix RandomMatrix(int64_t rows, int64_t cols, bool bf16, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  Matrix m;
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = value(rng);
    const uint16_t b = bf16 ? Fp32ToBf16(v) : Fp32ToFp16(v);
    m.bits.push_back(b);
    m.values.push_back(bf16 ? Bf16ToFp32(b) : Fp16ToFp32(b));
  }
  return m;
}

// Row r of m times token t of x, in double, and the sum of the terms'
// magnitudes (the scale an f32 sum's rounding goes with).
std::pair<double, double> Dot(const Matrix& m, int64_t cols, int64_t r, const float* x) {
  double sum = 0.0, scale = 0.0;
  for (int64_t c = 0; c < cols; ++c) {
    const double term = double{m.values[r * cols + c]} * x[c];
    sum += term;
    scale += std::abs(term);
  }
  return {sum, scale};
}

float Silu(double g) { return static_cast<float>(g / (1.0 + std::exp(-g))); }

TEST(EmulatedGemv16Test, AGroupStoresOrAddsEachProductsRows) {
  std::mt19937 rng(5);
  const int64_t cols = 136;            // 17 chunks of 8: a last round with lanes past the row
  const int64_t rows[3] = {24, 8, 8};  // Q, K and V of a small model
  for (const bool bf16 : {false, true}) {
    for (const bool add : {false, true}) {
      // 7 tokens run as launches of 4, 2 and 1.
      for (const int64_t n_tokens : {1, 7, 8}) {
        SCOPED_TRACE(testing::Message()
                     << (bf16 ? "bf16" : "f16") << (add ? ", add" : "") << ", tokens " << n_tokens);
        const std::vector<float> x = RandomVector(n_tokens * cols, rng);
        std::vector<Matrix> w;
        std::vector<std::vector<float>> y, before;
        std::vector<emulation::Product> products;
        for (const int64_t r : rows) {
          w.push_back(RandomMatrix(r, cols, bf16, rng));
          y.push_back(RandomVector(n_tokens * r, rng));
        }
        before = y;
        for (size_t i = 0; i < w.size(); ++i) {
          products.push_back(
              {.w = w[i].bits.data(), .rows = rows[i], .y = y[i].data(), .add = add});
        }
        ASSERT_EQ(emulation::RunGemv16Group(products.data(), 3, bf16, cols, x.data(), n_tokens), 0);
        for (size_t i = 0; i < w.size(); ++i) {
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t r = 0; r < rows[i]; ++r) {
              const auto [sum, scale] = Dot(w[i], cols, r, x.data() + t * cols);
              const double want = (add ? before[i][t * rows[i] + r] : 0.0) + sum;
              ASSERT_NEAR(y[i][t * rows[i] + r], want, 1e-5 * (scale + 1.0))
                  << "product " << i << ", token " << t << ", row " << r;
            }
          }
        }
      }
    }
  }
}

TEST(EmulatedGemv16Test, TheSwiGluPairWritesSiluOfGateTimesUp) {
  std::mt19937 rng(9);
  const int64_t rows = 24, cols = 64;
  for (const bool bf16 : {false, true}) {
    for (const int64_t n_tokens : {3, 8}) {
      SCOPED_TRACE(testing::Message() << (bf16 ? "bf16" : "f16") << ", tokens " << n_tokens);
      const Matrix gate = RandomMatrix(rows, cols, bf16, rng);
      const Matrix up = RandomMatrix(rows, cols, bf16, rng);
      const std::vector<float> x = RandomVector(n_tokens * cols, rng);
      std::vector<float> out(n_tokens * rows, std::nanf(""));
      ASSERT_EQ(emulation::RunGemv16SwiGlu(gate.bits.data(), up.bits.data(), bf16, rows, cols,
                                           x.data(), n_tokens, out.data()),
                0);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const auto [g, g_scale] = Dot(gate, cols, r, x.data() + t * cols);
          const auto [u, u_scale] = Dot(up, cols, r, x.data() + t * cols);
          const double want = double{Silu(g)} * u;
          ASSERT_NEAR(out[t * rows + r], want, 1e-5 * (g_scale + 1.0) * (u_scale + 1.0))
              << "token " << t << ", row " << r;
        }
      }
    }
  }
}

// The norm folded into a group (GemvNorm): every row of every block scaled
// by its token's norm, which the block's first row sums, whether the row's
// warps split it (40 rows: 8 warps a row) or each warp has a row of its own
// (8195 rows: a last block of 3 live rows); the norm's weight taken on x
// (1 token) or on the widened weights (more tokens than matrices).
TEST(EmulatedGemv16Test, AFoldedNormGivesTheProductsOfRmsNormOfX) {
  std::mt19937 rng(13);
  const int64_t cols = 136;
  const float eps = 1e-5f;
  const std::vector<float> weight = RandomVector(cols, rng);
  for (const std::vector<int64_t>& rows : {std::vector<int64_t>{24, 8, 8}, {8195}}) {
    // A launch of 8195 rows is 1025 blocks, about 10 s emulated: one.
    const bool large = rows.size() == 1;
    for (const bool bf16 : large ? std::vector<bool>{false} : std::vector<bool>{false, true}) {
      for (const int64_t n_tokens :
           large ? std::vector<int64_t>{2} : std::vector<int64_t>{1, 2, 7, 8}) {
        SCOPED_TRACE(testing::Message() << rows.size() << " products, " << (bf16 ? "bf16" : "f16")
                                        << ", tokens " << n_tokens);
        const std::vector<float> x = TokensOfManySizes(n_tokens, cols, rng);
        const std::vector<float> normed = Normed(x, cols, weight, eps);
        std::vector<Matrix> w;
        std::vector<std::vector<float>> y;
        std::vector<emulation::Product> products;
        for (const int64_t r : rows) {
          w.push_back(RandomMatrix(r, cols, bf16, rng));
          y.emplace_back(n_tokens * r, std::nanf(""));
        }
        for (size_t i = 0; i < w.size(); ++i) {
          products.push_back({.w = w[i].bits.data(), .rows = rows[i], .y = y[i].data()});
        }
        ASSERT_EQ(emulation::RunGemv16Group(products.data(), static_cast<int>(products.size()),
                                            bf16, cols, x.data(), n_tokens, weight.data(), eps),
                  0);
        for (size_t i = 0; i < w.size(); ++i) {
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t r = 0; r < rows[i]; ++r) {
              const auto [want, scale] = Dot(w[i], cols, r, normed.data() + t * cols);
              ASSERT_NEAR(y[i][t * rows[i] + r], want, 1e-5 * (scale + 1.0))
                  << "product " << i << ", token " << t << ", row " << r;
            }
          }
        }
      }
    }
  }
}

TEST(EmulatedGemv16Test, AFoldedNormFeedsTheSwiGluPair) {
  std::mt19937 rng(17);
  const int64_t rows = 24, cols = 64;
  const float eps = 1e-6f;
  const std::vector<float> weight = RandomVector(cols, rng);
  for (const bool bf16 : {false, true}) {
    // 1 and 2 tokens take the norm's weight on x, 8 on the weights.
    for (const int64_t n_tokens : {1, 2, 8}) {
      SCOPED_TRACE(testing::Message() << (bf16 ? "bf16" : "f16") << ", tokens " << n_tokens);
      const Matrix gate = RandomMatrix(rows, cols, bf16, rng);
      const Matrix up = RandomMatrix(rows, cols, bf16, rng);
      const std::vector<float> x = TokensOfManySizes(n_tokens, cols, rng);
      const std::vector<float> normed = Normed(x, cols, weight, eps);
      std::vector<float> out(n_tokens * rows, std::nanf(""));
      ASSERT_EQ(emulation::RunGemv16SwiGlu(gate.bits.data(), up.bits.data(), bf16, rows, cols,
                                           x.data(), n_tokens, out.data(), weight.data(), eps),
                0);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const auto [g, g_scale] = Dot(gate, cols, r, normed.data() + t * cols);
          const auto [u, u_scale] = Dot(up, cols, r, normed.data() + t * cols);
          const double want = double{Silu(g)} * u;
          ASSERT_NEAR(out[t * rows + r], want, 1e-5 * (g_scale + 1.0) * (u_scale + 1.0))
              << "token " << t << ", row " << r;
        }
      }
    }
  }
}

TEST(EmulatedGemv16Test, ANormWeightNotOn16BytesIsRefused) {
  const std::vector<uint16_t> w(8 * 8, 0);
  const std::vector<float> x(8, 1.0f), weight(9, 1.0f);
  std::vector<float> y(8);
  const emulation::Product product = {.w = w.data(), .rows = 8, .y = y.data()};
  EXPECT_NE(emulation::RunGemv16Group(&product, 1, false, 8, x.data(), 1, weight.data() + 1, 0), 0);
  EXPECT_NE(emulation::RunGemv16SwiGlu(w.data(), w.data(), false, 8, 8, x.data(), 1, y.data(),
                                       weight.data() + 1, 0),
            0);
}

// The emulation's __half converts as the project's Fp32ToFp16 (round to
// nearest even) does, subnormals, ties and overflow included, and back.
TEST(EmulatedGemv16Test, TheEmulatedHalfConvertsAsTheProjectsDoes) {
  std::vector<float> values = {
      0.0f,      -0.0f,         1.0f,    -1.5f,   65504.0f, 65519.0f,           65520.0f,
      -70000.0f, 6.1035156e-5f, 6.0e-8f, 2.9e-8f, 1e-10f,   1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
      INFINITY,  -INFINITY};
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, sizeof(f));
    if (!std::isnan(f)) values.push_back(f);
  }
  for (int i = -30; i <= 20; ++i) values.push_back(std::ldexp(1.37f, i));
  for (const float f : values) {
    const uint16_t want = Fp32ToFp16(f);
    ASSERT_EQ(emulation::HalfBits(f), want) << f;
    const float back = Fp16ToFp32(want);
    ASSERT_EQ(std::memcmp(&back, std::array<float, 1>{emulation::HalfValue(want)}.data(), 4), 0)
        << f;
  }
  EXPECT_TRUE(std::isnan(emulation::HalfValue(emulation::HalfBits(std::nanf("")))));
}

TEST(EmulatedGemv16Test, ProductsThatDifferInAddAreRefused) {
  const std::vector<uint16_t> w(8 * 8, 0);
  const std::vector<float> x(8, 1.0f);
  std::vector<float> y(8), z(8);
  const emulation::Product products[2] = {{.w = w.data(), .rows = 8, .y = y.data()},
                                          {.w = w.data(), .rows = 8, .y = z.data(), .add = true}};
  EXPECT_NE(emulation::RunGemv16Group(products, 2, false, 8, x.data(), 1), 0);
}

}  // namespace
}  // namespace tandem::engine::cuda
