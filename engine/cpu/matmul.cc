#include "engine/cpu/matmul.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "common/check.h"
#include "engine/cpu/quant_dot.h"
#include "oneapi/dnnl/dnnl.h"

namespace tandem::engine::cpu {
namespace {

// Dequantized weight tile per thread on the gemm path (floats): big enough
// that sgemm's per-call packing of x is amortized, small enough for L2.
constexpr int64_t kGemmTileFloats = 1 << 17;

// First row of part `i` of `parts` over `rows`, on 16-row (64-byte y)
// boundaries so threads never share a cache line of the output.
int64_t RowSplit(int64_t rows, int i, int parts) {
  // Whole packed row groups (and 64-byte output lines) per thread.
  const int64_t r = (rows * i / parts + kPackRows - 1) / kPackRows * kPackRows;
  return std::min(rows, r);
}

void Sgemm(int64_t n, int64_t rows, int64_t cols, const float* x, const float* w, float* y,
           int64_t ldy) {
  // Row-major y[n, rows] = x[n, cols] * w[rows, cols]^T.
  const dnnl_status_t status =
      dnnl_sgemm('N', 'T', n, rows, cols, 1.0f, x, cols, w, cols, 0.0f, y, ldy);
  TANDEM_CHECK(status == dnnl_success, "dnnl_sgemm rejected valid shapes") << status;
}

}  // namespace

MatMulPath ChoosePath(GgmlType type, int64_t n_tokens, int64_t cols, bool tiles) {
  const bool integer_dot = type == GgmlType::kQ8_0 || HasQuantDot(type);
  if (integer_dot && cols > kShortRowCols) return MatMulPath::kGemv;
  if (tiles) return MatMulPath::kGemv;
  const int64_t gemm_from = type == GgmlType::kF32 ? 32 : 64;
  return n_tokens >= gemm_from ? MatMulPath::kGemm : MatMulPath::kGemv;
}

void* ScratchBuffer::Get(size_t bytes) {
  if (bytes > size_) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    data_.reset(std::aligned_alloc(64, rounded));
    TANDEM_CHECK(data_ != nullptr, "out of memory for kernel scratch") << rounded << " bytes";
    size_ = rounded;
  }
  return data_.get();
}

MatMulRunner::MatMulRunner(const KernelTable& kernels, int threads)
    : kernels_(kernels), threads_(threads), per_thread_(threads) {
  TANDEM_CHECK(threads >= 1, "matmul needs at least one thread");
}

int MatMulRunner::ThreadsFor(int64_t macs) const {
  return macs < kMinParallelMacs ? 1 : threads_;
}

void MatMulRunner::Run(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                       MatMulPath path) {
  TANDEM_CHECK(w.cols % GgmlBlockSize(w.type) == 0, "rows are whole blocks")
      << GgmlTypeName(w.type) << " cols=" << w.cols;
  if (n_tokens <= 0 || w.rows <= 0) return;
  if (w.cols == 0) {
    std::memset(y, 0, n_tokens * w.rows * sizeof(float));
    return;
  }
  const PackedMatrix* packed = PackedOf(w);
  if (path == MatMulPath::kAuto) {
    const bool tiles = packed != nullptr ||
                       (kernels_.vnni_gemv &&
                        (w.type == GgmlType::kQ8_0 || w.type == GgmlType::kQ4_0));
    path = ChoosePath(w.type, n_tokens, w.cols, tiles);
  }
  if (path == MatMulPath::kGemm) {
    RunGemm(w, x, n_tokens, y);
    return;
  }
  if (packed == nullptr) {
    RunGemv(w, x, n_tokens, y);
    return;
  }
  // The activations each packed layout's kernel takes, made in RunPacked.
  const PackedMatrix* one[] = {packed};
  float* out[] = {y};
  RunPacked(one, out, x, n_tokens);
}

const PackedMatrix* MatMulRunner::PackedOf(const WeightMatrix& w) const {
  const auto found = packed_.find(w.data);
  return found != packed_.end() && found->second.rows() == w.rows &&
                 found->second.cols() == w.cols && found->second.type() == w.type
             ? &found->second
             : nullptr;
}

