#include "gateway/routing/block_index.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "absl/base/attributes.h"
#include "common/check.h"
#include "rpc/convert.h"

namespace tandem::gateway {
namespace {

int ShardShift(int shards) {
  TANDEM_CHECK(shards >= 1 && shards <= 4096 && std::has_single_bit(static_cast<unsigned>(shards)),
               "block index shards: a power of two in 1..4096")
      << "got " << shards;
  return 64 - std::countr_zero(static_cast<unsigned>(shards));
}

}  // namespace

class ABSL_SCOPED_LOCKABLE BlockIndex::WriteLock {
 public:
  // Each change to the table under it is marked on its own (a
  // SeqLockChange), so that routes read between a run's events.
  explicit WriteLock(Shard& shard)
      ABSL_EXCLUSIVE_LOCK_FUNCTION(shard.lock) ABSL_NO_THREAD_SAFETY_ANALYSIS : shard_(shard) {
    shard_.lock.Lock();
  }
  ~WriteLock() ABSL_UNLOCK_FUNCTION() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    shard_.limbo.Collect();
    shard_.lock.Unlock();
  }
  WriteLock(const WriteLock&) = delete;
  WriteLock& operator=(const WriteLock&) = delete;

 private:
  Shard& shard_;
};

BlockIndex::BlockIndex(const BlockIndexOptions& options)
    : options_(options),
      shard_shift_(ShardShift(options.shards)),
      shards_(new Shard[static_cast<size_t>(options.shards)]),
      entries_of_id_(new std::atomic<int64_t>[HolderTable::kMaxId + 1]()),
      numbering_(NewNumbering()),
      prefetch_spills_(options.prefetch_spills_from <= 0) {
  for (int i = 0; i < options.shards; ++i) {
    Shard& shard = shards_[i];
    SeqLockWriter lock(&shard.lock);
    shard.limbo.Attach(&reclaimer_);
    shard.table.set_limbo(&shard.limbo);
    shard.table.set_spill_pages(&spill_pages_);
  }
}

BlockIndex::~BlockIndex() = default;

uint64_t BlockIndex::NewNumbering() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

size_t BlockIndex::ShardIndex(HolderTable::Mixed key) const {
  // A shift by 64 (one shard) is undefined, hence the branch.
  return shard_shift_ >= 64 ? 0 : static_cast<size_t>(key.v >> shard_shift_);
}

BlockIndex::Shard& BlockIndex::ShardOf(HolderTable::Mixed key) const {
  return shards_[ShardIndex(key)];
}

BlockIndex::KeyedScratch& BlockIndex::KeyedScratch::OfThisThread(int shards) {
  thread_local KeyedScratch scratch;
  scratch.items.clear();
  scratch.starts.assign(static_cast<size_t>(shards) + 1, 0);
  return scratch;
}

void BlockIndex::KeyedScratch::Release() {
  // A snapshot of a large cache leaves no megabytes behind on every
  // thread that applied one.
  constexpr size_t kKept = size_t{1} << 14;
  if (items.capacity() > kKept) std::vector<Keyed>().swap(items);
  if (sorted.capacity() > kKept) std::vector<Keyed>().swap(sorted);
}

BlockIndex::Keyed BlockIndex::KeyedOf(uint64_t key, int tier, bool add) const {
  const HolderTable::Mixed mixed = HolderTable::MixKey(key);
  return Keyed{.key = key,
               .mixed = mixed,
               .shard = static_cast<uint32_t>(ShardIndex(mixed)),
               .digest = static_cast<uint16_t>(Shard::Digest(mixed)),
               .tier = static_cast<int8_t>(tier),
               .add = add};
}

void BlockIndex::SortByShard(KeyedScratch& s) {
  // A counting sort (the counts taken as the items were pushed): stable,
  // so a key's events keep their order.
  for (size_t i = 1; i < s.starts.size(); ++i) s.starts[i] += s.starts[i - 1];
  s.sorted.resize(s.items.size());
  for (const Keyed& k : s.items) s.sorted[s.starts[k.shard]++] = k;
}

