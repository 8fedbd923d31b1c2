// The seam between the engine and the memory it computes on. A Backend owns
// that memory (weights prepared once, scratch and the KV pool allocated at
// start, a step's metadata) and runs every step of the forward pass on it;
// the engine, the forward pass (engine/model/forward.cc) and the KV cache
// hold DevicePtr handles they cannot dereference. Called by ForwardPass and
// the Engine; engine-thread only: a backend may use its own compute pool
// inside a call, but calls do not overlap.
//
// Why this shape. Everything that crosses is explicit and batched, so a
// device backend (CUDA) can be written against it without the engine
// touching its memory: a step's metadata (tokens, positions, slot mapping,
// block tables, logits rows) goes over once in BeginStep and the step's ops
// refer to it implicitly, rather than each op taking host arrays; what comes
// back per logits row is O(k) (ReduceLogits: log-softmax stats, top-k, one
// target logit), and a full row only when a sampler or logits processor
// needs it (Download, which the engine then counts as such); KV bytes move
// only through ReadBlocks / WriteBlocks, a batch per step. Ops take
// DevicePtr rather than spans because the sizes are the op's own contract
// (n rows of a known width) and a device backend checks nothing on the host.
// The CPU backend (engine/cpu/) is always built and is the reference: its
// addresses are host pointers (DevicePtr costs nothing there), its weights
// are views of the mapped file, and every op keeps the arithmetic the host
// code it replaced had, bit for bit. tests/engine/fake_device_backend.h runs
// the same kernels over memory that faults when the host touches it, which
// keeps this seam honest.
#ifndef TANDEM_ENGINE_MODEL_BACKEND_H_
#define TANDEM_ENGINE_MODEL_BACKEND_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/model_config.h"
#include "engine/gguf/tensor_type.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/device_ptr.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_snapshot.h"
#include "engine/model/rope.h"
#include "engine/model/weights.h"

namespace tandem::engine {

// One sequence's rows of the batch: query rows [first_row, first_row + n_rows)
// have their keys and values in KV slots [kv_start, kv_start + n_rows) and
// attend to slots [0, their own] (slots, not RoPE positions: rotation is
// already in the stored keys). `blocks` is the sequence's block table,
// covering at least kv_start + n_rows slots. (The CPU kernels' host view.)
struct AttentionSequence {
  int32_t first_row = 0;
  int32_t n_rows = 0;
  int32_t kv_start = 0;
  std::span<const BlockId> blocks;
};

// The CPU attention kernels' arguments (engine/cpu/attention.h): host
// addresses of the CPU backend's memory.
struct AttentionArgs {
  const float* q = nullptr;  // [n_tokens, n_head * head_dim], RoPE applied
  float* out = nullptr;      // [n_tokens, n_head * head_dim]
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  PagedKvView kv;
  std::span<const AttentionSequence> seqs;
};

// A sequence of the step as StepMetadata lists it: its rows, its first KV
// slot, and its block table at block_tables[table_offset, + n_blocks).
struct StepSequence {
  int32_t first_row = 0;
  int32_t n_rows = 0;
  int32_t kv_start = 0;
  int32_t table_offset = 0;
  int32_t n_blocks = 0;
};

// Everything a step's ops need besides activations and weights, built once
// per step by the forward pass and handed over whole by BeginStep. T tokens
// (rows), S sequences, R rows that need logits.
struct StepMetadata {
  std::vector<int32_t> tokens;        // [T] token ids
  std::vector<int32_t> positions;     // [T] RoPE positions
  std::vector<int64_t> slot_mapping;  // [T] KV slot: block * block_size + slot in block
  std::vector<StepSequence> seqs;     // [S]
  std::vector<BlockId> block_tables;  // the sequences' tables, back to back
  std::vector<int32_t> logit_rows;    // [R] the batch row of each logits row
  // [R] what ReduceLogits reduces each logits row to: the top `logit_top_k`
  // (<= kMaxReducedTop; -1: the row is not reduced) and the logit of token
  // `logit_target` (-1: none).
  std::vector<int32_t> logit_top_k;
  std::vector<int32_t> logit_target;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_logit_rows() const { return static_cast<int32_t>(logit_rows.size()); }
};

// The most a step may hold (ReserveStep), known at engine start.
struct StepLimits {
  int32_t max_tokens = 0;        // T
  int32_t max_seqs = 0;          // S
  int32_t max_table_entries = 0;  // block_tables
  int32_t max_logit_rows = 0;    // R
};

// kMaxTopLogprobs (engine/sample/sampling_params.h), which the engine
// checks this equals; engine/model does not see engine/sample.
inline constexpr int kMaxReducedTop = 20;

// One logits row reduced to O(k) (ReduceLogits): its log-softmax stats
// (ComputeLogSoftmaxStats), its top n_top tokens with their logprobs
// (TopLogprobs order: most likely first, ties by lower id) and the raw logit
// of the row's target token. What a device backend moves per row.
struct LogitsSummary {
  float max = 0.0f;
  float log_sum = 0.0f;
  float target_logit = 0.0f;
  int32_t n_top = 0;
  std::array<int32_t, kMaxReducedTop> top_ids{};
  std::array<float, kMaxReducedTop> top_logprobs{};

