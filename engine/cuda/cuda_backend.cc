// The CUDA Backend. One stream carries everything: the step's metadata goes
// over in BeginStep (from pinned memory, one copy per array, into buffers
// whose addresses never change), each op is one launch on the stream, and
// the host waits only where the interface says a call returns with its
// result (ReduceLogits, Download, the block copies). Weights are the GGUF
// bytes as the file holds them, uploaded once; the matrix products dispatch
// on their type (engine/cuda/matmul.h).
//
// CUDA graphs. A decode step (one row per sequence) of up to
// graph_max_batch sequences is padded to its bucket (the next power of two):
// pad rows read token 0 at position 0, store no KV (slot -1) and attend to
// nothing, so every op's shape is the bucket's. The first step of a bucket
// is captured (cudaStreamBeginCapture in BeginStep, the ops queued as usual,
// the capture ended at the step's first host interaction: ReduceLogits, a
// Download, ...), later ones replay it: the metadata goes to the same
// buffers, the ops only check that they are the ones captured (a signature
// of each op and its arguments), and one cudaGraphLaunch runs them all. The
// ops are also kept as closures while a section is open, so a capture that
// fails or a step whose ops differ runs them eagerly instead, and is counted.
//
// Errors. Start-up calls return a Status; a step's ops return nothing (the
// Backend contract), so a CUDA error inside a step aborts the process with
// the call and the error named: the device's state is unknown after one, and
// the gateway re-routes the worker's streams (ARCHITECTURE.md, faults).
#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <deque>
#include <functional>
#include <type_traits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/cuda/backend_kernels.h"
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/quant_kernels.h"
#include "engine/cuda/step_plan.h"

