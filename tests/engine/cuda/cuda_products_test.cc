// The matrix products' kernels against the CPU reference on random inputs:
// MatMul for every weight type (storing and adding to y), each GEMV at every row split, grouped and
// fused (SwiGLU) GEMVs, with an RMSNorm folded in or not, the feed-forward block, the f16
// dequantizer and the embedding gather.
// Skips without a usable CUDA device (cuda_test_util.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cpu/reference_kernels.h"
#include "engine/cuda/device.h"
#include "engine/cuda/gemv16.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/quant_gemm.h"
#include "engine/cuda/quant_kernels.h"
#include "engine/cuda/weight_types.h"
#include "engine/gguf/tensor_type.h"
#include "tests/engine/cuda/cuda_test_util.h"

namespace tandem::engine::cuda {
namespace {

TEST_F(CudaKernelsTest, MatMulMatchesTheReferenceForEachWeightType) {
  struct Case {
    GgmlType type;
    float tol;  // relative to sum_c |w[r, c]| |x[t, c]|
  };
  // F32: cuBLAS in f32. F16 / BF16 round the activations to the weight's
  // type (2^-11 / 2^-8 relative each, plus the weight's own rounding for
  // the quantized types dequantized to f16, by the tile GEMM or before
  // cuBLAS). The quantized GEMV keeps everything in f32, so only summation
  // order separates it from the reference (a host emulation of its order
  // stays near 1e-8).
  const float kGemvTol = 1e-5f;
  const float kF16GemmTol = 2e-3f;
  const std::vector<Case> cases = {
      {GgmlType::kF32, 1e-5f},  {GgmlType::kF16, kF16GemmTol}, {GgmlType::kBF16, 1e-2f},
      {GgmlType::kQ8_0, 0.0f}, {GgmlType::kQ4_0, 0.0f},       {GgmlType::kQ4_K, 0.0f},
      {GgmlType::kQ5_K, 0.0f}, {GgmlType::kQ6_K, 0.0f}};
  // Token counts on both sides of kQuantGemvMaxTokens (the GEMV, then the
  // tile GEMM) and of kQuantTileGemmMaxTokens (then the weight dequantized
  // whole and cuBLAS); 37 also takes the GEMV's launcher past one 16-token
  // launch when called directly.
  static_assert(kQuantGemvMaxTokens == 16 && kQuantTileGemmMaxTokens == 64);
  for (const Case& c : cases) {
    // One and several 256-element super-blocks per row (a warp's lanes
    // mostly idle, then busy), and rows not multiples of the GEMV's 4 warps.
    for (const auto& [tokens, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 512},
                                                                               {3, 512},
                                                                               {16, 512},
                                                                               {17, 512},
                                                                               {37, 512},
                                                                               {1, 256},
                                                                               {4, 256},
                                                                               {9, 768},
                                                                               {20, 256},
                                                                               {64, 768},
                                                                               {65, 256}}) {
      const bool quantized = GgmlIsQuantized(c.type);
      const float tol =
          !quantized ? c.tol : (tokens <= kQuantGemvMaxTokens ? kGemvTol : kF16GemmTol);
      const int64_t rows = 70;
      const std::vector<uint8_t> w = Encode(c.type, Random(rows * cols));
      const std::vector<float> x = Random(tokens * cols, 2.0f);
      const WeightMatrix host{.type = c.type, .data = w.data(), .rows = rows, .cols = cols};
      std::vector<float> want(tokens * rows);
      cpu::MatMulReference(host, x.data(), tokens, want.data());
      // sum |w| |x| per output, from the dequantized weight.
      std::vector<float> magnitude(tokens * rows, 0.0f);
      std::vector<float> row(cols);
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(c.type, w.data() + r * GgmlRowBytes(c.type, cols), row.data(), cols);
        for (int64_t t = 0; t < tokens; ++t) {
          double sum = 0.0;
          for (int64_t i = 0; i < cols; ++i) sum += std::abs(double{row[i]} * x[t * cols + i]);
          magnitude[t * rows + r] = static_cast<float>(sum);
        }
      }
      DeviceBuffer dw = Up(w), dx = Up(x);
      absl::StatusOr<DeviceBuffer> dy = DeviceBuffer::Allocate(want.size() * 4);
      ASSERT_TRUE(dy.ok());
      const DeviceWeight weight{.type = c.type, .data = dw.data(), .rows = rows, .cols = cols};
      absl::StatusOr<DeviceBuffer> scratch =
          DeviceBuffer::Allocate(MatMulScratchBytes(weight, tokens));
      ASSERT_TRUE(scratch.ok());
      const absl::Status s = MatMul(*stream_, weight, dx.as<float>(), tokens, dy->as<float>(),
                                    *scratch);
      ASSERT_TRUE(s.ok()) << s;
      const std::vector<float> got = Down<float>(*dy, want.size());
      for (int64_t i = 0; i < tokens * rows; ++i) {
        ASSERT_NEAR(got[i], want[i], tol * magnitude[i])
            << GgmlTypeName(c.type) << " tokens " << tokens << " at " << i;
      }
      // With `add` (MatMulAdd's fused residual add), the same product added
      // to what y held: the GEMVs add the very sum they would have stored;
      // cuBLAS with beta 1 may pick another algorithm, hence the tolerance.
      const std::vector<float> residual = Random(tokens * rows, 3.0f);
      DeviceBuffer dr = Up(residual);
      const absl::Status added_status =
          MatMul(*stream_, weight, dx.as<float>(), tokens, dr.as<float>(), *scratch, /*add=*/true);
      ASSERT_TRUE(added_status.ok()) << added_status;
      const std::vector<float> added = Down<float>(dr, want.size());
      for (int64_t i = 0; i < tokens * rows; ++i) {
        ASSERT_NEAR(added[i], residual[i] + got[i],
                    tol * magnitude[i] + 1e-6f * std::abs(residual[i]))
            << GgmlTypeName(c.type) << " tokens " << tokens << " added, at " << i;
      }
      if (!quantized) continue;
      // The GEMV launcher itself, for every count (it splits past 16).
      ASSERT_EQ(LaunchMatMulQuant(c.type, dw.data(), rows, cols, dx.as<float>(), tokens,
                                  dy->as<float>(), stream_->stream()),
                cudaSuccess);
      const std::vector<float> gemv = Down<float>(*dy, want.size());
      for (int64_t i = 0; i < tokens * rows; ++i) {
        ASSERT_NEAR(gemv[i], want[i], kGemvTol * magnitude[i])
            << GgmlTypeName(c.type) << " GEMV tokens " << tokens << " at " << i;
      }
    }
  }
}