  // Bytes a device backend downloads for it: the four scalars and the pairs.
  int64_t wire_bytes() const { return 16 + int64_t{n_top} * 8; }
};

// Paged attention of the step's sequences (their rows, slots and block
// tables from StepMetadata): q and out [T, n_head * head_dim].
struct AttentionOp {
  DevicePtr<const float> q;  // RoPE applied
  DevicePtr<float> out;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  PagedKvView kv;  // the layer's view of the pool
};

// RoPE, then the KV store (Backend::RopeStoreKv): the attention's steps
// between its products and PagedAttention.
struct RopeStoreKvOp {
  DevicePtr<float> q;  // [T, n_head * head_dim]; null: the keys alone
  DevicePtr<float> k;  // [T, n_head_kv * head_dim]
  DevicePtr<const float> v;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  PagedKvView kv;  // the layer's view of the pool
};

// One of MatMuls's products: y = x w^T.
struct MatMulProduct {
  const DeviceMatrix* w = nullptr;
  DevicePtr<float> y;
};

// The input of products that begin with an RMSNorm (Backend::NormMatMuls):
// RmsNorm's arguments, and where the normed rows go when the backend does
// not fold the norm into the products.
struct NormedInput {
  DevicePtr<const float> x;       // [n_tokens, dim]
  DevicePtr<const float> weight;  // [dim]
  int64_t dim = 0;
  float eps = 0.0f;
  DevicePtr<float> normed;  // [n_tokens, dim]; may alias x
};

// The feed-forward block (Backend::FeedForward): out[t, :] += w_down ·
// (silu(w_gate · n) * (w_up · n)), n = RmsNorm(in)[t, :], t < n_tokens.
struct FeedForwardOp {
  NormedInput in;  // in.x [n_tokens, dim]
  const DeviceMatrix* w_gate = nullptr;
  const DeviceMatrix* w_up = nullptr;
  const DeviceMatrix* w_down = nullptr;
  DevicePtr<float> gate;     // [n_tokens, w_gate.rows]
  DevicePtr<float> up;       // [n_tokens, w_up.rows]
  DevicePtr<float> out;      // [n_tokens, dim], the residual stream; may be in.x
  DevicePtr<float> scratch;  // [n_tokens, dim], as MatMulAdd's
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int threads() const = 0;

  // --- Memory. The backend owns all of it; it is freed with the backend. ---

  // `bytes` of backend memory, uninitialized, 64-byte aligned. Start-up only
  // (weights, scratch, the KV pool): nothing is allocated inside a step.
  // `what` names the use in the error. ResourceExhausted when out of memory.
  virtual absl::StatusOr<DevicePtr<uint8_t>> Allocate(int64_t bytes, std::string_view what) = 0;
  // Copies host bytes in / out. Each returns once the copy is complete (ops
  // issued before a Download have finished when it returns).
  virtual void Upload(DevicePtr<uint8_t> dst, std::span<const uint8_t> src) = 0;
  virtual void Download(DevicePtr<const uint8_t> src, std::span<uint8_t> dst) = 0;
  // Waits for every op issued so far (benchmarks; the copies wait themselves).
  virtual void Synchronize() = 0;

  // --- Start-up: what every step uses. ---

  // The model's weights where the ops can read them, for as long as the
  // backend lives; `weights` must outlive the backend (the CPU backend keeps
  // views of them, no copy).
  virtual absl::StatusOr<DeviceWeights> PrepareWeights(const ModelWeights& weights) = 0;
  // The RoPE table Rope rotates with; `rope` must outlive the backend.
  virtual absl::Status PrepareRope(const RopeTable& rope) = 0;
  // Room for the largest step's metadata.
  virtual absl::Status ReserveStep(const StepLimits& limits) = 0;

  // --- One step: BeginStep, then the forward pass's ops in order. ---

  // Takes the step's metadata (within ReserveStep's limits); the ops below
  // read it until the next BeginStep. `step` must stay unchanged until then.
  virtual void BeginStep(const StepMetadata& step) = 0;