namespace tandem::engine {
namespace cuda {
namespace {

// ReduceLogits downloads the device's rows straight into LogitsSummary.
static_assert(kReducedTop == kMaxReducedTop);
static_assert(sizeof(ReducedRow) == sizeof(LogitsSummary));
static_assert(offsetof(ReducedRow, n_top) == offsetof(LogitsSummary, n_top));
static_assert(offsetof(ReducedRow, top_ids) == offsetof(LogitsSummary, top_ids));
static_assert(offsetof(ReducedRow, top_logprobs) == offsetof(LogitsSummary, top_logprobs));

// cuBLAS's workspace, set once so that it never allocates inside a step.
constexpr int64_t kBlasWorkspaceBytes = int64_t{32} << 20;

void Ok(cudaError_t e, const char* what) {
  TANDEM_CHECK(e == cudaSuccess, "a CUDA call inside a step succeeds")
      << what << ": " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")";
}

void Ok(const absl::Status& s, const char* what) {
  TANDEM_CHECK(s.ok(), "a CUDA call inside a step succeeds") << what << ": " << s;
}

// Page-locked host memory (cudaMallocHost): what the copy engines read and
// write without a bounce, so a copy from it is truly asynchronous.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Grows to at least `bytes` (contents lost); never shrinks.
  absl::Status Reserve(int64_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    bytes_ = 0;
    RETURN_IF_ERROR(Check(cudaMallocHost(&data_, static_cast<size_t>(bytes)), "cudaMallocHost"));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  uint8_t* data() const { return static_cast<uint8_t*>(data_); }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

KvRows RowsOf(const PagedKvView& kv) {
  TANDEM_CHECK(kv.dtype == GgmlType::kF32 || kv.dtype == GgmlType::kF16, "KV is f32 or f16");
  return {.base = kv.base.backend_address(),
          .block_bytes = kv.block_bytes,
          .k_offset = kv.k_offset,
          .v_offset = kv.v_offset,
          .block_size = kv.block_size,
          .kv_dim = kv.kv_dim,
          .f16 = kv.dtype == GgmlType::kF16};
}

// A 64-bit signature of an op and its arguments (FNV-1a over the words).
uint64_t Signature(std::initializer_list<uint64_t> words) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t w : words) {
    for (int i = 0; i < 8; ++i) {
      h ^= (w >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

uint64_t Word(const void* p) { return reinterpret_cast<uintptr_t>(p); }

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& options, const DeviceInfo& info, Stream stream)
      : device_(options.device),
        graph_max_batch_(options.graph_max_batch),
        info_(info),
        name_(absl::StrCat("cuda:", options.device, " (", info.name, ")")),
        stream_(std::move(stream)) {
    Ok(cudaEventCreateWithFlags(&meta_copied_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~CudaBackend() override {
    cudaSetDevice(device_);
    EndSection();
    cudaStreamSynchronize(stream_.stream());
    for (auto& [rows, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
    cudaEventDestroy(meta_copied_);
  }

  CudaGraphStats graph_stats() const { return graph_stats_; }

  std::string_view name() const override { return name_; }
  // One stream: the engine thread is the only host thread at work.
  int threads() const override { return 1; }

  absl::StatusOr<DevicePtr<uint8_t>> Allocate(int64_t bytes, std::string_view what) override {
    TANDEM_CHECK(bytes >= 0, "allocation size is not negative");
    RETURN_IF_ERROR(Check(cudaSetDevice(device_), "cudaSetDevice"));
    EndSection();
    absl::StatusOr<DeviceBuffer> b =
        DeviceBuffer::Allocate(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    if (!b.ok()) return OutOfMemory(bytes, what);
    allocated_[std::string(what.substr(0, what.find(' ')))] += bytes;
    auto* p = b->as<uint8_t>();
    memory_.push_back(*std::move(b));
    return DevicePtr<uint8_t>(p);
  }

  void Upload(DevicePtr<uint8_t> dst, std::span<const uint8_t> src) override {
    if (src.empty()) return;
    SetDevice();
    EndSection();
    Ok(cudaMemcpyAsync(dst.backend_address(), src.data(), src.size(), cudaMemcpyHostToDevice,
                       stream_.stream()),
       "Upload");
    Ok(stream_.Synchronize(), "Upload");
  }

  void Download(DevicePtr<const uint8_t> src, std::span<uint8_t> dst) override {
    if (dst.empty()) return;
    SetDevice();
    EndSection();
    Ok(cudaMemcpyAsync(dst.data(), src.backend_address(), dst.size(), cudaMemcpyDeviceToHost,
                       stream_.stream()),
       "Download");
    Ok(stream_.Synchronize(), "Download");
  }

  void Synchronize() override {
    SetDevice();
    EndSection();
    Ok(stream_.Synchronize(), "Synchronize");
  }

  // The file's bytes, each distinct matrix once (a tied output is the
  // embedding's own copy); vectors as the model holds them.
  absl::StatusOr<DeviceWeights> PrepareWeights(const ModelWeights& w) override {
    std::map<const void*, DevicePtr<const uint8_t>> uploaded;
    const auto matrix = [&](const WeightMatrix& m) -> absl::StatusOr<DeviceMatrix> {
      DeviceMatrix d{.type = m.type, .data = {}, .rows = m.rows, .cols = m.cols};
      if (m.data == nullptr) return d;
      if (auto it = uploaded.find(m.data); it != uploaded.end()) {
        d.data = it->second;
        return d;
      }
      const int64_t bytes = m.rows * GgmlRowBytes(m.type, m.cols);
      ASSIGN_OR_RETURN(DevicePtr<uint8_t> p, Allocate(bytes, "weights"));
      RETURN_IF_ERROR(CopyIn(p, m.data, bytes));
      d.data = p;
      uploaded.emplace(m.data, d.data);
      matrices_.push_back(d);
      return d;
    };
    const auto vector = [&](const std::vector<float>& v) -> absl::StatusOr<DevicePtr<const float>> {
      if (v.empty()) return DevicePtr<const float>();
      const int64_t bytes = static_cast<int64_t>(v.size() * sizeof(float));
      ASSIGN_OR_RETURN(DevicePtr<uint8_t> p, Allocate(bytes, "weights"));
      RETURN_IF_ERROR(CopyIn(p, v.data(), bytes));
      return p.As<const float>();
    };
    DeviceWeights d;
    ASSIGN_OR_RETURN(d.token_embd, matrix(w.token_embd));
    ASSIGN_OR_RETURN(d.output_norm, vector(w.output_norm));
    ASSIGN_OR_RETURN(d.output, matrix(w.output));
    for (const LayerWeights& l : w.layers) {
      DeviceLayerWeights dl;
      ASSIGN_OR_RETURN(dl.attn_norm, vector(l.attn_norm));
      ASSIGN_OR_RETURN(dl.wq, matrix(l.wq));
      ASSIGN_OR_RETURN(dl.wk, matrix(l.wk));
      ASSIGN_OR_RETURN(dl.wv, matrix(l.wv));
      ASSIGN_OR_RETURN(dl.wo, matrix(l.wo));
      ASSIGN_OR_RETURN(dl.bq, vector(l.bq));
      ASSIGN_OR_RETURN(dl.bk, vector(l.bk));
      ASSIGN_OR_RETURN(dl.bv, vector(l.bv));
      ASSIGN_OR_RETURN(dl.ffn_norm, vector(l.ffn_norm));
      ASSIGN_OR_RETURN(dl.w_gate, matrix(l.w_gate));
      ASSIGN_OR_RETURN(dl.w_up, matrix(l.w_up));
      ASSIGN_OR_RETURN(dl.w_down, matrix(l.w_down));
      d.layers.push_back(std::move(dl));
    }
    RETURN_IF_ERROR(stream_.Synchronize());
    return d;
  }

  absl::Status PrepareRope(const RopeTable& rope) override {
    rope_ = &rope;
    n_rot_ = rope.n_rot();
    style_ = rope.type() == RopeType::kNeox ? RopeStyle::kNeox : RopeStyle::kNormal;
    const int64_t bytes = static_cast<int64_t>(rope.cos_table().size() * sizeof(float));
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> c, Allocate(bytes, "rope tables"));
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> s, Allocate(bytes, "rope tables"));
    RETURN_IF_ERROR(CopyIn(c, rope.cos_table().data(), bytes));
    RETURN_IF_ERROR(CopyIn(s, rope.sin_table().data(), bytes));
    rope_cos_ = c.As<const float>().backend_address();
    rope_sin_ = s.As<const float>().backend_address();
    return stream_.Synchronize();
  }

  // The metadata buffers, the matrix products' scratch for the largest step,
  // cuBLAS's workspace and the reduced rows, all before the first step.
  absl::Status ReserveStep(const StepLimits& limits) override {
    limits_ = limits;
    layout_ = MetaLayout::For(limits);
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> meta, Allocate(layout_.bytes, "step metadata"));
    meta_ = meta.backend_address();
    RETURN_IF_ERROR(meta_host_.Reserve(layout_.bytes));
    int64_t scratch = 0;
    for (const DeviceMatrix& m : matrices_) {
      scratch = std::max(scratch, MatMulScratchBytes(Weight(m), limits.max_tokens));
    }
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> s, Allocate(scratch, "matmul scratch"));
    matmul_scratch_ = &memory_.back();
    (void)s;
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> ws, Allocate(kBlasWorkspaceBytes, "cuBLAS workspace"));
    RETURN_IF_ERROR(Check(stream_.blas_api().set_workspace(stream_.blas(), ws.backend_address(),
                                                           kBlasWorkspaceBytes),
                          "cublasSetWorkspace"));
    const int64_t reduced = int64_t{limits.max_logit_rows} * int64_t{sizeof(ReducedRow)};
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> r, Allocate(reduced, "reduced logits"));
    reduced_ = r.As<ReducedRow>().backend_address();
    RETURN_IF_ERROR(reduced_host_.Reserve(reduced));
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> a, Allocate(PagedAttentionScratchBytes(),
                                                    "attention scratch"));
    attention_scratch_ = a.As<float>().backend_address();
    return absl::OkStatus();
  }

  void BeginStep(const StepMetadata& step) override {
    SetDevice();
    EndSection();
    const int32_t T = step.n_tokens();
    const int32_t R = step.n_logit_rows();
    const int32_t bucket = GraphBucket(step);
    rows_ = bucket > 0 ? bucket : T;
    TANDEM_CHECK(T <= limits_.max_tokens && R <= limits_.max_logit_rows &&
                     static_cast<int32_t>(step.seqs.size()) <= limits_.max_seqs &&
                     static_cast<int64_t>(step.block_tables.size()) <= limits_.max_table_entries,
                 "a step within ReserveStep's limits");
    // The last step's copies may still be reading the pinned mirror.
    Ok(cudaEventSynchronize(meta_copied_), "cudaEventSynchronize");
    uint8_t* host = meta_host_.data();
    const auto put = [&](int64_t offset, const auto& v) {
      std::memcpy(host + offset, v.data(), v.size() * sizeof(v[0]));
      Copy(offset, static_cast<int64_t>(v.size() * sizeof(v[0])));
    };
    // Per row (token rows, or logits rows), padded to `n` for a graph's
    // bucket: pad rows read token 0 at position 0, store nothing (slot -1),
    // attend to nothing, gather row 0 and are not reduced.
    const auto put_rows = [&](int64_t offset, const auto& v, auto pad, int32_t n) {
      using Element = std::decay_t<decltype(v[0])>;
      auto* row = reinterpret_cast<Element*>(host + offset);
      std::memcpy(row, v.data(), v.size() * sizeof(Element));
      std::fill(row + v.size(), row + n, static_cast<Element>(pad));
      Copy(offset, int64_t{n} * int64_t{sizeof(Element)});
    };
    // A graph step has a logits row per token row: both padded alike.
    const int32_t logit_rows = bucket > 0 ? rows_ : R;
    put_rows(layout_.tokens, step.tokens, 0, rows_);
    put_rows(layout_.positions, step.positions, 0, rows_);
    put_rows(layout_.slots, step.slot_mapping, -1, rows_);
    auto* kv_len = reinterpret_cast<int32_t*>(host + layout_.kv_len);
    auto* table_offset = reinterpret_cast<int32_t*>(host + layout_.table_offset);
    for (const StepSequence& s : step.seqs) {
      for (int32_t i = 0; i < s.n_rows; ++i) {
        kv_len[s.first_row + i] = s.kv_start + i + 1;
        table_offset[s.first_row + i] = s.table_offset;
      }
    }
    std::fill(kv_len + T, kv_len + rows_, 0);
    std::fill(table_offset + T, table_offset + rows_, 0);
    Copy(layout_.kv_len, int64_t{rows_} * 4);
    Copy(layout_.table_offset, int64_t{rows_} * 4);
    put(layout_.block_table, step.block_tables);
    put_rows(layout_.logit_rows, step.logit_rows, 0, logit_rows);
    put_rows(layout_.top_k, step.logit_top_k, -1, logit_rows);
    put_rows(layout_.target, step.logit_target, -1, logit_rows);
    Ok(cudaEventRecord(meta_copied_, stream_.stream()), "cudaEventRecord");
    step_ = &step;
    real_rows_ = T;
    if (bucket > 0) BeginSection(bucket);
  }

  void Embed(const DeviceMatrix& table, DevicePtr<float> x) override {
    const int64_t T = rows_;
    const auto* tokens = Meta<int32_t>(layout_.tokens);
    const void* data = table.data.backend_address();
    const int64_t cols = table.cols;
    const GgmlType type = table.type;
    float* out = x.backend_address();
    Op(Signature({1, Word(data), static_cast<uint64_t>(cols), static_cast<uint64_t>(type),
                  Word(out), static_cast<uint64_t>(T)}),
       [=, this] {
         Ok(LaunchEmbedRows(type, data, cols, tokens, T, out, stream_.stream()), "Embed");
       });
  }

  void MatMul(const DeviceMatrix& w, DevicePtr<const float> x, int64_t n_tokens,
              DevicePtr<float> y) override {
    const DeviceWeight weight = Weight(w);
    const float* in = x.backend_address();
    float* out = y.backend_address();
    const int64_t n = Rows(n_tokens);
    Op(Signature({2, Word(weight.data), static_cast<uint64_t>(weight.type),
                  static_cast<uint64_t>(weight.rows), static_cast<uint64_t>(weight.cols), Word(in),
                  Word(out), static_cast<uint64_t>(n)}),
       [=, this] { Ok(cuda::MatMul(stream_, weight, in, n, out, *matmul_scratch_), "MatMul"); });
  }

  void AddBias(DevicePtr<float> x, DevicePtr<const float> bias, int64_t n_rows,
               int64_t dim) override {
    float* out = x.backend_address();
    const float* b = bias.backend_address();
    const int64_t n = Rows(n_rows);
    Op(Signature({3, Word(out), Word(b), static_cast<uint64_t>(n), static_cast<uint64_t>(dim)}),
       [=, this] { Ok(LaunchAddBias(out, b, n, dim, stream_.stream()), "AddBias"); });
  }

  void Rope(DevicePtr<float> x, int32_t n_heads, int32_t head_dim) override {
    TANDEM_CHECK(rope_ != nullptr, "PrepareRope before Rope");
    float* out = x.backend_address();
    const int64_t n = rows_;
    Op(Signature({4, Word(out), static_cast<uint64_t>(n), static_cast<uint64_t>(n_heads),
                  static_cast<uint64_t>(head_dim)}),
       [=, this] {
         Ok(LaunchRope(out, Meta<int32_t>(layout_.positions), n, n_heads, head_dim, n_rot_, style_,
                       rope_cos_, rope_sin_, stream_.stream()),
            "Rope");
       });
  }

  void StoreKv(const PagedKvView& kv, DevicePtr<const float> k,
               DevicePtr<const float> v) override {
    const KvRows rows = RowsOf(kv);
    const float* kp = k.backend_address();
    const float* vp = v.backend_address();
    const int64_t n = rows_;
    Op(Signature({5, Word(rows.base), static_cast<uint64_t>(rows.k_offset),
                  static_cast<uint64_t>(rows.v_offset), static_cast<uint64_t>(rows.f16), Word(kp),
                  Word(vp), static_cast<uint64_t>(n)}),
       [=, this] {
         Ok(LaunchStoreKv(rows, kp, vp, Meta<int64_t>(layout_.slots), n, stream_.stream()),
            "StoreKv");
       });
  }

  void RmsNorm(DevicePtr<const float> x, DevicePtr<const float> weight, int64_t n_tokens,
               int64_t dim, float eps, DevicePtr<float> y) override {
    const float* in = x.backend_address();
    const float* w = weight.backend_address();
    float* out = y.backend_address();
    const int64_t n = Rows(n_tokens);
    Op(Signature({6, Word(in), Word(w), Word(out), static_cast<uint64_t>(n),
                  static_cast<uint64_t>(dim), std::bit_cast<uint32_t>(eps)}),
       [=, this] { Ok(LaunchRmsNorm(in, w, n, dim, eps, out, stream_.stream()), "RmsNorm"); });
  }

  void SwiGlu(DevicePtr<const float> gate, DevicePtr<const float> up, int64_t n,
              DevicePtr<float> out) override {
    const float* g = gate.backend_address();
    const float* u = up.backend_address();
    float* o = out.backend_address();
    const int64_t count = Elements(n);
    Op(Signature({7, Word(g), Word(u), Word(o), static_cast<uint64_t>(count)}),
       [=, this] { Ok(LaunchSwiGlu(g, u, count, o, stream_.stream()), "SwiGlu"); });
  }

  void Add(DevicePtr<float> x, DevicePtr<const float> y, int64_t n) override {
    float* a = x.backend_address();
    const float* b = y.backend_address();
    const int64_t count = Elements(n);
    Op(Signature({8, Word(a), Word(b), static_cast<uint64_t>(count)}),
       [=, this] { Ok(LaunchAdd(a, b, count, stream_.stream()), "Add"); });
  }

  void PagedAttention(const AttentionOp& op) override {
    const KvRows kv = RowsOf(op.kv);
    const PagedAttentionArgs args{.q = op.q.backend_address(),
                             .out = op.out.backend_address(),
                             .n_rows = rows_,
                             .n_head = op.n_head,
                             .n_head_kv = op.n_head_kv,
                             .head_dim = op.head_dim,
                             .kv_base = kv.base,
                             .block_bytes = kv.block_bytes,
                             .k_offset = kv.k_offset,
                             .v_offset = kv.v_offset,
                             .block_size = kv.block_size,
                             .kv_f16 = kv.f16,
                             .kv_len = Meta<int32_t>(layout_.kv_len),
                             .table_offset = Meta<int32_t>(layout_.table_offset),
                             .block_table = Meta<int32_t>(layout_.block_table),
                             .split_scratch = attention_scratch_};
    Op(Signature({9, Word(args.q), Word(args.out), static_cast<uint64_t>(args.n_rows),
                  static_cast<uint64_t>(args.n_head), static_cast<uint64_t>(args.n_head_kv),
                  static_cast<uint64_t>(args.head_dim), Word(args.kv_base),
                  static_cast<uint64_t>(args.k_offset), static_cast<uint64_t>(args.v_offset),
                  static_cast<uint64_t>(args.kv_f16)}),
       [=, this] { Ok(LaunchPagedAttention(args, stream_.stream()), "PagedAttention"); });
  }

  void GatherRows(DevicePtr<const float> x, int64_t dim, DevicePtr<float> out) override {
    const float* in = x.backend_address();
    float* o = out.backend_address();
    // Decode steps have a logits row per row: padded alike.
    const int64_t n = real_rows_ == rows_ ? step().n_logit_rows() : rows_;
    Op(Signature({10, Word(in), Word(o), static_cast<uint64_t>(dim), static_cast<uint64_t>(n)}),
       [=, this] {
         Ok(LaunchGatherRows(in, dim, Meta<int32_t>(layout_.logit_rows), n, o, stream_.stream()),
            "GatherRows");
       });
  }

  // Reduced where the logits are; R rows of 176 bytes come back.
  void ReduceLogits(DevicePtr<const float> logits, int32_t n_vocab,
                    std::span<LogitsSummary> out) override {
    EndSection();
    const StepMetadata& s = step();
    const int32_t R = s.n_logit_rows();
    TANDEM_CHECK(static_cast<int32_t>(out.size()) >= R, "a summary per logits row");
    Ok(LaunchReduceLogits(logits.backend_address(), R, n_vocab, Meta<int32_t>(layout_.top_k),
                          Meta<int32_t>(layout_.target), reduced_, stream_.stream()),
       "ReduceLogits");
    const size_t bytes = static_cast<size_t>(R) * sizeof(ReducedRow);
    Ok(cudaMemcpyAsync(reduced_host_.data(), reduced_, bytes, cudaMemcpyDeviceToHost,
                       stream_.stream()),
       "ReduceLogits download");
    Ok(stream_.Synchronize(), "ReduceLogits");
    for (int32_t r = 0; r < R; ++r) {
      if (s.logit_top_k[r] < 0) continue;
      std::memcpy(&out[r], reduced_host_.data() + r * sizeof(ReducedRow), sizeof(ReducedRow));
    }
  }

  // Through pinned staging: every block's copy queued, then one wait.
  void ReadBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                  std::span<uint8_t> out) override {
    TANDEM_CHECK(static_cast<int64_t>(out.size()) ==
                     static_cast<int64_t>(ids.size()) * pool.block_bytes,
                 "ReadBlocks' staging holds exactly the blocks");
    if (ids.empty()) return;
    SetDevice();
    EndSection();
    Ok(staging_.Reserve(static_cast<int64_t>(out.size())), "ReadBlocks staging");
    for (size_t i = 0; i < ids.size(); ++i) {
      Ok(cudaMemcpyAsync(staging_.data() + i * pool.block_bytes,
                         pool.base.backend_address() + int64_t{ids[i]} * pool.block_bytes,
                         static_cast<size_t>(pool.block_bytes), cudaMemcpyDeviceToHost,
                         stream_.stream()),
         "ReadBlocks");
    }
    Ok(stream_.Synchronize(), "ReadBlocks");
    std::memcpy(out.data(), staging_.data(), out.size());
  }

