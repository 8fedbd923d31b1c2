// Decides what each engine step runs: running sequences first, in admission
// order (one decode token each, or the next chunk of a prompt: a chunk
// leaves room for the decode rows after it), then waiting sequences while
// the step's token budget, the running-batch bound and KV blocks allow. When blocks run out the
// newest running sequence is preempted by recompute (its blocks freed, back to the front of the
// queue). A sequence admitted without KV first takes the leading blocks the pool's prefix cache
// holds for its tokens, then those the lower cache tiers hold (promoted into pool blocks:
// TierPromoter), and computes only the rest. Owns the sequences; returns a value-type StepPlan that
// the Engine runs (Schedule -> Forward -> Update). Engine-thread only.
#ifndef TANDEM_ENGINE_SCHED_SCHEDULER_H_
#define TANDEM_ENGINE_SCHED_SCHEDULER_H_

#include <array>
#include <climits>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_tier.h"
#include "engine/sched/sequence.h"

namespace tandem::engine {

struct SchedulerOptions {
  int32_t max_batch_tokens = 512;  // tokens per step (prefill chunking)
  int32_t max_running = 64;        // sequences in the running batch
  // The model's fingerprint, which block hashes include (prefix cache).
  uint64_t model_fingerprint = 0;
  // Logits rows a step may spend on speculative tokens (beyond one per
  // sequence); a sequence's proposals past them are not scheduled.
  int32_t max_speculative_rows = 0;
};

// What one step may hold where it is tighter than SchedulerOptions (the
// engine's inter-token latency target sets it each step). Decoding
// sequences are never held back by it: their rows come first, and prompt
// chunks take what is left of max_tokens, at least min_prefill_tokens.
struct StepBudget {
  int32_t max_tokens = INT32_MAX;
  // Running sequences after this step's admissions.
  int32_t max_running = INT32_MAX;
  int32_t min_prefill_tokens = 0;
};

// Sequence `seq_id` computes its tokens [start, start + count) this step.
struct ScheduledChunk {
  int64_t seq_id = 0;
  int32_t start = 0;
  int32_t count = 0;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // in running order
  // Sequences admitted this step with imported KV: their blocks are
  // allocated and n_computed counts the imported positions, whose bytes
  // (from block import_from_block on) the Engine copies in before the
  // forward pass.
  std::vector<int64_t> imported;
  // Work was left out: sequences still wait, or a chunk stops short of its
  // sequence's pending tokens.
  bool held_back = false;

  int32_t tokens() const {
    int32_t n = 0;
    for (const ScheduledChunk& c : chunks) n += c.count;
    return n;
  }
};

// The lower cache tiers as admission uses them (the Engine implements it
// over its KvTierStore and KV memory).
class TierPromoter {
 public:
  virtual ~TierPromoter() = default;
  // Appends to `list` a new pool block holding the block under `hash`, copied
  // from a lower tier and hashed, and returns that tier; nullopt (nothing
  // changed) on a miss or when the pool has no block to give.
  virtual std::optional<KvTier> Promote(const BlockHash& hash, BlockList& list) = 0;
};

class Scheduler {
 public:
  // `pool` and `promoter` (null: no lower tiers) must outlive the scheduler.
  Scheduler(const SchedulerOptions& options, BlockPool& pool, int32_t block_size,
            TierPromoter* promoter = nullptr);

  // Queues a new sequence at the back, or one that has generated tokens
  // (a hand-off, a migrated stream) behind the others that have.
  void Enqueue(std::unique_ptr<Sequence> seq);
  // Drops a running or waiting sequence (its blocks are freed). False when
  // the id is unknown.
  bool Remove(int64_t seq_id);
  // A running or waiting sequence, or nullptr. O(1): the engine looks up
  // every planned sequence each step.
  Sequence* Find(int64_t seq_id) const;

  StepPlan Schedule(const StepBudget& budget = {});

  // Calls f(Sequence&) for each running sequence, in admission order.
  template <typename F>
  void ForEachRunning(F f) {
    for (std::unique_ptr<Sequence>& seq : running_) f(*seq);
  }
  // Likewise for the waiting ones, in the order they are admitted.
  template <typename F>
  void ForEachWaiting(F f) {
    for (std::unique_ptr<Sequence>& seq : waiting_) f(*seq);
  }

  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool empty() const { return running_.empty() && waiting_.empty(); }
  int64_t preemptions() const { return preemptions_; }
  // Prefix cache: prompt tokens looked up at admission, and those found.
  int64_t prefix_queried_tokens() const { return prefix_queried_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  // Of prefix_hit_tokens, those each tier supplied (KvTier order).
  const std::array<int64_t, kNumKvTiers>& prefix_hit_tokens_by_tier() const {
    return prefix_hit_tokens_by_tier_;
  }
  // Imports whose leading blocks (KvSnapshot::first_block) were gone at
  // admission, so the prompt was computed instead.
  int64_t delta_fallbacks() const { return delta_fallbacks_; }
  // Prompt tokens taken from pulled prefixes at admission.
  int64_t prefix_pulled_tokens() const { return prefix_pulled_tokens_; }

 private:
  // Grows seq's block table to hold `n_slots` KV slots; false (nothing
  // changed) when the pool is short.
  bool EnsureBlocks(Sequence& seq, int32_t n_slots);
  void Preempt(Sequence& seq);
  // Gives a sequence without blocks the longest run of its leading full
  // blocks that the pool holds (shared, refcounted) and then the lower tiers
  // hold (promoted into new pool blocks), at most `max_blocks`,
  // leaving at least its last token to compute so that its logits come out
  // of the step.
  void AttachCachedPrefix(Sequence& seq, int32_t max_blocks = INT32_MAX);
  // Admission of a sequence whose KV came with it (seq.import): attaches the
  // leading blocks the cache holds (for a hand-off, those a delta transfer
  // left out, falling back to computing the prompt when they were evicted
  // since; for a pulled prefix, any it has) and room for the rest. False
  // (nothing changed) when the pool is short.
  bool AdmitImport(Sequence& seq, StepPlan& plan);
  // Drops what admission gave the sequence, when it could not be admitted.
  void UndoAdmission(Sequence& seq);

  const SchedulerOptions options_;
  BlockPool& pool_;
  const int32_t block_size_;
  TierPromoter* const promoter_;
  int64_t preemptions_ = 0;
  int64_t prefix_queried_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  std::array<int64_t, kNumKvTiers> prefix_hit_tokens_by_tier_ = {};
  int64_t delta_fallbacks_ = 0;
  int64_t prefix_pulled_tokens_ = 0;
  // running_ keeps admission order: the newest is preempted first.
  std::list<std::unique_ptr<Sequence>> running_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  // Every sequence above by id (they own them).
  absl::flat_hash_map<int64_t, Sequence*> by_id_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SCHED_SCHEDULER_H_
