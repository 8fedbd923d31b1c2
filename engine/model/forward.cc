#include "engine/model/forward.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::engine {
namespace {

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}

void AddBias(float* x, const std::vector<float>& bias, int32_t n_tokens) {
  if (bias.empty()) return;
  const size_t n = bias.size();
  for (int32_t t = 0; t < n_tokens; ++t) {
    float* row = x + t * n;
    for (size_t i = 0; i < n; ++i) row[i] += bias[i];
  }
}

}  // namespace

ForwardPass::ForwardPass(const Model& model, Backend& backend, KvCache& kv,
                         const RopeTable& rope)
    : model_(model), config_(model.config()), backend_(backend), kv_(kv), rope_(rope) {}

absl::Status ForwardPass::Validate(std::span<const BatchChunk> chunks) const {
  for (size_t i = 0; i < chunks.size(); ++i) {
    const BatchChunk& c = chunks[i];
    if (c.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", i, ": no tokens"));
    }
    for (int32_t id : c.tokens) {
      if (id < 0 || id >= config_.n_vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token id ", id, " is out of range [0, ", config_.n_vocab, ")"));
      }
    }
    if (c.positions.size() != c.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", i, ": ", c.positions.size(), " positions for ", c.tokens.size(), " tokens"));
    }
    for (int32_t pos : c.positions) {
      if (pos < 0 || pos >= rope_.max_positions()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", i, ": position ", pos, " is outside [0, max_context ",
            rope_.max_positions(), ")"));
      }
    }
    const int64_t end = int64_t{c.kv_start} + static_cast<int64_t>(c.tokens.size());
    const int64_t covered = static_cast<int64_t>(c.blocks.size()) * kv_.block_size();
    if (c.kv_start < 0 || covered < end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", i, ": block table covers ", covered, " slots, needs ", end));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> ForwardPass::Run(std::span<const BatchChunk> chunks) {
  RETURN_IF_ERROR(Validate(chunks));
  int32_t n_tokens = 0;
  for (const BatchChunk& c : chunks) n_tokens += static_cast<int32_t>(c.tokens.size());
  const int64_t T = n_tokens;
  Grow(s_.x, T * config_.n_embd);
  Grow(s_.xb, T * config_.n_embd);
  Grow(s_.proj, T * config_.n_embd);
  Grow(s_.q, T * config_.q_dim());
  Grow(s_.att, T * config_.q_dim());
  Grow(s_.k, T * config_.kv_dim());
  Grow(s_.v, T * config_.kv_dim());
  Grow(s_.gate, T * config_.n_ff);
  Grow(s_.up, T * config_.n_ff);
  positions_.clear();
  slots_.clear();
  seqs_.clear();
  const int32_t bs = kv_.block_size();
  for (const BatchChunk& c : chunks) {
    const int32_t n = static_cast<int32_t>(c.tokens.size());
    seqs_.push_back({.first_row = static_cast<int32_t>(positions_.size()),
                     .n_rows = n,
                     .kv_start = c.kv_start,
                     .blocks = c.blocks});
    for (int32_t i = 0; i < n; ++i) {
      const int32_t slot = c.kv_start + i;
      positions_.push_back(c.positions[i]);
      slots_.push_back({.block = c.blocks[slot / bs], .slot = slot % bs});
    }
  }

  Embed(chunks);
  for (int32_t layer = 0; layer < config_.n_layer; ++layer) {
    Attention(layer);
    FeedForward(layer, n_tokens);
  }
  return Logits(chunks);
}

// x[t, :] = token_embd[tokens[t], :]
void ForwardPass::Embed(std::span<const BatchChunk> chunks) {
  const WeightMatrix& e = model_.weights().token_embd;
  const int64_t row_bytes = GgmlRowBytes(e.type, e.cols);
  int64_t t = 0;
  for (const BatchChunk& c : chunks) {
    for (int32_t id : c.tokens) {
      DequantizeRow(e.type, static_cast<const uint8_t*>(e.data) + id * row_bytes,
                    s_.x.data() + t * config_.n_embd, config_.n_embd);
      ++t;
    }
  }
}

// x += Wo · attention(RoPE(Wq·xb), RoPE(Wk·xb), Wv·xb), xb = RmsNorm(x).
void ForwardPass::Attention(int32_t layer) {
  const LayerWeights& w = model_.weights().layers[layer];
  const int32_t T = static_cast<int32_t>(positions_.size());
  const int32_t q_dim = config_.q_dim();
  const int32_t kv_dim = config_.kv_dim();
  backend_.RmsNorm(s_.x.data(), w.attn_norm.data(), T, config_.n_embd, config_.rms_eps,
                   s_.xb.data());
  backend_.MatMul(w.wq, s_.xb.data(), T, s_.q.data());
  backend_.MatMul(w.wk, s_.xb.data(), T, s_.k.data());
  backend_.MatMul(w.wv, s_.xb.data(), T, s_.v.data());
  AddBias(s_.q.data(), w.bq, T);
  AddBias(s_.k.data(), w.bk, T);
  AddBias(s_.v.data(), w.bv, T);

  // Rotate, then store each token's key and value in its block slot.
  for (int32_t t = 0; t < T; ++t) {
    float* q = s_.q.data() + static_cast<int64_t>(t) * q_dim;
    float* k = s_.k.data() + static_cast<int64_t>(t) * kv_dim;
    rope_.Apply(q, config_.n_head, config_.head_dim, positions_[t]);
    rope_.Apply(k, config_.n_head_kv, config_.head_dim, positions_[t]);
    kv_.Store(layer, slots_[t].block, slots_[t].slot, k,
              s_.v.data() + static_cast<int64_t>(t) * kv_dim);
  }
  backend_.PagedAttention({
      .q = s_.q.data(),
      .out = s_.att.data(),
      .n_head = config_.n_head,
      .n_head_kv = config_.n_head_kv,
      .head_dim = config_.head_dim,
      .kv = kv_.LayerView(layer),
      .seqs = seqs_,
  });
  backend_.MatMul(w.wo, s_.att.data(), T, s_.proj.data());
  backend_.Add(s_.x.data(), s_.proj.data(), static_cast<int64_t>(T) * config_.n_embd);
}

// x += W_down · (silu(W_gate · xb) * (W_up · xb)), xb = RmsNorm(x).
void ForwardPass::FeedForward(int32_t layer, int32_t n_tokens) {
  const LayerWeights& w = model_.weights().layers[layer];
  backend_.RmsNorm(s_.x.data(), w.ffn_norm.data(), n_tokens, config_.n_embd,
                   config_.rms_eps, s_.xb.data());
  backend_.MatMul(w.w_gate, s_.xb.data(), n_tokens, s_.gate.data());
  backend_.MatMul(w.w_up, s_.xb.data(), n_tokens, s_.up.data());
  backend_.SwiGlu(s_.gate.data(), s_.up.data(), static_cast<int64_t>(n_tokens) * config_.n_ff,
                  s_.gate.data());
  backend_.MatMul(w.w_down, s_.gate.data(), n_tokens, s_.proj.data());
  backend_.Add(s_.x.data(), s_.proj.data(), static_cast<int64_t>(n_tokens) * config_.n_embd);
}

// logits = W_out · RmsNorm(x) for the rows that need them.
ForwardResult ForwardPass::Logits(std::span<const BatchChunk> chunks) {
  ForwardResult result;
  result.n_vocab = config_.n_vocab;
  const int32_t d = config_.n_embd;
  int32_t n_out = 0;
  for (const BatchChunk& c : chunks) {
    n_out += c.all_logits ? static_cast<int32_t>(c.tokens.size()) : 1;
  }
  Grow(s_.out_x, static_cast<int64_t>(n_out) * d);
  Grow(s_.logits, static_cast<int64_t>(n_out) * config_.n_vocab);
  int32_t t = 0;
  int32_t out_row = 0;
  for (const BatchChunk& c : chunks) {
    const int32_t n = static_cast<int32_t>(c.tokens.size());
    const int32_t first = c.all_logits ? t : t + n - 1;
    const int32_t rows = c.all_logits ? n : 1;
    std::copy_n(s_.x.data() + static_cast<int64_t>(first) * d, static_cast<int64_t>(rows) * d,
                s_.out_x.data() + static_cast<int64_t>(out_row) * d);
    result.first_row.push_back(out_row);
    out_row += rows;
    t += n;
  }
  const ModelWeights& w = model_.weights();
  backend_.RmsNorm(s_.out_x.data(), w.output_norm.data(), n_out, d, config_.rms_eps,
                   s_.out_x.data());
  backend_.MatMul(w.output, s_.out_x.data(), n_out, s_.logits.data());
  result.logits = s_.logits.data();
  return result;
}

}  // namespace tandem::engine