// The f16 matrix the prefill GEMM multiplies is each weight dequantized by
// the CPU reference, then rounded to f16.
TEST_F(CudaKernelsTest, DequantizeToF16MatchesTheReference) {
  for (const GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                              GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const int64_t rows = 9, cols = 768;
    const std::vector<uint8_t> w = Encode(type, Random(rows * cols));
    std::vector<float> row(cols);
    std::vector<uint16_t> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(type, w.data() + r * GgmlRowBytes(type, cols), row.data(), cols);
      for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = Fp32ToFp16(row[c]);
    }
    DeviceBuffer dw = Up(w);
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(want.size() * 2);
    ASSERT_TRUE(out.ok());
    ASSERT_EQ(LaunchDequantizeToF16(type, dw.data(), rows, cols, out->data(), stream_->stream()),
              cudaSuccess);
    const std::vector<uint16_t> got = Down<uint16_t>(*out, want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << GgmlTypeName(type) << " at " << i;
    }
  }
}

// The embedding gather is the CPU's DequantizeRow bit for bit, every table
// type, with repeated and out-of-order ids.
TEST_F(CudaKernelsTest, EmbedRowsEqualsDequantizeRowBitForBit) {
  for (const GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                              GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_K,
                              GgmlType::kQ6_K}) {
    const int64_t vocab = 11, cols = 512;
    std::vector<float> values = Random(vocab * cols, 3.0f);
    values[7] = 40.0f;  // an outlier: large scales, small q elsewhere in its block
    const std::vector<uint8_t> table = Encode(type, values);
    const std::vector<int32_t> tokens = {3, 0, 10, 3, 7};
    const auto n = static_cast<int64_t>(tokens.size());
    std::vector<float> want(n * cols);
    for (int64_t t = 0; t < n; ++t) {
      DequantizeRow(type, table.data() + tokens[t] * GgmlRowBytes(type, cols),
                    want.data() + t * cols, cols);
    }
    DeviceBuffer dtable = Up(table), dtokens = Up(tokens);
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(want.size() * 4);
    ASSERT_TRUE(out.ok());
    ASSERT_EQ(LaunchEmbedRows(type, dtable.data(), cols, dtokens.as<int32_t>(), n,
                              out->as<float>(), stream_->stream()),
              cudaSuccess);
    const std::vector<float> got = Down<float>(*out, want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      uint32_t got_bits, want_bits;
      std::memcpy(&got_bits, &got[i], 4);
      std::memcpy(&want_bits, &want[i], 4);
      ASSERT_EQ(got_bits, want_bits)
          << GgmlTypeName(type) << " at " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

// The list the factory refuses models by (engine/cuda/weight_types.h) is
// exactly what MatMul takes: every other type the engine reads is
// Unimplemented, before anything is queued.
TEST_F(CudaKernelsTest, MatMulTakesExactlyTheListedWeightTypes) {
  const int64_t rows = 4, cols = 256, tokens = 2;
  for (uint32_t id = 0; id < 64; ++id) {
    const absl::StatusOr<GgmlType> type = GgmlTypeFromId(id);
    if (!type.ok()) continue;
    const std::vector<uint8_t> w(rows * GgmlRowBytes(*type, cols), 0);
    const std::vector<float> x(tokens * cols, 1.0f);
    DeviceBuffer dw = Up(w), dx = Up(x);
    absl::StatusOr<DeviceBuffer> dy = DeviceBuffer::Allocate(tokens * rows * sizeof(float));
    ASSERT_TRUE(dy.ok());
    const DeviceWeight weight{.type = *type, .data = dw.data(), .rows = rows, .cols = cols};
    absl::StatusOr<DeviceBuffer> scratch =
        DeviceBuffer::Allocate(MatMulScratchBytes(weight, tokens));
    ASSERT_TRUE(scratch.ok());
    const absl::Status s = MatMul(*stream_, weight, dx.as<float>(), tokens, dy->as<float>(),
                                  *scratch);
    EXPECT_EQ(s.ok(), HasMatMulKernel(*type)) << GgmlTypeName(*type) << ": " << s;
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    }
    ASSERT_TRUE(stream_->Synchronize().ok());
  }
}

// y[t, r] = x[t, :] . w[r, :] in double from the dequantized weight, and
// sum_c |w[r, c] x[t, c]| to scale each one's tolerance by.
struct Products {
  std::vector<double> sum;
  std::vector<double> magnitude;
};
Products ReferenceProducts(GgmlType type, const std::vector<uint8_t>& w, int64_t rows,
                           int64_t cols, const std::vector<float>& x, int64_t tokens) {
  Products p{std::vector<double>(tokens * rows), std::vector<double>(tokens * rows)};
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(type, w.data() + r * GgmlRowBytes(type, cols), row.data(), cols);
    for (int64_t t = 0; t < tokens; ++t) {
      double sum = 0.0, mag = 0.0;
      for (int64_t i = 0; i < cols; ++i) {
        sum += double{row[i]} * x[t * cols + i];
        mag += std::abs(double{row[i]} * x[t * cols + i]);
      }
      p.sum[t * rows + r] = sum;
      p.magnitude[t * rows + r] = mag;
    }
  }
  return p;
}

