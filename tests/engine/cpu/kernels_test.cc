// Every optimized CPU kernel against the naive reference
// (engine/cpu/reference_kernels.h), for every ISA this CPU supports (the
// portable one always), every weight type, odd shapes, unaligned weights and
// both matmul strategies.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/packed_weights.h"
#include "engine/cpu/quant_dot.h"
#include "engine/cpu/reference_kernels.h"
#include "engine/gguf/tensor_type.h"

namespace tandem::engine::cpu {
namespace {

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas = {Isa::kPortable};
  if (IsaSupported(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  if (IsaSupported(Isa::kAvx512)) isas.push_back(Isa::kAvx512);
  return isas;
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  // A few outliers, as real activations have.
  for (int64_t i = 0; i < n; i += 37) v[i] *= 8.0f;
  return v;
}

// y = x * w^T through the portable quantized dot (activations quantized
// per token as QuantizeActivations does for w's type).
std::vector<float> QuantDotReference(const WeightMatrix& w, const float* x, int64_t n) {
  std::vector<float> y(n * w.rows);
  std::vector<uint8_t> xq(QuantActivationBytes(w.type, w.cols));
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t t = 0; t < n; ++t) {
    QuantizeActivations(w.type, x + t * w.cols, w.cols, xq.data());
    for (int64_t r = 0; r < w.rows; ++r) {
      y[t * w.rows + r] =
          VecDotRow(w.type, base + r * GgmlRowBytes(w.type, w.cols), xq.data(), w.cols);
    }
  }
  return y;
}

// x rounded to bf16, nearest even (finite values).
std::vector<float> RoundedToBf16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

// A weight matrix in GGUF layout, `offset` bytes into its own storage.
struct TestWeights {
  std::vector<uint8_t> storage;
  WeightMatrix matrix;
};

TestWeights MakeWeights(GgmlType type, int64_t rows, int64_t cols, int64_t offset,
                        uint32_t seed) {
  const std::vector<float> values = RandomFloats(rows * cols, seed, 0.5f);
  const int64_t row_bytes = GgmlRowBytes(type, cols);
  TestWeights w;
  w.storage.assign(offset + rows * row_bytes, 0xee);  // exact: ASan sees over-reads
  uint8_t* base = w.storage.data() + offset;
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = values.data() + r * cols;
    uint8_t* dst = base + r * row_bytes;
    QuantizeRow(type, src, dst, cols);
  }
  w.matrix = {type, base, rows, cols};
  return w;
}

// sum_c |w[r, c] * x[t, c]|, the scale f32 rounding errors are relative to.
std::vector<double> Magnitudes(const WeightMatrix& w, const float* x, int64_t n) {
  std::vector<double> mag(n * w.rows);
  std::vector<float> row(w.cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, base + r * GgmlRowBytes(w.type, w.cols), row.data(), w.cols);
    for (int64_t t = 0; t < n; ++t) {
      double s = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) s += std::fabs(double{row[c]} * x[t * w.cols + c]);
      mag[t * w.rows + r] = s;
    }
  }
  return mag;
}

// Bound on |x.w - quantized(x).w|: each activation moves by at most half its
// block's step d.
std::vector<double> ActivationQuantizationBound(const WeightMatrix& w, const float* x,
                                                int64_t n) {
  std::vector<double> bound(n * w.rows);
  std::vector<float> row(w.cols);
  std::vector<int8_t> q;
  std::vector<float> d;
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t t = 0; t < n; ++t) {
    QuantizeActivationsReference(x + t * w.cols, w.cols, &q, &d);
    for (int64_t r = 0; r < w.rows; ++r) {
      DequantizeRow(w.type, base + r * GgmlRowBytes(w.type, w.cols), row.data(), w.cols);
      double s = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) s += std::fabs(row[c]) * 0.5 * d[c / kQ8_0BlockSize];
      bound[t * w.rows + r] = s;
    }
  }
  return bound;
}