void MatMulRunner::RunGroup(std::span<const Product> products, const float* x, int64_t n_tokens) {
  constexpr size_t kMaxGroup = 4;
  std::array<const PackedMatrix*, kMaxGroup> packed{};
  std::array<float*, kMaxGroup> y{};
  bool together = products.size() >= 2 && products.size() <= kMaxGroup && n_tokens > 0;
  for (size_t i = 0; together && i < products.size(); ++i) {
    const WeightMatrix& w = products[i].w;
    packed[i] = w.cols > 0 ? PackedOf(w) : nullptr;
    y[i] = products[i].y;
    together = packed[i] != nullptr && w.cols == products[0].w.cols &&
               PackedInputOf(w.type) == PackedInputOf(products[0].w.type);
  }
  if (!together) {
    for (const Product& p : products) Run(p.w, x, n_tokens, p.y);
    return;
  }
  const size_t n = products.size();
  RunPacked(std::span(packed.data(), n), std::span(y.data(), n), x, n_tokens);
}

void MatMulRunner::RunPacked(std::span<const PackedMatrix* const> w, std::span<float* const> y,
                             const float* x, int64_t n_tokens) {
  const PackedMatrix& first = *w[0];
  const int64_t cols = first.cols();
  int64_t macs = 0;
  for (const PackedMatrix* m : w) macs += m->rows() * cols * n_tokens;
  const int nth = ThreadsFor(macs);
  PackedGemvArgs base{.n = n_tokens};
  // The activations in the matrices' form, made once (cheap next to the
  // weights): bf16 and, for a few tokens, Q8_K before the threads start
  // (which hides the second thread's wake-up), Q8Activations for a few
  // tokens by every thread into its own buffer (cheaper than a serial step
  // plus moving the result across cores); for more tokens the threads split
  // them and meet at a barrier.
  const PackedInput input = PackedInputOf(first.type());
  const bool split_quantization = nth > 1 && n_tokens > 4;
  Q8Activations shared_xq;
  uint8_t* xk = nullptr;  // base.xk, written
  switch (input) {
    case PackedInput::kFloat:
      base.x = x;
      break;
    case PackedInput::kBf16: {
      const int64_t padded = 2 * first.blocks();
      auto* xb = static_cast<uint16_t*>(shared_activations_.Get(n_tokens * padded * 2));
      ToBf16Avx512(x, n_tokens, cols, padded, xb);
      base.xb = xb;
      break;
    }
    case PackedInput::kQ8K: {
      base.xk_bytes = QuantActivationBytes(first.type(), cols);
      xk = static_cast<uint8_t*>(shared_activations_.Get(n_tokens * base.xk_bytes));
      base.xk = xk;
      if (!split_quantization) {
        for (int64_t t = 0; t < n_tokens; ++t) {
          QuantizeQ8KAvx512(x + t * cols, cols, xk + t * base.xk_bytes);
        }
      }
      break;
    }
    case PackedInput::kQ8:
      if (split_quantization) {
        shared_xq = ActivationBuffers(shared_activations_, n_tokens, cols);
      } else {
        for (int i = 0; i < nth; ++i) ActivationBuffers(per_thread_[i].activations, n_tokens, cols);
      }
      break;
  }
#pragma omp parallel num_threads(nth)
  {
    const int tid = omp_get_thread_num();
    const int parts = omp_get_num_threads();
    PackedGemvArgs args = base;
    Q8Activations xq;
    const int64_t t0 = n_tokens * tid / parts;
    const int64_t t1 = n_tokens * (tid + 1) / parts;
    if (input == PackedInput::kQ8K && split_quantization) {
      for (int64_t t = t0; t < t1; ++t) {
        QuantizeQ8KAvx512(x + t * cols, cols, xk + t * base.xk_bytes);
      }
#pragma omp barrier
    } else if (input == PackedInput::kQ8 && split_quantization) {
      Q8Activations part = shared_xq;
      part.qs += t0 * part.pairs * 64;
      part.bias += t0 * part.pairs * 16;
      part.scale += t0 * part.pairs * 16;
      kernels_.quantize_q8(x + t0 * cols, t1 - t0, cols, part);
#pragma omp barrier
      args.xq = &shared_xq;
    } else if (input == PackedInput::kQ8) {
      xq = ActivationBuffers(per_thread_[tid].activations, n_tokens, cols);
      kernels_.quantize_q8(x, n_tokens, cols, xq);
      args.xq = &xq;
    }
    for (size_t i = 0; i < w.size(); ++i) {
      args.w = w[i];
      args.y = y[i];
      args.ldy = w[i]->rows();
      const int64_t begin = RowSplit(w[i]->rows(), tid, parts);
      const int64_t end = RowSplit(w[i]->rows(), tid + 1, parts);
      if (begin < end) kernels_.packed_gemv(args, begin, end);
    }
  }
}

