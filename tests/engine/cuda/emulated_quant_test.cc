// engine/cuda/quant_kernels.cu, its own source run on the CPU under the CUDA
// emulation (emulation/), against the CPU's dequantizers (DequantizeRow) for
// each block-quantized type the GPU takes (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K):
// the GEMV's products in double (a group of products of different lengths,
// stored or added, rows of more units than a block has lanes, every launch
// size and a count of tokens that takes two launches), the fused SwiGLU pair
// bit for bit the products then SwiGLU, both with an RMSNorm of x folded in
// (GemvNorm), the tile GEMM within f16's rounding, the dequantizer's f16
// and the embedding gather bit for bit the reference, and the launches'
// refusals. In every build: no GPU or nvcc
// needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "engine/gguf/tensor_type.h"
#include "tests/engine/cuda/emulated_test_util.h"
#include "tests/engine/cuda/emulation/emulated_kernels.h"

namespace tandem::engine::cuda {
namespace {

constexpr int kSuccess = 0, kInvalidValue = 1, kMisalignedAddress = 716;

const GgmlType kTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                           GgmlType::kQ6_K};

// A matrix's blocks at a 64-byte aligned address (the GPU's weights are
// 256-byte aligned), and the values the CPU dequantizes them to.
class Quantized {
 public:
  Quantized(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng)
      : bytes_(GgmlRowBytes(type, cols) * rows + 64), values_(rows * cols) {
    std::normal_distribution<float> value(0.0f, 1.0f);
    std::vector<float> source(rows * cols);
    for (float& v : source) v = value(rng);
    QuantizeRow(type, source.data(), data(), rows * cols);
    DequantizeRow(type, data(), values_.data(), rows * cols);
  }
  uint8_t* data() {
    const auto a = reinterpret_cast<uintptr_t>(bytes_.data());
    return bytes_.data() + (64 - a % 64) % 64;
  }
  const std::vector<float>& values() const { return values_; }

 private:
  std::vector<uint8_t> bytes_;
  std::vector<float> values_;
};

// Row r of w times x, in double, and the sum of the terms' magnitudes (the
// scale an f32 sum's rounding goes with).
std::pair<double, double> Dot(const Quantized& w, int64_t cols, int64_t r, const float* x) {
  double sum = 0.0, scale = 0.0;
  for (int64_t c = 0; c < cols; ++c) {
    const double term = double{w.values()[r * cols + c]} * x[c];
    sum += term;
    scale += std::abs(term);
  }
  return {sum, scale};
}

float Silu(float g) { return g / (1.0f + std::exp(-g)); }

// Each product's rows of y against w's rows times x (`before` added to them
// when given), in double.
void ExpectProducts(const std::vector<Quantized>& w, const std::vector<int64_t>& rows, int64_t cols,
                    const std::vector<float>& x, int64_t n_tokens,
                    const std::vector<std::vector<float>>& y,
                    const std::vector<std::vector<float>>* before) {
  for (size_t i = 0; i < w.size(); ++i) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t r = 0; r < rows[i]; ++r) {
        const auto [sum, scale] = Dot(w[i], cols, r, x.data() + t * cols);
        const double want = (before != nullptr ? (*before)[i][t * rows[i] + r] : 0.0) + sum;
        ASSERT_NEAR(y[i][t * rows[i] + r], want, 1e-5 * (scale + 1.0))
            << "product " << i << ", token " << t << ", row " << r;
      }
    }
  }
}

// Q, K and V of one type in one launch: rows located in the right product,
// each stored or added to its y (GemvProduct::add), rows of 136-272 units
// (more than a block's 128 lanes take in one step), tokens that take the
// launches of 1, 2, 4, 8 and 16 and one of 17 that takes two.
TEST(EmulatedQuantTest, AGroupStoresOrAddsEachProductsRows) {
  std::mt19937 rng(5);
  const int64_t cols = 17 * 256;
  const std::vector<int64_t> rows = {12, 4, 4};
  for (const GgmlType type : kTypes) {
    for (const auto& [n_tokens, add] : std::vector<std::pair<int64_t, bool>>{
             {1, false}, {2, true}, {3, false}, {8, false}, {17, true}}) {
      SCOPED_TRACE(testing::Message()
                   << GgmlTypeName(type) << ", tokens " << n_tokens << (add ? ", add" : ""));
      const std::vector<float> x = RandomVector(n_tokens * cols, rng);
      std::vector<Quantized> w;
      std::vector<std::vector<float>> y;
      std::vector<emulation::Product> products;
      for (const int64_t r : rows) {
        w.emplace_back(type, r, cols, rng);
        y.push_back(RandomVector(n_tokens * r, rng));
      }
      const std::vector<std::vector<float>> before = y;
      for (size_t i = 0; i < w.size(); ++i) {
        products.push_back({.w = w[i].data(), .rows = rows[i], .y = y[i].data(), .add = add});
      }
      ASSERT_EQ(emulation::RunMatMulQuantGroup(static_cast<int>(type), products.data(), 3, cols,
                                               x.data(), n_tokens),
                kSuccess);
      ExpectProducts(w, rows, cols, x, n_tokens, y, add ? &before : nullptr);
    }
  }
}

