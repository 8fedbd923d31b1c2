// BlockIndex's read path: a route's walk of a prompt's blocks for every
// worker at once, without a lock (gateway/routing/block_index.h).
#include <algorithm>
#include <bit>
#include <utility>

#include "gateway/routing/block_index.h"

namespace tandem::gateway {
namespace {

// The fastest tier in `bits` (bit t: tier t).
int FastestTier(uint8_t bits) {
  int t = 0;
  while (t < kNumTiers - 1 && (bits & (1u << t)) == 0) ++t;
  return t;
}

}  // namespace

void BlockIndex::OverlapAll(std::span<const int> workers, std::span<const engine::BlockHash> chain,
                            Overlaps& r, absl::Time now, bool with_predictions) const {
  const size_t n = workers.size();
  // Every entry is written below: a router's answers keep their storage.
  r.tiered.resize(n);
  r.reported.resize(n);
  // The slots' numbers, kept by the thread until the index numbers or
  // retires a worker or the thread asks for other slots: a router asks for
  // the same thousand slots route after route, and reading their numbers
  // and gathering them as bits cost as much as a fifth of a walk.
  struct Numbers {
    uint64_t numbering = 0;  // the index's numbering_ they are of; 0: none
    std::vector<int> workers;
    std::vector<uint16_t> ids;      // by worker asked; 0: none
    std::vector<uint64_t> running;  // ids as bits, up to the last word with one
  };
  thread_local Numbers numbers;
  if (numbers.numbering != numbering_.load(std::memory_order_acquire) ||
      !std::ranges::equal(workers, numbers.workers)) {
    absl::ReaderMutexLock lock(&workers_mu_);
    numbers.numbering = numbering_.load(std::memory_order_relaxed);
    numbers.workers.assign(workers.begin(), workers.end());
    numbers.ids.assign(n, 0);
    numbers.running.clear();
    // One page lookup per run of slots on the same page; the numbers are
    // the page's, in slot order.
    const SlotPage* page = nullptr;
    int page_key = 0;
    for (size_t k = 0; k < n; ++k) {
      const int key = workers[k] >> kSlotPageBits;
      if (k == 0 || key != page_key) {
        page = PageLocked(workers[k]);
        page_key = key;
      }
      if (page == nullptr) continue;
      const uint16_t id =
          page->ids[workers[k] & (kSlotsPerPage - 1)].load(std::memory_order_relaxed);
      numbers.ids[k] = id;
      if (id == 0) continue;
      if (numbers.running.size() <= id / 64) numbers.running.resize(id / 64 + 1, 0);
      numbers.running[id / 64] |= uint64_t{1} << (id % 64);
    }
  }
  const std::vector<uint16_t>& ids = numbers.ids;
  // The walk keeps, as bitmaps over compact ids, the workers whose run is
  // still going: `running` holds or is predicted to hold blocks 0..j-1,
  // `reporting` reported them. Block j ends the run of each one that is not
  // among its holders; a block costs a few words per 64 workers, or its
  // holder list when it has few, never a lookup per worker. The two are the
  // same until a prediction counts (`split`), and only `running` is kept
  // till then: most walks meet no prediction.
  constexpr size_t kWords = (HolderTable::kMaxId + 1) / 64;
  uint64_t running[kWords];
  uint64_t reporting[kWords];       // written when the walk splits them
  uint64_t next_running[kWords];    // 0 between blocks (see the walk)
  uint64_t next_reporting[kWords];  // likewise, once split
  const size_t words = numbers.running.size();
  std::copy(numbers.running.begin(), numbers.running.end(), running);
  std::fill(next_running, next_running + words, 0);
  // Per id: where its run ended (written as it ends; one still running at
  // the end ran the whole chain), and its blocks credited to a slower
  // tier (0 between walks: a walk zeroes what it credited).
  thread_local std::vector<int32_t> run_end(HolderTable::kMaxId + 1);
  thread_local std::vector<int32_t> reported_end(HolderTable::kMaxId + 1);
  thread_local std::vector<std::array<int32_t, kNumTiers>> slower(HolderTable::kMaxId + 1);
  bool credited = false;
  auto set = [](uint64_t* bits, uint16_t id) { bits[id / 64] |= uint64_t{1} << (id % 64); };
  auto has = [](const uint64_t* bits, uint16_t id) { return (bits[id / 64] >> (id % 64)) & 1; };
  // A block's holders are three cache misses away, one after the other:
  // where its shard's slots are, its slot, then a spilled set. So the
  // shard's table header is loaded kShardsAhead blocks ahead, the slot (and
  // the shard's version) kSlotsAhead, and a spilled set (whose address is in
  // the slot) kHoldersAhead, once the index is past
  // options_.prefetch_spills_from entries.
  constexpr size_t kShardsAhead = 16, kSlotsAhead = 8, kHoldersAhead = 4;
  // Pauses a walk waits for a shard's writers' lock to read its
  // predictions (see below).
  constexpr int kPredictionTries = 64;
  const bool prefetch_spills = prefetch_spills_.load(std::memory_order_relaxed);
  const int64_t now_ns = absl::ToUnixNanos(now);
  // The chain's keys mixed once, and their shards found once, for the
  // stages ahead and the walk (four uses a block: 3-6% of a walk's cycles
  // at 1000 workers, docs/benchmarks.md).
  thread_local std::vector<HolderTable::Mixed> mixed;
  thread_local std::vector<const Shard*> shard_of;
  mixed.clear();
  shard_of.clear();
  for (const engine::BlockHash& h : chain) {
    mixed.push_back(HolderTable::MixKey(KeyOf(h)));
    shard_of.push_back(&ShardOf(mixed.back()));
  }
  auto prefetch_shard = [&](size_t j) {
    if (j < chain.size()) shard_of[j]->TableForReaders().PrefetchHeader();
  };
  auto prefetch_slot = [&](size_t j) {
    if (j < chain.size()) Prefetch(*shard_of[j], mixed[j]);
  };
  static_assert(kProbed > kHoldersAhead);
  std::array<Probed, kProbed> probed;
  auto prefetch_holders = [&](size_t j) {
    if (prefetch_spills && j < chain.size()) probed[j % kProbed].Load(*shard_of[j], mixed[j]);
  };
  // Holders in a slower tier than the pool, met while reading a block:
  // credited once the read is known whole.
  thread_local std::vector<std::pair<uint16_t, uint8_t>> credits;
  // Words lo..hi-1 hold every worker still running (the rest are 0): past
  // a shared system prompt, few workers are left, so most blocks cost a
  // word or two rather than one per 64 workers asked.
  size_t lo = 0, hi = words;
  bool split = false;
  const Reclaimer::ReadSection reading(reclaimer_);
  for (size_t j = 0; words > 0 && j < kShardsAhead; ++j) prefetch_shard(j);
  for (size_t j = 0; words > 0 && j < kSlotsAhead; ++j) prefetch_slot(j);
  for (size_t j = 0; words > 0 && j < kHoldersAhead; ++j) prefetch_holders(j);
  for (size_t j = 0; words > 0 && j < chain.size(); ++j) {
    prefetch_shard(j + kShardsAhead);
    prefetch_slot(j + kSlotsAhead);
    prefetch_holders(j + kHoldersAhead);
    const HolderTable::Mixed key = mixed[j];
    const Shard& shard = *shard_of[j];
    // Without the shard's lock: from scratch on every read, since Read
    // reads again what a writer changed meanwhile.
    // next_running (and next_reporting) are 0 over lo..hi-1 between blocks:
    // only a read again clears what the last one set.
    bool again = false;
    shard.lock.Read([&] {
      if (again) {
        std::fill(next_running + lo, next_running + hi, 0);
        if (split) std::fill(next_reporting + lo, next_reporting + hi, 0);
      }
      again = true;
      credits.clear();
      auto on_list = [&](std::span<const HolderTable::Holder> list) {
        for (const HolderTable::Holder& held : list) {
          const HolderTable::Holder h = HolderTable::Load(held);
          const uint16_t id = HolderTable::IdOf(h);
          if (id / 64 >= hi || !has(running, id)) continue;
          set(next_running, id);
          if (split && has(reporting, id)) set(next_reporting, id);
          const uint8_t tiers = HolderTable::TiersOf(h);
          if ((tiers & 1) == 0) {  // not in the pool (rare): credited by its tier
            credits.emplace_back(id, static_cast<uint8_t>(FastestTier(tiers)));
          }
        }
      };
      auto on_bitmap = [&](HolderTable::Bitmap b) {
        const size_t common = std::min(hi, b.words);
        if (b.planes == 1) {  // the pool's plane alone, as most: nothing to credit
          for (size_t i = lo; i < common; ++i) {
            const uint64_t any = HolderTable::Load(b.bits[i]);
            next_running[i] = running[i] & any;
            if (split) next_reporting[i] = reporting[i] & any;
          }
          return;
        }
        for (size_t i = lo; i < common; ++i) {
          const uint64_t any = HolderTable::AnyTier(b, i);
          next_running[i] = running[i] & any;
          if (split) next_reporting[i] = reporting[i] & any;
          // Those not in the pool (rare) are credited by their tier.
          for (uint64_t off = next_running[i] & ~HolderTable::TierWord(b, i, 0); off != 0;
               off &= off - 1) {
            const uint16_t id = static_cast<uint16_t>(64 * i + std::countr_zero(off));
            credits.emplace_back(
                id, static_cast<uint8_t>(FastestTier(HolderTable::BitmapTiers(b, id))));
          }
        }
      };
      // One call of the visit, which the compiler inlines with the two
      // above.
      const Probed& ahead = probed[j % kProbed];
      const HolderTable& table = shard.TableForReaders();
      table.VisitConcurrentAt(ahead.Stands(shard) ? ahead.found : table.FindForReaders(key),
                              on_list, on_bitmap);
    });
    for (const auto& [id, tier] : credits) ++slower[id][tier];
    credited |= !credits.empty();
    // The digests are on the line the read just read the version from. A
    // writer's hold is a few events' changes, but a sweep of retired
    // workers holds the shard's lock for a pass over it (milliseconds at
    // tens of millions of entries): then the block counts as predicted
    // nowhere rather than hold up the route.
    if (with_predictions && shard.MayBePredicted(key) && shard.lock.TryLock(kPredictionTries)) {
      shard.predicted.ForEachOf(key.v, [&](uint16_t id, int64_t until_ns) {
        // Being computed into the worker's pool.
        if (until_ns <= now_ns || id / 64 >= hi || !has(running, id) || has(next_running, id)) {
          return;
        }
        if (!split) {  // from here on, what was reported differs
          split = true;
          std::copy(running, running + words, reporting);
          std::copy(next_running + lo, next_running + hi, next_reporting + lo);
          for (uint16_t other : ids) {
            if (other != 0) reported_end[other] = run_end[other];
          }
        }
        set(next_running, id);
      });
      shard.lock.Unlock();
    }
    for (size_t i = lo; i < hi; ++i) {
      for (uint64_t gone = running[i] & ~next_running[i]; gone != 0; gone &= gone - 1) {
        run_end[64 * i + std::countr_zero(gone)] = static_cast<int32_t>(j);
      }
      running[i] = next_running[i];
      next_running[i] = 0;
    }
    if (split) {
      for (size_t i = lo; i < hi; ++i) {
        for (uint64_t gone = reporting[i] & ~next_reporting[i]; gone != 0; gone &= gone - 1) {
          reported_end[64 * i + std::countr_zero(gone)] = static_cast<int32_t>(j);
        }
        reporting[i] = next_reporting[i];
        next_reporting[i] = 0;
      }
    }
    while (lo < hi && running[lo] == 0) ++lo;
    while (hi > lo && running[hi - 1] == 0) --hi;
    if (lo == hi) break;
  }
  // The answers: a thousand workers' a route, so the common case (no
  // slower tier credited, no prediction counted) in a loop of its own.
  const auto whole = static_cast<int32_t>(chain.size());
  TieredOverlap* const tiered = r.tiered.data();
  int32_t* const reported = r.reported.data();
  const int32_t* const ends = run_end.data();
  for (size_t k = 0; k < n; ++k) {
    const uint16_t id = ids[k];
    const int32_t blocks = id == 0 ? 0 : has(running, id) ? whole : ends[id];
    tiered[k] = {.blocks = blocks, .by_tier = {blocks}};
    reported[k] = blocks;
  }
  for (size_t k = 0; (credited || split) && k < n; ++k) {
    const uint16_t id = ids[k];
    if (id == 0) continue;
    if (credited) {
      for (size_t t = 1; t < kNumTiers; ++t) {
        tiered[k].by_tier[t] = slower[id][t];
        tiered[k].by_tier[0] -= slower[id][t];
      }
    }
    if (split) reported[k] = has(reporting, id) ? whole : reported_end[id];
  }
  if (credited) {  // after the answers: a worker may be asked for twice
    for (uint16_t id : ids) slower[id] = {};
  }
}

std::vector<int32_t> BlockIndex::Overlap(std::span<const int> workers,
                                         std::span<const engine::BlockHash> chain,
                                         absl::Time now, bool with_predictions) const {
  const std::vector<TieredOverlap> tiered = OverlapByTier(workers, chain, now, with_predictions);
  std::vector<int32_t> overlap(tiered.size());
  for (size_t k = 0; k < tiered.size(); ++k) overlap[k] = tiered[k].blocks;
  return overlap;
}

std::vector<TieredOverlap> BlockIndex::OverlapByTier(std::span<const int> workers,
                                                     std::span<const engine::BlockHash> chain,
                                                     absl::Time now,
                                                     bool with_predictions) const {
  return OverlapAll(workers, chain, now, with_predictions).tiered;
}

}  // namespace tandem::gateway
