#include "engine/sched/scheduler.h"

#include <algorithm>

namespace tandem::engine {

Scheduler::Scheduler(const SchedulerOptions& options, BlockPool& pool, int32_t block_size,
                     TierPromoter* promoter)
    : options_(options), pool_(pool), block_size_(block_size), promoter_(promoter) {}

void Scheduler::Enqueue(std::unique_ptr<Sequence> seq) {
  by_id_[seq->id] = seq.get();
  if (seq->n_generated == 0) {
    waiting_.push_back(std::move(seq));
    return;
  }
  // A stream already under way (a hand-off with its first token, a migrated
  // stream) waits ahead of the prompts that have not begun: a client
  // watching tokens arrive should not stall behind one still waiting for
  // its first.
  const auto first_unstarted =
      std::find_if(waiting_.begin(), waiting_.end(),
                   [](const std::unique_ptr<Sequence>& w) { return w->n_generated == 0; });
  waiting_.insert(first_unstarted, std::move(seq));
}

bool Scheduler::Remove(int64_t seq_id) {
  if (by_id_.erase(seq_id) == 0) return false;
  auto match = [seq_id](const std::unique_ptr<Sequence>& s) { return s->id == seq_id; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    running_.erase(it);
    return true;
  }
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), match); it != waiting_.end()) {
    waiting_.erase(it);
    return true;
  }
  return false;
}

Sequence* Scheduler::Find(int64_t seq_id) const {
  auto it = by_id_.find(seq_id);
  return it == by_id_.end() ? nullptr : it->second;
}

bool Scheduler::EnsureBlocks(Sequence& seq, int32_t n_slots) {
  const int32_t need = (n_slots + block_size_ - 1) / block_size_;
  if (!seq.blocks.has_value()) {
    std::optional<BlockList> list = pool_.Allocate(need);
    if (!list.has_value()) return false;
    seq.blocks = std::move(list);
    return true;
  }
  const int32_t have = seq.blocks->size();
  return have >= need || pool_.Extend(*seq.blocks, need - have);
}

// Frees the sequence's KV; it re-enters the queue at the front and later
// recomputes its prompt and generated tokens in one prefill (vLLM's
// recompute preemption). Its sampler keeps its state and its positions stay.
namespace {

// Whether the chunk of `seq` starting at n_computed has a logits row per
// token (Engine::WantsPromptLogprobs).
bool GathersPromptLogprobs(const Sequence& seq) {
  return seq.request.prompt_logprobs >= 0 &&
         seq.n_computed + 1 < static_cast<int32_t>(seq.request.prompt.size());
}

// The tokens of `seq` a step computes: what is pending, within the budget,
// and while prompt logprobs are gathered at most what is left of the step's
// kPromptLogprobsChunk prompt-logprobs rows (possibly none).
// A speculating sequence's proposals take a logits row each, from
// `spec_rows`.
int32_t ChunkSize(const Sequence& seq, int32_t budget, int32_t logprob_rows, int32_t spec_rows) {
  int32_t count = std::min(seq.pending(), budget);
  if (GathersPromptLogprobs(seq)) count = std::min(count, logprob_rows);
  if (seq.n_proposed > 0) count = std::min(count, 1 + spec_rows);
  return count;
}

}  // namespace

void Scheduler::Preempt(Sequence& seq) {
  // Its proposals go: it computes its tokens again from the start (or the
  // cache), and the last real one must be among them to be sampled from.
  const auto real_end = seq.tokens.size() - static_cast<size_t>(seq.n_proposed);
  seq.tokens.resize(real_end);
  seq.positions.resize(real_end);
  seq.n_proposed = 0;
  seq.drafting = false;
  UndoAdmission(seq);
  ++preemptions_;
}

void Scheduler::UndoAdmission(Sequence& seq) {
  seq.blocks.reset();
  seq.n_computed = 0;
  seq.draft_lag = 0;
  seq.n_cached = 0;
  seq.n_cached_by_tier = {};
  seq.n_hashed = 0;
  seq.last_hash = kRootParentHash;
}