// Checks |got - want| <= rel * mag + extra for every element; reports the worst.
testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<float>& want,
                                  const std::vector<double>& mag, double rel,
                                  const std::vector<double>* extra = nullptr) {
  int64_t worst = -1;
  double worst_excess = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = rel * mag[i] + 1e-30 + (extra != nullptr ? (*extra)[i] : 0.0);
    const double err = std::fabs(double{got[i]} - want[i]);
    if (!(err <= allowed) && (worst < 0 || err - allowed > worst_excess)) {
      worst = static_cast<int64_t>(i);
      worst_excess = err - allowed;
    }
  }
  if (worst < 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "element " << worst << ": got " << got[worst]
                                     << ", want " << want[worst] << ", magnitude "
                                     << mag[worst] << ", excess " << worst_excess;
}

struct MatMulCase {
  int64_t rows;
  int64_t cols;
};

class MatMulTest : public testing::TestWithParam<std::tuple<Isa, GgmlType>> {};

TEST_P(MatMulTest, MatchesReference) {
  const auto [isa, type] = GetParam();
  // Types whose gemv path multiplies by activations quantized to Q8_0
  // blocks (Q8Activations), and the K-quants, by Q8_K super-blocks: packed,
  // here; unpacked through quant_dot (quant_formats_test checks those).
  const bool k_quant =
      type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
  const bool q8 = type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0;
  // Q4_0 without the table's VNNI tiles goes through quant_dot, whose Q8_0
  // activation blocks round their scale to fp16 as ggml's do: each
  // activation may move by 0.5 + 127 * 2^-11 of its step, not 0.5.
  const bool fp16_act_scale = type == GgmlType::kQ4_0 && !Kernels(isa).vnni_gemv;
  // Rows not a multiple of 4 or 16; F types also take any column count,
  // including stories260K's n_ff of 172.
  const std::vector<MatMulCase> shapes =
      k_quant ? std::vector<MatMulCase>{{1, 256}, {5, 512}, {17, 256}, {36, 768}, {64, 512}}
      : q8    ? std::vector<MatMulCase>{{1, 32}, {5, 96}, {17, 64}, {36, 160}, {64, 512}}
         : std::vector<MatMulCase>{{1, 1},   {3, 7},   {5, 17},    {17, 96},
                                   {18, 172}, {33, 64}, {64, 512}, {20, 257}};
  const int64_t kTokens[] = {1, 2, 3, 7, 16, 33, 64, 300};
  const int64_t kOffsets[] = {0, 2, 4, 34};
  uint32_t seed = 1;
  int case_index = 0;
  for (const MatMulCase& shape : shapes) {
    for (int64_t n : kTokens) {
      if (shape.rows * shape.cols * n > (1 << 22) && n > 64) continue;  // keep it fast
      const int64_t offset = kOffsets[case_index++ % 4];
      const TestWeights w = MakeWeights(type, shape.rows, shape.cols, offset, seed++);
      const std::vector<float> x = RandomFloats(n * shape.cols, seed++);
      std::vector<float> want(n * shape.rows);
      MatMulReference(w.matrix, x.data(), n, want.data());
      const std::vector<double> mag = Magnitudes(w.matrix, x.data(), n);
      std::vector<float> want_q8;
      std::vector<double> q8_bound;
      if (q8) {
        want_q8.resize(want.size());
        MatMulQ8Reference(w.matrix, x.data(), n, want_q8.data());
        q8_bound = ActivationQuantizationBound(w.matrix, x.data(), n);
      }
      // Matrices with a packed layout run both ways: as they are, and
      // repacked (rows in groups of 16, the last one partial here).
      const bool packable = PackedMatrix::Packable(type) && Kernels(isa).packed_gemv != nullptr &&
                            (type != GgmlType::kBF16 || Bf16DotSupported());
      std::vector<float> want_q8k;
      if (k_quant) want_q8k = QuantDotReference(w.matrix, x.data(), n);
      std::vector<float> want_bf16;
      if (packable && type == GgmlType::kBF16) {
        want_bf16.resize(want.size());
        const std::vector<float> rounded = RoundedToBf16(x);
        MatMulReference(w.matrix, rounded.data(), n, want_bf16.data());
      }
      for (const auto& [threads, pack] : {std::pair{1, false}, std::pair{2, false},
                                         std::pair{3, false}, std::pair{1, packable},
                                         std::pair{2, packable}, std::pair{3, packable}}) {
        MatMulRunner runner(Kernels(isa), threads);
        if (pack) {
          ASSERT_GT(runner.Pack(w.matrix), 0);
        }
        for (MatMulPath path : {MatMulPath::kGemv, MatMulPath::kGemm, MatMulPath::kAuto}) {
          SCOPED_TRACE(testing::Message()
                       << "rows " << shape.rows << " cols " << shape.cols << " n " << n
                       << " offset " << offset << " threads " << threads << " path "
                       << static_cast<int>(path) << " packed " << pack);
          std::vector<float> got(want.size(), std::nanf(""));
          runner.Run(w.matrix, x.data(), n, got.data(), path);
          const bool tiles = pack || (Kernels(isa).vnni_gemv && q8);
          const MatMulPath taken =
              path == MatMulPath::kAuto ? ChoosePath(type, n, shape.cols, tiles) : path;
          const bool quantized_acts = q8 && taken == MatMulPath::kGemv;
          if (k_quant && taken == MatMulPath::kGemv) {
            // ggml's integer sums on Q8_K activations, as the portable
            // quant_dot computes them: only f32 rounding order differs.
            if (pack) {
              ASSERT_TRUE(AllClose(got, want_q8k, mag, 2e-5));
            }
            continue;
          }
          if (quantized_acts && fp16_act_scale && !pack) {
            std::vector<double> bound = q8_bound;
            for (double& b : bound) b *= 1.13;
            ASSERT_TRUE(AllClose(got, want, mag, 2e-5, &bound));
          } else if (pack && type == GgmlType::kBF16 && taken == MatMulPath::kGemv) {
            // Packed BF16 rounds the activations to bf16: exact products of
            // those, and each within 2^-8 relative of the f32 one.
            ASSERT_TRUE(AllClose(got, want_bf16, mag, 2e-5));
            ASSERT_TRUE(AllClose(got, want, mag, 4e-3));
          } else if (quantized_acts) {
            // Same quantization as the model: only f32 summation order differs.
            ASSERT_TRUE(AllClose(got, want_q8, mag, 2e-5));
            // Against exact f32 activations: within the quantization bound.
            ASSERT_TRUE(AllClose(got, want, mag, 2e-5, &q8_bound));
          } else {
            ASSERT_TRUE(AllClose(got, want, mag, 2e-5));
          }
        }
      }
    }
  }
}