void ExpectNearProducts(const std::vector<float>& got, const Products& want, double tol) {
  ASSERT_EQ(got.size(), want.sum.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want.sum[i], tol * want.magnitude[i]) << "at " << i;
  }
}

// The quantized GEMV at each row split (4, 2 and 1 warps a row, picked by
// the row count), for each of its types.
TEST_F(CudaKernelsTest, QuantGemvMatchesTheReferenceAtEveryRowSplit) {
  const int64_t cols = 512;
  for (const GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_K,
                              GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    for (const int64_t rows : {70, 2100, 5000, 9000}) {
      for (const int64_t tokens : {1, 5}) {
        SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << " rows " << rows << " tokens "
                                        << tokens);
        const std::vector<uint8_t> w = Encode(type, Random(rows * cols));
        const std::vector<float> x = Random(tokens * cols, 2.0f);
        const Products want = ReferenceProducts(type, w, rows, cols, x, tokens);
        DeviceBuffer dw = Up(w), dx = Up(x);
        absl::StatusOr<DeviceBuffer> dy = DeviceBuffer::Allocate(want.sum.size() * 4);
        ASSERT_TRUE(dy.ok());
        ASSERT_EQ(LaunchMatMulQuant(type, dw.data(), rows, cols, dx.as<float>(), tokens,
                                    dy->as<float>(), stream_->stream()),
                  cudaSuccess);
        ExpectNearProducts(Down<float>(*dy, want.sum.size()), want, 1e-5);
      }
    }
  }
}

