// The model's forward pass over one batch that mixes prefill chunks and
// single decode tokens of many sequences, reading and writing the paged KV
// cache, every stage a Backend op on backend memory. Called by the Engine
// once per step. Engine-thread only: it owns its scratch (backend memory
// sized at start for the largest step, never grown) and the step's
// metadata; a ForwardResult is valid until the next Run.
#ifndef TANDEM_ENGINE_MODEL_FORWARD_H_
#define TANDEM_ENGINE_MODEL_FORWARD_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/backend.h"
#include "engine/model/model.h"
#include "engine/model/rope.h"

namespace tandem::engine {

// What a logits row is reduced to before it leaves the backend
// (LogitsSummary): the top `top_k` tokens (<= kMaxReducedTop; -1: not
// reduced, for rows read whole with DownloadRow or not at all) and the logit
// of token `target` (-1: none).
struct LogitsRequest {
  int32_t top_k = -1;
  int32_t target = -1;
};

// One sequence's share of a batch: token i is rotated for RoPE position
// positions[i] and its key and value go to KV slot kv_start + i of the
// sequence's block table `blocks` (block s / block_size, slot s %
// block_size). Slots [0, kv_start) already hold the sequence's earlier keys
// and values, which the tokens attend to; `blocks` covers every slot up to
// the last token. Slots and positions are separate so a sequence can drop
// blocks (a rolling window) or shift its positions.
struct BatchChunk {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;  // one per token
  int32_t kv_start = 0;
  std::span<const BlockId> blocks;
  bool all_logits = false;  // logits for every token, else for the last only
  // One per logits row of the chunk (1, or tokens.size() with all_logits);
  // empty: none of them reduced.
  std::span<const LogitsRequest> reduce;
  // Its keys and values only, no logits row (a draft model catching up on
  // KV). When every chunk of a pass is, the last layer computes only the
  // keys and values, and nothing after them.
  bool kv_only = false;
};

struct ForwardResult {
  DevicePtr<const float> logits;  // [n_rows, n_vocab], backend memory
  int32_t n_vocab = 0;
  // first_row[i]: the first logits row of chunk i (its last token's row when
  // all_logits is false, else its first token's; -1 for a kv_only chunk).
  std::vector<int32_t> first_row;
  // [n_rows]: row r reduced as its LogitsRequest asked (entries of rows not
  // reduced are stale).
  std::span<const LogitsSummary> summaries;
};

// The largest step the pass is sized for (the scheduler's bounds).
struct ForwardLimits {
  int32_t max_tokens = 512;      // tokens per step (--max-batch-tokens)
  int32_t max_seqs = 64;         // chunks per step (--max-running)
  int32_t max_logit_rows = 512;  // rows that need logits per step
};

class ForwardPass {
 public:
  // Prepares the weights and the RoPE table on `backend` and allocates the
  // scratch for `limits`. The model's layer l keeps its keys and values in
  // the cache's layer kv_first_layer + l (a draft model's follow the
  // target's). `model`, `backend`, `kv` and `rope` must outlive the pass.
  // The backend's error when its memory falls short.
  static absl::StatusOr<std::unique_ptr<ForwardPass>> Create(const Model& model, Backend& backend,
                                                             const KvCache& kv,
                                                             const RopeTable& rope,
                                                             const ForwardLimits& limits,
                                                             int32_t kv_first_layer = 0);

  // InvalidArgument for token ids out of range, positions past the RoPE
  // table, block tables that do not cover the chunk, or more slots than
  // max_context. The chunks must fit the limits (checked).
  absl::StatusOr<ForwardResult> Run(std::span<const BatchChunk> chunks);

  // Copies logits row `row` of the last Run out of the backend: the whole
  // row, for a sampler or logits processor that needs it. out: [n_vocab].
  void DownloadRow(int32_t row, std::span<float> out);

 private:
  // Backend memory; shapes for the limits (T = max_tokens, R =
  // max_logit_rows).
  struct Scratch {
    DevicePtr<float> x;       // [T, n_embd] residual stream
    DevicePtr<float> xb;      // [T, n_embd] normed input of a sublayer
    DevicePtr<float> q;       // [T, q_dim]
    DevicePtr<float> k;       // [T, kv_dim]
    DevicePtr<float> v;       // [T, kv_dim]
    DevicePtr<float> att;     // [T, q_dim] attention output
    DevicePtr<float> proj;    // [T, n_embd] sublayer output
    DevicePtr<float> gate;    // [T, n_ff]
    DevicePtr<float> up;      // [T, n_ff]
    DevicePtr<float> out_x;   // [R, n_embd] rows that need logits
    DevicePtr<float> logits;  // [R, n_vocab]
  };

  ForwardPass(const Model& model, Backend& backend, const KvCache& kv, const RopeTable& rope,
              const ForwardLimits& limits, int32_t kv_first_layer);
  absl::Status Allocate();
  absl::Status Validate(std::span<const BatchChunk> chunks) const;
  // Fills step_ (and the result's first rows) for `chunks`.
  void BuildStep(std::span<const BatchChunk> chunks, ForwardResult& result);
  void Attention(int32_t layer);
  // A layer's keys and values stored, and nothing else (the last layer of a
  // pass whose chunks are all kv_only).
  void StoreKvOnly(int32_t layer);
  void FeedForward(int32_t layer);
  void Logits();
  // The residual stream x normed with `weight` into xb, as a sublayer's
  // products take it (Backend::NormMatMuls).
  NormedInput Normed(DevicePtr<const float> weight) const;

  const ModelConfig& config_;
  Backend& backend_;
  const KvCache& kv_;
  const RopeTable& rope_;
  const ForwardLimits limits_;
  const int32_t kv_first_layer_;
  const int32_t max_blocks_per_seq_;  // a block table never needs more
  const ModelWeights& host_weights_;
  DeviceWeights w_;
  Scratch s_;
  // This step's metadata (host vectors reserved for the limits) and its
  // logits rows' summaries ([max_logit_rows]).
  StepMetadata step_;
  std::vector<LogitsSummary> summaries_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_FORWARD_H_
