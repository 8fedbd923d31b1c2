#include "engine/model/forward.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace tandem::engine {

absl::StatusOr<std::unique_ptr<ForwardPass>> ForwardPass::Create(
    const Model& model, Backend& backend, const KvCache& kv, const RopeTable& rope,
    const ForwardLimits& limits, int32_t kv_first_layer) {
  TANDEM_CHECK(limits.max_tokens >= 1 && limits.max_seqs >= 1 && limits.max_logit_rows >= 1,
               "forward limits are positive");
  TANDEM_CHECK(kv_first_layer >= 0 && kv_first_layer + model.config().n_layer <= kv.n_layer() &&
                   kv.kv_dim() == model.config().kv_dim(),
               "the cache holds the model's layers")
      << kv_first_layer << " + " << model.config().n_layer << " > " << kv.n_layer();
  std::unique_ptr<ForwardPass> pass(
      new ForwardPass(model, backend, kv, rope, limits, kv_first_layer));
  RETURN_IF_ERROR(pass->Allocate());
  return pass;
}

ForwardPass::ForwardPass(const Model& model, Backend& backend, const KvCache& kv,
                         const RopeTable& rope, const ForwardLimits& limits, int32_t kv_first_layer)
    : config_(model.config()),
      backend_(backend),
      kv_(kv),
      rope_(rope),
      limits_(limits),
      kv_first_layer_(kv_first_layer),
      // Slots never run past positions (a rolled or shifted sequence has
      // fewer slots than positions), and a table holds each block once.
      max_blocks_per_seq_(std::min(kv.num_blocks(), rope.max_positions() / kv.block_size() + 2)),
      host_weights_(model.weights()) {}

absl::Status ForwardPass::Allocate() {
  ASSIGN_OR_RETURN(w_, backend_.PrepareWeights(host_weights_));
  RETURN_IF_ERROR(backend_.PrepareRope(rope_));
  const StepLimits step{.max_tokens = limits_.max_tokens,
                        .max_seqs = limits_.max_seqs,
                        .max_table_entries = limits_.max_seqs * max_blocks_per_seq_,
                        .max_logit_rows = limits_.max_logit_rows};
  RETURN_IF_ERROR(backend_.ReserveStep(step));
  const int64_t t = limits_.max_tokens;
  const int64_t r = limits_.max_logit_rows;
  const auto floats = [this](int64_t n, std::string_view what) -> absl::StatusOr<DevicePtr<float>> {
    ASSIGN_OR_RETURN(DevicePtr<uint8_t> p, backend_.Allocate(n * int64_t{sizeof(float)}, what));
    return p.As<float>();
  };
  ASSIGN_OR_RETURN(s_.x, floats(t * config_.n_embd, "forward scratch x"));
  ASSIGN_OR_RETURN(s_.xb, floats(t * config_.n_embd, "forward scratch xb"));
  ASSIGN_OR_RETURN(s_.q, floats(t * config_.q_dim(), "forward scratch q"));
  ASSIGN_OR_RETURN(s_.k, floats(t * config_.kv_dim(), "forward scratch k"));
  ASSIGN_OR_RETURN(s_.v, floats(t * config_.kv_dim(), "forward scratch v"));
  ASSIGN_OR_RETURN(s_.att, floats(t * config_.q_dim(), "forward scratch att"));
  ASSIGN_OR_RETURN(s_.proj, floats(t * config_.n_embd, "forward scratch proj"));
  ASSIGN_OR_RETURN(s_.gate, floats(t * config_.n_ff, "forward scratch gate"));
  ASSIGN_OR_RETURN(s_.up, floats(t * config_.n_ff, "forward scratch up"));
  ASSIGN_OR_RETURN(s_.out_x, floats(r * config_.n_embd, "forward scratch out_x"));
  ASSIGN_OR_RETURN(s_.logits, floats(r * config_.n_vocab, "logits"));
  step_.tokens.reserve(t);
  step_.positions.reserve(t);
  step_.slot_mapping.reserve(t);
  step_.seqs.reserve(limits_.max_seqs);
  step_.block_tables.reserve(static_cast<size_t>(step.max_table_entries));
  step_.logit_rows.reserve(r);
  step_.logit_top_k.reserve(r);
  step_.logit_target.reserve(r);
  summaries_.resize(r);
  return absl::OkStatus();
}

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
    if (end > int64_t{max_blocks_per_seq_} * kv_.block_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", i, ": ", end, " KV slots run past max_context ", rope_.max_positions()));
    }
    if (c.kv_only && (c.all_logits || !c.reduce.empty())) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", i, ": a kv_only chunk asks for no logits"));
    }
    const size_t rows = c.kv_only ? 0 : c.all_logits ? c.tokens.size() : 1;
    if (!c.reduce.empty() && c.reduce.size() != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", i, ": ", c.reduce.size(), " logits requests for ", rows, " rows"));
    }
    for (const LogitsRequest& r : c.reduce) {
      if (r.top_k > kMaxReducedTop || r.target >= config_.n_vocab) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", i, ": bad logits request"));
      }
    }
  }
  return absl::OkStatus();
}

