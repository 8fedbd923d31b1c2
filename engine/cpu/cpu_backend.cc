// The CPU Backend: host memory (a DevicePtr is the host address), weights
// as views of the mapped file, MatMul through MatMulRunner
// (engine/cpu/matmul.h), the element-wise ops straight from the kernel
// table, split over the OpenMP pool only when the work outweighs the fork.
// The ops the forward pass used to run itself (embedding, bias, RoPE, the KV
// store, the row gather, the logits reduction) keep its arithmetic exactly.
// Engine-thread only.
#include "engine/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/strings.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/huge_pages.h"
#include "engine/cpu/matmul.h"
#include "engine/sample/sampler.h"

namespace tandem::engine {
namespace cpu {
namespace {

// Element-wise ops below this many elements run on the calling thread.
constexpr int64_t kMinParallelElements = 1 << 15;

WeightMatrix HostView(const DeviceMatrix& w) {
  return {.type = w.type, .data = w.data.backend_address(), .rows = w.rows, .cols = w.cols};
}

DevicePtr<const float> VectorView(const std::vector<float>& v) {
  return v.empty() ? DevicePtr<const float>() : DevicePtr<const float>(v.data());
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(const KernelTable& kernels, int threads)
      : kernels_(kernels),
        threads_(threads),
        matmul_(kernels, threads),
        name_(absl::StrCat("cpu-", ToAbsl(IsaName(kernels.isa)))) {}

  std::string_view name() const override { return name_; }
  int threads() const override { return threads_; }

  // Default-initialized, so the OS commits pages only once they are written
  // (RSS follows use, the size bounds it). Allocations of 2 MiB and more (the
  // KV pool, scratch) go on huge pages (huge_pages.h): attention reads a
  // sequence's blocks from all over the pool (25.7M model, 16 sequences at
  // 512 tokens: batched decode 7-16% faster); RSS then grows in 2 MiB steps.
  absl::StatusOr<DevicePtr<uint8_t>> Allocate(int64_t bytes, std::string_view what) override {
    TANDEM_CHECK(bytes >= 0, "allocation size is not negative");
    const bool huge = bytes >= static_cast<int64_t>(kHugePageBytes);
    const std::align_val_t align = huge ? std::align_val_t{kHugePageBytes} : kAlign;
    auto* p = static_cast<uint8_t*>(
        ::operator new(static_cast<size_t>(std::max<int64_t>(bytes, 1)), align, std::nothrow));
    if (huge && p != nullptr) AdviseHugePages(p, static_cast<size_t>(bytes));
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat(ToAbsl(what), ": cannot allocate ", bytes, " bytes of host memory"));
    }
    memory_.emplace_back(p, Free{align});
    return DevicePtr<uint8_t>(p);
  }

  void Upload(DevicePtr<uint8_t> dst, std::span<const uint8_t> src) override {
    if (!src.empty()) std::memcpy(dst.backend_address(), src.data(), src.size());
  }

  void Download(DevicePtr<const uint8_t> src, std::span<uint8_t> dst) override {
    if (!dst.empty()) std::memcpy(dst.data(), src.backend_address(), dst.size());
  }

  void Synchronize() override {}

  // Views, no copy: matrices into the mapped file, vectors into the model's.
  absl::StatusOr<DeviceWeights> PrepareWeights(const ModelWeights& w) override {
    const auto matrix = [](const WeightMatrix& m) {
      return DeviceMatrix{.type = m.type,
                          .data = DevicePtr<const uint8_t>(static_cast<const uint8_t*>(m.data)),
                          .rows = m.rows,
                          .cols = m.cols};
    };
    // Matrices with a packed layout on this ISA are repacked once here, and
    // their mapped pages given back (not a tied output's: the embedding
    // table is gathered from every step).
    matmul_.Pack(w.output, /*release_source=*/w.output.data != w.token_embd.data);
    for (const LayerWeights& l : w.layers) {
      for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        matmul_.Pack(*m, /*release_source=*/true);
      }
    }
    DeviceWeights d{.token_embd = matrix(w.token_embd),
                    .output_norm = VectorView(w.output_norm),
                    .output = matrix(w.output),
                    .layers = {}};
    for (const LayerWeights& l : w.layers) {
      d.layers.push_back({.attn_norm = VectorView(l.attn_norm),
                          .wq = matrix(l.wq),
                          .wk = matrix(l.wk),
                          .wv = matrix(l.wv),
                          .wo = matrix(l.wo),
                          .bq = VectorView(l.bq),
                          .bk = VectorView(l.bk),
                          .bv = VectorView(l.bv),
                          .ffn_norm = VectorView(l.ffn_norm),
                          .w_gate = matrix(l.w_gate),
                          .w_up = matrix(l.w_up),
                          .w_down = matrix(l.w_down)});
    }
    return d;
  }