std::string MatMulName(const testing::TestParamInfo<std::tuple<Isa, GgmlType>>& info) {
  return std::string(IsaName(std::get<0>(info.param))) + "_" +
         std::string(GgmlTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest,
                         testing::Combine(testing::ValuesIn(SupportedIsas()),
                                          testing::Values(GgmlType::kF32, GgmlType::kF16,
                                                          GgmlType::kBF16, GgmlType::kQ8_0,
                                                          GgmlType::kQ4_0, GgmlType::kQ4_K,
                                                          GgmlType::kQ5_K, GgmlType::kQ6_K)),
                         MatMulName);

// Each row is computed by one thread the same way whatever the split, so the
// thread count must not change a single bit.
TEST(MatMulDeterminismTest, ThreadCountDoesNotChangeResults) {
  for (Isa isa : SupportedIsas()) {
    for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                          GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                          GgmlType::kQ6_K}) {
      const TestWeights w = MakeWeights(type, 300, 256, 0, 7);
      const std::vector<float> x = RandomFloats(5 * 256, 8);
      std::vector<float> one(5 * 300), two(5 * 300);
      MatMulRunner(Kernels(isa), 1).Run(w.matrix, x.data(), 5, one.data(), MatMulPath::kGemv);
      MatMulRunner(Kernels(isa), 2).Run(w.matrix, x.data(), 5, two.data(), MatMulPath::kGemv);
      EXPECT_EQ(one, two) << IsaName(isa) << " " << GgmlTypeName(type);
      MatMulRunner packed_one(Kernels(isa), 1), packed_two(Kernels(isa), 2);
      if (packed_one.Pack(w.matrix) == 0) continue;
      packed_two.Pack(w.matrix);
      packed_one.Run(w.matrix, x.data(), 5, one.data(), MatMulPath::kGemv);
      packed_two.Run(w.matrix, x.data(), 5, two.data(), MatMulPath::kGemv);
      EXPECT_EQ(one, two) << IsaName(isa) << " packed " << GgmlTypeName(type);
    }
  }
}