  void WriteBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                   std::span<const KvBlockBytes> blocks) override {
    TANDEM_CHECK(ids.size() == blocks.size(), "one block of bytes per id");
    if (ids.empty()) return;
    SetDevice();
    EndSection();
    // The last copies out of the staging must be done before it is rewritten.
    Ok(stream_.Synchronize(), "WriteBlocks");
    Ok(staging_.Reserve(static_cast<int64_t>(ids.size()) * pool.block_bytes),
       "WriteBlocks staging");
    for (size_t i = 0; i < ids.size(); ++i) {
      TANDEM_CHECK(static_cast<int64_t>(blocks[i].size()) == pool.block_bytes,
                   "a written block is exactly one block");
      blocks[i].CopyTo(staging_.data() + i * pool.block_bytes);
      Ok(cudaMemcpyAsync(pool.base.backend_address() + int64_t{ids[i]} * pool.block_bytes,
                         staging_.data() + i * pool.block_bytes,
                         static_cast<size_t>(pool.block_bytes), cudaMemcpyHostToDevice,
                         stream_.stream()),
         "WriteBlocks");
    }
    Ok(stream_.Synchronize(), "WriteBlocks");
  }

  // On the device, layer by layer: every source row gathered (keys to f32),
  // the keys rotated by the delta's own table, then scattered; the slot
  // lists are all that cross.
  void MoveKvSlots(std::span<const PagedKvView> layers, int32_t head_dim,
                   std::span<const int64_t> src, std::span<const int64_t> dst,
                   int32_t delta) override {
    TANDEM_CHECK(src.size() == dst.size(), "one destination slot per source slot");
    TANDEM_CHECK(rope_ != nullptr, "PrepareRope before MoveKvSlots");
    if (src.empty() || layers.empty()) return;
    SetDevice();
    EndSection();
    const int64_t n = static_cast<int64_t>(src.size());
    int32_t kv_dim = 0;
    for (const PagedKvView& kv : layers) kv_dim = std::max(kv_dim, kv.kv_dim);
    const int64_t half = n_rot_ / 2;
    // Device staging: slots (src, dst), zero positions, the delta's cos and
    // sin, the keys as f32 and the values as bytes (f32 at most).
    const int64_t slot_bytes = 2 * n * 8;
    const int64_t pos_bytes = n * 4;
    const int64_t table_bytes = 2 * half * 4;
    const int64_t key_bytes = n * kv_dim * 4;
    const int64_t need = slot_bytes + pos_bytes + table_bytes + 2 * key_bytes;
    if (move_.bytes() < static_cast<size_t>(need)) {
      Ok(stream_.Synchronize(), "MoveKvSlots");
      absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(static_cast<size_t>(need));
      Ok(b.status(), "MoveKvSlots staging");
      move_ = *std::move(b);
    }
    Ok(host_move_.Reserve(slot_bytes + table_bytes), "MoveKvSlots staging");
    uint8_t* host = host_move_.data();
    std::memcpy(host, src.data(), n * 8);
    std::memcpy(host + n * 8, dst.data(), n * 8);
    auto* cos = reinterpret_cast<float*>(host + slot_bytes);
    rope_->DeltaTables(delta, cos, cos + half);
    uint8_t* dev = move_.as<uint8_t>();
    Ok(cudaMemcpyAsync(dev, host, slot_bytes, cudaMemcpyHostToDevice, stream_.stream()),
       "MoveKvSlots slots");
    Ok(cudaMemcpyAsync(dev + slot_bytes + pos_bytes, host + slot_bytes, table_bytes,
                       cudaMemcpyHostToDevice, stream_.stream()),
       "MoveKvSlots tables");
    Ok(cudaMemsetAsync(dev + slot_bytes, 0, pos_bytes, stream_.stream()), "MoveKvSlots");
    const auto* src_dev = reinterpret_cast<const int64_t*>(dev);
    const auto* dst_dev = src_dev + n;
    const auto* positions = reinterpret_cast<const int32_t*>(dev + slot_bytes);
    const auto* delta_cos = reinterpret_cast<const float*>(dev + slot_bytes + pos_bytes);
    auto* keys = reinterpret_cast<float*>(dev + slot_bytes + pos_bytes + table_bytes);
    auto* values = reinterpret_cast<uint8_t*>(keys) + key_bytes;
    for (const PagedKvView& kv : layers) {
      const KvRows rows = RowsOf(kv);
      Ok(LaunchGatherKvRows(rows, src_dev, n, keys, values, stream_.stream()), "MoveKvSlots");
      if (delta != 0) {
        Ok(LaunchRope(keys, positions, n, kv.kv_dim / head_dim, head_dim, n_rot_, style_,
                      delta_cos, delta_cos + half, stream_.stream()),
           "MoveKvSlots rotation");
      }
      Ok(LaunchScatterKvRows(rows, dst_dev, n, keys, values, stream_.stream()), "MoveKvSlots");
    }
    // The pinned slot lists are rewritten by the next call.
    Ok(stream_.Synchronize(), "MoveKvSlots");
  }