void ForwardPass::BuildStep(std::span<const BatchChunk> chunks, ForwardResult& result) {
  StepMetadata& m = step_;
  m.tokens.clear();
  m.positions.clear();
  m.slot_mapping.clear();
  m.seqs.clear();
  m.block_tables.clear();
  m.logit_rows.clear();
  m.logit_top_k.clear();
  m.logit_target.clear();
  const int32_t bs = kv_.block_size();
  for (const BatchChunk& c : chunks) {
    const int32_t n = static_cast<int32_t>(c.tokens.size());
    const int32_t first = m.n_tokens();
    // Attention reads slots below kv_start + n only: the table up to there.
    const int32_t n_blocks = (c.kv_start + n + bs - 1) / bs;
    m.seqs.push_back({.first_row = first,
                      .n_rows = n,
                      .kv_start = c.kv_start,
                      .table_offset = static_cast<int32_t>(m.block_tables.size()),
                      .n_blocks = n_blocks});
    m.block_tables.insert(m.block_tables.end(), c.blocks.begin(), c.blocks.begin() + n_blocks);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t slot = c.kv_start + i;
      m.tokens.push_back(c.tokens[i]);
      m.positions.push_back(c.positions[i]);
      m.slot_mapping.push_back(int64_t{c.blocks[slot / bs]} * bs + slot % bs);
    }
    result.first_row.push_back(c.kv_only ? -1 : m.n_logit_rows());
    const int32_t rows = c.kv_only ? 0 : c.all_logits ? n : 1;
    for (int32_t r = 0; r < rows; ++r) {
      m.logit_rows.push_back(c.all_logits ? first + r : first + n - 1);
      const LogitsRequest req = c.reduce.empty() ? LogitsRequest{} : c.reduce[r];
      m.logit_top_k.push_back(req.top_k);
      m.logit_target.push_back(req.target);
    }
  }
  TANDEM_CHECK(m.n_tokens() <= limits_.max_tokens, "a step's tokens fit max_batch_tokens")
      << m.n_tokens() << " > " << limits_.max_tokens;
  TANDEM_CHECK(static_cast<int32_t>(m.seqs.size()) <= limits_.max_seqs,
               "a step's sequences fit max_running")
      << m.seqs.size() << " > " << limits_.max_seqs;
  TANDEM_CHECK(m.n_logit_rows() <= limits_.max_logit_rows,
               "a step's logits rows fit the scheduler's bound")
      << m.n_logit_rows() << " > " << limits_.max_logit_rows;
}

absl::StatusOr<ForwardResult> ForwardPass::Run(std::span<const BatchChunk> chunks) {
  RETURN_IF_ERROR(Validate(chunks));
  ForwardResult result;
  BuildStep(chunks, result);
  backend_.BeginStep(step_);
  // x[t, :] = token_embd[tokens[t], :]
  backend_.Embed(w_.token_embd, s_.x);
  // Only KV wanted: the last layer's keys and values are its last use of x.
  const bool kv_only =
      std::all_of(chunks.begin(), chunks.end(), [](const BatchChunk& c) { return c.kv_only; });
  for (int32_t layer = 0; layer < config_.n_layer; ++layer) {
    if (kv_only && layer == config_.n_layer - 1) {
      StoreKvOnly(layer);
      break;
    }
    Attention(layer);
    FeedForward(layer);
  }
  if (step_.n_logit_rows() > 0) Logits();
  result.logits = s_.logits;
  result.n_vocab = config_.n_vocab;
  result.summaries = std::span<const LogitsSummary>(summaries_).subspan(0, step_.n_logit_rows());
  return result;
}

NormedInput ForwardPass::Normed(DevicePtr<const float> weight) const {
  return {
      .x = s_.x, .weight = weight, .dim = config_.n_embd, .eps = config_.rms_eps, .normed = s_.xb};
}