void Scheduler::AttachCachedPrefix(Sequence& seq, int32_t max_blocks) {
  const int32_t n = static_cast<int32_t>(seq.tokens.size());
  // Cached KV was computed at positions 0, 1, ...: a sequence whose
  // positions were shifted cannot use it.
  if (n == 0 || seq.positions.front() != 0 || seq.positions.back() != n - 1) return;
  // At least the last token is computed: its logits give the next token.
  max_blocks = std::min(max_blocks, (n - 1) / block_size_);
  std::optional<BlockList> list = pool_.Allocate(0);
  BlockHash parent = kRootParentHash;
  int32_t found = 0;
  seq.n_cached_by_tier = {};
  // The pool first; from its first miss on, the lower tiers (a block they
  // return lands in the pool, so the chain stays one run of pool blocks).
  bool pool_run = true;
  for (; found < max_blocks; ++found) {
    const BlockHash hash =
        HashBlock(parent,
                  std::span<const int32_t>(seq.tokens).subspan(int64_t{found} * block_size_,
                                                               block_size_),
                  options_.model_fingerprint, block_size_, seq.request.cache_salt);
    KvTier tier = KvTier::kDevice;
    std::optional<BlockId> id;
    if (pool_run) id = pool_.AcquireCached(hash);
    if (id.has_value()) {
      list->Append(*id);
    } else {
      pool_run = false;
      if (promoter_ == nullptr) break;
      const std::optional<KvTier> from = promoter_->Promote(hash, *list);
      if (!from.has_value()) break;
      tier = *from;
    }
    seq.n_cached_by_tier[static_cast<size_t>(tier)] += block_size_;
    parent = hash;
  }
  // A draft's KV reaches as far as the first block that lacks it (a
  // sequence whose draft put it off; BlockPool::draft_missing).
  int32_t draft_blocks = 0;
  while (draft_blocks < found && !pool_.draft_missing((*list)[draft_blocks])) ++draft_blocks;
  seq.blocks = std::move(list);
  seq.n_cached = found * block_size_;
  seq.n_computed = seq.n_cached;
  seq.draft_lag = (found - draft_blocks) * block_size_;
  seq.n_hashed = found;  // their hashes are known: the chain continues
  seq.last_hash = parent;
}

bool Scheduler::AdmitImport(Sequence& seq, StepPlan& plan) {
  const KvSnapshot& kv = *seq.import;
  const bool prefix = seq.import_is_prefix();
  // A hand-off's skipped blocks must come from the cache; a pulled prefix
  // takes from the cache what it can and the rest from the import.
  const int32_t from_cache = prefix ? kv.n_tokens / block_size_ : kv.first_block;
  // Private KV (a SHIFT session's) takes nothing from the shared cache.
  if (from_cache > 0 && !seq.request.private_kv) AttachCachedPrefix(seq, from_cache);
  if (!prefix && seq.n_cached < kv.first_block * block_size_) {
    // Evicted between the fetch and now: the imported blocks cannot be
    // placed, so the prompt is computed from where the cache ends (the
    // sampler state and the first token stay as they are).
    seq.import.reset();
    ++delta_fallbacks_;
    return true;
  }
  if (prefix && seq.n_cached >= kv.n_tokens) {
    seq.import.reset();  // the cache had all of it
    return true;
  }
  // Room for the imported positions and, after a hand-off, the token that
  // follows them.
  if (!EnsureBlocks(seq, kv.n_tokens + (prefix ? 0 : 1))) {
    UndoAdmission(seq);
    return false;
  }
  seq.import_from_block = seq.n_cached / block_size_;
  // The draft's KV reaches to the first cached block that lacks it, else as
  // far as the import's does (KvSnapshot::draft_tokens; a cached block
  // before the imported ones holds it all the same).
  const int32_t draft_end =
      seq.draft_lag > 0
          ? seq.n_computed - seq.draft_lag
          : std::max(seq.n_computed, std::min(kv.draft_tokens.value_or(kv.n_tokens), kv.n_tokens));
  if (prefix) seq.n_cached = kv.n_tokens;
  seq.n_computed = kv.n_tokens;
  seq.draft_lag = seq.n_computed - draft_end;
  plan.imported.push_back(seq.id);
  return true;
}