  absl::Status PrepareRope(const RopeTable& rope) override {
    rope_ = &rope;
    return absl::OkStatus();
  }

  absl::Status ReserveStep(const StepLimits& limits) override {
    seqs_.reserve(static_cast<size_t>(limits.max_seqs));
    return absl::OkStatus();
  }

  // The metadata is read where it lies (host memory): nothing to copy.
  void BeginStep(const StepMetadata& step) override {
    step_ = &step;
    seqs_.clear();
    const std::span<const BlockId> tables(step.block_tables);
    for (const StepSequence& s : step.seqs) {
      seqs_.push_back({.first_row = s.first_row,
                       .n_rows = s.n_rows,
                       .kv_start = s.kv_start,
                       .blocks = tables.subspan(s.table_offset, s.n_blocks)});
    }
  }

  void Embed(const DeviceMatrix& table, DevicePtr<float> x) override {
    const int64_t row_bytes = GgmlRowBytes(table.type, table.cols);
    const uint8_t* rows = table.data.backend_address();
    float* out = x.backend_address();
    const std::vector<int32_t>& tokens = step().tokens;
    for (size_t t = 0; t < tokens.size(); ++t) {
      DequantizeRow(table.type, rows + tokens[t] * row_bytes,
                    out + static_cast<int64_t>(t) * table.cols, table.cols);
    }
  }

  void MatMul(const DeviceMatrix& w, DevicePtr<const float> x, int64_t n_tokens,
              DevicePtr<float> y) override {
    matmul_.Run(HostView(w), x.backend_address(), n_tokens, y.backend_address());
  }

  // Q, K and V in one parallel region where they are packed alike
  // (MatMulRunner::RunGroup); the same bits as three MatMuls.
  void MatMuls(std::span<const MatMulProduct> products, DevicePtr<const float> x,
               int64_t n_tokens) override {
    std::array<MatMulRunner::Product, 3> group;
    if (products.size() > group.size()) return Backend::MatMuls(products, x, n_tokens);
    for (size_t i = 0; i < products.size(); ++i) {
      group[i] = {.w = HostView(*products[i].w), .y = products[i].y.backend_address()};
    }
    matmul_.RunGroup(std::span(group.data(), products.size()), x.backend_address(), n_tokens);
  }

  // Gate and up likewise, then SwiGlu.
  void MatMulSwiGlu(const DeviceMatrix& w_gate, const DeviceMatrix& w_up,
                    DevicePtr<const float> x, int64_t n_tokens, DevicePtr<float> gate,
                    DevicePtr<float> up) override {
    const MatMulRunner::Product group[] = {{.w = HostView(w_gate), .y = gate.backend_address()},
                                           {.w = HostView(w_up), .y = up.backend_address()}};
    matmul_.RunGroup(group, x.backend_address(), n_tokens);
    SwiGlu(gate, up, n_tokens * w_gate.rows, gate);
  }

  void AddBias(DevicePtr<float> x, DevicePtr<const float> bias, int64_t n_rows,
               int64_t dim) override {
    const float* b = bias.backend_address();
    for (int64_t t = 0; t < n_rows; ++t) {
      float* row = x.backend_address() + t * dim;
      for (int64_t i = 0; i < dim; ++i) row[i] += b[i];
    }
  }