 private:
  enum class Mode { kEager, kCapture, kReplay };
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::vector<uint64_t> signature;
  };

  void SetDevice() const { Ok(cudaSetDevice(device_), "cudaSetDevice"); }

  // The step's bucket (engine/cuda/step_plan.h), unless its capture failed.
  int32_t GraphBucket(const StepMetadata& step) const {
    const int32_t bucket = cuda::GraphBucket(step, graph_max_batch_, limits_);
    return uncapturable_.contains(bucket) ? 0 : bucket;
  }

  // Rows and element counts as the ops give them (for the step's real rows),
  // scaled to the padded rows.
  int64_t Rows(int64_t n) const { return n == real_rows_ ? rows_ : n; }
  int64_t Elements(int64_t n) const {
    if (rows_ == real_rows_) return n;
    TANDEM_CHECK(n % real_rows_ == 0, "a padded step's element counts are per row") << n;
    return n / real_rows_ * rows_;
  }

  void BeginSection(int32_t bucket) {
    section_rows_ = bucket;
    if (graphs_.contains(bucket)) {
      mode_ = Mode::kReplay;
      return;
    }
    mode_ = Mode::kCapture;
    Ok(cudaStreamBeginCapture(stream_.stream(), cudaStreamCaptureModeThreadLocal),
       "cudaStreamBeginCapture");
  }