StepPlan Scheduler::Schedule(const StepBudget& limits) {
  StepPlan plan;
  // Running sequences that decode (one token, or one and its proposals)
  // rather than prefill: their rows are kept out of any prompt chunk's share.
  const auto decoding = [](const Sequence& seq) { return seq.pending() <= 1 + seq.n_proposed; };
  int32_t decode_left = 0;
  for (const std::unique_ptr<Sequence>& seq : running_) decode_left += decoding(*seq) ? 1 : 0;
  int32_t budget = options_.max_batch_tokens;
  if (limits.max_tokens < budget) {
    budget = std::max({limits.max_tokens, decode_left + limits.min_prefill_tokens, 1});
    budget = std::min(budget, options_.max_batch_tokens);
  }
  const int32_t max_running = std::min(options_.max_running, limits.max_running);
  // A step's logits rows: one per sequence, and for chunks gathering prompt
  // logprobs one per token, those at most kPromptLogprobsChunk in all
  // (StepLimits::max_logit_rows).
  int32_t logprob_rows = kPromptLogprobsChunk;
  int32_t spec_rows = options_.max_speculative_rows;
  // Running sequences in admission order: each takes its pending tokens (one
  // when decoding, a chunk when its prompt is still being prefilled).
  for (auto it = running_.begin(); it != running_.end() && budget > 0;) {
    Sequence& seq = **it;
    const bool decodes = decoding(seq);
    if (decodes) --decode_left;
    // A prompt chunk leaves one row for each decoding sequence after it.
    const int32_t count =
        ChunkSize(seq, decodes ? budget : budget - decode_left, logprob_rows, spec_rows);
    if (count <= 0) {  // its prompt logprobs wait for the next step's rows, or the budget does
      ++it;
      continue;
    }
    bool preempted_self = false;
    while (!EnsureBlocks(seq, seq.n_computed + count)) {
      // Out of blocks: preempt the newest sequence (never one already
      // planned, since those come earlier in admission order).
      std::unique_ptr<Sequence> victim = std::move(running_.back());
      running_.pop_back();
      Preempt(*victim);
      preempted_self = victim.get() == &seq;
      waiting_.push_front(std::move(victim));
      if (preempted_self) break;
    }
    if (preempted_self) break;
    if (GathersPromptLogprobs(seq)) logprob_rows -= count;
    if (seq.n_proposed > 0) spec_rows -= count - 1;
    plan.chunks.push_back({.seq_id = seq.id, .start = seq.n_computed, .count = count});
    plan.held_back |= count < seq.pending();
    budget -= count;
    ++it;
  }
  // Admit waiting sequences while there is budget and memory.
  while (budget > 0 && !waiting_.empty() && static_cast<int32_t>(running_.size()) < max_running) {
    Sequence& seq = *waiting_.front();
    // A hand-off's sequence is not a prefix-cache query: its prompt came
    // computed.
    const bool query = seq.import == nullptr || seq.import_is_prefix();
    if (seq.import != nullptr) {
      if (!AdmitImport(seq, plan)) break;
    } else if (!seq.blocks.has_value() && !seq.request.private_kv &&
               seq.request.prompt_logprobs < 0) {
      // (Prompt logprobs need every position's logits: nothing cached.)
      AttachCachedPrefix(seq);
    }
    // Of n_cached, what a pulled prefix brought (the rest the pool had).
    const int32_t pulled =
        seq.import_is_prefix() ? seq.n_cached - seq.import_from_block * block_size_ : 0;
    // (Proposals: a hand-off's first token may come with some.)
    const int32_t count = ChunkSize(seq, budget, logprob_rows, spec_rows);
    if (count == 0 || !EnsureBlocks(seq, seq.n_computed + count)) {
      // Not admitted after all: give back what admission took (cached
      // blocks return to the LRU).
      if (seq.import != nullptr) plan.imported.pop_back();
      UndoAdmission(seq);
      break;
    }
    if (query) {
      prefix_queried_tokens_ += static_cast<int64_t>(seq.tokens.size());
      prefix_hit_tokens_ += seq.n_cached - pulled;
      for (int t = 0; t < kNumKvTiers; ++t) {
        prefix_hit_tokens_by_tier_[static_cast<size_t>(t)] +=
            seq.n_cached_by_tier[static_cast<size_t>(t)];
      }
      prefix_pulled_tokens_ += pulled;
    }
    if (GathersPromptLogprobs(seq)) logprob_rows -= count;
    if (seq.n_proposed > 0) spec_rows -= count - 1;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan.chunks.push_back({.seq_id = seq.id, .start = seq.n_computed, .count = count});
    plan.held_back |= count < seq.pending();
    budget -= count;
  }
  plan.held_back |= !waiting_.empty();
  return plan;
}

}  // namespace tandem::engine