  void Rope(DevicePtr<float> x, int32_t n_heads, int32_t head_dim) override {
    TANDEM_CHECK(rope_ != nullptr, "PrepareRope before Rope");
    const std::vector<int32_t>& positions = step().positions;
    const int64_t stride = int64_t{n_heads} * head_dim;
    const auto n = static_cast<int64_t>(positions.size());
    // A prompt chunk's rows split over the threads (each row is its own).
#pragma omp parallel for num_threads(threads_) \
    schedule(static) if (n * stride >= kMinParallelElements)
    for (int64_t t = 0; t < n; ++t) {
      rope_->Apply(x.backend_address() + t * stride, n_heads, head_dim, positions[t]);
    }
  }

  void StoreKv(const PagedKvView& kv, DevicePtr<const float> k,
               DevicePtr<const float> v) override {
    const int64_t elem = GgmlBlockBytes(kv.dtype);
    const int64_t row_bytes = int64_t{kv.kv_dim} * elem;
    const std::vector<int64_t>& slots = step().slot_mapping;
    const auto n = static_cast<int64_t>(slots.size());
    // A prompt chunk's rows split over the threads (each goes to its own slot).
#pragma omp parallel for num_threads(threads_) \
    schedule(static) if (n * kv.kv_dim >= kMinParallelElements)
    for (int64_t t = 0; t < n; ++t) {
      uint8_t* block = kv.base.backend_address() + slots[t] / kv.block_size * kv.block_bytes;
      const int64_t at = slots[t] % kv.block_size * row_bytes;
      const float* kt = k.backend_address() + static_cast<int64_t>(t) * kv.kv_dim;
      const float* vt = v.backend_address() + static_cast<int64_t>(t) * kv.kv_dim;
      uint8_t* kd = block + kv.k_offset + at;
      uint8_t* vd = block + kv.v_offset + at;
      if (kv.dtype == GgmlType::kF32) {
        std::memcpy(kd, kt, row_bytes);
        std::memcpy(vd, vt, row_bytes);
        continue;
      }
      auto* kh = reinterpret_cast<uint16_t*>(kd);
      auto* vh = reinterpret_cast<uint16_t*>(vd);
      for (int32_t i = 0; i < kv.kv_dim; ++i) {
        kh[i] = Fp32ToFp16(kt[i]);
        vh[i] = Fp32ToFp16(vt[i]);
      }
    }
  }