// Packed matrices share 2 MiB-aligned slabs (packed_weights.cc): a matrix
// keeps its bits while others in its slab are freed and new ones are packed
// beside it, and one larger than a slab gets a slab of its own.
TEST(PackedSlabTest, MatricesKeepTheirBitsWhateverIsPackedOrFreedAroundThem) {
  for (Isa isa : SupportedIsas()) {
    if (Kernels(isa).packed_gemv == nullptr) continue;
    const std::vector<float> x = RandomFloats(3 * 256, 11);
    const TestWeights kept = MakeWeights(GgmlType::kQ8_0, 100, 256, 0, 12);
    const TestWeights neighbour = MakeWeights(GgmlType::kF32, 64, 256, 0, 13);
    auto before = std::make_unique<MatMulRunner>(Kernels(isa), 2);
    ASSERT_GT(before->Pack(neighbour.matrix), 0);
    MatMulRunner runner(Kernels(isa), 2);
    ASSERT_GT(runner.Pack(kept.matrix), 0);
    std::vector<float> want(3 * 100), got(3 * 100);
    runner.Run(kept.matrix, x.data(), 3, want.data(), MatMulPath::kGemv);
    before.reset();  // frees a neighbour in the slab
    std::vector<TestWeights> later;
    std::vector<std::unique_ptr<MatMulRunner>> after;
    for (uint32_t seed = 20; seed < 24; ++seed) {  // neighbours packed (written) since
      later.push_back(MakeWeights(GgmlType::kQ4_K, 96, 512, 0, seed));
      after.push_back(std::make_unique<MatMulRunner>(Kernels(isa), 1));
      ASSERT_GT(after.back()->Pack(later.back().matrix), 0);
    }
    runner.Run(kept.matrix, x.data(), 3, got.data(), MatMulPath::kGemv);
    EXPECT_EQ(got, want) << IsaName(isa);

    // 8200 x 1024 F32 packs to 33.6 MB, more than a 32 MiB slab.
    const TestWeights big = MakeWeights(GgmlType::kF32, 8200, 1024, 0, 30);
    const std::vector<float> xb = RandomFloats(1024, 31);
    MatMulRunner big_runner(Kernels(isa), 2);
    ASSERT_GT(big_runner.Pack(big.matrix), int64_t{32} << 20);
    std::vector<float> y(8200), ref(8200);
    big_runner.Run(big.matrix, xb.data(), 1, y.data(), MatMulPath::kGemv);
    MatMulReference(big.matrix, xb.data(), 1, ref.data());
    EXPECT_TRUE(AllClose(y, ref, Magnitudes(big.matrix, xb.data(), 1), 1e-5)) << IsaName(isa);
  }
}

