// Prompt-lookup speculation: a decoding sequence proposes the tokens that
// followed the latest earlier occurrence of its last n tokens (its prompt and
// output; a session's prompt holds the earlier turns), the step computes
// them with the sequence's last token as one chunk, and each row's own token
// -- picked as a step without speculation would pick it, mask, penalties and
// the sampler's next draw included -- is kept while it equals the proposal
// before it. So the output is token for token what one token per step gives
// (up to the batch-invariance tolerance of the forward pass), sampled output
// included, and no draft distribution needs correcting: the proposal is kept
// exactly when the model's own draw chose it.
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

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

}  // namespace

bool Engine::Speculates(const Sequence& seq) const {
  const GenerationRequest& r = seq.request;
  const bool on = r.sampling.speculation == Speculation::kPromptLookup ||
                  (r.sampling.speculation == Speculation::kDefault && options_.speculation.prompt_lookup);
  // Decoding (one pending token after at least one generated), and no
  // export (the prefill side's single token). A rolling window's proposals
  // stop short of its next roll (Propose).
  return on && seq.n_generated > 0 && seq.pending() == 1 && !r.export_kv && r.prompt_logprobs < 0;
}

void Engine::Propose() {
  speculating_.clear();
  const EngineOptions::Speculation& o = options_.speculation;
  // A busy step: proposals would cost what tokens do.
  if (o.max_batch > 0 && scheduler_.num_running() > o.max_batch) return;
  scheduler_.ForEachRunning([&](Sequence& seq) {
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
    const std::vector<int32_t> proposals =
        LookUp(seq.tokens, o.ngram_max, o.ngram_min, static_cast<int32_t>(k));
    if (proposals.empty()) return;
    for (int32_t id : proposals) seq.Append(id);
    seq.n_proposed = static_cast<int32_t>(proposals.size());
    speculating_.push_back(seq.id);
  });
}

void Engine::TrimProposals(const StepPlan& plan) {
  for (int64_t id : speculating_) {
    Sequence* seq = scheduler_.Find(id);
    if (seq == nullptr || seq->n_proposed == 0) continue;
    // What the plan computes of it (nothing when it waits, or was
    // preempted).
    int32_t scheduled = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      if (c.seq_id == id) scheduled = c.start + c.count;
    }
    const auto end = static_cast<int32_t>(seq->tokens.size());
    const int32_t keep = scheduled == 0 ? end - seq->n_proposed : std::min(end, scheduled);
    const int32_t drop = end - keep;
    seq->tokens.resize(static_cast<size_t>(keep));
    seq->positions.resize(static_cast<size_t>(keep));
    seq->n_proposed -= drop;
  }
}

void Engine::UpdateSpeculative(Sequence& seq, const ScheduledChunk& c,
                               const ForwardResult& result, int32_t first_row,
                               StepOutput& out) {
  const int32_t k = seq.n_proposed;
  seq.n_proposed = 0;
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
  for (const Decided& d : decided) seq.Append(d.token.id);
  seq.n_generated += static_cast<int32_t>(decided.size());
  HashFullBlocks(seq, out.blocks);
  spec_proposed_ += k;
  spec_accepted_ += accepted;
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