// x += Wo · attention(RoPE(Wq·xb + bq), RoPE(Wk·xb + bk), Wv·xb + bv), xb = RmsNorm(x).
void ForwardPass::Attention(int32_t layer) {
  const DeviceLayerWeights& w = w_.layers[layer];
  const int64_t T = step_.n_tokens();
  const MatMulProduct qkv[] = {{&w.wq, s_.q}, {&w.wk, s_.k}, {&w.wv, s_.v}};
  backend_.NormMatMuls(Normed(w.attn_norm), qkv, T);
  if (!w.bq.is_null()) backend_.AddBias(s_.q, w.bq, T, config_.q_dim());
  if (!w.bk.is_null()) backend_.AddBias(s_.k, w.bk, T, config_.kv_dim());
  if (!w.bv.is_null()) backend_.AddBias(s_.v, w.bv, T, config_.kv_dim());
  // Rotate, then store each token's key and value in its KV slot.
  const PagedKvView kv = kv_.LayerView(kv_first_layer_ + layer);
  backend_.RopeStoreKv({.q = s_.q,
                        .k = s_.k,
                        .v = s_.v,
                        .n_head = config_.n_head,
                        .n_head_kv = config_.n_head_kv,
                        .head_dim = config_.head_dim,
                        .kv = kv});
  backend_.PagedAttention({.q = s_.q,
                           .out = s_.att,
                           .n_head = config_.n_head,
                           .n_head_kv = config_.n_head_kv,
                           .head_dim = config_.head_dim,
                           .kv = kv});
  backend_.MatMulAdd(w.wo, s_.att, T, s_.x, s_.proj);
}

void ForwardPass::StoreKvOnly(int32_t layer) {
  const DeviceLayerWeights& w = w_.layers[layer];
  const int64_t T = step_.n_tokens();
  const MatMulProduct kv_products[] = {{&w.wk, s_.k}, {&w.wv, s_.v}};
  backend_.NormMatMuls(Normed(w.attn_norm), kv_products, T);
  if (!w.bk.is_null()) backend_.AddBias(s_.k, w.bk, T, config_.kv_dim());
  if (!w.bv.is_null()) backend_.AddBias(s_.v, w.bv, T, config_.kv_dim());
  backend_.RopeStoreKv({.q = {},  // the keys alone
                        .k = s_.k,
                        .v = s_.v,
                        .n_head = 0,
                        .n_head_kv = config_.n_head_kv,
                        .head_dim = config_.head_dim,
                        .kv = kv_.LayerView(kv_first_layer_ + layer)});
}

// x += W_down · (silu(W_gate · xb) * (W_up · xb)), xb = RmsNorm(x).
void ForwardPass::FeedForward(int32_t layer) {
  const DeviceLayerWeights& w = w_.layers[layer];
  const int64_t T = step_.n_tokens();
  backend_.FeedForward({.in = Normed(w.ffn_norm),
                        .w_gate = &w.w_gate,
                        .w_up = &w.w_up,
                        .w_down = &w.w_down,
                        .gate = s_.gate,
                        .up = s_.up,
                        .out = s_.x,
                        .scratch = s_.proj},
                       T);
}

// logits = W_out · RmsNorm(x) for the rows that need them, then each row
// reduced to what the step's requests ask (O(k) per row leaves the backend).
void ForwardPass::Logits() {
  const int64_t R = step_.n_logit_rows();
  backend_.GatherRows(s_.x, config_.n_embd, s_.out_x);
  const MatMulProduct output[] = {{&w_.output, s_.logits}};
  backend_.NormMatMuls({.x = s_.out_x,
                        .weight = w_.output_norm,
                        .dim = config_.n_embd,
                        .eps = config_.rms_eps,
                        .normed = s_.out_x},
                       output, R);
  const bool any = std::any_of(step_.logit_top_k.begin(), step_.logit_top_k.end(),
                               [](int32_t k) { return k >= 0; });
  if (any) backend_.ReduceLogits(s_.logits, config_.n_vocab, summaries_);
}

void ForwardPass::DownloadRow(int32_t row, std::span<float> out) {
  TANDEM_CHECK(row >= 0 && row < step_.n_logit_rows(), "a logits row of the last Run");
  TANDEM_CHECK(static_cast<int64_t>(out.size()) == config_.n_vocab, "a row is n_vocab floats");
  const DevicePtr<const float> at = s_.logits + int64_t{row} * config_.n_vocab;
  backend_.Download(at.As<const uint8_t>(),
                    {reinterpret_cast<uint8_t*>(out.data()), out.size() * sizeof(float)});
}

}  // namespace tandem::engine