  // Queues an op: launched now (eager, or into the capture), or only
  // checked against the graph (replay). Kept while a section is open in case
  // it has to run eagerly after all.
  template <typename Launch>
  void Op(uint64_t signature, Launch&& launch) {
    if (mode_ == Mode::kEager) {
      launch();
      return;
    }
    signature_.push_back(signature);
    if (mode_ == Mode::kCapture) launch();
    pending_.emplace_back(std::forward<Launch>(launch));
  }

  // Ends an open section: the captured graph instantiated and launched, or
  // the bucket's graph launched, or (a failed capture, a step that differs)
  // the kept ops run eagerly.
  void EndSection() {
    if (mode_ == Mode::kEager) return;
    const Mode mode = std::exchange(mode_, Mode::kEager);
    std::vector<uint64_t> signature = std::move(signature_);
    std::vector<std::function<void()>> pending = std::move(pending_);
    signature_.clear();
    pending_.clear();
    bool launched = false;
    if (mode == Mode::kCapture) {
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(stream_.stream(), &graph);
      if (ended == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess &&
          cudaGraphLaunch(exec, stream_.stream()) == cudaSuccess) {
        graphs_[section_rows_] = {.exec = exec, .signature = std::move(signature)};
        ++graph_stats_.captured;
        launched = true;
      } else {
        if (exec != nullptr) cudaGraphExecDestroy(exec);
        cudaGetLastError();  // the capture's error, not sticky
        uncapturable_.insert(section_rows_);
      }
      if (graph != nullptr) cudaGraphDestroy(graph);
    } else {
      auto it = graphs_.find(section_rows_);
      if (it->second.signature == signature) {
        Ok(cudaGraphLaunch(it->second.exec, stream_.stream()), "cudaGraphLaunch");
        ++graph_stats_.replayed;
        launched = true;
      } else {
        // Not the captured step: capture this bucket afresh next time.
        cudaGraphExecDestroy(it->second.exec);
        graphs_.erase(it);
      }
    }
    if (launched) return;
    ++graph_stats_.fallbacks;
    for (const std::function<void()>& op : pending) op();
  }

