// The CUDA Backend. One stream carries everything: the step's metadata goes over in
// BeginStep (from pinned memory, one copy per array, into buffers whose addresses never
// change), each op is one launch on the stream, and the host waits only where the
// interface says a call returns with its result (ReduceLogits, Download, the block
// copies of engine/cuda/kv_moves.h). Weights are the GGUF bytes as the file holds them,
// uploaded once; the matrix products dispatch on their type (engine/cuda/matmul.h).
//
// CUDA graphs. A decode step (one row per sequence) of up to
// graph_max_batch sequences is padded to its bucket (engine/cuda/step_plan.h):
// pad rows read token 0 at position 0, store no KV (slot -1) and attend to
// nothing, so every op's shape is the bucket's, and the step's ops run as a
// section of engine/cuda/graph_sections.h: captured once per bucket, then
// replayed.
//
// Errors. Start-up calls return a Status; a step's ops return nothing (the
// Backend contract), so a CUDA error inside a step aborts the process with
// the call and the error named: the device's state is unknown after one, and
// the gateway re-routes the worker's streams (ARCHITECTURE.md, faults).
#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/cuda/backend_kernels.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_memory.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/graph_sections.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/kv_moves.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/quant_kernels.h"
#include "engine/cuda/rope_store_kv.h"
#include "engine/cuda/step_plan.h"
#include "engine/model/copy_weights.h"

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