// Once an event on the apply path, as are AddLocked and RemoveLocked:
// inline (this file alone calls them).
inline void BlockIndex::PrefetchForWrite(const Keyed& e) const {
  const Shard& shard = shards_[e.shard];
  shard.table.PrefetchForWrite(e.mixed);
  shard.lock.Prefetch();
  __builtin_prefetch(&shard);  // the limbo, on the shard's first line
  // The array's address never changes once the shard is made.
  __builtin_prefetch(&shard.predicted_by_digest[e.digest]);
}

BlockIndex::WorkerState& BlockIndex::StateOf(int worker) {
  {
    absl::ReaderMutexLock lock(&workers_mu_);
    if (WorkerState* w = FindLocked(worker); w != nullptr) return *w;
  }
  absl::MutexLock lock(&workers_mu_);
  std::unique_ptr<SlotPage>& page = slot_pages_[worker >> kSlotPageBits];
  if (page == nullptr) page = std::make_unique<SlotPage>();
  const int at = worker & (kSlotsPerPage - 1);
  std::unique_ptr<WorkerState>& w = page->states[at];
  if (w == nullptr) w = std::make_unique<WorkerState>(page->ids[at]);
  return *w;
}

const BlockIndex::SlotPage* BlockIndex::PageLocked(int worker) const {
  const auto it = slot_pages_.find(worker >> kSlotPageBits);
  return it == slot_pages_.end() ? nullptr : it->second.get();
}

BlockIndex::WorkerState* BlockIndex::FindLocked(int worker) const {
  const SlotPage* page = PageLocked(worker);
  return page == nullptr ? nullptr : page->states[worker & (kSlotsPerPage - 1)].get();
}

uint16_t BlockIndex::IdOf(WorkerState& w) {
  if (const uint16_t id = w.id.load(std::memory_order_relaxed); id != 0) return id;
  for (bool swept = false;; swept = true) {
    {
      absl::MutexLock lock(&workers_mu_);
      uint16_t id = 0;
      if (!free_ids_.empty()) {
        id = free_ids_.back();
        free_ids_.pop_back();
      } else if (next_id_ <= HolderTable::kMaxId) {
        id = next_id_++;
      }
      if (id != 0 || swept) {
        // 0: more workers at once than the holder sets number; unrecorded.
        w.id.store(id, std::memory_order_relaxed);
        numbering_.store(NewNumbering(), std::memory_order_release);
        return id;
      }
    }
    // Every number is taken: the retired ones come back once swept.
    SweepAllRetired();
  }
}

bool BlockIndex::EvictLocked(Shard& shard, Tally& tally) {
  while (entries_.load(std::memory_order_relaxed) + tally.entries > options_.max_entries) {
    const int64_t n = shard.table.EvictOne(
        [&](uint16_t holder) { entries_of_id_[holder].fetch_sub(1, std::memory_order_relaxed); },
        kEvictionVisits);
    if (n == 0) return false;
    tally.entries -= n;
    tally.hashes -= 1;
    dropped_.fetch_add(n, std::memory_order_relaxed);
  }
  return true;
}

inline void BlockIndex::EndPrediction(Shard& shard, const Keyed& e, uint16_t id, Tally& tally) {
  if (!shard.predicted.Erase(e.mixed.v, id)) return;
  shard.CountPredictionsAt(e.digest, -1);
  --tally.predictions;
}