  // x[t, :] = table[tokens[t], :] dequantized to f32, t < T. x: [T, table.cols].
  virtual void Embed(const DeviceMatrix& table, DevicePtr<float> x) = 0;
  // y[t, r] = sum_c x[t, c] * w[r, c] for t < n_tokens.
  // x: [n_tokens, w.cols], y: [n_tokens, w.rows]; y does not alias x.
  virtual void MatMul(const DeviceMatrix& w, DevicePtr<const float> x, int64_t n_tokens,
                      DevicePtr<float> y) = 0;
  // MatMul for each product, all of the same x (Q, K and V); a backend may
  // run them as one.
  virtual void MatMuls(std::span<const MatMulProduct> products, DevicePtr<const float> x,
                       int64_t n_tokens) {
    for (const MatMulProduct& p : products) MatMul(*p.w, x, n_tokens, p.y);
  }
  // gate = silu(x w_gate^T) * (x w_up^T), [n_tokens, w_gate.rows]: MatMul
  // into gate and into up, then SwiGlu. A backend may fuse them; `up` is
  // then left as it was.
  virtual void MatMulSwiGlu(const DeviceMatrix& w_gate, const DeviceMatrix& w_up,
                            DevicePtr<const float> x, int64_t n_tokens, DevicePtr<float> gate,
                            DevicePtr<float> up) {
    MatMul(w_gate, x, n_tokens, gate);
    MatMul(w_up, x, n_tokens, up);
    SwiGlu(gate, up, n_tokens * w_gate.rows, gate);
  }
  // y[t, :] += x[t, :] w^T for t < n_tokens (a product added to the
  // residual stream): MatMul into `scratch` ([n_tokens, w.rows]), then Add.
  // A backend may fuse them; `scratch` is then left as it was. y does not
  // alias x or scratch.
  virtual void MatMulAdd(const DeviceMatrix& w, DevicePtr<const float> x, int64_t n_tokens,
                         DevicePtr<float> y, DevicePtr<float> scratch) {
    MatMul(w, x, n_tokens, scratch);
    Add(y, scratch, n_tokens * w.rows);
  }
  // MatMuls of RmsNorm(in) (the attention's Q, K and V): RmsNorm into
  // in.normed, then MatMuls of it. A backend may fold the norm into the
  // products (their sums scaled by each row's 1 / rms, the norm's weight
  // taken with the matrix's); in.normed is then left as it was.
  virtual void NormMatMuls(const NormedInput& in, std::span<const MatMulProduct> products,
                           int64_t n_tokens) {
    RmsNorm(in.x, in.weight, n_tokens, in.dim, in.eps, in.normed);
    MatMuls(products, in.normed, n_tokens);
  }
  // MatMulSwiGlu of RmsNorm(in) (the feed-forward's input), as NormMatMuls.
  virtual void NormMatMulSwiGlu(const NormedInput& in, const DeviceMatrix& w_gate,
                                const DeviceMatrix& w_up, int64_t n_tokens, DevicePtr<float> gate,
                                DevicePtr<float> up) {
    RmsNorm(in.x, in.weight, n_tokens, in.dim, in.eps, in.normed);
    MatMulSwiGlu(w_gate, w_up, in.normed, n_tokens, gate, up);
  }
  // NormMatMulSwiGlu into op.gate (and op.up), then MatMulAdd of op.gate
  // into op.out. A backend may fuse them; op.gate, op.up and op.in.normed
  // then hold whatever the fused ops left there.
  virtual void FeedForward(const FeedForwardOp& op, int64_t n_tokens) {
    NormMatMulSwiGlu(op.in, *op.w_gate, *op.w_up, n_tokens, op.gate, op.up);
    MatMulAdd(*op.w_down, op.gate, n_tokens, op.out, op.scratch);
  }
  // x[t, :] += bias[:] for t < n_rows; x: [n_rows, dim].
  virtual void AddBias(DevicePtr<float> x, DevicePtr<const float> bias, int64_t n_rows,
                       int64_t dim) = 0;
  // Rotates x[t] ([n_heads][head_dim]) for positions[t], t < T (PrepareRope's table).
  virtual void Rope(DevicePtr<float> x, int32_t n_heads, int32_t head_dim) = 0;
  // Stores k[t] and v[t] ([T, kv.kv_dim] f32) in KV slot slot_mapping[t] of
  // layer view `kv`, converted to its dtype.
  virtual void StoreKv(const PagedKvView& kv, DevicePtr<const float> k,
                       DevicePtr<const float> v) = 0;
  // Rope of op.q (unless null) and op.k, then StoreKv(op.kv, op.k, op.v). A
  // backend may run them as one.
  virtual void RopeStoreKv(const RopeStoreKvOp& op) {
    if (!op.q.is_null()) Rope(op.q, op.n_head, op.head_dim);
    Rope(op.k, op.n_head_kv, op.head_dim);
    StoreKv(op.kv, op.k, op.v);
  }
  // y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight[:]
  // x, y: [n_tokens, dim]; y may alias x.
  virtual void RmsNorm(DevicePtr<const float> x, DevicePtr<const float> weight,
                       int64_t n_tokens, int64_t dim, float eps, DevicePtr<float> y) = 0;
  // out[i] = silu(gate[i]) * up[i] for i < n; out may alias gate.
  virtual void SwiGlu(DevicePtr<const float> gate, DevicePtr<const float> up, int64_t n,
                      DevicePtr<float> out) = 0;
  // x[i] += y[i] for i < n.
  virtual void Add(DevicePtr<float> x, DevicePtr<const float> y, int64_t n) = 0;
  // Causal attention of op.q over each sequence's paged KV (whose keys and
  // values for these rows are already stored) into op.out.
  virtual void PagedAttention(const AttentionOp& op) = 0;
  // out[r, :] = x[logit_rows[r], :] for r < R; x: [T, dim], out: [R, dim].
  virtual void GatherRows(DevicePtr<const float> x, int64_t dim, DevicePtr<float> out) = 0;
  // out[r] = the summary of logits row r ([R, n_vocab]) for every r whose
  // logit_top_k >= 0; other entries are left alone. out: [R], host memory.
  virtual void ReduceLogits(DevicePtr<const float> logits, int32_t n_vocab,
                            std::span<LogitsSummary> out) = 0;