// The attention tiles' arithmetic by CudaAttention (--cuda-attention).
constexpr TileMath kTiles[] = {TileMath::kF32, TileMath::kSplitF16, TileMath::kF16};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& options, const DeviceInfo& info, Stream stream)
      : options_(options),
        name_(absl::StrCat("cuda:", options.device, " (", info.name, ")")),
        shared_bytes_per_block_(info.shared_bytes_per_block),
        stream_(std::move(stream)),
        memory_(name_),
        graphs_(stream_.stream()) {
    CheckInStep(cudaEventCreateWithFlags(&meta_copied_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~CudaBackend() override {
    cudaSetDevice(options_.device);
    graphs_.End();
    cudaStreamSynchronize(stream_.stream());
    cudaEventDestroy(meta_copied_);
  }

  CudaGraphStats graph_stats() const { return graphs_.stats(); }

  std::string_view name() const override { return name_; }
  // One stream: the engine thread is the only host thread at work.
  int threads() const override { return 1; }

  absl::StatusOr<DevicePtr<uint8_t>> Allocate(int64_t bytes, std::string_view what) override {
    TANDEM_CHECK(bytes >= 0, "allocation size is not negative");
    RETURN_IF_ERROR(Check(cudaSetDevice(options_.device), "cudaSetDevice"));
    graphs_.End();
    ASSIGN_OR_RETURN(DeviceBuffer * b, memory_.Allocate(bytes, what));
    return DevicePtr<uint8_t>(b->as<uint8_t>());
  }

  void Upload(DevicePtr<uint8_t> dst, std::span<const uint8_t> src) override {
    CopyNow(dst.backend_address(), src.data(), src.size(), cudaMemcpyHostToDevice, "Upload");
  }

  void Download(DevicePtr<const uint8_t> src, std::span<uint8_t> dst) override {
    CopyNow(dst.data(), src.backend_address(), dst.size(), cudaMemcpyDeviceToHost, "Download");
  }

  void Synchronize() override {
    SetDevice();
    graphs_.End();
    CheckInStep(stream_.Synchronize(), "Synchronize");
  }

  // The file's bytes, each distinct matrix once (a tied output is the embedding's).
  absl::StatusOr<DeviceWeights> PrepareWeights(const ModelWeights& w) override {
    ASSIGN_OR_RETURN(
        DeviceWeights d,
        CopyWeights(
            w, [this](std::span<const uint8_t> bytes) { return CopyToDevice(bytes, "weights"); },
            &matrices_));
    RETURN_IF_ERROR(stream_.Synchronize());
    return d;
  }

  absl::Status PrepareRope(const RopeTable& rope) override {
    rope_ = &rope;
    rope_args_.n_rot = rope.n_rot();
    rope_args_.style = rope.type() == RopeType::kNeox ? RopeStyle::kNeox : RopeStyle::kNormal;
    const auto bytes = [](std::span<const float> t) {
      return std::span(reinterpret_cast<const uint8_t*>(t.data()), t.size() * sizeof(float));
    };
    constexpr std::string_view kWhat = "rope tables";
    ASSIGN_OR_RETURN(DevicePtr<const uint8_t> c, CopyToDevice(bytes(rope.cos_table()), kWhat));
    ASSIGN_OR_RETURN(DevicePtr<const uint8_t> s, CopyToDevice(bytes(rope.sin_table()), kWhat));
    rope_args_.cos_table = c.As<const float>().backend_address();
    rope_args_.sin_table = s.As<const float>().backend_address();
    return stream_.Synchronize();
  }

  // The metadata buffers, the matrix products' scratch for the largest step,
  // cuBLAS's workspace and the reduced rows, all before the first step.
  absl::Status ReserveStep(const StepLimits& limits) override {
    limits_ = limits;
    layout_ = MetaLayout::For(limits);
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> meta, Allocate(layout_.bytes, "step metadata"));
    meta_ = meta.backend_address();
    rope_args_.positions = Meta<int32_t>(layout_.positions);
    RETURN_IF_ERROR(meta_host_.Reserve(layout_.bytes));
    int64_t scratch = 0;
    for (const DeviceMatrix& m : matrices_) {
      scratch = std::max(scratch, MatMulScratchBytes(Weight(m), limits.max_tokens));
    }
    RETURN_IF_ERROR(Check(cudaSetDevice(options_.device), "cudaSetDevice"));
    ASSIGN_OR_RETURN(matmul_scratch_, memory_.Allocate(scratch, "matmul scratch"));
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> ws, Allocate(kBlasWorkspaceBytes, "cuBLAS workspace"));
    RETURN_IF_ERROR(Check(stream_.blas_api().set_workspace(stream_.blas(), ws.backend_address(),
                                                           kBlasWorkspaceBytes),
                          "cublasSetWorkspace"));
    const int64_t reduced = int64_t{limits.max_logit_rows} * int64_t{sizeof(ReducedRow)};
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> r, Allocate(reduced, "reduced logits"));
    reduced_ = r.As<ReducedRow>().backend_address();
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> rs,
                     Allocate(ReduceLogitsScratchBytes(limits.max_logit_rows), "reduced logits"));
    reduce_scratch_ = rs.backend_address();
    RETURN_IF_ERROR(reduced_host_.Reserve(reduced));
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> a, Allocate(PagedAttentionScratchBytes(),
                                                    "attention scratch"));
    attention_scratch_ = a.As<float>().backend_address();
    RETURN_IF_ERROR(Check(cudaMemsetAsync(attention_scratch_, 0, PagedAttentionScratchBytes(),
                                          stream_.stream()),
                          "attention scratch"));
    return absl::OkStatus();
  }

  void BeginStep(const StepMetadata& step) override {
    SetDevice();
    graphs_.End();
    const int32_t T = step.n_tokens();
    const int32_t R = step.n_logit_rows();
    const int32_t bucket = GraphBucket(step);
    rows_ = bucket > 0 ? bucket : T;
    TANDEM_CHECK(T <= limits_.max_tokens && R <= limits_.max_logit_rows &&
                     static_cast<int32_t>(step.seqs.size()) <= limits_.max_seqs &&
                     static_cast<int64_t>(step.block_tables.size()) <= limits_.max_table_entries,
                 "a step within ReserveStep's limits");
    // The last step's copies may still be reading the pinned mirror.
    CheckInStep(cudaEventSynchronize(meta_copied_), "cudaEventSynchronize");
    // A graph step has a logits row per token row: both padded alike.
    WriteStepMeta(step, layout_, rows_, bucket > 0 ? rows_ : R, meta_host_.data(),
                  [this](int64_t offset, int64_t bytes) { Copy(offset, bytes); });
    CheckInStep(cudaEventRecord(meta_copied_, stream_.stream()), "cudaEventRecord");
    step_ = &step;
    real_rows_ = T;
    if (bucket > 0) graphs_.Begin(bucket);
  }

  void Embed(const DeviceMatrix& table, DevicePtr<float> x) override {
    const int64_t T = rows_;
    const auto* tokens = Meta<int32_t>(layout_.tokens);
    const void* data = table.data.backend_address();
    const int64_t cols = table.cols;
    const GgmlType type = table.type;
    float* out = x.backend_address();
    graphs_.Op(Words(1, data, cols, type, out, T), [=, this] {
      CheckInStep(LaunchEmbedRows(type, data, cols, tokens, T, out, stream_.stream()), "Embed");
    });
  }

  void MatMul(const DeviceMatrix& w, DevicePtr<const float> x, int64_t n_tokens,
              DevicePtr<float> y) override { Product(w, x, n_tokens, y, /*add=*/false); }

  // The product added into y as it is stored: no Add launch, `scratch` unused.
  void MatMulAdd(const DeviceMatrix& w, DevicePtr<const float> x, int64_t n_tokens,
                 DevicePtr<float> y, DevicePtr<float> /*scratch*/) override {
    Product(w, x, n_tokens, y, /*add=*/true);
  }

  // Q, K and V in one GEMV launch where they take one (cuda::MatMulGroup).
  void MatMuls(std::span<const MatMulProduct> products, DevicePtr<const float> x,
               int64_t n_tokens) override {
    if (products.size() > kMaxGemvProducts) return Backend::MatMuls(products, x, n_tokens);
    Products(products, x.backend_address(), n_tokens, {});
  }

  // The norm folded into the GEMV where one 16-bit launch takes the products.
  void NormMatMuls(const NormedInput& in, std::span<const MatMulProduct> products,
                   int64_t n_tokens) override {
    if (products.size() > kMaxGemvProducts) return Backend::NormMatMuls(in, products, n_tokens);
    Products(products, in.x.backend_address(), n_tokens, NormOf(in));
  }

  // Gate, up and SwiGLU in one GEMV launch where it takes both.
  void MatMulSwiGlu(const DeviceMatrix& w_gate, const DeviceMatrix& w_up,
                    DevicePtr<const float> x, int64_t n_tokens, DevicePtr<float> gate,
                    DevicePtr<float> up) override {
    SwiGluProducts(w_gate, w_up, x.backend_address(), n_tokens, gate, up, {});
  }

  void NormMatMulSwiGlu(const NormedInput& in, const DeviceMatrix& w_gate, const DeviceMatrix& w_up,
                        int64_t n_tokens, DevicePtr<float> gate, DevicePtr<float> up) override {
    SwiGluProducts(w_gate, w_up, in.x.backend_address(), n_tokens, gate, up, NormOf(in));
  }

  // Past GEMV sizes, the SwiGLU stored in 16 bits as down's x (cuda::FeedForward).
  void FeedForward(const FeedForwardOp& op, int64_t n_tokens) override {
    const DeviceWeight g = Weight(*op.w_gate), u = Weight(*op.w_up), d = Weight(*op.w_down);
    const float* in = op.in.x.backend_address();
    float* g_out = op.gate.backend_address();
    float* u_out = op.up.backend_address();
    float* out = op.out.backend_address();
    const RmsNormed norm = NormOf(op.in);
    const int64_t n = Rows(n_tokens);
    graphs_.Op(Words(14, g.data, u.data, d.data, in, g_out, u_out, out, n, norm.weight, norm.eps,
                     norm.normed),
               [=, this] {
                 CheckInStep(
                     cuda::FeedForward(stream_, g, u, d, in, n, g_out, u_out, out, *matmul_scratch_,
                                       norm.weight != nullptr ? &norm : nullptr),
                     "FeedForward");
               });
  }

  void AddBias(DevicePtr<float> x, DevicePtr<const float> bias, int64_t n_rows,
               int64_t dim) override {
    float* out = x.backend_address();
    const float* b = bias.backend_address();
    const int64_t n = Rows(n_rows);
    graphs_.Op(Words(3, out, b, n, dim), [=, this] {
      CheckInStep(LaunchAddBias(out, b, n, dim, stream_.stream()), "AddBias");
    });
  }

  void Rope(DevicePtr<float> x, int32_t n_heads, int32_t head_dim) override {
    RopeAndStore({.q = x,
                  .k = {},
                  .v = {},
                  .n_head = n_heads,
                  .n_head_kv = 0,
                  .head_dim = head_dim,
                  .kv = {}},
                 KvRows{});
  }

  // RoPE of q and k and the store of k and v in one launch (cuda/rope_store_kv.h).
  void RopeStoreKv(const RopeStoreKvOp& op) override { RopeAndStore(op, RowsOf(op.kv)); }

  void StoreKv(const PagedKvView& kv, DevicePtr<const float> k, DevicePtr<const float> v) override {
    const KvRows rows = RowsOf(kv);
    const float* kp = k.backend_address();
    const float* vp = v.backend_address();
    const int64_t n = rows_;
    graphs_.Op(Words(5, rows.base, rows.k_offset, rows.v_offset, rows.f16, kp, vp, n), [=, this] {
      CheckInStep(LaunchStoreKv(rows, kp, vp, Meta<int64_t>(layout_.slots), n, stream_.stream()),
                  "StoreKv");
    });
  }

  void RmsNorm(DevicePtr<const float> x, DevicePtr<const float> weight, int64_t n_tokens,
               int64_t dim, float eps, DevicePtr<float> y) override {
    const float* in = x.backend_address();
    const float* w = weight.backend_address();
    float* out = y.backend_address();
    const int64_t n = Rows(n_tokens);
    graphs_.Op(Words(6, in, w, out, n, dim, eps), [=, this] {
      CheckInStep(LaunchRmsNorm(in, w, n, dim, eps, out, stream_.stream()), "RmsNorm");
    });
  }

  void SwiGlu(DevicePtr<const float> gate, DevicePtr<const float> up, int64_t n,
              DevicePtr<float> out) override {
    const float* g = gate.backend_address();
    const float* u = up.backend_address();
    float* o = out.backend_address();
    const int64_t count = Elements(n);
    graphs_.Op(Words(7, g, u, o, count), [=, this] {
      CheckInStep(LaunchSwiGlu(g, u, count, o, stream_.stream()), "SwiGlu");
    });
  }

  void Add(DevicePtr<float> x, DevicePtr<const float> y, int64_t n) override {
    float* a = x.backend_address();
    const float* b = y.backend_address();
    const int64_t count = Elements(n);
    graphs_.Op(Words(8, a, b, count),
               [=, this] { CheckInStep(LaunchAdd(a, b, count, stream_.stream()), "Add"); });
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
                                  .split_scratch = attention_scratch_,
                                  .tiles = kTiles[static_cast<int>(options_.attention)],
                                  .shared_bytes_per_block = shared_bytes_per_block_};
    graphs_.Op(
        Words(9, args.q, args.out, args.n_rows, args.n_head, args.n_head_kv, args.head_dim,
              args.kv_base, args.k_offset, args.v_offset, args.kv_f16),
        [=, this] { CheckInStep(LaunchPagedAttention(args, stream_.stream()), "PagedAttention"); });
  }

  void GatherRows(DevicePtr<const float> x, int64_t dim, DevicePtr<float> out) override {
    const float* in = x.backend_address();
    float* o = out.backend_address();
    // Decode steps have a logits row per row: padded alike.
    const int64_t n = real_rows_ == rows_ ? step().n_logit_rows() : rows_;
    graphs_.Op(
        Words(10, in, o, dim, n), [=, this] {
          CheckInStep(
              LaunchGatherRows(in, dim, Meta<int32_t>(layout_.logit_rows), n, o, stream_.stream()),
              "GatherRows");
        });
  }

  // Reduced where the logits are; R rows of 176 bytes come back.
  void ReduceLogits(DevicePtr<const float> logits, int32_t n_vocab,
                    std::span<LogitsSummary> out) override {
    graphs_.End();
    const StepMetadata& s = step();
    const int32_t R = s.n_logit_rows();
    TANDEM_CHECK(static_cast<int32_t>(out.size()) >= R, "a summary per logits row");
    CheckInStep(
        LaunchReduceLogits(logits.backend_address(), R, n_vocab, Meta<int32_t>(layout_.top_k),
                           Meta<int32_t>(layout_.target), reduce_scratch_, reduced_,
                           stream_.stream()),
        "ReduceLogits");
    const size_t bytes = static_cast<size_t>(R) * sizeof(ReducedRow);
    CheckInStep(cudaMemcpyAsync(reduced_host_.data(), reduced_, bytes, cudaMemcpyDeviceToHost,
                                stream_.stream()),
                "ReduceLogits download");
    CheckInStep(stream_.Synchronize(), "ReduceLogits");
    for (int32_t r = 0; r < R; ++r) {
      if (s.logit_top_k[r] < 0) continue;
      std::memcpy(&out[r], reduced_host_.data() + r * sizeof(ReducedRow), sizeof(ReducedRow));
    }
  }

  void ReadBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                  std::span<uint8_t> out) override {
    SetDevice();
    graphs_.End();
    kv_moves_.Read(pool, ids, out);
  }

  void WriteBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                   std::span<const KvBlockBytes> blocks) override {
    SetDevice();
    graphs_.End();
    kv_moves_.Write(pool, ids, blocks);
  }

  void MoveKvSlots(std::span<const PagedKvView> layers, int32_t head_dim,
                   std::span<const int64_t> src, std::span<const int64_t> dst,
                   int32_t delta) override {
    TANDEM_CHECK(rope_ != nullptr, "PrepareRope before MoveKvSlots");
    SetDevice();
    graphs_.End();
    kv_moves_.Move(layers, head_dim, src, dst, delta, *rope_, rope_args_.style);
  }

 private:
  // MatMul, or with `add` MatMulAdd.
  void Product(const DeviceMatrix& w, DevicePtr<const float> x, int64_t n_tokens,
               DevicePtr<float> y, bool add) {
    const DeviceWeight weight = Weight(w);
    const float* in = x.backend_address();
    float* out = y.backend_address();
    const int64_t n = Rows(n_tokens);
    graphs_.Op(Words(add ? 13u : 2u, weight.data, weight.type, weight.rows, weight.cols, in, out,
                     n),
               [=, this] {
                 CheckInStep(cuda::MatMul(stream_, weight, in, n, out, *matmul_scratch_, add),
                             add ? "MatMulAdd" : "MatMul");
               });
  }

  // Rope (rows.kv_dim 0: no keys, nothing stored) or RopeStoreKv.
  void RopeAndStore(const RopeStoreKvOp& op, const KvRows& rows) {
    TANDEM_CHECK(rope_ != nullptr, "PrepareRope before Rope");
    float* q = op.q.backend_address();
    float* k = op.k.backend_address();
    const float* v = op.v.backend_address();
    const int32_t heads = op.n_head, kv_heads = op.n_head_kv, head_dim = op.head_dim;
    const int64_t n = rows_;
    graphs_.Op(Words(4, q, k, v, n, heads, kv_heads, head_dim, rows.base, rows.k_offset,
                     rows.v_offset, rows.f16),
               [=, this] {
                 CheckInStep(LaunchRopeStoreKv(q, heads, k, v, kv_heads, head_dim, rope_args_, rows,
                                               Meta<int64_t>(layout_.slots), n, stream_.stream()),
                             "RopeStoreKv");
               });
  }

  // MatMuls, or with a norm (its weight not null) NormMatMuls; kMaxGemvProducts
  // products at most.
  void Products(std::span<const MatMulProduct> products, const float* in, int64_t n_tokens,
                const RmsNormed& norm) {
    std::array<DeviceWeight, kMaxGemvProducts> w{};
    std::array<float*, kMaxGemvProducts> y{};
    for (size_t i = 0; i < products.size(); ++i) {
      w[i] = Weight(*products[i].w);
      y[i] = products[i].y.backend_address();
    }
    const auto count = static_cast<int>(products.size());
    const int64_t n = Rows(n_tokens);
    const bool normed = norm.weight != nullptr;
    // A weight's address names its type and shape.
    graphs_.Op(Words(11, in, n, w[0].data, w[1].data, w[2].data, y[0], y[1], y[2], norm.weight,
                     norm.eps, norm.normed),
               [=, this] {
                 CheckInStep(MatMulGroup(stream_, w.data(), y.data(), count, in, n,
                                         *matmul_scratch_, normed ? &norm : nullptr),
                             normed ? "NormMatMuls" : "MatMuls");
               });
  }

  // MatMulSwiGlu, or with a norm NormMatMulSwiGlu.
  void SwiGluProducts(const DeviceMatrix& w_gate, const DeviceMatrix& w_up, const float* in,
                      int64_t n_tokens, DevicePtr<float> gate, DevicePtr<float> up,
                      const RmsNormed& norm) {
    const DeviceWeight g = Weight(w_gate);
    const DeviceWeight u = Weight(w_up);
    float* g_out = gate.backend_address();
    float* u_out = up.backend_address();
    const int64_t n = Rows(n_tokens);
    const bool normed = norm.weight != nullptr;
    graphs_.Op(Words(12, g.data, u.data, in, g_out, u_out, n, norm.weight, norm.eps, norm.normed),
               [=, this] {
                 CheckInStep(cuda::MatMulSwiGlu(stream_, g, u, in, n, g_out, u_out,
                                                *matmul_scratch_, normed ? &norm : nullptr),
                             normed ? "NormMatMulSwiGlu" : "MatMulSwiGlu");
               });
  }

  static RmsNormed NormOf(const NormedInput& in) {
    return {.weight = in.weight.backend_address(),
            .eps = in.eps,
            .normed = in.normed.backend_address()};
  }

  // The calling thread's device and launch setting (engine/cuda/launch.h).
  void SetDevice() const {
    CheckInStep(cudaSetDevice(options_.device), "cudaSetDevice");
    SetProgrammaticLaunch(options_.programmatic_launch);
  }

  // The step's bucket (engine/cuda/step_plan.h), unless its capture failed.
  int32_t GraphBucket(const StepMetadata& step) const {
    const int32_t bucket = cuda::GraphBucket(step, options_.graph_max_batch, limits_);
    return graphs_.Usable(bucket) ? bucket : 0;
  }

  // Rows and element counts as the ops give them (for the step's real rows),
  // scaled to the padded rows.
  int64_t Rows(int64_t n) const { return n == real_rows_ ? rows_ : n; }
  int64_t Elements(int64_t n) const {
    if (rows_ == real_rows_) return n;
    TANDEM_CHECK(n % real_rows_ == 0, "a padded step's element counts are per row") << n;
    return n / real_rows_ * rows_;
  }

  const StepMetadata& step() const {
    TANDEM_CHECK(step_ != nullptr, "BeginStep before the step's ops");
    return *step_;
  }

  template <typename T>
  T* Meta(int64_t offset) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(meta_) + offset);
  }

  // A copy the host waits for, outside any graph.
  void CopyNow(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what) {
    if (bytes == 0) return;
    SetDevice();
    graphs_.End();
    CheckInStep(cudaMemcpyAsync(dst, src, bytes, kind, stream_.stream()), what);
    CheckInStep(stream_.Synchronize(), what);
  }

  // Queues the pinned mirror's [offset, offset + bytes) to the device.
  void Copy(int64_t offset, int64_t bytes) {
    if (bytes == 0) return;
    CheckInStep(cudaMemcpyAsync(Meta<uint8_t>(offset), meta_host_.data() + offset,
                       static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_.stream()),
       "BeginStep");
  }

  // Start-up copies from pageable host memory (the mapped file), into memory of their own.
  absl::StatusOr<DevicePtr<const uint8_t>> CopyToDevice(std::span<const uint8_t> bytes,
                                                        std::string_view what) {
    RETURN_IF_ERROR(Check(cudaSetDevice(options_.device), "cudaSetDevice"));
    ASSIGN_OR_RETURN(DeviceBuffer * b, memory_.CopyIn(bytes, what, stream_));
    return DevicePtr<const uint8_t>(b->as<const uint8_t>());
  }

  static DeviceWeight Weight(const DeviceMatrix& m) {
    return {.type = m.type, .data = m.data.backend_address(), .rows = m.rows, .cols = m.cols};
  }

  const CudaBackendOptions options_;
  const std::string name_;
  const int64_t shared_bytes_per_block_;  // the device's, with opting in
  Stream stream_;
  DeviceMemory memory_;                       // every Allocate, until the end
  std::vector<DeviceMatrix> matrices_;        // the distinct weight matrices
  const RopeTable* rope_ = nullptr;
  RopeArgs rope_args_;  // its tables on the device, and the step's positions
  StepLimits limits_;
  MetaLayout layout_;
  void* meta_ = nullptr;       // the step's metadata on the device
  PinnedBuffer meta_host_;     // its host mirror
  cudaEvent_t meta_copied_ = nullptr;  // after the last step's copies out of the mirror
  DeviceBuffer* matmul_scratch_ = nullptr;
  ReducedRow* reduced_ = nullptr;
  float* attention_scratch_ = nullptr;  // LaunchPagedAttention's split partials
  uint8_t* reduce_scratch_ = nullptr;    // LaunchReduceLogits's slice partials
  PinnedBuffer reduced_host_;
  KvMoves kv_moves_{stream_};  // ReadBlocks, WriteBlocks, MoveKvSlots
  const StepMetadata* step_ = nullptr;
  int32_t real_rows_ = 0;  // the step's rows
  int32_t rows_ = 0;       // the rows its ops run on: real_rows_, or its bucket
  GraphSections graphs_;  // after stream_, whose stream it captures
};

}  // namespace
}  // namespace cuda

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  if (options.graph_max_batch < 0) {
    return absl::InvalidArgumentError("--cuda-graph-max-batch must be >= 0");
  }
  ASSIGN_OR_RETURN(const cuda::DeviceInfo info, cuda::GetDeviceInfo(options.device));
  if (options.programmatic_launch && info.major < 9) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cuda-pdl needs a GPU of compute capability 9.0 or newer; cuda:", options.device, " (",
        info.name, ") is ", info.major, ".", info.minor));
  }
  ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(options.device));
  return std::make_unique<cuda::CudaBackend>(options, info, std::move(stream));
}

CudaGraphStats GraphStats(const Backend& backend) {
  const auto* cuda = dynamic_cast<const cuda::CudaBackend*>(&backend);
  return cuda != nullptr ? cuda->graph_stats() : CudaGraphStats{};
}

}  // namespace tandem::engine
