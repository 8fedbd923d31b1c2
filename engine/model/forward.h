// The model's forward pass over one batch that mixes prefill chunks and
// single decode tokens of many sequences, reading and writing the paged KV
// cache. Called by the Engine once per step. Engine-thread only: it owns
// scratch buffers reused across steps; logits are valid until the next Run.
#ifndef TANDEM_ENGINE_MODEL_FORWARD_H_
#define TANDEM_ENGINE_MODEL_FORWARD_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/backend.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/rope.h"

namespace tandem::engine {

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
};

// Views into the pass's scratch, valid until the next Run.
struct ForwardResult {
  // [n_rows, n_vocab]; the caller may adjust a row in place before sampling.
  float* logits = nullptr;
  int32_t n_vocab = 0;
  // first_row[i]: the first logits row of chunk i (its last token's row when
  // all_logits is false, else its first token's).
  std::vector<int32_t> first_row;

  std::span<float> Row(int32_t row) const {
    return {logits + static_cast<int64_t>(row) * n_vocab, static_cast<size_t>(n_vocab)};
  }
};

class ForwardPass {
 public:
  struct KvSlot {
    BlockId block;
    int32_t slot;
  };

  ForwardPass(const Model& model, Backend& backend, KvCache& kv, const RopeTable& rope);

  // InvalidArgument for token ids out of range, positions past the RoPE
  // table or block tables that do not cover the chunk.
  absl::StatusOr<ForwardResult> Run(std::span<const BatchChunk> chunks);

 private:
  // Scratch, grown on demand and reused; shapes in comments ([rows, cols]).
  struct Scratch {
    std::vector<float> x;       // [T, n_embd] residual stream
    std::vector<float> xb;      // [T, n_embd] normed input of a sublayer
    std::vector<float> q;       // [T, q_dim]
    std::vector<float> k;       // [T, kv_dim]
    std::vector<float> v;       // [T, kv_dim]
    std::vector<float> att;     // [T, q_dim] attention output
    std::vector<float> proj;    // [T, n_embd] sublayer output
    std::vector<float> gate;    // [T, n_ff]
    std::vector<float> up;      // [T, n_ff]
    std::vector<float> out_x;   // [R, n_embd] rows that need logits
    std::vector<float> logits;  // [R, n_vocab]
  };

  absl::Status Validate(std::span<const BatchChunk> chunks) const;
  void Embed(std::span<const BatchChunk> chunks);
  void Attention(int32_t layer);
  void FeedForward(int32_t layer, int32_t n_tokens);
  ForwardResult Logits(std::span<const BatchChunk> chunks);

  const Model& model_;
  const ModelConfig& config_;
  Backend& backend_;
  KvCache& kv_;
  const RopeTable& rope_;
  Scratch s_;
  // Per step, shared by every layer.
  std::vector<int32_t> positions_;           // [T] each token's RoPE position
  std::vector<KvSlot> slots_;                // [T] where its key and value go
  std::vector<AttentionSequence> seqs_;      // one per chunk
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_MODEL_FORWARD_H_