  const StepMetadata& step() const {
    TANDEM_CHECK(step_ != nullptr, "BeginStep before the step's ops");
    return *step_;
  }

  template <typename T>
  T* Meta(int64_t offset) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(meta_) + offset);
  }

  // Queues the pinned mirror's [offset, offset + bytes) to the device.
  void Copy(int64_t offset, int64_t bytes) {
    if (bytes == 0) return;
    Ok(cudaMemcpyAsync(Meta<uint8_t>(offset), meta_host_.data() + offset,
                       static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_.stream()),
       "BeginStep");
  }

  // Start-up copies from pageable host memory (the mapped file).
  absl::Status CopyIn(DevicePtr<uint8_t> dst, const void* src, int64_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    return Check(cudaMemcpyAsync(dst.backend_address(), src, static_cast<size_t>(bytes),
                                 cudaMemcpyHostToDevice, stream_.stream()),
                 "weights upload");
  }

  static DeviceWeight Weight(const DeviceMatrix& m) {
    return {.type = m.type, .data = m.data.backend_address(), .rows = m.rows, .cols = m.cols};
  }

  // What did not fit, what is already held, and the flags that size each.
  absl::Status OutOfMemory(int64_t bytes, std::string_view what) const {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        OutOfMemoryMessage(what, bytes, name_, static_cast<int64_t>(free),
                           static_cast<int64_t>(total), allocated_));
  }

  const int device_;
  const int32_t graph_max_batch_;
  const DeviceInfo info_;
  const std::string name_;
  Stream stream_;
  // Every Allocate, until the end (a deque: matmul_scratch_ points into it).
  std::deque<DeviceBuffer> memory_;
  std::map<std::string, int64_t> allocated_;  // bytes by use, for OutOfMemory
  std::vector<DeviceMatrix> matrices_;        // the distinct weight matrices
  const RopeTable* rope_ = nullptr;
  const float* rope_cos_ = nullptr;
  const float* rope_sin_ = nullptr;
  int32_t n_rot_ = 0;
  RopeStyle style_ = RopeStyle::kNormal;
  StepLimits limits_;
  MetaLayout layout_;
  void* meta_ = nullptr;       // the step's metadata on the device
  PinnedBuffer meta_host_;     // its host mirror
  cudaEvent_t meta_copied_ = nullptr;  // after the last step's copies out of the mirror
  DeviceBuffer* matmul_scratch_ = nullptr;
  ReducedRow* reduced_ = nullptr;
  float* attention_scratch_ = nullptr;  // LaunchPagedAttention's split partials
  PinnedBuffer reduced_host_;
  PinnedBuffer staging_;       // ReadBlocks / WriteBlocks
  DeviceBuffer move_;          // MoveKvSlots (outside steps; grows)
  PinnedBuffer host_move_;
  const StepMetadata* step_ = nullptr;
  int32_t real_rows_ = 0;  // the step's rows
  int32_t rows_ = 0;       // the rows its ops run on: real_rows_, or its bucket
  Mode mode_ = Mode::kEager;
  int32_t section_rows_ = 0;  // the open section's bucket
  std::vector<uint64_t> signature_;                 // the open section's ops
  std::vector<std::function<void()>> pending_;      // and the ops themselves
  std::map<int32_t, Graph> graphs_;                 // by bucket
  absl::flat_hash_set<int32_t> uncapturable_;       // buckets whose capture failed
  CudaGraphStats graph_stats_;
};

}  // namespace
}  // namespace cuda

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  if (options.graph_max_batch < 0) {
    return absl::InvalidArgumentError("--cuda-graph-max-batch must be >= 0");
  }
  ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::GetDeviceInfo(options.device));
  ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(options.device));
  return std::make_unique<cuda::CudaBackend>(options, info, std::move(stream));
}

CudaGraphStats GraphStats(const Backend& backend) {
  const auto* cuda = dynamic_cast<const cuda::CudaBackend*>(&backend);
  return cuda != nullptr ? cuda->graph_stats() : CudaGraphStats{};
}

}  // namespace tandem::engine