// The gate and up rows decoded side by side and written as silu(gate) * up:
// bit for bit the two products and SwiGluKernel's formula, in launches of
// 8 tokens (9: two).
TEST(EmulatedQuantTest, TheSwiGluPairIsTheProductsThenSilu) {
  std::mt19937 rng(9);
  const int64_t rows = 6, cols = 512;
  for (const GgmlType type : kTypes) {
    for (const int64_t n_tokens : {1, 3, 9}) {
      SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << ", tokens " << n_tokens);
      Quantized gate(type, rows, cols, rng), up(type, rows, cols, rng);
      const std::vector<float> x = RandomVector(n_tokens * cols, rng);
      std::vector<float> out(n_tokens * rows, std::nanf(""));
      ASSERT_EQ(emulation::RunMatMulQuantSwiGlu(static_cast<int>(type), gate.data(), up.data(),
                                                rows, cols, x.data(), n_tokens, out.data()),
                kSuccess);
      std::vector<float> g(n_tokens * rows), u(n_tokens * rows);
      const emulation::Product pg{.w = gate.data(), .rows = rows, .y = g.data()};
      const emulation::Product pu{.w = up.data(), .rows = rows, .y = u.data()};
      ASSERT_EQ(
          emulation::RunMatMulQuantGroup(static_cast<int>(type), &pg, 1, cols, x.data(), n_tokens),
          kSuccess);
      ASSERT_EQ(
          emulation::RunMatMulQuantGroup(static_cast<int>(type), &pu, 1, cols, x.data(), n_tokens),
          kSuccess);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], Silu(g[i]) * u[i]) << "at " << i;
      }
      ExpectProducts({gate}, {rows}, cols, x, n_tokens, {g}, nullptr);
    }
  }
}

// The norm folded into a group and into the pair (GemvNorm): every row of
// every block scaled by its token's norm, which the block's first row sums,
// whether the row's warps split it (4 warps a row below 2048 rows) or each
// warp has a row of its own (8195 rows: a last block of 3 live rows), in
// launches of kQuantGemvNormTokensPerLaunch tokens (6: two).
TEST(EmulatedQuantTest, AFoldedNormGivesTheProductsOfRmsNormOfX) {
  std::mt19937 rng(13);
  const float eps = 1e-5f;
  ASSERT_EQ(emulation::QuantGemvNormTokensPerLaunch(), 4);
  struct Case {
    GgmlType type;
    std::vector<int64_t> rows;
    int64_t cols;
    int64_t n_tokens;
  };
  std::vector<Case> cases;
  for (const GgmlType type : kTypes) {
    for (const int64_t n_tokens : {1, 4, 6}) {
      cases.push_back({.type = type, .rows = {12, 4, 4}, .cols = 768, .n_tokens = n_tokens});
    }
  }
  // A launch of 8195 rows is 2049 blocks: one, of short rows.
  cases.push_back({.type = GgmlType::kQ4_0, .rows = {8195}, .cols = 64, .n_tokens = 2});
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << GgmlTypeName(c.type) << ", " << c.rows.size()
                                    << " products, tokens " << c.n_tokens);
    const std::vector<float> weight = RandomVector(c.cols, rng, 1.5f);
    const std::vector<float> x = TokensOfManySizes(c.n_tokens, c.cols, rng);
    const std::vector<float> normed = Normed(x, c.cols, weight, eps);
    std::vector<Quantized> w;
    std::vector<std::vector<float>> y;
    std::vector<emulation::Product> products;
    for (const int64_t r : c.rows) {
      w.emplace_back(c.type, r, c.cols, rng);
      y.emplace_back(c.n_tokens * r, std::nanf(""));
    }
    for (size_t i = 0; i < w.size(); ++i) {
      products.push_back({.w = w[i].data(), .rows = c.rows[i], .y = y[i].data()});
    }
    ASSERT_EQ(emulation::RunMatMulQuantGroup(static_cast<int>(c.type), products.data(),
                                             static_cast<int>(products.size()), c.cols, x.data(),
                                             c.n_tokens, weight.data(), eps),
              kSuccess);
    ExpectProducts(w, c.rows, c.cols, normed, c.n_tokens, y, nullptr);
    if (c.rows.size() == 1) continue;
    // The pair: gate and up, the group's first two products cut to 4 rows.
    const int64_t rows = c.rows[1];
    std::vector<float> out(c.n_tokens * rows, std::nanf(""));
    ASSERT_EQ(emulation::RunMatMulQuantSwiGlu(static_cast<int>(c.type), w[0].data(), w[1].data(),
                                              rows, c.cols, x.data(), c.n_tokens, out.data(),
                                              weight.data(), eps),
              kSuccess);
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const auto [g, g_scale] = Dot(w[0], c.cols, r, normed.data() + t * c.cols);
        const auto [u, u_scale] = Dot(w[1], c.cols, r, normed.data() + t * c.cols);
        const double want = double{Silu(static_cast<float>(g))} * u;
        ASSERT_NEAR(out[t * rows + r], want, 1e-5 * (g_scale + 1.0) * (u_scale + 1.0))
            << "token " << t << ", row " << r;
      }
    }
  }
}

