// Speculative decoding. Prompt lookup: a decoding sequence proposes the
// tokens that followed the latest earlier occurrence of its last n tokens
// (its prompt and output; a session's prompt holds the earlier turns). A
// draft model: the draft's greedy picks, one draft pass each, on the KV the
// draft keeps beside the model's in the same blocks (RunDraft). Either way
// the step computes the proposals with the sequence's last token as one
// chunk, and each row's own token
// -- picked as a step without speculation would pick it, mask, penalties and
// the sampler's next draw included -- is kept while it equals the proposal
// before it. So the output is token for token what one token per step gives
// (up to the batch-invariance tolerance of the forward pass), sampled output
// included, and no draft distribution needs correcting: the proposal is kept
// exactly when the model's own draw chose it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "engine/engine.h"

namespace tandem::engine {
namespace {

// The tokens after the latest earlier occurrence of the last n tokens of
// `tokens`, for n from ngram_max down to ngram_min, at most k of them.
std::vector<int32_t> LookUp(std::span<const int32_t> tokens, int32_t ngram_max,
                            int32_t ngram_min, int32_t k) {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int32_t n = ngram_max; n >= ngram_min; --n) {
    if (len <= n) continue;
    const std::span<const int32_t> tail = tokens.subspan(static_cast<size_t>(len - n));
    // Latest first: the most recent context predicts best.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (tokens[static_cast<size_t>(i)] != tail[0]) continue;
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n;
      const int64_t to = std::min(len, from + k);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

// Steps a sequence whose draft proposals do not pay goes without them
// before it tries one again: a probe's cost spread over this many steps
// stays near 3% of them.
constexpr int32_t kRestSteps = 32;

// A draft pass's request for a drafting row: its top token.
constexpr LogitsRequest kDraftPick{.top_k = 1};

}  // namespace

Speculation Engine::MethodOf(const Sequence& seq) const {
  const Speculation asked = seq.request.sampling.speculation;
  if (asked != Speculation::kDefault) return asked;
  if (options_.speculation.draft) return Speculation::kDraft;
  return options_.speculation.prompt_lookup ? Speculation::kPromptLookup : Speculation::kOff;
}

bool Engine::Speculates(const Sequence& seq) const {
  const GenerationRequest& r = seq.request;
  const Speculation method = MethodOf(seq);
  const bool on = method == Speculation::kPromptLookup ||
                  (method == Speculation::kDraft && draft_.model != nullptr);
  // Decoding (one token to compute after at least one generated: a running
  // sequence's pending one, or a hand-off's first token, whose KV before it
  // came computed), and no export (the prefill side's single token). A
  // rolling window's proposals stop short of its next roll (Propose).
  const bool handed_off = !seq.blocks.has_value() && seq.import != nullptr &&
                          !seq.import_is_prefix() &&
                          seq.import->n_tokens + 1 == static_cast<int32_t>(seq.tokens.size());
  const bool decoding = seq.blocks.has_value() ? seq.pending() == 1 : handed_off;
  return on && seq.n_generated > 0 && decoding && !r.export_kv && r.prompt_logprobs < 0;
}

void Engine::Propose() {
  speculating_.clear();
  const EngineOptions::Speculation& o = options_.speculation;
  // A busy step: proposals would cost what tokens do.
  if (o.max_batch > 0 && scheduler_.num_running() > o.max_batch) return;
  if (draft_.model != nullptr && o.min_gain > 0) {
    // The cost model needs the model's own step: every other step goes
    // without proposals until one is timed, then again once it is old.
    ++steps_since_model_sample_;
    if ((spec_costs_.model_samples == 0 || steps_since_model_sample_ > 64) &&
        steps_since_model_sample_ % 2 == 0) {
      return;
    }
  }
  // The running sequences, and hand-offs waiting to be admitted: those
  // speculate from their first step.
  const auto propose = [&](Sequence& seq) {
    if (!Speculates(seq)) return;
    if (seq.spec_cooldown > 0) {
      --seq.spec_cooldown;
      return;
    }
    if (seq.spec_k == 0) seq.spec_k = o.k;
    // Room: max_tokens counts the token after the proposals too, and every
    // proposal takes a KV slot and a position.
    int64_t k = std::min<int64_t>(seq.spec_k, seq.request.max_tokens - seq.n_generated - 1);
    k = std::min<int64_t>(k, MaxSequenceLength() - static_cast<int64_t>(seq.tokens.size()) - 1);
    k = std::min<int64_t>(k, options_.max_context - seq.next_position() - 1);
    if (seq.request.roll_window > 0) {
      // A rolling window drops a block once a new token takes it past
      // roll_window tokens, before the next token is computed: a proposal
      // computed after that point would attend to the dropped block. So the
      // window rolls after the last one at the earliest, as it would one
      // token per step.
      k = std::min<int64_t>(k, seq.request.roll_window - static_cast<int64_t>(seq.tokens.size()));
    }
    if (k <= 0) return;
    if (MethodOf(seq) == Speculation::kDraft) {
      if (seq.spec_alpha < 0) seq.spec_alpha = spec_alpha_;
      int32_t worth = WorthwhileK(seq, static_cast<int32_t>(k));
      if (worth == 0) {
        if (!seq.spec_resting) {
          // Proposals do not pay now: rest, then one proposal to see
          // whether they pay again (the acceptance rate moves with the text).
          seq.spec_resting = true;
          seq.spec_cooldown = kRestSteps;
          return;
        }
        worth = 1;
      }
      seq.spec_resting = false;
      k = worth;
      // Places for the draft's picks (RunDraft fills them once the step is
      // planned): the scheduler budgets and allocates for them as for any.
      const int32_t last = seq.tokens.back();
      for (int64_t i = 0; i < k; ++i) seq.Append(last);
      seq.n_proposed = static_cast<int32_t>(k);
      seq.drafting = true;
      speculating_.push_back(seq.id);
      return;
    }
    const std::vector<int32_t> proposals =
        LookUp(seq.tokens, o.ngram_max, o.ngram_min, static_cast<int32_t>(k));
    if (proposals.empty()) return;
    for (int32_t id : proposals) seq.Append(id);
    seq.n_proposed = static_cast<int32_t>(proposals.size());
    speculating_.push_back(seq.id);
  };
  scheduler_.ForEachRunning(propose);
  scheduler_.ForEachWaiting(propose);
}

void Engine::TrimProposals(StepPlan& plan) {
  for (int64_t id : speculating_) {
    Sequence* seq = scheduler_.Find(id);
    if (seq == nullptr || seq->n_proposed == 0) continue;
    const auto end = static_cast<int32_t>(seq->tokens.size());
    const int32_t real_end = end - seq->n_proposed;  // the tokens before the proposals
    // What the plan computes of it: nothing when it waits, or a chunk from
    // its last token on; a chunk from earlier computes its prompt (a
    // hand-off whose cached blocks were evicted before admission), which
    // takes no proposals. (A preempted sequence lost its proposals then.)
    ScheduledChunk* chunk = nullptr;
    for (ScheduledChunk& c : plan.chunks) {
      if (c.seq_id == id) chunk = &c;
    }
    int32_t keep = real_end;
    if (chunk != nullptr && chunk->start == real_end - 1) {
      keep = std::min(end, chunk->start + chunk->count);
    } else if (chunk != nullptr) {
      chunk->count = std::min(chunk->count, real_end - chunk->start);
    }
    seq->tokens.resize(static_cast<size_t>(keep));
    seq->positions.resize(static_cast<size_t>(keep));
    seq->n_proposed = keep - real_end;
    if (seq->n_proposed == 0) seq->drafting = false;
  }
}

int32_t Engine::DraftKvRoom() const {
  const EngineOptions::Speculation& o = options_.speculation;
  if (draft_.model == nullptr || !o.draft) return 0;  // not its default method
  if (o.max_batch <= 0) return -1;
  return std::max(0, o.max_batch - scheduler_.num_running() - scheduler_.num_waiting());
}

bool Engine::DefersDraft(const Sequence& seq) const {
  return !seq.request.private_kv && seq.request.roll_window == 0;
}

void Engine::MarkDraftFilled(std::span<const BlockId> blocks, int32_t first, int32_t last,
                             bool to_tiers) {
  BlockPool& pool = kv_->pool();
  for (int32_t b = first; b < last; ++b) {
    const BlockId id = blocks[static_cast<size_t>(b)];
    if (!pool.draft_missing(id)) continue;
    pool.SetDraftMissing(id, false);
    // Its hash's parent: the hash of the block before, when that one holds it
    // (one left private, its hash held by another block, has none here).
    const std::optional<BlockHash> hash = pool.hash(id);
    const std::optional<BlockHash> parent = b == 0 ? std::optional<BlockHash>(kRootParentHash)
                                                   : pool.hash(blocks[static_cast<size_t>(b) - 1]);
    if (to_tiers && options_.tiers != nullptr && hash.has_value() && parent.has_value()) {
      stored_.push_back({.hash = *hash, .parent = *parent, .index = b, .id = id});
    }
  }
}

absl::Status Engine::FillDraft(std::span<const int32_t> tokens, std::span<const BlockId> blocks,
                               int32_t from, int32_t to) {
  std::vector<int32_t> positions(static_cast<size_t>(to));
  for (int32_t i = 0; i < to; ++i) positions[static_cast<size_t>(i)] = i;
  backend_->Synchronize();
  for (int32_t at = from; at < to;) {
    const int32_t n = std::min(to - at, draft_.max_tokens);
    const BatchChunk chunk{
        .tokens = tokens.subspan(static_cast<size_t>(at), static_cast<size_t>(n)),
        .positions = std::span<const int32_t>(positions).subspan(static_cast<size_t>(at),
                                                                 static_cast<size_t>(n)),
        .kv_start = at,
        .blocks = blocks,
        .all_logits = false,
        .reduce = {},
        .kv_only = true,
    };
    RETURN_IF_ERROR(draft_.forward->Run(std::span<const BatchChunk>(&chunk, 1)).status());
    draft_computed_tokens_ += n;
    at += n;
  }
  draft_.backend->Synchronize();
  const int32_t bs = kv_->block_size();
  MarkDraftFilled(blocks, from / bs, to / bs, /*to_tiers=*/false);
  return absl::OkStatus();
}

absl::Status Engine::RunDraft(const StepPlan& plan) {
  if (draft_.model == nullptr || plan.chunks.empty()) return absl::OkStatus();
  // Pass 0: each chunk as the model computes it, from the first token the
  // draft has no KV for; a drafting chunk up to its last real token, whose
  // row gives the first proposal. What a sequence is behind on may exceed
  // a pass (a draft put off, or cached blocks that lack the draft's KV): it
  // takes as many passes as it needs, in order.
  struct Range {
    Sequence* seq;
    int32_t start;  // the draft's first token this step
    int32_t next;   // the first not in a pass yet
    int32_t end;
    int32_t row;  // a drafting chunk's logits row in the last draft pass
  };
  std::vector<Range> ranges;
  const int32_t bs = kv_->block_size();
  BlockPool& pool = kv_->pool();
  int32_t max_k = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& seq = *scheduler_.Find(c.seq_id);
    int32_t from = c.start - seq.draft_lag;
    // Shared blocks whose draft's KV has been computed since (by another
    // sequence, or for a prefix export) need nothing more.
    while ((from / bs + 1) * bs <= c.start) {
      const BlockId id = (*seq.blocks)[from / bs];
      if (!pool.hash(id).has_value() || pool.draft_missing(id)) break;
      from = (from / bs + 1) * bs;
    }
    const int32_t end = seq.drafting ? c.start + 1 : c.start + c.count;
    // Drafting, the passes below reach the last proposal's slot.
    seq.draft_end = seq.drafting ? c.start + seq.n_proposed : end;
    const bool ships_draft = seq.request.export_kv && !seq.request.export_without_draft;
    if (!seq.drafting && !ships_draft && DefersDraft(seq)) {
      // A sequence that proposes nothing this step (its prompt, or a decode
      // step at a busy batch, resting after rejected proposals, speculating
      // otherwise) computes nothing with the draft: its next proposal's
      // first pass catches up, and if none comes, the blocks are shared
      // marked as lacking the draft's KV (HashFullBlocks). A hand-off's
      // prompt (export_kv) ships with the draft's KV unless the decode side
      // will not propose with it (export_without_draft).
      seq.draft_end = from;
      continue;
    }
    const bool decoding = seq.n_generated > 0 && !seq.request.export_kv &&
                          c.start + c.count == static_cast<int32_t>(seq.tokens.size());
    if (!seq.drafting && decoding && (c.start + c.count) / bs == from / bs) {
      // One that must keep its blocks whole (DefersDraft) puts off its draft
      // tokens until a block fills: then one chunk computes them together,
      // for about what one token costs.
      seq.draft_end = from;
      continue;
    }
    if (seq.drafting) max_k = std::max(max_k, seq.n_proposed);
    ranges.push_back({.seq = &seq, .start = from, .next = from, .end = end, .row = -1});
  }
  if (ranges.empty()) return absl::OkStatus();
  // The imports and promotions the model's backend wrote come first.
  backend_->Synchronize();
  std::vector<size_t> in_pass;
  std::vector<BlockId> shared;  // hashed blocks a pass writes
  for (;;) {
    draft_chunks_.clear();
    in_pass.clear();
    shared.clear();
    int32_t room = draft_.max_tokens;
    for (size_t r = 0; r < ranges.size() && room > 0; ++r) {
      Range& g = ranges[r];
      if (g.next >= g.end) continue;
      const int32_t n = std::min(g.end - g.next, room);
      const std::span<const BlockId> ids = g.seq->blocks->ids();
      // Two sequences that share a cached block lacking the draft's KV
      // compute the same values into it: one pass at a time (the later one
      // writes them again, as the flags clear only after the passes).
      bool clash = false;
      const size_t shared_before = shared.size();
      for (int32_t b = g.next / bs; b <= (g.next + n - 1) / bs && !clash; ++b) {
        const BlockId id = ids[static_cast<size_t>(b)];
        if (!pool.hash(id).has_value()) continue;
        clash = std::find(shared.begin(), shared.begin() + shared_before, id) !=
                shared.begin() + shared_before;
        shared.push_back(id);
      }
      if (clash) {
        shared.resize(shared_before);
        continue;
      }
      const bool last = g.next + n == g.end;
      const bool picks = last && g.seq->drafting;
      draft_chunks_.push_back({
          .tokens = std::span<const int32_t>(g.seq->tokens).subspan(g.next, n),
          .positions = std::span<const int32_t>(g.seq->positions).subspan(g.next, n),
          .kv_start = g.next,
          .blocks = ids,
          .all_logits = false,
          .reduce = picks ? std::span<const LogitsRequest>(&kDraftPick, 1)
                          : std::span<const LogitsRequest>(),
          .kv_only = !picks,
      });
      if (picks) g.row = static_cast<int32_t>(draft_chunks_.size()) - 1;
      in_pass.push_back(r);
      g.next += n;
      room -= n;
      draft_computed_tokens_ += n;
    }
    if (draft_chunks_.empty()) break;
    ASSIGN_OR_RETURN(const ForwardResult result, draft_.forward->Run(draft_chunks_));
    for (size_t r : in_pass) {
      Range& g = ranges[r];
      if (g.row < 0 || g.next != g.end || g.seq->n_proposed == 0) continue;
      const LogitsSummary& s = result.summaries[result.first_row[g.row]];
      g.seq->tokens[static_cast<size_t>(g.end)] = s.top_ids[0];
    }
  }
  for (const Range& g : ranges) {
    // The shared blocks this step's passes filled hold both models' KV now.
    MarkDraftFilled(g.seq->blocks->ids(), g.start / bs, g.end / bs, /*to_tiers=*/true);
  }
  // Pass j (1 <= j < k): the proposal pass j - 1 picked, one token per
  // drafting chunk that wants more.
  for (int32_t j = 1; j < max_k; ++j) {
    draft_chunks_.clear();
    std::vector<Range*> drafting;
    for (Range& g : ranges) {
      Sequence& seq = *g.seq;
      if (!seq.drafting || seq.n_proposed <= j) continue;
      const int32_t slot = g.end + j - 1;  // the proposal just picked
      draft_chunks_.push_back({
          .tokens = std::span<const int32_t>(seq.tokens).subspan(slot, 1),
          .positions = std::span<const int32_t>(seq.positions).subspan(slot, 1),
          .kv_start = slot,
          .blocks = seq.blocks->ids(),
          .all_logits = false,
          .reduce = std::span<const LogitsRequest>(&kDraftPick, 1),
      });
      drafting.push_back(&g);
      ++draft_computed_tokens_;
    }
    ASSIGN_OR_RETURN(const ForwardResult result, draft_.forward->Run(draft_chunks_));
    for (size_t i = 0; i < drafting.size(); ++i) {
      const LogitsSummary& s = result.summaries[result.first_row[i]];
      drafting[i]->seq->tokens[static_cast<size_t>(drafting[i]->end + j)] = s.top_ids[0];
    }
  }
  draft_.backend->Synchronize();
  return absl::OkStatus();
}

int32_t Engine::DecodeStepProposals(const StepPlan& plan) const {
  int32_t longest = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    const Sequence& seq = *scheduler_.Find(c.seq_id);
    if (c.count != 1 + seq.n_proposed || seq.n_generated == 0) return -1;
    longest = std::max(longest, seq.n_proposed);
  }
  return plan.chunks.empty() ? -1 : longest;
}