// RunGroup (Q, K and V; gate and up) gives each product the bits Run
// gives it: packed matrices of one input form in one region (a Q4_K group
// with a Q6_K V among them), the activations split among the threads past
// four tokens, and groups that cannot share a region (a Q8_0 beside a Q4_K;
// unpacked matrices) falling back to Run.
TEST(MatMulGroupTest, AGroupGivesEachProductRunsBits) {
  for (Isa isa : SupportedIsas()) {
    for (const auto& types : std::vector<std::vector<GgmlType>>{
             {GgmlType::kF32, GgmlType::kF32, GgmlType::kF32},
             {GgmlType::kF16, GgmlType::kF16, GgmlType::kF16},
             {GgmlType::kBF16, GgmlType::kBF16},
             {GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ8_0},
             {GgmlType::kQ4_0, GgmlType::kQ4_0},
             {GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K},
             {GgmlType::kQ5_K, GgmlType::kQ5_K},
             {GgmlType::kQ4_K, GgmlType::kQ8_0}}) {
      std::vector<TestWeights> w;
      const int64_t rows[] = {300, 100, 100};
      for (size_t i = 0; i < types.size(); ++i) {
        w.push_back(MakeWeights(types[i], rows[i], 256, 0, 11 + static_cast<uint32_t>(i)));
      }
      for (const int threads : {1, 2}) {
        MatMulRunner runner(Kernels(isa), threads);
        for (const TestWeights& m : w) runner.Pack(m.matrix);
        for (const int64_t n : {1, 3, 8, 40}) {
          SCOPED_TRACE(testing::Message() << IsaName(isa) << " " << GgmlTypeName(types[0]) << "+"
                                          << GgmlTypeName(types.back()) << " threads "
                                          << threads << " tokens " << n);
          const std::vector<float> x = RandomFloats(n * 256, 21);
          std::vector<std::vector<float>> want(types.size()), got(types.size());
          std::vector<MatMulRunner::Product> group;
          for (size_t i = 0; i < types.size(); ++i) {
            want[i].resize(n * rows[i]);
            got[i].assign(n * rows[i], -1.0f);
            runner.Run(w[i].matrix, x.data(), n, want[i].data());
            group.push_back({.w = w[i].matrix, .y = got[i].data()});
          }
          runner.RunGroup(group, x.data(), n);
          for (size_t i = 0; i < types.size(); ++i) EXPECT_EQ(got[i], want[i]) << "product " << i;
        }
      }
    }
  }
}

TEST(ChoosePathTest, LongQuantizedRowsStayOnIntegerDots) {
  // Few tokens: gemv for every type.
  EXPECT_EQ(ChoosePath(GgmlType::kF16, 8, 4096), MatMulPath::kGemv);
  // Many tokens: sgemm for float weights and for short quantized rows...
  EXPECT_EQ(ChoosePath(GgmlType::kF32, 32, 4096), MatMulPath::kGemm);
  EXPECT_EQ(ChoosePath(GgmlType::kF16, 64, 4096), MatMulPath::kGemm);
  EXPECT_EQ(ChoosePath(GgmlType::kQ4_K, 64, kShortRowCols), MatMulPath::kGemm);
  EXPECT_EQ(ChoosePath(GgmlType::kQ8_0, 64, kShortRowCols), MatMulPath::kGemm);
  // ...but long quantized rows keep their integer dots at any count.
  EXPECT_EQ(ChoosePath(GgmlType::kQ8_0, 4096, 2048), MatMulPath::kGemv);
  EXPECT_EQ(ChoosePath(GgmlType::kQ4_K, 4096, 2048), MatMulPath::kGemv);
  EXPECT_EQ(ChoosePath(GgmlType::kIQ4_NL, 4096, 1024), MatMulPath::kGemv);
  // A matrix with tiles of its own (Q8_0 and Q4_0 on the AVX-512 table, any
  // packed matrix) stays on them at any length.
  EXPECT_EQ(ChoosePath(GgmlType::kQ8_0, 512, kShortRowCols, true), MatMulPath::kGemv);
  EXPECT_EQ(ChoosePath(GgmlType::kQ4_0, 512, 64, true), MatMulPath::kGemv);
  EXPECT_EQ(ChoosePath(GgmlType::kQ4_K, 512, kShortRowCols, true), MatMulPath::kGemv);
  EXPECT_EQ(ChoosePath(GgmlType::kBF16, 512, 4096, true), MatMulPath::kGemv);
  EXPECT_EQ(ChoosePath(GgmlType::kBF16, 512, 4096, false), MatMulPath::kGemm);
}