int64_t MatMulRunner::Pack(const WeightMatrix& w, bool release_source) {
  if (kernels_.packed_gemv == nullptr || !PackedMatrix::Packable(w.type) || w.rows <= 0 ||
      w.cols <= 0 || packed_.contains(w.data) ||
      (w.type == GgmlType::kBF16 && !Bf16DotSupported())) {
    return 0;
  }
  PackedMatrix p = PackedMatrix::Pack(w);
  const int64_t bytes = p.bytes();
  packed_.emplace(w.data, std::move(p));
  if (release_source) ReleasePages(w);
  return bytes;
}

Q8Activations MatMulRunner::ActivationBuffers(ScratchBuffer& buffer, int64_t n_tokens,
                                               int64_t cols) {
  Q8Activations xq;
  xq.pairs = (cols / kQ8_0BlockSize + 1) / 2;
  const int64_t lanes = n_tokens * xq.pairs * 16;  // int32/float lanes per array
  auto* base = static_cast<uint8_t*>(buffer.Get(3 * lanes * 4));
  xq.qs = reinterpret_cast<int8_t*>(base);
  xq.bias = reinterpret_cast<int32_t*>(base + lanes * 4);
  xq.scale = reinterpret_cast<float*>(base + 2 * lanes * 4);
  return xq;
}

void MatMulRunner::RunQuantGemv(const WeightMatrix& w, const float* x, int64_t n_tokens,
                                float* y) {
  // The activations quantized once (cheap next to the weights), then rows
  // split over the threads.
  const int64_t x_bytes = QuantActivationBytes(w.type, w.cols);
  auto* xq = static_cast<uint8_t*>(shared_activations_.Get(n_tokens * x_bytes));
  for (int64_t t = 0; t < n_tokens; ++t) {
    QuantizeActivations(w.type, x + t * w.cols, w.cols, xq + t * x_bytes);
  }
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = GgmlRowBytes(w.type, w.cols);
  const int nth = ThreadsFor(w.rows * w.cols * n_tokens);
#pragma omp parallel num_threads(nth)
  {
    const int tid = omp_get_thread_num();
    const int parts = omp_get_num_threads();
    const int64_t end = RowSplit(w.rows, tid + 1, parts);
    for (int64_t r = RowSplit(w.rows, tid, parts); r < end; ++r) {
      kernels_.quant_dot(w.type, data + r * row_bytes, xq, x_bytes, n_tokens, w.cols, y + r,
                         w.rows);
    }
  }
}