// The 16-bit GEMV (engine/cuda/gemv16.h) at every row split (1, 2, 4, 8
// warps a row, picked by the row count), token counts that take one launch
// and several (7: 4 + 2 + 1), and rows of few 16-byte chunks (lanes idle)
// and many.
TEST_F(CudaKernelsTest, Gemv16MatchesTheReferenceAtEveryRowSplit) {
  for (const GgmlType type : {GgmlType::kF16, GgmlType::kBF16}) {
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {70, 264}, {3000, 2048}, {5000, 264}, {9000, 264}}) {
      for (const int64_t tokens : {1, 3, 7, 8}) {
        SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << " rows " << rows << " cols "
                                        << cols << " tokens " << tokens);
        const std::vector<uint8_t> w = Encode(type, Random(rows * cols));
        const std::vector<float> x = Random(tokens * cols, 2.0f);
        const Products want = ReferenceProducts(type, w, rows, cols, x, tokens);
        DeviceBuffer dw = Up(w), dx = Up(x);
        absl::StatusOr<DeviceBuffer> dy = DeviceBuffer::Allocate(want.sum.size() * 4);
        ASSERT_TRUE(dy.ok());
        ASSERT_EQ(LaunchGemv16(dw.data(), type == GgmlType::kBF16, rows, cols, dx.as<float>(),
                               tokens, dy->as<float>(), stream_->stream()),
                  cudaSuccess);
        ExpectNearProducts(Down<float>(*dy, want.sum.size()), want, 1e-5);
      }
    }
  }
}