// The whole-matrix dequantization to f16 (prefill's GEMM input): each
// element the CPU's value rounded to nearest even.
TEST(EmulatedQuantTest, DequantizedToF16IsTheReferenceRounded) {
  std::mt19937 rng(21);
  const int64_t rows = 3, cols = 512;
  for (const GgmlType type : kTypes) {
    SCOPED_TRACE(GgmlTypeName(type));
    Quantized w(type, rows, cols, rng);
    std::vector<uint16_t> out(rows * cols, 0xFFFFu);
    ASSERT_EQ(
        emulation::RunDequantizeToF16(static_cast<int>(type), w.data(), rows, cols, out.data()),
        kSuccess);
    for (int64_t i = 0; i < rows * cols; ++i) {
      ASSERT_EQ(out[i], emulation::HalfBits(w.values()[i])) << "at " << i;
    }
  }
}

// The embedding gather: each token's row bit for bit what the CPU's
// DequantizeRow gives, for the quantized types and F32, F16 and BF16.
TEST(EmulatedQuantTest, EmbeddedRowsAreTheReferenceRows) {
  std::mt19937 rng(25);
  const int64_t vocab = 5, cols = 512;
  const std::vector<int32_t> tokens = {4, 0, 4, 2};
  std::vector<GgmlType> types(std::begin(kTypes), std::end(kTypes));
  types.insert(types.end(), {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16});
  for (const GgmlType type : types) {
    SCOPED_TRACE(GgmlTypeName(type));
    Quantized table(type, vocab, cols, rng);
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<float> out(n * cols, std::nanf(""));
    ASSERT_EQ(emulation::RunEmbedRows(static_cast<int>(type), table.data(), cols, tokens.data(), n,
                                      out.data()),
              kSuccess);
    for (int64_t t = 0; t < n; ++t) {
      ASSERT_EQ(std::memcmp(out.data() + t * cols, table.values().data() + tokens[t] * cols,
                            cols * sizeof(float)),
                0)
          << "token " << t;
    }
  }
}

// The tile GEMM (quant_gemm.cu) against the products in double, within the
// f16 GEMM's rounding (x and each weight rounded to f16: 2^-11 relative
// each, summed in f32): rows not a multiple of the 64-row tile, tokens that
// fill one 32-token tile, part of one, and two; columns of 2-6 chunks of 128,
// which the block's two warp groups take in turn (Q8_0 and Q4_0: 3 chunks,
// the second group idle in the last round, and a last chunk of 32 or 96
// columns); each stored or added.
TEST(EmulatedQuantTest, TheTileGemmGivesTheProductsInF16sRounding) {
  std::mt19937 rng(33);
  ASSERT_EQ(emulation::QuantTileGemmMaxTokens(), 64);
  for (const GgmlType type : kTypes) {
    const bool k_quant = type != GgmlType::kQ8_0 && type != GgmlType::kQ4_0;
    for (const auto& [rows, cols, n_tokens, add] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
             {70, 256, 17, false},
             {20, k_quant ? 512 : 352, 32, true},
             {9, k_quant ? 768 : 160, 40, false}}) {
      SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << ", " << rows << " x " << cols
                                      << ", tokens " << n_tokens << (add ? ", add" : ""));
      Quantized w(type, rows, cols, rng);
      const std::vector<float> x = RandomVector(n_tokens * cols, rng);
      std::vector<float> y = RandomVector(n_tokens * rows, rng);
      const std::vector<std::vector<float>> before = {y};
      ASSERT_EQ(emulation::RunQuantTileGemm(static_cast<int>(type), w.data(), rows, cols, x.data(),
                                            n_tokens, y.data(), add),
                kSuccess);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const auto [sum, scale] = Dot(w, cols, r, x.data() + t * cols);
          const double want = (add ? before[0][t * rows + r] : 0.0) + sum;
          ASSERT_NEAR(y[t * rows + r], want, 2e-3 * (scale + 1.0))
              << "token " << t << ", row " << r;
        }
      }
    }
  }
}