void Engine::ObserveStepCost(int32_t max_proposals, double seconds) {
  constexpr double kWeight = 0.1;  // of the newest sample
  const auto average = [](double& mean, int64_t& samples, double sample) {
    mean = samples++ == 0 ? sample : (1 - kWeight) * mean + kWeight * sample;
  };
  SpecCosts& c = spec_costs_;
  if (max_proposals == 0) {
    average(c.model_step, c.model_samples, seconds);
    steps_since_model_sample_ = 0;
  } else if (c.model_samples > 0) {
    average(c.per_proposal, c.proposal_samples,
            std::max(0.0, seconds - c.model_step) / max_proposals);
  }
}

int32_t Engine::WorthwhileK(const Sequence& seq, int32_t k) const {
  const double min_gain = options_.speculation.min_gain;
  const SpecCosts& c = spec_costs_;
  if (min_gain <= 0 || c.model_samples == 0 || c.proposal_samples == 0 || c.model_step <= 0) {
    return k;  // proposals until both costs are known
  }
  // Leviathan et al.: k proposals each kept with probability alpha yield
  // (1 - alpha^(k+1)) / (1 - alpha) tokens; the step costs a plain step and
  // k times what a proposal adds (a draft pass and the verification rows,
  // shared by the step's drafting sequences, as the averages measured).
  const double alpha = std::clamp(seq.spec_alpha, 0.0, 0.999);
  int32_t best = 0;
  double best_gain = min_gain;
  for (int32_t j = 1; j <= k; ++j) {
    const double tokens = (1 - std::pow(alpha, j + 1)) / (1 - alpha);
    const double cost = 1 + j * c.per_proposal / c.model_step;
    if (tokens / cost >= best_gain) {
      best = j;
      best_gain = tokens / cost;
    }
  }
  return best;
}

