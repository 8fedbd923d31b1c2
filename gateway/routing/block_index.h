// The gateway's block index: which workers hold which full KV blocks, and in
// which tiers (pool, host RAM, disk: a worker may hold a block in several), fed by
// every worker's BlockEvents stream (gateway/routing/block_event_subscriber.h) and
// read by the router. Workers are the gateway's numbered worker slots. A
// batch that does not follow the last one applied (a gap, or a new epoch)
// is refused so that the subscriber resubscribes for a snapshot; a worker
// whose stream ends is dropped with every entry.
//
// Layout, for a fleet of 1000 workers in a pod of 2 GiB: the index is
// sharded by block key (the low 64 bits of the 128-bit block hash; a
// collision there costs one routing choice, never a wrong cache hit, since
// the worker matches the whole hash), each shard a HolderTable
// (gateway/routing/holder_table.h) with its own writers' lock; a batch is
// applied shard by shard, a run of its events under one hold of the
// shard's lock (each event still a change of its own for readers), and a
// route's predictions likewise. A (block, worker) entry is 2 bytes of a
// holder set, not a map node; workers are numbered compactly (up to 8191
// at once). Overlap walks the prompt's blocks once for every worker
// together, intersecting holder sets, and stops where no candidate holds
// the block (gateway/routing/block_index_walk.cc).
//
// Routes read without a lock, so that they write nothing a writer then
// has to take back from another core: a shard's writers' lock carries a
// version, odd while a writer changes the table (gateway/routing/seq_lock.h;
// a table's growth and a worker's sweep mark only their changes), and a
// walk reads a block's holders again when the version moved while it read
// them. What a writer frees while a route may be reading it waits in the
// shard's limbo until no route that began before can still be walking
// (gateway/routing/reclaimer.h). A routing thread keeps the compact numbers
// of the slots it asked for last until the index numbers or retires a
// worker, so a route over a thousand workers reads no worker state.
//
// Memory is bounded by `max_entries` (block, worker) pairs: past it the
// shard being written evicts, with all its holders, the first block its
// clock hand finds with no use left (a route reading a block or a worker
// storing it counts a use, up to 3; the hand takes one off each block it
// passes); when the hand passes kEvictionVisits blocks all still in use,
// the new entry is the one not kept. Both are counted as dropped. A worker whose entries go (its
// stream ended, or a snapshot replaces them) is retired: its compact number is no longer routed
// to, and a sweep of every shard takes the retired numbers' entries out together, once
// `retired_per_sweep` wait, and frees the numbers.
//
// Predictions: the router records the blocks of a prompt it just sent to a
// worker as predicted there until a deadline, because the worker reports
// them only once it has computed them; without that, prompts of one prefix
// that arrive together would be spread over every worker before the first
// is done. Overlap counts a predicted block as held; the worker's own
// `stored` event (or the deadline, or its stream ending) ends the
// prediction. Most end by the report; the few that expire are swept out of
// their shard once it holds twice the predictions its last sweep kept, and
// of every shard when the index is full. Predictions are bounded by
// `max_predictions` (and `max_entries`), expired ones not yet swept
// included. A renewal keeps the later of the two deadlines. A walk reads a
// block's predictions under its shard's lock, and does without them when a
// writer keeps the lock longer than a moment (a sweep of retired workers).
//
// Thread-safe. Lock order: a worker's own lock, then the sweep's lock,
// then a shard's lock or the workers' table lock; never two shards' at
// once. A reader may see a batch, or a worker's removal, half applied;
// a prediction made just as the worker's own report of the block lands may
// last until its deadline.
#ifndef TANDEM_GATEWAY_ROUTING_BLOCK_INDEX_H_
#define TANDEM_GATEWAY_ROUTING_BLOCK_INDEX_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/kv/block_hash.h"
#include "gateway/routing/holder_table.h"
#include "gateway/routing/prediction_table.h"
#include "gateway/routing/reclaimer.h"
#include "gateway/routing/seq_lock.h"
#include "gateway/routing/spill_arena.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