  // --- KV blocks, in batches: one call per step, never one per block. ---

  // out[i * pool.block_bytes, ...) = block ids[i], whole (every layer).
  virtual void ReadBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                          std::span<uint8_t> out) = 0;
  // Block ids[i] = blocks[i] (each exactly pool.block_bytes).
  virtual void WriteBlocks(const KvPoolView& pool, std::span<const BlockId> ids,
                           std::span<const KvBlockBytes> blocks) = 0;
  // Moves KV slots within the pool in every layer (`layers`: the pool's
  // layer views, KvCache::LayerView): slot dst[i] takes the value of slot
  // src[i] as it is and its key rotated by `delta` RoPE positions
  // (PrepareRope's table; RoPE composes, so that equals the key computed at
  // a position `delta` away). A slot is block * block_size + slot in block.
  // Every source is read before any destination is written. A SHIFT
  // window's re-rotation, done where the KV lives: the slot lists are the
  // only bytes that cross.
  virtual void MoveKvSlots(std::span<const PagedKvView> layers, int32_t head_dim,
                           std::span<const int64_t> src, std::span<const int64_t> dst,
                           int32_t delta) = 0;
};

struct CpuBackendOptions {
  int threads = 2;  // size of the compute pool (OpenMP); 0 = all cores
  // The kernel table: "portable", "avx2" or "avx512", which this CPU must
  // have; empty: the best it has (or the one TANDEM_ISA names).
  std::string isa = "";
};

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options);

// Prefill attention's tiles (engine/cuda/attention_f16.cu): f32 on the CUDA
// cores; on the tensor cores with each f32 operand split into two f16 halves
// (about f32's accuracy, two or three products for one); or on the tensor
// cores with the operands rounded to f16 (about 1e-3 relative).
enum class CudaAttention { kF32, kSplitF16, kF16 };  // in engine/cuda's TileMath's order

struct CudaBackendOptions {
  int device = 0;  // the CUDA ordinal (the factory sets it from --device cuda:N)
  // Decode steps (one row per sequence) of up to this many sequences are
  // captured as CUDA graphs, one per batch-size bucket (powers of two, the
  // batch padded up to its bucket), and replayed; 0: every step eager.
  int32_t graph_max_batch = 256;
  // Programmatic dependent launch (compute capability 9.0 and newer): each
  // kernel of a step may start while the one before it ends, loading its
  // weights into L2 before it waits (engine/cuda/launch.h).
  bool programmatic_launch = false;
  // How prefill attention's tiles are computed (--cuda-attention); decode
  // rows are f32 on the CUDA cores in every case.
  CudaAttention attention = CudaAttention::kF32;
};

// A KV cache whose pool `backend` allocates; the backend must outlive it.
inline absl::StatusOr<std::unique_ptr<KvCache>> CreateKvCache(Backend& backend,
                                                              const ModelConfig& config,
                                                              const KvCacheOptions& options) {
  return KvCache::Create(config, options,
                         [&backend](int64_t bytes) { return backend.Allocate(bytes, "KV pool"); });
}

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_BACKEND_H_