void MatMulRunner::RunGemv(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  // Q8_0, and Q4_0 where the table's gemv takes it, multiply Q8Activations.
  const bool q8 = w.type == GgmlType::kQ8_0 || (w.type == GgmlType::kQ4_0 && kernels_.vnni_gemv);
  if (!q8 && HasQuantDot(w.type)) {
    RunQuantGemv(w, x, n_tokens, y);
    return;
  }
  GemvArgs args;
  args.type = w.type;
  args.w = static_cast<const uint8_t*>(w.data);
  args.row_bytes = GgmlRowBytes(w.type, w.cols);
  args.cols = w.cols;
  args.n = n_tokens;
  args.x = x;
  args.y = y;
  args.ldy = w.rows;
  const int nth = ThreadsFor(w.rows * w.cols * n_tokens);
  const size_t scratch_bytes = GemvScratchFloats(w.cols) * sizeof(float);

  if (nth == 1) {
    Q8Activations xq;
    if (q8) {
      xq = ActivationBuffers(per_thread_[0].activations, n_tokens, w.cols);
      kernels_.quantize_q8(x, n_tokens, w.cols, xq);
      args.xq = &xq;
    }
    args.scratch = static_cast<float*>(per_thread_[0].floats.Get(scratch_bytes));
    kernels_.gemv(args, 0, w.rows);
    return;
  }

  // Q8_0 activations: with few tokens every thread quantizes all of them into
  // its own buffer (cheaper than a serial step plus moving the result across
  // cores); with many, the threads split the tokens and meet at a barrier.
  const bool private_q8 = q8 && n_tokens <= 4;
  Q8Activations shared_xq;
  if (q8 && !private_q8) shared_xq = ActivationBuffers(shared_activations_, n_tokens, w.cols);
  for (int i = 0; i < nth; ++i) {
    per_thread_[i].floats.Get(scratch_bytes);
    if (private_q8) ActivationBuffers(per_thread_[i].activations, n_tokens, w.cols);
  }
#pragma omp parallel num_threads(nth)
  {
    // With one thread the region is inactive, so oneDNN would open its own
    // team of omp_get_max_threads() threads and compete with whatever else
    // runs on the machine (e.g. the other worker of `tandem up`). This sets
    // the ICV of this region's task only.
    omp_set_num_threads(1);
    const int tid = omp_get_thread_num();
    const int parts = omp_get_num_threads();
    GemvArgs local = args;
    local.scratch = static_cast<float*>(per_thread_[tid].floats.Get(scratch_bytes));
    Q8Activations xq;
    if (private_q8) {
      xq = ActivationBuffers(per_thread_[tid].activations, n_tokens, w.cols);
      kernels_.quantize_q8(x, n_tokens, w.cols, xq);
      local.xq = &xq;
    } else if (q8) {
      const int64_t t0 = n_tokens * tid / parts;
      const int64_t t1 = n_tokens * (tid + 1) / parts;
      Q8Activations part = shared_xq;
      part.qs += t0 * part.pairs * 64;
      part.bias += t0 * part.pairs * 16;
      part.scale += t0 * part.pairs * 16;
      kernels_.quantize_q8(x + t0 * w.cols, t1 - t0, w.cols, part);
#pragma omp barrier
      local.xq = &shared_xq;
    }
    const int64_t begin = RowSplit(w.rows, tid, parts);
    const int64_t end = RowSplit(w.rows, tid + 1, parts);
    if (begin < end) kernels_.gemv(local, begin, end);
  }
}

void MatMulRunner::RunGemm(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = GgmlRowBytes(w.type, w.cols);
  // f32 weights go to sgemm in place; anything else (or a misaligned f32
  // matrix) is dequantized tile by tile into per-thread scratch.
  const bool in_place =
      w.type == GgmlType::kF32 && reinterpret_cast<uintptr_t>(data) % alignof(float) == 0;
  const int64_t tile_rows = std::max<int64_t>(16, kGemmTileFloats / w.cols / 16 * 16);
  const int nth = ThreadsFor(w.rows * w.cols * n_tokens);
  if (!in_place) {
    const size_t tile_bytes = std::min(tile_rows, w.rows) * w.cols * sizeof(float);
    for (int i = 0; i < nth; ++i) per_thread_[i].floats.Get(tile_bytes);
  }
  // Each thread runs a single-threaded sgemm on its own rows (oneDNN does not
  // nest inside an OpenMP parallel region), so no tile is shared or waited on.
#pragma omp parallel num_threads(nth)
  {
    // With one thread the region is inactive, so oneDNN would open its own
    // team of omp_get_max_threads() threads and compete with whatever else
    // runs on the machine (e.g. the other worker of `tandem up`). This sets
    // the ICV of this region's task only.
    omp_set_num_threads(1);
    const int tid = omp_get_thread_num();
    const int parts = omp_get_num_threads();
    const int64_t begin = RowSplit(w.rows, tid, parts);
    const int64_t end = RowSplit(w.rows, tid + 1, parts);
    if (in_place && begin < end) {
      Sgemm(n_tokens, end - begin, w.cols, x,
            reinterpret_cast<const float*>(data + begin * row_bytes), y + begin, w.rows);
    } else if (begin < end) {
      auto* tile = static_cast<float*>(per_thread_[tid].floats.Get(0));
      for (int64_t r = begin; r < end; r += tile_rows) {
        const int64_t m = std::min(tile_rows, end - r);
        kernels_.dequantize_rows(w.type, data + r * row_bytes, row_bytes, m, w.cols, tile);
        Sgemm(n_tokens, m, w.cols, x, tile, y + r, w.rows);
      }
    }
  }
}

}  // namespace tandem::engine::cpu