TEST(MatMulDeathTest, RejectsPartialQ8Blocks) {
  const TestWeights w = MakeWeights(GgmlType::kQ8_0, 2, 64, 0, 21);
  const WeightMatrix partial = {GgmlType::kQ8_0, w.matrix.data, 2, 40};
  const std::vector<float> x(40);
  std::vector<float> y(2);
  MatMulRunner runner(Kernels(Isa::kPortable), 1);
  EXPECT_DEATH(runner.Run(partial, x.data(), 1, y.data()), "whole blocks");
}

// The gemv kernels write exactly the requested rows.
TEST(GemvTest, WritesOnlyItsRowRange) {
  for (Isa isa : SupportedIsas()) {
    const TestWeights w = MakeWeights(GgmlType::kF16, 40, 48, 0, 9);
    const std::vector<float> x = RandomFloats(3 * 48, 10);
    std::vector<float> y(3 * 40, -7.0f);
    std::vector<float> scratch(GemvScratchFloats(48));
    GemvArgs args;
    args.type = GgmlType::kF16;
    args.w = static_cast<const uint8_t*>(w.matrix.data);
    args.row_bytes = GgmlRowBytes(GgmlType::kF16, 48);
    args.cols = 48;
    args.n = 3;
    args.x = x.data();
    args.y = y.data();
    args.ldy = 40;
    args.scratch = scratch.data();
    Kernels(isa).gemv(args, 11, 29);
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t r = 0; r < 40; ++r) {
        EXPECT_EQ(y[t * 40 + r] == -7.0f, r < 11 || r >= 29)
            << IsaName(isa) << " " << t << "," << r;
      }
    }
  }
}

TEST(QuantizeQ8Test, MatchesReferenceBitForBit) {
  for (Isa isa : SupportedIsas()) {
    for (int64_t cols : {32, 64, 96, 512}) {
      const int64_t n = 3;
      std::vector<float> x = RandomFloats(n * cols, 11 + cols);
      for (int64_t i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero block
      x[40] = 0.5f;                                  // ties round to even
      const int64_t pairs = (cols / 32 + 1) / 2;
      std::vector<int8_t> qs(n * pairs * 64, 99);
      std::vector<int32_t> bias(n * pairs * 16, 99);
      std::vector<float> scale(n * pairs * 16, 99.0f);
      const Q8Activations out = {pairs, qs.data(), bias.data(), scale.data()};
      Kernels(isa).quantize_q8(x.data(), n, cols, out);
      std::vector<int8_t> want_q;
      std::vector<float> want_d;
      for (int64_t t = 0; t < n; ++t) {
        QuantizeActivationsReference(x.data() + t * cols, cols, &want_q, &want_d);
        for (int64_t b = 0; b < 2 * pairs; ++b) {
          const bool pad = b >= cols / 32;
          int32_t sum = 0;
          for (int i = 0; i < 32; ++i) {
            const int8_t want = pad ? 0 : want_q[b * 32 + i];
            ASSERT_EQ(qs[t * pairs * 64 + b * 32 + i], want) << IsaName(isa) << " " << cols;
            sum += want;
          }
          for (int j = 0; j < 8; ++j) {
            ASSERT_EQ(bias[t * pairs * 16 + b * 8 + j], -16 * sum);
            ASSERT_EQ(scale[t * pairs * 16 + b * 8 + j], pad ? 0.0f : want_d[b]);
          }
        }
      }
    }
  }
}

// The packed K-quant kernels' Q8_K quantizer writes the portable one's
// bytes: random blocks, a zero block, and blocks whose largest magnitude
// comes twice with opposite signs (the first one's sign wins).
TEST(QuantizeQ8KTest, Avx512MatchesPortableBitForBit) {
  if (!IsaSupported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 here";
  constexpr int64_t kCols = 6 * 256;
  std::vector<float> x = RandomFloats(kCols, 31, 3.0f);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  x[512 + 7] = -20.0f;
  x[512 + 100] = 20.0f;
  x[768 + 3] = 20.0f;
  x[768 + 200] = -20.0f;
  for (int64_t i = 1024; i < 1280; ++i) x[i] = 0.5f * static_cast<float>(i % 7) - 1.5f;  // ties
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    std::vector<uint8_t> want(QuantActivationBytes(type, kCols)), got(want.size(), 0xAA);
    QuantizeActivations(type, x.data(), kCols, want.data());
    QuantizeQ8KAvx512(x.data(), kCols, got.data());
    EXPECT_EQ(got, want) << GgmlTypeName(type);
  }
}

TEST(DequantizeRowsTest, MatchesDequantizeRow) {
  for (Isa isa : SupportedIsas()) {
    for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0}) {
      const int64_t cols = type == GgmlType::kQ8_0 ? 96 : 45;
      const TestWeights w = MakeWeights(type, 3, cols, 2, 12);
      std::vector<float> got(3 * cols), want(3 * cols);
      const auto* base = static_cast<const uint8_t*>(w.matrix.data);
      const int64_t row_bytes = GgmlRowBytes(type, cols);
      Kernels(isa).dequantize_rows(type, base, row_bytes, 3, cols, got.data());
      for (int64_t r = 0; r < 3; ++r) {
        DequantizeRow(type, base + r * row_bytes, want.data() + r * cols, cols);
      }
      EXPECT_EQ(got, want) << IsaName(isa) << " " << GgmlTypeName(type);
    }
  }
}