// MatMulGroup and MatMulSwiGlu (engine/cuda/matmul.h): Q, K and V of one
// type in one GEMV launch, the rows of a block straddling two products (1000
// and 260 rows, not multiples of a block's rows), and a V of another type
// in a launch of its own; gate and up with the SwiGLU applied to their sums
// equal to the separate products and SwiGlu. Every token count a GEMV takes
// (16-bit: 1-8; quantized: 1-16, the fused SwiGLU in launches of 8).
TEST_F(CudaKernelsTest, GroupedAndSwiGluProductsMatchSeparateOnes) {
  const int64_t cols = 512;
  const int64_t rows[3] = {1000, 260, 260};
  for (const auto& [type, v_type] : std::vector<std::pair<GgmlType, GgmlType>>{
           {GgmlType::kF16, GgmlType::kF16},
           {GgmlType::kBF16, GgmlType::kBF16},
           {GgmlType::kQ8_0, GgmlType::kQ8_0},
           {GgmlType::kQ4_0, GgmlType::kQ4_0},
           {GgmlType::kQ4_K, GgmlType::kQ6_K},
           {GgmlType::kQ5_K, GgmlType::kQ5_K},
           {GgmlType::kQ6_K, GgmlType::kQ6_K}}) {
    const bool quantized = GgmlIsQuantized(type);
    for (const int64_t tokens :
         quantized ? std::vector<int64_t>{1, 5, 16, 65} : std::vector<int64_t>{1, 3, 8, 9, 32}) {
      SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << " tokens " << tokens);
      const std::vector<float> x = Random(tokens * cols, 2.0f);
      DeviceBuffer dx = Up(x);
      std::vector<std::vector<uint8_t>> w;
      std::vector<DeviceBuffer> dw, dy;
      DeviceWeight weights[3];
      float* y[3];
      for (int i = 0; i < 3; ++i) {
        const GgmlType t = i == 2 ? v_type : type;
        w.push_back(Encode(t, Random(rows[i] * cols)));
        dw.push_back(Up(w.back()));
        absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(tokens * rows[i] * 4);
        ASSERT_TRUE(b.ok());
        dy.push_back(*std::move(b));
        weights[i] = {.type = t, .data = dw[i].data(), .rows = rows[i], .cols = cols};
        y[i] = dy[i].as<float>();
      }
      int64_t scratch_bytes = 1;
      for (const DeviceWeight& dwt : weights) {
        scratch_bytes = std::max(scratch_bytes, MatMulScratchBytes(dwt, tokens));
      }
      absl::StatusOr<DeviceBuffer> scratch = DeviceBuffer::Allocate(scratch_bytes);
      ASSERT_TRUE(scratch.ok());
      absl::Status s = MatMulGroup(*stream_, weights, y, 3, dx.as<float>(), tokens, *scratch);
      ASSERT_TRUE(s.ok()) << s;
      const bool gemv = tokens <= (quantized ? kQuantGemvMaxTokens : kGemv16MaxTokens);
      for (int i = 0; i < 3; ++i) {
        if (gemv) {
          const Products want = ReferenceProducts(weights[i].type, w[i], rows[i], cols, x, tokens);
          ExpectNearProducts(Down<float>(dy[i], want.sum.size()), want, 1e-5);
          continue;
        }
        // On the tensor cores, x rounded to 16 bits once for the group:
        // each product as MatMul gives it alone.
        absl::StatusOr<DeviceBuffer> alone = DeviceBuffer::Allocate(tokens * rows[i] * 4);
        ASSERT_TRUE(alone.ok());
        ASSERT_TRUE(
            MatMul(*stream_, weights[i], dx.as<float>(), tokens, alone->as<float>(), *scratch)
                .ok());
        EXPECT_EQ(Down<float>(dy[i], tokens * rows[i]), Down<float>(*alone, tokens * rows[i]))
            << "product " << i;
      }
      // Gate and up: the first two products (1000 and 260 rows) truncated
      // to 260 rows each, against two MatMuls and SwiGlu.
      DeviceWeight gate = weights[0], up = weights[1];
      gate.rows = up.rows = rows[1];
      absl::StatusOr<DeviceBuffer> fused = DeviceBuffer::Allocate(tokens * rows[1] * 4);
      // Up's rows where the GEMV does not take both (the tensor cores).
      absl::StatusOr<DeviceBuffer> up_rows = DeviceBuffer::Allocate(tokens * rows[1] * 4);
      ASSERT_TRUE(fused.ok() && up_rows.ok());
      s = MatMulSwiGlu(*stream_, gate, up, dx.as<float>(), tokens, fused->as<float>(),
                       up_rows->as<float>(), *scratch);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_TRUE(MatMul(*stream_, gate, dx.as<float>(), tokens, y[0], *scratch).ok());
      ASSERT_TRUE(MatMul(*stream_, up, dx.as<float>(), tokens, y[1], *scratch).ok());
      ASSERT_EQ(LaunchSwiGlu(y[0], y[1], tokens * rows[1], y[0], stream_->stream()), cudaSuccess);
      const std::vector<float> want = Down<float>(dy[0], tokens * rows[1]);
      const std::vector<float> got = Down<float>(*fused, tokens * rows[1]);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-6f * std::max(1.0f, std::abs(want[i]))) << "at " << i;
      }
    }
  }
}