// Forced: left to itself, the compiler made it a call of its own, which
// cost a stored event 14 instructions more (callgrind, docs/benchmarks.md).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void BlockIndex::AddLocked(Shard& shard, uint16_t id,
                                                               const Keyed& e, Tally& tally) {
  shard.table.Reserve(1);  // a growth is no change readers must wait out
  SeqLockChange change(shard.lock);
  const size_t keys = shard.table.size();
  const bool fresh = shard.table.AddReserved(e.mixed, id, e.tier);
  if (fresh) {
    ++tally.entries;
    ++tally.of_id;
    tally.hashes += static_cast<int64_t>(shard.table.size() - keys);
  }
  // Over the bound (rare: the bound is what the pod holds) calls out.
  if (fresh && entries_.load(std::memory_order_relaxed) + tally.entries > options_.max_entries &&
      !EvictLocked(shard, tally)) {
    // Full of blocks still in use: the new entry is the one not kept
    // (unless the hand took it already).
    const size_t before = shard.table.size();
    if (shard.table.Remove(e.mixed, id, e.tier)) {
      --tally.entries;
      --tally.of_id;
      tally.hashes -= static_cast<int64_t>(before - shard.table.size());
      dropped_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // The worker's report ends its prediction.
  if (shard.MayBePredictedAt(e.digest)) EndPrediction(shard, e, id, tally);
}

inline void BlockIndex::RemoveLocked(Shard& shard, uint16_t id, const Keyed& e, Tally& tally) {
  SeqLockChange change(shard.lock);
  const size_t keys = shard.table.size();
  if (!shard.table.Remove(e.mixed, id, e.tier)) return;
  --tally.entries;
  --tally.of_id;
  tally.hashes -= static_cast<int64_t>(keys - shard.table.size());
}

void BlockIndex::ApplyEvents(uint16_t id, const tandem::v1::BlockEventBatch& batch, Tally& tally) {
  KeyedScratch& scratch = KeyedScratch::OfThisThread(options_.shards);
  auto push = [&](const auto& hashes, int tier, bool add) {
    for (const auto& h : hashes) scratch.Push(KeyedOf(h.low(), tier, add));
  };
  push(batch.stored(), 0, true);
  push(batch.removed(), 0, false);
  for (const tandem::v1::TierBlockEvents& t : batch.tiers()) {
    const int tier = static_cast<int>(t.tier());
    if (tier <= 0 || tier >= kNumTiers) continue;  // a tier this gateway predates
    push(t.stored(), tier, true);
    push(t.removed(), tier, false);
  }
  // Shard by shard, a run under one hold of the shard's lock; slots are
  // loaded a few events ahead (see OverlapAll).
  SortByShard(scratch);
  // The thread's vector read once: the compiler cannot tell that the
  // writes below leave it alone.
  const std::span<const Keyed> sorted(scratch.sorted);
  const size_t n = sorted.size();
  constexpr size_t kAhead = 4;
  for (size_t i = 0; i < std::min(kAhead, n); ++i) PrefetchForWrite(sorted[i]);
  for (size_t i = 0; i < n;) {
    Shard& shard = shards_[sorted[i].shard];
    const uint32_t run = sorted[i].shard;
    WriteLock lock(shard);
    for (; i < n && sorted[i].shard == run; ++i) {
      if (i + kAhead < n) PrefetchForWrite(sorted[i + kAhead]);
      const Keyed& e = sorted[i];
      if (e.add) {
        AddLocked(shard, id, e, tally);
      } else {
        RemoveLocked(shard, id, e, tally);
      }
    }
    tally.retired |= shard.limbo.has_pending();
  }
  scratch.Release();
}

void BlockIndex::RetireNumberOf(WorkerState& w) {
  const uint16_t id = w.id.load(std::memory_order_relaxed);
  {
    // Routes stop asking for it first.
    absl::MutexLock lock(&workers_mu_);
    w.id.store(0, std::memory_order_relaxed);
    numbering_.store(NewNumbering(), std::memory_order_release);
  }
  w.predicted = false;
  std::vector<uint16_t> due;
  {
    absl::MutexLock lock(&retired_mu_);
    retired_.push_back(id);
    if (std::ssize(retired_) < options_.retired_per_sweep) return;
    due.swap(retired_);
    sweeping_.insert(sweeping_.end(), due.begin(), due.end());
  }
  SweepRetired(due);
}

void BlockIndex::SweepAllRetired() {
  std::vector<uint16_t> due;
  {
    absl::MutexLock lock(&retired_mu_);
    due.swap(retired_);
    sweeping_.insert(sweeping_.end(), due.begin(), due.end());
  }
  SweepRetired(due);  // with none due, still waits for a sweep under way
}

void BlockIndex::SweepRetired(std::span<const uint16_t> ids) {
  absl::MutexLock sweeping(&sweep_mu_);
  if (ids.empty()) return;
  // Evictions may lower this meanwhile: the sweep then reads to the end.
  int64_t had = 0;
  std::vector<uint64_t> listed((HolderTable::kMaxId + 1) / 64, 0);
  for (uint16_t id : ids) {
    had += entries_of_id_[id].load(std::memory_order_relaxed);
    listed[id / 64] |= uint64_t{1} << (id % 64);
  }
  int64_t removed = 0;
  for (int s = 0; s < options_.shards; ++s) {
    Shard& shard = shards_[s];
    if (removed < had) {
      // Routes read between its keys' removals.
      SeqLockWriter lock(&shard.lock);
      const size_t keys = shard.table.size();
      // Each entry leaves both counts at once, so that entries() stays
      // exact while the sweep goes.
      removed += shard.table.RemoveWorkers(ids, had - removed, &shard.lock, [&](uint16_t id) {
        entries_of_id_[id].fetch_sub(1, std::memory_order_relaxed);
        entries_.fetch_sub(1, std::memory_order_relaxed);
      });
      hashes_.fetch_sub(static_cast<int64_t>(keys - shard.table.size()), std::memory_order_relaxed);
      shard.limbo.Collect();
    }
    SeqLockWriter lock(&shard.lock);
    const int64_t predictions = ErasePredictionsLocked(
        shard, [&](uint16_t id, int64_t) { return (listed[id / 64] >> (id % 64)) & 1; });
    predicted_count_.fetch_sub(predictions, std::memory_order_relaxed);
  }
  reclaimer_.Advance();
  {
    absl::MutexLock lock(&retired_mu_);
    for (uint16_t id : ids) sweeping_.erase(std::find(sweeping_.begin(), sweeping_.end(), id));
  }
  absl::MutexLock lock(&workers_mu_);
  free_ids_.insert(free_ids_.end(), ids.begin(), ids.end());
}

int64_t BlockIndex::ErasePredictionsLocked(
    Shard& shard, absl::FunctionRef<bool(uint16_t id, int64_t until_ns)> gone) {
  // The callback runs under the lock this function requires.
  return shard.predicted.EraseIf(gone, [&](uint64_t key) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    shard.CountPredictions(HolderTable::Mixed{key}, -1);
  });
}

absl::Time BlockIndex::SweepExpiredLocked(Shard& shard, absl::Time now, Tally& tally) {
  const int64_t now_ns = absl::ToUnixNanos(now);
  int64_t earliest = INT64_MAX;
  tally.predictions -= ErasePredictionsLocked(shard, [&](uint16_t, int64_t until_ns) {
    if (until_ns <= now_ns) return true;
    earliest = std::min(earliest, until_ns);  // kept
    return false;
  });
  shard.sweep_at = std::max<int64_t>(kMinSweep, 2 * std::ssize(shard.predicted));
  return earliest == INT64_MAX ? absl::InfiniteFuture() : absl::FromUnixNanos(earliest);
}

void BlockIndex::Predict(int worker, std::span<const engine::BlockHash> chain, absl::Time until) {
  WorkerState& w = StateOf(worker);
  absl::MutexLock worker_lock(&w.mu);
  const uint16_t id = IdOf(w);
  if (id == 0) return;
  const absl::Time now = absl::Now();
  const int64_t bound = std::min(options_.max_entries, options_.max_predictions);
  Tally tally;  // predictions made and swept
  auto room = [&] {
    return bound - predicted_count_.load(std::memory_order_relaxed) - tally.predictions;
  };
  const int64_t until_ns = absl::ToUnixNanos(until);
  int64_t earliest = earliest_until_ns_.load(std::memory_order_relaxed);
  if (room() < std::ssize(chain) && absl::ToUnixNanos(now) >= earliest) {
    // Near the bound, and some prediction may have expired: the expired
    // make room first, a sweep of every shard that only so full an index
    // pays, once each time a deadline passes.
    absl::Time kept = absl::InfiniteFuture();
    for (int s = 0; s < options_.shards; ++s) {
      SeqLockWriter lock(&shards_[s].lock);
      kept = std::min(kept, SweepExpiredLocked(shards_[s], now, tally));
    }
    earliest = kept == absl::InfiniteFuture() ? INT64_MAX : absl::ToUnixNanos(kept);
    earliest_until_ns_.store(earliest, std::memory_order_relaxed);
  }
  while (until_ns < earliest &&
         !earliest_until_ns_.compare_exchange_weak(earliest, until_ns, std::memory_order_relaxed)) {
  }
  // Past the bound, the chain's leading blocks are the ones worth predicting
  // (a walk counts a run from the first block).
  const size_t kept = static_cast<size_t>(std::clamp<int64_t>(room(), 0, std::ssize(chain)));
  int64_t dropped = static_cast<int64_t>(chain.size() - kept);
  KeyedScratch& scratch = KeyedScratch::OfThisThread(options_.shards);
  for (const engine::BlockHash& h : chain.first(kept)) {
    scratch.Push(KeyedOf(KeyOf(h), /*tier=*/0, /*add=*/true));
  }
  // Shard by shard, as Apply: one hold of a shard's lock (and at most one
  // sweep of its expired predictions) for all its blocks, rather than one
  // a block.
  SortByShard(scratch);
  const std::vector<Keyed>& sorted = scratch.sorted;
  // Each block's slot, then its spilled holders (for Holds), loaded ahead
  // as in OverlapAll: the holders of blocks in shards not yet locked are
  // reached as a walk reaches them, inside a read section. Where that load
  // found a block is kept for its Holds while its shard's version has not
  // moved (as in OverlapAll).
  constexpr size_t kSlotsAhead = 8, kHoldersAhead = 4;
  static_assert(kProbed > kHoldersAhead);
  std::array<Probed, kProbed> probed;
  const Reclaimer::ReadSection reading(reclaimer_);
  auto prefetch_holders = [&](size_t j) {
    if (j < sorted.size()) probed[j % kProbed].Load(shards_[sorted[j].shard], sorted[j].mixed);
  };
  for (size_t i = 0; i < std::min(kSlotsAhead, sorted.size()); ++i) Prefetch(sorted[i].mixed);
  for (size_t i = 0; i < kHoldersAhead; ++i) prefetch_holders(i);
  for (size_t i = 0; i < sorted.size();) {
    Shard& shard = shards_[sorted[i].shard];
    const uint32_t run = sorted[i].shard;
    SeqLockWriter lock(&shard.lock);  // no change to the table: readers read on
    if (std::ssize(shard.predicted) >= shard.sweep_at) SweepExpiredLocked(shard, now, tally);
    for (; i < sorted.size() && sorted[i].shard == run; ++i) {
      if (i + kSlotsAhead < sorted.size()) Prefetch(sorted[i + kSlotsAhead].mixed);
      prefetch_holders(i + kHoldersAhead);
      const HolderTable::Mixed key = sorted[i].mixed;
      const Probed& ahead = probed[i % kProbed];
      if (ahead.Stands(shard) ? shard.table.Holds(ahead.found, id)
                              : shard.table.Holds(sorted[i].key, id)) {
        continue;
      }
      if (int64_t* had = shard.predicted.Find(key.v, id); had != nullptr) {
        *had = std::max(*had, until_ns);
        continue;
      }
      // Others may have predicted meanwhile.
      if (room() <= 0) {
        ++dropped;
        continue;
      }
      shard.predicted.Insert(key.v, id, until_ns);
      shard.CountPredictionsAt(sorted[i].digest, 1);
      ++tally.predictions;
    }
  }
  scratch.Release();
  if (tally.predictions != 0) {
    predicted_count_.fetch_add(tally.predictions, std::memory_order_relaxed);
  }
  if (dropped > 0) dropped_.fetch_add(dropped, std::memory_order_relaxed);
  w.predicted = true;
}

BlockIndex::Applied BlockIndex::Apply(int worker, const tandem::v1::BlockEventBatch& batch) {
  WorkerState& w = StateOf(worker);
  absl::MutexLock worker_lock(&w.mu);
  if (!batch.snapshot() &&
      (!w.synced || batch.epoch() != w.epoch || batch.sequence() != w.sequence + 1)) {
    return Applied::kNeedsResync;
  }
  uint16_t id = IdOf(w);
  if (batch.snapshot()) {
    if (id != 0 && (entries_of_id_[id].load(std::memory_order_relaxed) > 0 || w.predicted)) {
      // What the index knew of the worker goes with its number; routes
      // ask for a new one from now on.
      RetireNumberOf(w);
      id = IdOf(w);
    }
    w.epoch = batch.epoch();
    w.synced = true;
  }
  w.sequence = batch.sequence();
  if (id == 0) {  // no number for it: nothing of it is recorded
    dropped_.fetch_add(batch.stored_size(), std::memory_order_relaxed);
  } else {
    Tally tally;
    ApplyEvents(id, batch, tally);
    // What the batch retired goes at the shards' next writes. Most batches
    // retire nothing (a spill outgrown, a table outgrown), and advancing
    // writes the line every route's read section reads.
    if (tally.retired) reclaimer_.Advance();
    const int64_t entries =
        entries_.fetch_add(tally.entries, std::memory_order_relaxed) + tally.entries;
    // Routes read the flag, which changes once in a long while, rather than
    // the count, which every batch writes.
    if (const bool large = entries >= options_.prefetch_spills_from;
        large != prefetch_spills_.load(std::memory_order_relaxed)) {
      prefetch_spills_.store(large, std::memory_order_relaxed);
    }
    hashes_.fetch_add(tally.hashes, std::memory_order_relaxed);
    entries_of_id_[id].fetch_add(tally.of_id, std::memory_order_relaxed);
    if (tally.predictions != 0) {
      predicted_count_.fetch_add(tally.predictions, std::memory_order_relaxed);
    }
  }
  if (!has_params_.load(std::memory_order_acquire) && batch.block_size() > 0) {
    absl::MutexLock lock(&workers_mu_);
    if (!params_.has_value()) {
      params_ = BlockHashParams{.model_fingerprint = batch.model_fingerprint(),
                                .block_size = batch.block_size()};
      has_params_.store(true, std::memory_order_release);
    }
  }
  return Applied::kApplied;
}

void BlockIndex::Drop(int worker) {
  WorkerState* w = nullptr;
  {
    absl::ReaderMutexLock lock(&workers_mu_);
    w = FindLocked(worker);
    if (w == nullptr) return;
  }
  absl::MutexLock worker_lock(&w->mu);
  w->synced = false;
  if (w->id.load(std::memory_order_relaxed) != 0) RetireNumberOf(*w);
}

bool BlockIndex::Holds(int worker, const engine::BlockHash& h) const {
  uint16_t id = 0;
  {
    absl::ReaderMutexLock lock(&workers_mu_);
    const WorkerState* w = FindLocked(worker);
    if (w == nullptr) return false;
    id = w->id.load(std::memory_order_relaxed);
  }
  if (id == 0) return false;
  const Shard& shard = ShardOf(KeyOf(h));
  SeqLockWriter lock(&shard.lock);  // diagnostics: no need to read lock-free
  return shard.table.Holds(KeyOf(h), id);
}

std::optional<BlockHashParams> BlockIndex::params() const {
  // Set once, before the flag (see params_): no lock, so that routes do
  // not write the line every Apply locks.
  if (!has_params_.load(std::memory_order_acquire)) return std::nullopt;
  return params_;
}

int64_t BlockIndex::entries() const {
  int64_t retired = 0;
  absl::ReaderMutexLock lock(&retired_mu_);
  for (const std::vector<uint16_t>* ids : {&retired_, &sweeping_}) {
    for (uint16_t id : *ids) retired += entries_of_id_[id].load(std::memory_order_relaxed);
  }
  return entries_.load(std::memory_order_relaxed) - retired;
}

int64_t BlockIndex::hashes() const { return hashes_.load(std::memory_order_relaxed); }

int64_t BlockIndex::entries_of(int worker) const {
  absl::ReaderMutexLock lock(&workers_mu_);
  const WorkerState* w = FindLocked(worker);
  if (w == nullptr) return 0;
  const uint16_t id = w->id.load(std::memory_order_relaxed);
  return id == 0 ? 0 : entries_of_id_[id].load(std::memory_order_relaxed);
}

int64_t BlockIndex::dropped_entries() const { return dropped_.load(std::memory_order_relaxed); }

int64_t BlockIndex::predicted_entries() const {
  return predicted_count_.load(std::memory_order_relaxed);
}

int64_t BlockIndex::table_bytes() const {
  int64_t bytes = 0;
  for (int s = 0; s < options_.shards; ++s) {
    SeqLockWriter lock(&shards_[s].lock);
    bytes += static_cast<int64_t>(shards_[s].table.MemoryBytes());
  }
  return bytes;
}

HolderTable::Growths BlockIndex::table_growths() const {
  HolderTable::Growths sum;
  for (int s = 0; s < options_.shards; ++s) {
    SeqLockWriter lock(&shards_[s].lock);
    const HolderTable::Growths& g = shards_[s].table.growths();
    sum.count += g.count;
    sum.keys_moved += g.keys_moved;
    sum.nanos += g.nanos;
  }
  return sum;
}

}  // namespace tandem::gateway