std::string Label(Isa isa, int64_t size) {
  return std::string(IsaName(isa)) + " size " + std::to_string(size);
}

TEST(DequantizeRowsTest, ConvertsEveryHalfExactly) {
  std::vector<uint16_t> halves(1 << 16);
  for (uint32_t h = 0; h < halves.size(); ++h) halves[h] = static_cast<uint16_t>(h);
  const auto* bytes = reinterpret_cast<const uint8_t*>(halves.data());
  for (Isa isa : SupportedIsas()) {
    std::vector<float> got(halves.size());
    Kernels(isa).dequantize_rows(GgmlType::kF16, bytes, 2 * halves.size(), 1, halves.size(),
                                 got.data());
    for (uint32_t h = 0; h < halves.size(); ++h) {
      const float want = Fp16ToFp32(halves[h]);
      if (std::isnan(want)) {  // vcvtph2ps quiets signaling NaNs; any NaN will do
        ASSERT_TRUE(std::isnan(got[h])) << IsaName(isa) << " half " << h;
        continue;
      }
      uint32_t got_bits, want_bits;
      std::memcpy(&got_bits, &got[h], 4);
      std::memcpy(&want_bits, &want, 4);
      ASSERT_EQ(got_bits, want_bits) << IsaName(isa) << " half " << h;
    }
  }
}

const int64_t kElementwiseSizes[] = {1, 15, 16, 17, 172, 512, 1000, 100003};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double rel,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + 1e-30) << what << " at " << i;
  }
}

TEST(ElementwiseTest, RmsNormMatchesReference) {
  for (Isa isa : SupportedIsas()) {
    auto backend = MakeCpuBackendWithIsa({.threads = 2}, isa);
    for (int64_t dim : {1, 15, 16, 17, 172, 512, 1000}) {
      for (int64_t n : {1, 3, 64}) {
        const std::vector<float> x = RandomFloats(n * dim, 13 + dim);
        const std::vector<float> weight = RandomFloats(dim, 14);
        std::vector<float> want(n * dim), got(n * dim), in_place = x;
        RmsNormReference(x.data(), weight.data(), n, dim, 1e-5f, want.data());
        Kernels(isa).rms_norm(x.data(), weight.data(), n, dim, 1e-5f, got.data());
        const std::string what = Label(isa, dim);
        ExpectNear(got, want, 2e-6, what);
        backend->RmsNorm(HostPtr<const float>(in_place.data()), HostPtr(weight.data()), n, dim,
                         1e-5f, HostPtr(in_place.data()));
        ExpectNear(in_place, want, 2e-6, what + " in place");
      }
    }
  }
}