void Engine::UpdateSpeculative(Sequence& seq, const ScheduledChunk& c,
                               const ForwardResult& result, int32_t first_row,
                               StepOutput& out) {
  const int32_t k = seq.n_proposed;
  const bool drafted = seq.drafting;
  seq.n_proposed = 0;
  seq.drafting = false;
  const std::vector<int32_t> proposals(seq.tokens.begin() + c.start + 1,
                                       seq.tokens.begin() + c.start + 1 + k);
  seq.tokens.resize(static_cast<size_t>(c.start) + 1);
  seq.positions.resize(static_cast<size_t>(c.start) + 1);
  // Row r predicts the token after the chunk's r-th: the model's own pick
  // there, with the tokens before it observed (penalties, format).
  struct Decided {
    SampledToken token;
    FinishReason finish;
  };
  std::vector<Decided> decided;
  int32_t accepted = 0;
  for (int32_t r = 0; r <= k; ++r) {
    SampledToken token = SampleRow(seq, result, first_row + r);
    seq.logits_processor.ObserveGenerated(token.id);
    const auto n = static_cast<int32_t>(decided.size()) + 1;
    const FinishReason finish =
        EndAfter(seq, token.id, seq.n_generated + n, static_cast<int64_t>(seq.tokens.size()) + n,
                 seq.next_position() + n);
    const bool kept = r < k && token.id == proposals[r];
    accepted += kept ? 1 : 0;
    decided.push_back({std::move(token), finish});
    if (finish != FinishReason::kNone || !kept) break;
  }
  // The KV of the last token and of the kept proposals stays; the slots of
  // the rejected ones are written over by the next step.
  seq.n_computed = c.start + static_cast<int32_t>(decided.size());
  // What the draft computed (RunDraft): drafting, up to the last proposal,
  // whose own pick followed it, so when every proposal was kept the last
  // one's draft KV comes with the next chunk.
  if (draft_.model != nullptr) seq.draft_lag = std::max(0, seq.n_computed - seq.draft_end);
  for (const Decided& d : decided) seq.Append(d.token.id);
  seq.n_generated += static_cast<int32_t>(decided.size());
  HashFullBlocks(seq, out.blocks);
  spec_proposed_ += k;
  spec_accepted_ += accepted;
  if (drafted) {
    spec_draft_proposed_ += k;
    spec_draft_accepted_ += accepted;
    // Each proposal up to the first rejection is a trial (those after it
    // were never judged).
    const int32_t trials = std::min(k, accepted + 1);
    const double rate = static_cast<double>(accepted) / trials;
    seq.spec_alpha = 0.8 * seq.spec_alpha + 0.2 * rate;
    spec_alpha_ = 0.9 * spec_alpha_ + 0.1 * rate;
  }
  // Adaptive k: grow while everything is kept, halve when nothing is, and
  // after repeated misses stop proposing for a while (doubling each time, up
  // to 64 steps), so a sequence that does not benefit pays little.
  if (accepted == k) {
    seq.spec_k = std::min(options_.speculation.k, seq.spec_k + 1);
    seq.spec_misses = 0;
  } else if (accepted == 0) {
    seq.spec_k = std::max(1, seq.spec_k / 2);
    ++seq.spec_misses;
    if (seq.spec_misses >= 2) seq.spec_cooldown = std::min(64, 1 << std::min(seq.spec_misses, 6));
  } else {
    seq.spec_misses = 0;
  }
  for (size_t i = 0; i < decided.size(); ++i) {
    const bool first = i == 0;
    if (Emit(seq, std::move(decided[i].token), decided[i].finish, first ? k : 0,
             first ? accepted : 0, out)) {
      break;
    }
  }
}

}  // namespace tandem::engine