// What the launchers refuse, before any launch: a type without a kernel,
// columns not of whole blocks, misaligned x, weights, norm weight or f16
// output, and a product count out of range.
TEST(EmulatedQuantTest, ItRefusesWhatItHasNoKernelFor) {
  std::mt19937 rng(29);
  const int64_t cols = 256;
  Quantized q4k(GgmlType::kQ4_K, 2, cols, rng);
  Quantized q5_0(GgmlType::kQ5_0, 2, cols, rng);
  std::vector<float> x(2 * cols + 4, 1.0f), y(4), weight(cols + 4, 1.0f);
  const int q4 = static_cast<int>(GgmlType::kQ4_K);
  const emulation::Product p{.w = q4k.data(), .rows = 2, .y = y.data()};
  EXPECT_EQ(emulation::RunMatMulQuantGroup(q4, &p, 1, cols, x.data(), 1), kSuccess);
  const emulation::Product other{.w = q5_0.data(), .rows = 2, .y = y.data()};
  EXPECT_EQ(emulation::RunMatMulQuantGroup(static_cast<int>(GgmlType::kQ5_0), &other, 1, cols,
                                           x.data(), 1),
            kInvalidValue);
  EXPECT_EQ(emulation::RunMatMulQuantGroup(q4, &p, 1, cols - 32, x.data(), 1), kInvalidValue);
  EXPECT_EQ(emulation::RunMatMulQuantGroup(q4, &p, 1, cols, x.data() + 1, 1), kMisalignedAddress);
  EXPECT_EQ(emulation::RunMatMulQuantGroup(q4, &p, 1, cols, x.data(), 1, weight.data() + 1, 1e-5f),
            kMisalignedAddress);
  const emulation::Product shifted{.w = q4k.data() + 2, .rows = 2, .y = y.data()};
  EXPECT_EQ(emulation::RunMatMulQuantGroup(q4, &shifted, 1, cols, x.data(), 1), kMisalignedAddress);
  const emulation::Product four[4] = {p, p, p, p};
  EXPECT_EQ(emulation::RunMatMulQuantGroup(q4, four, 0, cols, x.data(), 1), kInvalidValue);
  EXPECT_EQ(emulation::RunMatMulQuantGroup(q4, four, 4, cols, x.data(), 1), kInvalidValue);
  EXPECT_EQ(emulation::RunQuantTileGemm(static_cast<int>(GgmlType::kQ5_0), q5_0.data(), 2, cols,
                                        x.data(), 1, y.data(), false),
            kInvalidValue);
  EXPECT_EQ(emulation::RunQuantTileGemm(q4, q4k.data(), 2, cols - 32, x.data(), 1, y.data(), false),
            kInvalidValue);
  EXPECT_EQ(emulation::RunQuantTileGemm(q4, q4k.data(), 2, cols, x.data() + 1, 1, y.data(), false),
            kMisalignedAddress);
  EXPECT_EQ(emulation::RunQuantTileGemm(q4, q4k.data() + 2, 2, cols, x.data(), 1, y.data(), false),
            kMisalignedAddress);
  std::vector<uint16_t> f16(2 * cols + 8);
  EXPECT_EQ(emulation::RunDequantizeToF16(static_cast<int>(GgmlType::kQ5_0), q5_0.data(), 2, cols,
                                          f16.data()),
            kInvalidValue);
  EXPECT_EQ(emulation::RunDequantizeToF16(q4, q4k.data(), 2, cols, f16.data() + 2),
            kMisalignedAddress);  // 16-byte stores
  EXPECT_EQ(emulation::RunDequantizeToF16(q4, q4k.data(), 2, cols, f16.data()), kSuccess);
}

}  // namespace
}  // namespace tandem::engine::cuda