  void RmsNorm(DevicePtr<const float> xp, DevicePtr<const float> weightp, int64_t n_tokens,
               int64_t dim, float eps, DevicePtr<float> yp) override {
    const float* x = xp.backend_address();
    const float* weight = weightp.backend_address();
    float* y = yp.backend_address();
    if (n_tokens < 2 * threads_ || n_tokens * dim < kMinParallelElements) {
      kernels_.rms_norm(x, weight, n_tokens, dim, eps, y);
      return;
    }
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t t = 0; t < n_tokens; ++t) {
      kernels_.rms_norm(x + t * dim, weight, 1, dim, eps, y + t * dim);
    }
  }

  void SwiGlu(DevicePtr<const float> gatep, DevicePtr<const float> upp, int64_t n,
              DevicePtr<float> outp) override {
    const float* gate = gatep.backend_address();
    const float* up = upp.backend_address();
    float* out = outp.backend_address();
    if (n < kMinParallelElements) {
      kernels_.swiglu(gate, up, n, out);
      return;
    }
    const int64_t chunk = ChunkFor(n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < n; i += chunk) {
      kernels_.swiglu(gate + i, up + i, std::min(chunk, n - i), out + i);
    }
  }

  void Add(DevicePtr<float> xp, DevicePtr<const float> yp, int64_t n) override {
    float* x = xp.backend_address();
    const float* y = yp.backend_address();
    if (n < kMinParallelElements) {
      kernels_.add(x, y, n);
      return;
    }
    const int64_t chunk = ChunkFor(n);
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < n; i += chunk) kernels_.add(x + i, y + i, std::min(chunk, n - i));
  }

  void PagedAttention(const AttentionOp& op) override {
    cpu::PagedAttention({.q = op.q.backend_address(),
                         .out = op.out.backend_address(),
                         .n_head = op.n_head,
                         .n_head_kv = op.n_head_kv,
                         .head_dim = op.head_dim,
                         .kv = op.kv,
                         .seqs = seqs_},
                        {.threads = threads_, .isa = kernels_.isa});
  }

  void GatherRows(DevicePtr<const float> x, int64_t dim, DevicePtr<float> out) override {
    const std::vector<int32_t>& rows = step().logit_rows;
    for (size_t r = 0; r < rows.size(); ++r) {
      std::copy_n(x.backend_address() + rows[r] * dim, dim,
                  out.backend_address() + static_cast<int64_t>(r) * dim);
    }
  }

  // The sampler's own functions (engine/sample/sampler.h), so the stats and
  // top-k are those Sampler::Sample computes from the same row.
  void ReduceLogits(DevicePtr<const float> logits, int32_t n_vocab,
                    std::span<LogitsSummary> out) override {
    const StepMetadata& s = step();
    TANDEM_CHECK(out.size() >= s.logit_top_k.size(), "a summary per logits row");
    for (size_t r = 0; r < s.logit_top_k.size(); ++r) {
      if (s.logit_top_k[r] < 0) continue;
      const std::span<const float> row(logits.backend_address() + r * n_vocab,
                                       static_cast<size_t>(n_vocab));
      const LogSoftmaxStats stats = ComputeLogSoftmaxStats(row);
      const std::vector<TokenLogprob> top = TopLogprobs(row, stats, s.logit_top_k[r]);
      LogitsSummary& o = out[r];
      o.max = stats.max;
      o.log_sum = stats.log_sum;
      o.target_logit = s.logit_target[r] >= 0 ? row[s.logit_target[r]] : 0.0f;
      o.n_top = static_cast<int32_t>(top.size());
      for (size_t i = 0; i < top.size(); ++i) {
        o.top_ids[i] = top[i].id;
        o.top_logprobs[i] = top[i].logprob;
      }
    }
  }

  void ReadBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                  std::span<uint8_t> out) override {
    TANDEM_CHECK(static_cast<int64_t>(out.size()) ==
                     static_cast<int64_t>(ids.size()) * pool.block_bytes,
                 "ReadBlocks' staging holds exactly the blocks");
    for (size_t i = 0; i < ids.size(); ++i) {
      std::memcpy(out.data() + i * pool.block_bytes,
                  pool.base.backend_address() + int64_t{ids[i]} * pool.block_bytes,
                  pool.block_bytes);
    }
  }

  void WriteBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                   std::span<const KvBlockBytes> blocks) override {
    TANDEM_CHECK(ids.size() == blocks.size(), "one block of bytes per id");
    for (size_t i = 0; i < ids.size(); ++i) {
      TANDEM_CHECK(static_cast<int64_t>(blocks[i].size()) == pool.block_bytes,
                   "a written block is exactly one block");
      blocks[i].CopyTo(pool.base.backend_address() + int64_t{ids[i]} * pool.block_bytes);
    }
  }

  void MoveKvSlots(std::span<const PagedKvView> layers, int32_t head_dim,
                   std::span<const int64_t> src, std::span<const int64_t> dst,
                   int32_t delta) override {
    TANDEM_CHECK(src.size() == dst.size(), "one destination slot per source slot");
    TANDEM_CHECK(rope_ != nullptr, "PrepareRope before MoveKvSlots");
    if (src.empty()) return;
    for (const PagedKvView& kv : layers) {
      const bool f16 = kv.dtype == GgmlType::kF16;
      TANDEM_CHECK(f16 || kv.dtype == GgmlType::kF32, "KV is f32 or f16");
      const int64_t elem = f16 ? 2 : 4;
      const int64_t row_bytes = int64_t{kv.kv_dim} * elem;
      auto row = [&kv, row_bytes](int64_t slot, int64_t offset) {
        return kv.base.backend_address() + slot / kv.block_size * kv.block_bytes + offset +
               slot % kv.block_size * row_bytes;
      };
      // Every source row first (sources and destinations may overlap), as
      // f32 keys and raw values.
      const size_t n = src.size();
      move_keys_.resize(n * static_cast<size_t>(kv.kv_dim));
      move_values_.resize(n * static_cast<size_t>(row_bytes));
      for (size_t i = 0; i < n; ++i) {
        const uint8_t* k = row(src[i], kv.k_offset);
        float* key = move_keys_.data() + i * kv.kv_dim;
        for (int32_t j = 0; j < kv.kv_dim; ++j) {
          if (f16) {
            uint16_t h;
            std::memcpy(&h, k + 2 * j, 2);
            key[j] = Fp16ToFp32(h);
          } else {
            std::memcpy(&key[j], k + 4 * j, 4);
          }
        }
        std::memcpy(move_values_.data() + i * row_bytes, row(src[i], kv.v_offset), row_bytes);
      }
      for (size_t i = 0; i < n; ++i) {
        float* key = move_keys_.data() + i * kv.kv_dim;
        if (delta != 0) rope_->ApplyDelta(key, kv.kv_dim / head_dim, head_dim, delta);
        uint8_t* k = row(dst[i], kv.k_offset);
        for (int32_t j = 0; j < kv.kv_dim; ++j) {
          if (f16) {
            const uint16_t h = Fp32ToFp16(key[j]);
            std::memcpy(k + 2 * j, &h, 2);
          } else {
            std::memcpy(k + 4 * j, &key[j], 4);
          }
        }
        std::memcpy(row(dst[i], kv.v_offset), move_values_.data() + i * row_bytes, row_bytes);
      }
    }
  }

 private:
  static constexpr std::align_val_t kAlign{64};
  struct Free {
    std::align_val_t align;
    void operator()(uint8_t* p) const { ::operator delete(p, align); }
  };

  const StepMetadata& step() const {
    TANDEM_CHECK(step_ != nullptr, "BeginStep before the step's ops");
    return *step_;
  }
  // One contiguous, 16-float aligned chunk per thread.
  int64_t ChunkFor(int64_t n) const { return (n / threads_ + 16) / 16 * 16; }

  const KernelTable& kernels_;
  const int threads_;
  MatMulRunner matmul_;
  const std::string name_;
  std::vector<std::unique_ptr<uint8_t, Free>> memory_;  // every Allocate, until the end
  const RopeTable* rope_ = nullptr;
  // MoveKvSlots' staging of the source rows (outside steps; grows to the
  // largest SHIFT).
  std::vector<float> move_keys_;
  std::vector<uint8_t> move_values_;
  const StepMetadata* step_ = nullptr;          // the current step's (BeginStep)
  std::vector<AttentionSequence> seqs_;         // its sequences, for the attention kernels
};

}  // namespace

DeviceMatrix HostMatrix(const WeightMatrix& w) {
  return {.type = w.type,
          .data = DevicePtr<const uint8_t>(static_cast<const uint8_t*>(w.data)),
          .rows = w.rows,
          .cols = w.cols};
}

std::unique_ptr<Backend> MakeCpuBackendWithIsa(const CpuBackendOptions& options, Isa isa) {
  TANDEM_CHECK(options.threads >= 0, "thread count is 0 (all cores) or positive");
  const int threads = options.threads == 0 ? omp_get_num_procs() : options.threads;
  return std::make_unique<CpuBackend>(Kernels(isa), threads);
}

}  // namespace cpu

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  if (options.isa.empty()) return cpu::MakeCpuBackendWithIsa(options, cpu::DetectIsa());
  const std::optional<cpu::Isa> isa = cpu::IsaFromName(options.isa);
  TANDEM_CHECK(isa.has_value(), "CpuBackendOptions::isa names a kernel table") << options.isa;
  return cpu::MakeCpuBackendWithIsa(options, *isa);
}

}  // namespace tandem::engine