// MatMulGroup and MatMulSwiGlu with an RMSNorm of x (RmsNormed, the forward
// pass's NormMatMuls): folded into the GEMV launches (the normed buffer left
// as it was; a Q4_K Q and K with a Q6_K V: two launches, each folding it);
// on the tensor cores (16-bit weights past the 16-bit GEMV's 8 tokens,
// quantized ones past the tile GEMM's 64) normed as x is rounded to 16 bits
// (the normed buffer left as it was too); else normed first (quantized
// weights past kQuantGemvNormTokensPerLaunch, to the tile GEMM's 64),
// against LaunchRmsNorm and then the same products. Tokens of different
// sizes, so that one token scaled by another's norm is caught.
TEST_F(CudaKernelsTest, NormedProductsMatchRmsNormThenTheProducts) {
  const int64_t cols = 512;
  const int64_t rows[3] = {1000, 260, 260};
  const float eps = 1e-5f;
  const std::vector<float> norm_weight = Random(cols, 1.5f);
  DeviceBuffer dnorm = Up(norm_weight);
  for (const auto& [type, v_type, tokens] : std::vector<std::tuple<GgmlType, GgmlType, int64_t>>{
           {GgmlType::kF16, GgmlType::kF16, 1},
           {GgmlType::kF16, GgmlType::kF16, 2},
           {GgmlType::kF16, GgmlType::kF16, 7},
           {GgmlType::kBF16, GgmlType::kBF16, 4},
           {GgmlType::kF16, GgmlType::kF16, 9},
           {GgmlType::kQ8_0, GgmlType::kQ8_0, 1},
           {GgmlType::kQ4_0, GgmlType::kQ4_0, 3},
           {GgmlType::kQ5_K, GgmlType::kQ5_K, 4},
           {GgmlType::kQ4_K, GgmlType::kQ6_K, 1},
           {GgmlType::kQ4_K, GgmlType::kQ6_K, 2},
           {GgmlType::kQ8_0, GgmlType::kQ8_0, 5},
           {GgmlType::kF16, GgmlType::kF16, 32},
           {GgmlType::kBF16, GgmlType::kBF16, 12},
           {GgmlType::kQ8_0, GgmlType::kQ8_0, 20},
           {GgmlType::kQ4_K, GgmlType::kQ6_K, 65},
           {GgmlType::kQ8_0, GgmlType::kQ8_0, 70}}) {
    SCOPED_TRACE(testing::Message() << GgmlTypeName(type) << " tokens " << tokens);
    const bool quantized = GgmlIsQuantized(type);
    const bool folded = tokens <= (quantized ? kQuantGemvNormTokensPerLaunch : kGemv16MaxTokens);
    const bool on_tensor_cores = tokens > (quantized ? kQuantTileGemmMaxTokens : kGemv16MaxTokens);
    std::vector<float> x = Random(tokens * cols, 2.0f);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = 0; c < cols; ++c) x[t * cols + c] *= static_cast<float>(1 + 10 * (t % 3));
    }
    DeviceBuffer dx = Up(x);
    std::vector<DeviceBuffer> dw, got, want;
    std::vector<std::vector<uint8_t>> host_w;
    DeviceWeight weights[3];
    float* y_got[3];
    float* y_want[3];
    int64_t scratch_bytes = 1;
    for (int i = 0; i < 3; ++i) {
      const GgmlType t = i == 2 ? v_type : type;
      host_w.push_back(Encode(t, Random(rows[i] * cols)));
      dw.push_back(Up(host_w[i]));
      weights[i] = {.type = t, .data = dw[i].data(), .rows = rows[i], .cols = cols};
      for (std::vector<DeviceBuffer>* ys : {&got, &want}) {
        absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(tokens * rows[i] * 4);
        ASSERT_TRUE(b.ok());
        ys->push_back(*std::move(b));
      }
      y_got[i] = got[i].as<float>();
      y_want[i] = want[i].as<float>();
      scratch_bytes = std::max(scratch_bytes, MatMulScratchBytes(weights[i], tokens));
    }
    absl::StatusOr<DeviceBuffer> scratch = DeviceBuffer::Allocate(scratch_bytes);
    ASSERT_TRUE(scratch.ok());
    const std::vector<float> sentinel(tokens * cols, -7.0f);
    DeviceBuffer normed = Up(sentinel);
    DeviceBuffer reference_normed = Up(sentinel);
    const RmsNormed norm{.weight = dnorm.as<float>(), .eps = eps, .normed = normed.as<float>()};
    ASSERT_TRUE(
        MatMulGroup(*stream_, weights, y_got, 3, dx.as<float>(), tokens, *scratch, &norm).ok());
    ASSERT_EQ(LaunchRmsNorm(dx.as<float>(), dnorm.as<float>(), tokens, cols, eps,
                            reference_normed.as<float>(), stream_->stream()),
              cudaSuccess);
    ASSERT_TRUE(
        MatMulGroup(*stream_, weights, y_want, 3, reference_normed.as<float>(), tokens, *scratch)
            .ok());
    // Folded: the same sums scaled once rather than each term, within f32's
    // rounding of the sum of the terms' magnitudes; otherwise the very same
    // products of the very same rows (on the tensor cores, the normed rows
    // rounded to 16 bits bit for bit as LaunchToF16 rounds them).
    const double tol = folded ? 1e-5 : 0.0;
    const std::vector<float> host_normed = Down<float>(reference_normed, tokens * cols);
    std::vector<Products> sizes;
    for (int i = 0; i < 3; ++i) {
      sizes.push_back(
          ReferenceProducts(weights[i].type, host_w[i], rows[i], cols, host_normed, tokens));
      const std::vector<float> a = Down<float>(got[i], tokens * rows[i]);
      const std::vector<float> b = Down<float>(want[i], tokens * rows[i]);
      for (size_t k = 0; k < a.size(); ++k) {
        ASSERT_NEAR(a[k], b[k], tol * (sizes[i].magnitude[k] + 1.0))
            << "product " << i << " at " << k;
      }
    }
    const std::vector<float> left = Down<float>(normed, tokens * cols);
    if (folded || on_tensor_cores) {
      EXPECT_EQ(left, sentinel) << "the folded norm writes no normed rows";
    } else {
      EXPECT_EQ(left, Down<float>(reference_normed, tokens * cols));
    }
    // Gate and up: the first two products truncated to 260 rows each.
    DeviceWeight gate = weights[0], up = weights[1];
    gate.rows = up.rows = rows[1];
    ASSERT_TRUE(MatMulSwiGlu(*stream_, gate, up, dx.as<float>(), tokens, y_got[0], y_got[1],
                             *scratch, &norm)
                    .ok());
    ASSERT_TRUE(MatMulSwiGlu(*stream_, gate, up, reference_normed.as<float>(), tokens, y_want[0],
                             y_want[1], *scratch)
                    .ok());
    const std::vector<float> a = Down<float>(got[0], tokens * rows[1]);
    const std::vector<float> b = Down<float>(want[0], tokens * rows[1]);
    for (size_t k = 0; k < a.size(); ++k) {
      // Row r of token t is row r of the gate's (product 0's 1000) and the
      // up's (product 1's 260) sums.
      const size_t t = k / rows[1], r = k % rows[1];
      const double g = sizes[0].magnitude[t * rows[0] + r] + 1.0;
      const double u = sizes[1].magnitude[t * rows[1] + r] + 1.0;
      ASSERT_NEAR(a[k], b[k], tol * g * u) << "SwiGLU at " << k;
    }
  }
}