struct BlockIndexOptions {
  // (hash, worker) pairs. 48M: about 0.6-1.1 GiB at the 13-23 bytes per
  // entry measured at fleet size, 1.44 GiB in the worst case (one holder
  // per block, tables just grown, 52% full; docs/benchmarks.md), so a 2 GiB
  // gateway pod keeps headroom for the rest of the process; 1000 workers x
  // 48k blocks.
  int64_t max_entries = int64_t{48} << 20;
  // Predictions held at most (a 24-byte record each, in a shard's table
  // at most half full: 48-96 bytes), and never more than max_entries.
  int64_t max_predictions = int64_t{1} << 20;
  // Lock shards (a power of two, 1..4096); tests use 1 for a single clock.
  // 32: a batch's events meet in a shard often enough to share its lock
  // (ApplyEvents), and the tables reach 2 MiB, huge pages, from about 5M
  // entries. Two writers met no more often in 32 shards than in 256, and
  // 256 made routes and events slower (docs/benchmarks.md).
  int shards = 32;
  // From this many entries a walk loads spilled holder sets ahead, at the
  // cost of one more probe of the slot table per block: in a large index
  // that hides a miss, in a small one (its tables in the last-level cache)
  // the probe costs more (measured: 11% more route CPU at 65k entries, with
  // routes reading without a lock; with the locks, at 1000 x 2000, from 256k
  // entries rather than 1M, walk p99 76-94 us against 94-104;
  // docs/benchmarks.md).
  int64_t prefetch_spills_from = int64_t{1} << 18;
  // Workers whose entries go (a snapshot replaces them, or the stream
  // ended) are retired: routes stop asking for them at once, and their
  // entries are swept out of every shard in one pass once this many wait.
  // A pass reads the whole index (about 30 ms at 8.8M entries on a 2-core
  // VM), so that a fleet's rolling restart costs one pass per this many
  // workers rather than one each; retired entries count toward
  // max_entries until swept. 1: each at once.
  int retired_per_sweep = 16;
};

// Tiers a worker reports (tandem.v1.KvTier: device, host, disk).
inline constexpr int kNumTiers = tandem::v1::KvTier_ARRAYSIZE;
static_assert(kNumTiers <= HolderTable::kMaxTiers);

// A worker's run of a prompt's leading blocks, and the fastest tier it holds
// each of them in (predicted blocks count as the pool's).
struct TieredOverlap {
  int32_t blocks = 0;
  std::array<int32_t, kNumTiers> by_tier = {};  // tier order; sums to blocks
};

// One walk's answer for every worker asked, in their order.
struct Overlaps {
  std::vector<TieredOverlap> tiered;  // held or predicted
  std::vector<int32_t> reported;      // held as the worker reported (no predictions)
};

// How the workers hash blocks (they report it with their events).
struct BlockHashParams {
  uint64_t model_fingerprint = 0;
  int32_t block_size = 0;
};

class BlockIndex {
 public:
  explicit BlockIndex(const BlockIndexOptions& options = {});
  ~BlockIndex();

  enum class Applied { kApplied, kNeedsResync };
  // Applies a batch from `worker`'s stream: a snapshot replaces what the
  // index knew of the worker; a delta must be the next one in the same
  // epoch, else nothing changes and kNeedsResync says to resubscribe.
  Applied Apply(int worker, const tandem::v1::BlockEventBatch& batch);
  // Forgets the worker (its stream ended): its entries no longer count at
  // once, and are swept out with the next retired workers'.
  void Drop(int worker);

  // Records `chain` as soon held by `worker`, until `until`.
  void Predict(int worker, std::span<const engine::BlockHash> chain, absl::Time until);
  // For each of `workers`, how many leading blocks of `chain` it holds (or
  // is predicted to hold at `now`), with tiers, and how many it reported:
  // one walk of the chain for all of them. Fills `out` whole (resized to
  // the workers asked), so a caller may keep one for route after route.
  void OverlapAll(std::span<const int> workers, std::span<const engine::BlockHash> chain,
                  Overlaps& out, absl::Time now = absl::Now(), bool with_predictions = true) const;
  Overlaps OverlapAll(std::span<const int> workers, std::span<const engine::BlockHash> chain,
                      absl::Time now = absl::Now(), bool with_predictions = true) const {
    Overlaps out;
    OverlapAll(workers, chain, out, now, with_predictions);
    return out;
  }
  std::vector<int32_t> Overlap(std::span<const int> workers,
                               std::span<const engine::BlockHash> chain,
                               absl::Time now = absl::Now(), bool with_predictions = true) const;
  std::vector<TieredOverlap> OverlapByTier(std::span<const int> workers,
                                           std::span<const engine::BlockHash> chain,
                                           absl::Time now = absl::Now(),
                                           bool with_predictions = true) const;
  // Whether `worker` holds `h` in any tier; unlike a walk, not a use that
  // keeps the block from eviction (diagnostics, tests).
  bool Holds(int worker, const engine::BlockHash& h) const;
  // What the workers hash with, once one has reported.
  std::optional<BlockHashParams> params() const;

