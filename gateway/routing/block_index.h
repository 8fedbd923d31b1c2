// The gateway's block index: which workers hold which full KV blocks, and in
// which tiers (pool, host RAM, disk: a worker may hold a block in several), fed by
// every worker's BlockEvents stream (gateway/routing/block_event_subscriber.h) and
// read by the router. Workers are the gateway's numbered worker slots. A
// batch that does not follow the last one applied (a gap, or a new epoch)
// is refused so that the subscriber resubscribes for a snapshot; a worker
// whose stream ends is dropped with every entry. Memory is bounded by
// `max_entries` (hash, worker) pairs: past it new entries are not recorded
// (counted), which only costs routing accuracy.
//
// Predictions: the router records the blocks of a prompt it just sent to a
// worker as predicted there until a deadline, because the worker reports
// them only once it has computed them; without that, prompts of one prefix
// that arrive together would be spread over every worker before the first
// is done. Overlap counts a predicted block as held; the worker's own
// `stored` event (or the deadline, or its stream ending) ends the
// prediction. Predictions are bounded by `max_entries` too. Thread-safe.
#ifndef TANDEM_GATEWAY_ROUTING_BLOCK_INDEX_H_
#define TANDEM_GATEWAY_ROUTING_BLOCK_INDEX_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/kv/block_hash.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

struct BlockIndexOptions {
  int64_t max_entries = 4 << 20;  // (hash, worker) pairs
};

// Tiers a worker reports (tandem.v1.KvTier: device, host, disk).
inline constexpr int kNumTiers = tandem::v1::KvTier_ARRAYSIZE;

// A worker's run of a prompt's leading blocks, and the fastest tier it holds
// each of them in (predicted blocks count as the pool's).
struct TieredOverlap {
  int32_t blocks = 0;
  std::array<int32_t, kNumTiers> by_tier = {};  // tier order; sums to blocks
};

// How the workers hash blocks (they report it with their events).
struct BlockHashParams {
  uint64_t model_fingerprint = 0;
  int32_t block_size = 0;
};

class BlockIndex {
 public:
  explicit BlockIndex(const BlockIndexOptions& options = {});

  enum class Applied { kApplied, kNeedsResync };
  // Applies a batch from `worker`'s stream: a snapshot replaces what the
  // index knew of the worker; a delta must be the next one in the same
  // epoch, else nothing changes and kNeedsResync says to resubscribe.
  Applied Apply(int worker, const tandem::v1::BlockEventBatch& batch);
  // Forgets the worker (its stream ended): its entries go at once.
  void Drop(int worker);

  // Records `chain` as soon held by `worker`, until `until`.
  void Predict(int worker, std::span<const engine::BlockHash> chain, absl::Time until);
  // For each of `workers`, how many leading blocks of `chain` it holds (or
  // is predicted to hold at `now`).
  std::vector<int32_t> Overlap(std::span<const int> workers,
                               std::span<const engine::BlockHash> chain,
                               absl::Time now = absl::Now(), bool with_predictions = true) const;
  // The same run, with the tier each block would come from.
  std::vector<TieredOverlap> OverlapByTier(std::span<const int> workers,
                                           std::span<const engine::BlockHash> chain,
                                           absl::Time now = absl::Now(),
                                           bool with_predictions = true) const;
  // What the workers hash with, once one has reported.
  std::optional<BlockHashParams> params() const;

  int64_t entries() const;           // (hash, worker) pairs
  int64_t hashes() const;            // distinct hashes
  int64_t entries_of(int worker) const;
  int64_t dropped_entries() const;   // not recorded: the index was full
  int64_t predicted_entries() const;  // predictions held, expired ones included

 private:
  struct WorkerState {
    uint64_t epoch = 0;
    uint64_t sequence = 0;
    bool synced = false;  // a snapshot has been applied
    // Each hash held, with a bit per tier holding it (1 << KvTier).
    absl::flat_hash_map<engine::BlockHash, uint8_t> held;
    absl::flat_hash_map<engine::BlockHash, absl::Time> predicted;  // -> until
  };
  // Drops `w`'s expired predictions.
  void PruneLocked(WorkerState& w, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddLocked(int worker, WorkerState& w, const engine::BlockHash& h, int tier)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(int worker, WorkerState& w, const engine::BlockHash& h, int tier)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The batch's lower-tier events (`tiers`).
  void ApplyTiersLocked(int worker, WorkerState& w, const tandem::v1::BlockEventBatch& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearLocked(int worker, WorkerState& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `worker` off the holders of `h` (an entry it had).
  void UnholdLocked(int worker, const engine::BlockHash& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BlockIndexOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<engine::BlockHash, absl::InlinedVector<int, 2>> holders_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, WorkerState> workers_ ABSL_GUARDED_BY(mu_);
  std::optional<BlockHashParams> params_ ABSL_GUARDED_BY(mu_);
  int64_t entries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t predicted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_BLOCK_INDEX_H_