// The feed-forward block (FeedForward) against MatMulSwiGlu then MatMul
// adding into the residual, with the norm and without: bit for bit, at GEMV
// sizes (where it is those calls) and where gate, up and down all go to the
// tensor cores (where the SwiGLU is stored in down's 16-bit type, as
// LaunchToF16 rounds it for down's product).
TEST_F(CudaKernelsTest, FeedForwardEqualsSwiGluThenTheDownProduct) {
  const int64_t dim = 512, n_ff = 768;
  const std::vector<float> norm_weight = Random(dim, 1.5f);
  DeviceBuffer dnorm = Up(norm_weight);
  for (const auto& [type, tokens] :
       std::vector<std::pair<GgmlType, int64_t>>{{GgmlType::kF16, 3},
                                                 {GgmlType::kF16, 9},
                                                 {GgmlType::kF16, 32},
                                                 {GgmlType::kBF16, 12},
                                                 {GgmlType::kQ8_0, 5},
                                                 {GgmlType::kQ8_0, 20},
                                                 {GgmlType::kQ4_K, 65},
                                                 {GgmlType::kQ6_K, 70}}) {
    for (const bool normed : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << GgmlTypeName(type) << " tokens " << tokens << (normed ? " normed" : ""));
      std::vector<DeviceBuffer> dw;
      DeviceWeight w[3];  // gate, up, down
      int64_t scratch_bytes = 1;
      for (int i = 0; i < 3; ++i) {
        const int64_t rows = i < 2 ? n_ff : dim, cols = i < 2 ? dim : n_ff;
        dw.push_back(Up(Encode(type, Random(rows * cols))));
        w[i] = {.type = type, .data = dw[i].data(), .rows = rows, .cols = cols};
        scratch_bytes = std::max(scratch_bytes, MatMulScratchBytes(w[i], tokens));
      }
      absl::StatusOr<DeviceBuffer> scratch = DeviceBuffer::Allocate(scratch_bytes);
      ASSERT_TRUE(scratch.ok());
      DeviceBuffer dx = Up(Random(tokens * dim, 2.0f));
      const std::vector<float> residual = Random(tokens * dim, 3.0f);
      DeviceBuffer got = Up(residual), want = Up(residual);
      std::vector<DeviceBuffer> ff;  // gate and up, each call's
      for (int i = 0; i < 4; ++i) {
        absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(tokens * n_ff * 4);
        ASSERT_TRUE(b.ok());
        ff.push_back(*std::move(b));
      }
      DeviceBuffer normed_rows = Up(std::vector<float>(tokens * dim, 0.0f));
      const RmsNormed norm{
          .weight = dnorm.as<float>(), .eps = 1e-5f, .normed = normed_rows.as<float>()};
      const RmsNormed* n = normed ? &norm : nullptr;
      absl::Status s =
          FeedForward(*stream_, w[0], w[1], w[2], dx.as<float>(), tokens, ff[0].as<float>(),
                      ff[1].as<float>(), got.as<float>(), *scratch, n);
      ASSERT_TRUE(s.ok()) << s;
      s = MatMulSwiGlu(*stream_, w[0], w[1], dx.as<float>(), tokens, ff[2].as<float>(),
                       ff[3].as<float>(), *scratch, n);
      ASSERT_TRUE(s.ok()) << s;
      s = MatMul(*stream_, w[2], ff[2].as<float>(), tokens, want.as<float>(), *scratch,
                 /*add=*/true);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(Down<float>(got, tokens * dim), Down<float>(want, tokens * dim));
    }
  }
}

}  // namespace
}  // namespace tandem::engine::cuda