  int64_t entries() const;  // (hash, worker) pairs, retired workers' not counted
  // Distinct hashes; one held only by retired workers counts until swept.
  int64_t hashes() const;
  int64_t entries_of(int worker) const;
  int64_t dropped_entries() const;   // evicted (or not kept): the index was full
  int64_t predicted_entries() const;  // predictions held, expired ones included
  // Heap bytes of the shards' tables (the allocator's own overhead aside).
  int64_t table_bytes() const;
  // The shards' tables' growths so far, summed (diagnostics, benchmarks).
  HolderTable::Growths table_growths() const;

 private:
  // A shard: its blocks' holders, written under `lock` and read by routes
  // without it (see the layout above), and its predictions, under `lock`
  // too (a walk takes it for a block only when the digests say the block
  // may be predicted). A walk reads, for each block, the table's slot array
  // (on the table's first line, which changes only when it grows), the
  // version and prediction digests (on the line every write changes); it
  // loads both a few blocks ahead.
  struct alignas(64) Shard {
    // What the table retired; declared first, so that it outlives the table
    // (which takes back its spills from it as it goes).
    Reclaimer::Limbo limbo ABSL_GUARDED_BY(lock);
    HolderTable table ABSL_GUARDED_BY(lock);
    // The table's writers' lock and its version, and beside it on one line,
    // predictions by a digest of their key (one of 384), the digests with
    // any as bits: a walk or a stored event looks a key up in `predicted`
    // only when its bit is set, and a walk reads the version and the bit
    // in one load. A shard of a fleet's index holds tens to a few hundred
    // predictions at once (the prompts being computed); 64 bits were a
    // third or more set at a fleet's usual load, and a stored event or a
    // walked block then paid a lookup (docs/benchmarks.md). A wider
    // filter on lines of its own cost more than it saved. Written under
    // lock, and only when a digest's count moves between 0 and 1; read
    // without it.
    static constexpr size_t kDigests = 384;
    alignas(64) mutable SeqLock lock;
    std::array<std::atomic<uint64_t>, kDigests / 64> predicted_digests{};
    static_assert(sizeof(SeqLock) + kDigests / 8 == 64, "the lock and the digests: one line");
    // Predictions by digest (kDigests counts), off the readers' lines.
    std::unique_ptr<uint32_t[]> predicted_by_digest ABSL_GUARDED_BY(lock) =
        std::make_unique<uint32_t[]>(kDigests);
    // A record a (block, worker), expired ones included
    // (gateway/routing/prediction_table.h).
    PredictionTable predicted ABSL_GUARDED_BY(lock);
    // How many records make Predict sweep the expired ones out first
    // (SweepExpiredLocked).
    int64_t sweep_at ABSL_GUARDED_BY(lock) = kMinSweep;
    bool MayBePredicted(HolderTable::Mixed key) const { return MayBePredictedAt(Digest(key)); }
    bool MayBePredictedAt(size_t digest) const {
      return (predicted_digests[digest / 64].load(std::memory_order_relaxed) >> (digest % 64)) & 1;
    }
    // Counts `n` predictions of `key` made (n > 0) or ended (n < 0).
    void CountPredictions(HolderTable::Mixed key, int64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock) {
      CountPredictionsAt(Digest(key), n);
    }
    // The same for the key of `digest` (Digest(key)).
    void CountPredictionsAt(size_t digest, int64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock) {
      uint32_t& c = predicted_by_digest[digest];
      const bool had = c != 0;
      c = static_cast<uint32_t>(c + n);
      if (had == (c != 0)) return;
      std::atomic<uint64_t>& word = predicted_digests[digest / 64];
      const uint64_t bit = uint64_t{1} << (digest % 64);
      const uint64_t bits = word.load(std::memory_order_relaxed);
      word.store(c == 0 ? bits & ~bit : bits | bit, std::memory_order_relaxed);
    }
    // The table, for lock-free readers (inside a Reclaimer::ReadSection,
    // through lock.Read: see OverlapAll).
    const HolderTable& TableForReaders() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return table; }
    // From bits the shard and the slot do not use (HolderTable::Mix's low
    // 24, for tables under 2^28 slots).
    static size_t Digest(HolderTable::Mixed key) {
      return static_cast<size_t>(((key.v & 0xffffff) * kDigests) >> 24);
    }
  };
  // A writer's hold on a shard's table; on release, the limbo frees what
  // no reader can hold any more.
  class WriteLock;
  struct WorkerState {
    explicit WorkerState(std::atomic<uint16_t>& id) : id(id) {}
    absl::Mutex mu;  // one Apply, Predict or Drop of the worker at a time
    // Its compact number in the holder sets; 0 while it has none. Kept in
    // its slot's page (SlotPage::ids), where a route reads a thousand
    // workers' numbers from 2 KiB in a row rather than through a pointer
    // each. Written under mu and workers_mu_ together, so either suffices
    // to read it.
    std::atomic<uint16_t>& id;
    uint64_t epoch ABSL_GUARDED_BY(mu) = 0;
    uint64_t sequence ABSL_GUARDED_BY(mu) = 0;
    bool synced ABSL_GUARDED_BY(mu) = false;  // a snapshot has been applied
    bool predicted ABSL_GUARDED_BY(mu) = false;  // predictions made under its number
  };
  // What one Apply changed in the counters, published once at its end.
  struct Tally {
    int64_t entries = 0;
    int64_t hashes = 0;
    int64_t of_id = 0;  // the applying worker's entries
    int64_t predictions = 0;  // made (> 0) or ended (< 0)
    bool retired = false;     // a shard written holds what it retired (Reclaimer::Limbo)
  };

  // Keys the clock hand passes looking for one to evict before the index
  // keeps what it has and refuses the new entry instead.
  static constexpr size_t kEvictionVisits = 16;
  // Prediction records a shard holds before Predict first sweeps out the
  // expired ones (see SweepExpiredLocked). Workers report most predicted blocks
  // within a prefill, so few records are left to expire.
  static constexpr int64_t kMinSweep = 64;
  static uint64_t KeyOf(const engine::BlockHash& h) { return h.low; }
  Shard& ShardOf(uint64_t key) const { return ShardOf(HolderTable::MixKey(key)); }
  size_t ShardIndex(HolderTable::Mixed key) const;
  Shard& ShardOf(HolderTable::Mixed key) const;
  // Starts loading `key`'s slot and its shard's version, without the
  // shard's lock.
  void Prefetch(HolderTable::Mixed key) const { Prefetch(ShardOf(key), key); }
  // Prefetch for a caller that found `key`'s shard already.
  void Prefetch(const Shard& shard, HolderTable::Mixed key) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // Unlocked by design: HolderTable::Prefetch reads only atomics.
    shard.table.Prefetch(key);
    shard.lock.Prefetch();
  }
  // Where the load ahead of a block's holders found it, with its shard's
  // version then, kept in a ring of kProbed for the block's read: one probe
  // a block rather than two, while the version has not moved (see
  // HolderTable::Found).
  struct Probed {
    HolderTable::Found found;
    uint64_t version = 1;  // odd: nothing kept
    // The load ahead of `key`'s holders (lock-free), keeping where it found it.
    void Load(const Shard& shard, HolderTable::Mixed key) {
      version = shard.lock.BeginRead();
      found = shard.TableForReaders().FindHoldersConcurrent(key);
      if (!shard.lock.Unchanged(version)) version = 1;
    }
    // Whether `found` still stands: inside a read of the shard, or under its
    // lock.
    bool Stands(const Shard& shard) const { return shard.lock.Unchanged(version); }
  };
  static constexpr size_t kProbed = 8;  // a power of two past the holders' loads ahead
  // The worker's state, made on first use (never freed: slots are few).
  WorkerState& StateOf(int worker) ABSL_LOCKS_EXCLUDED(workers_mu_);
  // The worker's state, or null when it has none yet.
  WorkerState* FindLocked(int worker) const ABSL_SHARED_LOCKS_REQUIRED(workers_mu_);
  // `w`'s compact id, numbering it if it has none.
  uint16_t IdOf(WorkerState& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w.mu)
      ABSL_LOCKS_EXCLUDED(workers_mu_);
  // A block event (or a block to predict) with its shard.
  struct Keyed {
    uint64_t key;
    HolderTable::Mixed mixed;
    uint32_t shard;
    uint16_t digest;  // Shard::Digest(mixed)
    int8_t tier;
    bool add;  // stored, else removed
  };
  // The calling thread's: `items` as drawn, then `sorted` by shard.
  struct KeyedScratch {
    // Empty `items`, ready to fill, and no item counted in any of
    // `shards` shards.
    static KeyedScratch& OfThisThread(int shards);
    // Appends `k`, counting it in its shard (starts[k.shard + 1]).
    void Push(const Keyed& k) {
      items.push_back(k);
      ++starts[k.shard + 1];
    }
    // Frees what a large batch grew, once done with it.
    void Release();
    std::vector<Keyed> items;
    std::vector<Keyed> sorted;
    std::vector<uint32_t> starts;
  };
  Keyed KeyedOf(uint64_t key, int tier, bool add) const;
  // Prefetch for the writer about to change `e`'s slot (see
  // HolderTable::PrefetchForWrite), with the lines of its shard an event
  // writes: the lock and its digests, the limbo, the prediction count of
  // `e`'s digest. Between two batches a route and the rest of the
  // gateway's work leave them out of the core's caches, and there are
  // more of them than slots (an event of a 30-event batch is mostly alone
  // in its shard).
  void PrefetchForWrite(const Keyed& e) const ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Orders `s.items` (pushed by KeyedScratch::Push) by shard into
  // `s.sorted`, keeping their order within each (a key's events stay in
  // order).
  static void SortByShard(KeyedScratch& s);
  void AddLocked(Shard& shard, uint16_t id, const Keyed& e, Tally& tally)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.lock);
  void RemoveLocked(Shard& shard, uint16_t id, const Keyed& e, Tally& tally)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.lock);
  // The batch's events, every tier's, shard by shard: a shard's run under
  // one hold of its lock, each event a change of its own.
  void ApplyEvents(uint16_t id, const tandem::v1::BlockEventBatch& batch, Tally& tally);
  // Retires `w`'s number (routes no longer ask for it; `w` has none until
  // it is given a new one): its entries and predictions go at the next
  // sweep, which this runs once options_.retired_per_sweep numbers wait.
  void RetireNumberOf(WorkerState& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w.mu)
      ABSL_LOCKS_EXCLUDED(retired_mu_, sweep_mu_, workers_mu_);
  // Sweeps every number retired so far (none: waits for a sweep under way).
  void SweepAllRetired() ABSL_LOCKS_EXCLUDED(retired_mu_, sweep_mu_);
  // Takes `ids` (moved from retired_ to sweeping_) off every block and
  // every prediction, in one pass over every shard, and frees the numbers.
  void SweepRetired(std::span<const uint16_t> ids) ABSL_LOCKS_EXCLUDED(retired_mu_, sweep_mu_);
  // Evicts from `shard` while the index (with `tally` not yet published)
  // is over its bound; false when the hand found no block without uses
  // within kEvictionVisits.
  bool EvictLocked(Shard& shard, Tally& tally) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.lock);
  // Drops `shard`'s predictions past their deadline at `now`, counting
  // them in `tally`, and sets when the next sweep comes: once the shard
  // holds twice what it kept (and kMinSweep at least), so that a sweep's
  // cost, a pass over the shard's predictions, is spread over the
  // predictions made meanwhile. Returns the earliest deadline kept
  // (absl::InfiniteFuture() when none is).
  absl::Time SweepExpiredLocked(Shard& shard, absl::Time now, Tally& tally)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.lock);
  // Erases the shard's predictions `gone` says are, and returns how many.
  int64_t ErasePredictionsLocked(Shard& shard,
                                 absl::FunctionRef<bool(uint16_t id, int64_t until_ns)> gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.lock);
  // Ends `id`'s prediction of the keyed event `e`'s block, if it has one, counting it in
  // `tally`.
  void EndPrediction(Shard& shard, const Keyed& e, uint16_t id, Tally& tally)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.lock);

  const BlockIndexOptions options_;
  const int shard_shift_;  // key mix >> shard_shift_: the shard
  Reclaimer reclaimer_;    // for every shard's limbo; outlives them
  SpillPages spill_pages_;  // every shard's spills; outlives them
  std::unique_ptr<Shard[]> shards_;
  // The counts every Apply adds to, on a line of their own: beside shards_
  // (which a walk reads for every block), each batch's add took the line
  // from the routing cores and the next route's read took it back.
  alignas(64) std::atomic<int64_t> entries_{0};
  std::atomic<int64_t> hashes_{0};
  std::atomic<int64_t> dropped_{0};
  // Predictions held, for Predict's bound and predicted_entries(). Each
  // Apply or Predict adds what it changed once, at its end, since a line
  // both cores write back and forth costs a miss a write. Walks do not read
  // it: the shards' digests tell them which blocks may be predicted.
  std::atomic<int64_t> predicted_count_{0};
  // Entries per compact id.
  std::unique_ptr<std::atomic<int64_t>[]> entries_of_id_;

  // One sweep at a time. Lock order: a worker's own lock, then this, then
  // a shard's lock, the retired ids' lock or the workers' table lock.
  absl::Mutex sweep_mu_;
  // Ids retired and not yet swept (see RetireNumberOf), and those a sweep is
  // taking out: their entries are not counted by entries(). Held briefly,
  // never while taking another lock.
  mutable absl::Mutex retired_mu_;
  std::vector<uint16_t> retired_ ABSL_GUARDED_BY(retired_mu_);
  std::vector<uint16_t> sweeping_ ABSL_GUARDED_BY(retired_mu_);

  mutable absl::Mutex workers_mu_;
  // Worker states by slot, in pages of kSlotsPerPage consecutive slots
  // (a gateway numbers a role's workers from a base): a route asks for a
  // role's slots in order, so it finds a thousand workers' states with a
  // hash lookup or two rather than one each.
  static constexpr int kSlotPageBits = 10;
  static constexpr int kSlotsPerPage = 1 << kSlotPageBits;
  struct SlotPage {
    std::array<std::unique_ptr<WorkerState>, kSlotsPerPage> states;
    std::array<std::atomic<uint16_t>, kSlotsPerPage> ids{};  // WorkerState::id
  };
  // The page holding `worker`'s slot, or null.
  const SlotPage* PageLocked(int worker) const ABSL_SHARED_LOCKS_REQUIRED(workers_mu_);
  absl::flat_hash_map<int, std::unique_ptr<SlotPage>> slot_pages_ ABSL_GUARDED_BY(workers_mu_);
  std::vector<uint16_t> free_ids_ ABSL_GUARDED_BY(workers_mu_);
  uint16_t next_id_ ABSL_GUARDED_BY(workers_mu_) = 1;

  // What every route reads and batches seldom write, apart from the lock
  // every Apply takes (workers_mu_, above) and the counts it adds to.
  // Which numbering of the workers is current: a value no index has had
  // before, taken anew (under workers_mu_) whenever a worker is numbered
  // or its number retired, so that a routing thread may keep the numbers
  // of the slots it asks for while it stays (see OverlapAll).
  alignas(64) std::atomic<uint64_t> numbering_;
  static uint64_t NewNumbering();
  // The first batch's hash parameters: written once, under workers_mu_,
  // before has_params_ is set, and never again, so that params() reads
  // them without a lock (every route asks for them).
  std::optional<BlockHashParams> params_;
  // No prediction expires before this (Unix nanoseconds; a prediction made
  // while a full sweep runs may be missed, and wait for its shard's own).
  std::atomic<int64_t> earliest_until_ns_{INT64_MAX};
  std::atomic<bool> has_params_{false};
  // Whether the index holds options_.prefetch_spills_from entries or more,
  // as the last Apply found: what a walk reads, rather than entries_, which
  // every batch writes.
  std::atomic<bool> prefetch_spills_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_BLOCK_INDEX_H_