TEST(ElementwiseTest, SwiGluMatchesReference) {
  for (Isa isa : SupportedIsas()) {
    auto backend = MakeCpuBackendWithIsa({.threads = 2}, isa);
    for (int64_t n : kElementwiseSizes) {
      std::vector<float> gate = RandomFloats(n, 15 + n, 12.0f);
      const std::vector<float> up = RandomFloats(n, 16);
      if (n > 8) {  // the tails of silu
        const float tails[] = {-100.0f, 100.0f, 0.0f, -1e30f, 1e30f, -87.5f, 88.5f, -1e-30f};
        std::copy(std::begin(tails), std::end(tails), gate.begin());
      }
      std::vector<float> want(n), got(n), in_place = gate;
      SwiGluReference(gate.data(), up.data(), n, want.data());
      Kernels(isa).swiglu(gate.data(), up.data(), n, got.data());
      const std::string what = Label(isa, n);
      ExpectNear(got, want, 3e-6, what);
      backend->SwiGlu(HostPtr<const float>(in_place.data()), HostPtr(up.data()), n,
                      HostPtr(in_place.data()));
      ExpectNear(in_place, want, 3e-6, what + " in place");
    }
  }
}

TEST(ElementwiseTest, AddMatchesReference) {
  for (Isa isa : SupportedIsas()) {
    auto backend = MakeCpuBackendWithIsa({.threads = 2}, isa);
    for (int64_t n : kElementwiseSizes) {
      const std::vector<float> x = RandomFloats(n, 17 + n);
      const std::vector<float> y = RandomFloats(n, 18);
      std::vector<float> want = x, got = x, via_backend = x;
      AddReference(want.data(), y.data(), n);
      Kernels(isa).add(got.data(), y.data(), n);
      backend->Add(HostPtr(via_backend.data()), HostPtr(y.data()), n);
      EXPECT_EQ(got, want) << IsaName(isa) << " " << n;
      EXPECT_EQ(via_backend, want) << IsaName(isa) << " " << n;
    }
  }
}

TEST(CpuBackendTest, PicksBestIsaAndRunsTinyModels) {
  auto backend = MakeCpuBackend({.threads = 2});
  EXPECT_EQ(backend->name(), "cpu-" + std::string(IsaName(DetectIsa())));
  EXPECT_EQ(backend->threads(), 2);
  EXPECT_GE(MakeCpuBackend({.threads = 0})->threads(), 1);
  // No columns: every output is an empty sum.
  const float unused = 0.0f;
  std::vector<float> zero_cols(3 * 5, 1.0f);
  backend->MatMul(HostMatrix({GgmlType::kF16, &unused, 5, 0}), HostPtr(&unused), 3,
                  HostPtr(zero_cols.data()));
  EXPECT_EQ(zero_cols, std::vector<float>(3 * 5, 0.0f));
  // stories260K-sized: 64x64 and 172x64 f32 matrices, one token.
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{64, 64}, {172, 64}, {64, 172}}) {
    const TestWeights w = MakeWeights(GgmlType::kF32, rows, cols, 0, 19);
    const std::vector<float> x = RandomFloats(cols, 20);
    std::vector<float> want(rows), got(rows);
    MatMulReference(w.matrix, x.data(), 1, want.data());
    backend->MatMul(HostMatrix(w.matrix), HostPtr(x.data()), 1, HostPtr(got.data()));
    EXPECT_TRUE(AllClose(got, want, Magnitudes(w.matrix, x.data(), 1), 2e-5));
  }
}

}  // namespace
}  // namespace tandem::engine::cpu
