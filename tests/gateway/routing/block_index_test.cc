// The gateway's block index: snapshots replace, deltas must follow in
// order within an epoch (else a resync is asked for), a dropped worker's
// entries go at once, overlap counts leading blocks only, the entry bound
// holds by evicting the block least recently routed to, one walk for all
// workers answers what a walk per worker would, and routes read while a
// writer applies.
#include "gateway/routing/block_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace tandem::gateway {
namespace {

engine::BlockHash H(uint64_t v) { return engine::BlockHash{.low = v, .high = v * 31}; }

tandem::v1::BlockEventBatch Batch(uint64_t epoch, uint64_t seq, bool snapshot,
                                  const std::vector<uint64_t>& stored,
                                  const std::vector<uint64_t>& removed = {}) {
  tandem::v1::BlockEventBatch b;
  b.set_epoch(epoch);
  b.set_sequence(seq);
  b.set_snapshot(snapshot);
  b.set_model_fingerprint(77);
  b.set_block_size(16);
  for (uint64_t v : stored) {
    auto* p = b.add_stored();
    p->set_low(H(v).low);
    p->set_high(H(v).high);
  }
  for (uint64_t v : removed) {
    auto* p = b.add_removed();
    p->set_low(H(v).low);
    p->set_high(H(v).high);
  }
  return b;
}

std::vector<engine::BlockHash> Chain(const std::vector<uint64_t>& v) {
  std::vector<engine::BlockHash> out;
  for (uint64_t x : v) out.push_back(H(x));
  return out;
}

TEST(BlockIndexTest, SnapshotThenDeltasInOrder) {
  BlockIndex index;
  EXPECT_FALSE(index.params().has_value());
  ASSERT_EQ(index.Apply(0, Batch(9, 4, true, {1, 2})), BlockIndex::Applied::kApplied);
  ASSERT_TRUE(index.params().has_value());
  EXPECT_EQ(index.params()->block_size, 16);
  EXPECT_EQ(index.params()->model_fingerprint, 77u);
  ASSERT_EQ(index.Apply(0, Batch(9, 5, false, {3}, {1})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.entries_of(0), 2);
  const std::vector<int> workers = {0};
  EXPECT_EQ(index.Overlap(workers, Chain({1, 2, 3})), std::vector<int32_t>{0});
  EXPECT_EQ(index.Overlap(workers, Chain({2, 3, 4})), std::vector<int32_t>{2});
}

TEST(BlockIndexTest, AGapOrANewEpochAsksForAResyncAndChangesNothing) {
  BlockIndex index;
  ASSERT_EQ(index.Apply(0, Batch(9, 1, true, {1})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.Apply(0, Batch(9, 3, false, {2})), BlockIndex::Applied::kNeedsResync);
  EXPECT_EQ(index.Apply(0, Batch(10, 2, false, {2})), BlockIndex::Applied::kNeedsResync);
  EXPECT_EQ(index.entries_of(0), 1);
  // A delta before any snapshot cannot be placed either.
  EXPECT_EQ(index.Apply(1, Batch(9, 1, false, {2})), BlockIndex::Applied::kNeedsResync);
  // The fresh snapshot (a restarted worker's new epoch) replaces all.
  ASSERT_EQ(index.Apply(0, Batch(10, 0, true, {5, 6})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.entries_of(0), 2);
  const std::vector<int> workers = {0};
  EXPECT_EQ(index.Overlap(workers, Chain({1})), std::vector<int32_t>{0});
  EXPECT_EQ(index.Overlap(workers, Chain({5, 6})), std::vector<int32_t>{2});
}

TEST(BlockIndexTest, OverlapIsPerWorkerAndADroppedWorkerLosesEverything) {
  BlockIndex index({.retired_per_sweep = 1});  // a dropped worker's entries go at once
  index.Apply(0, Batch(1, 1, true, {1, 2, 3}));
  index.Apply(1, Batch(2, 1, true, {1, 2, 7}));
  const std::vector<int> both = {0, 1};
  EXPECT_EQ(index.Overlap(both, Chain({1, 2, 3, 4})), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(index.hashes(), 4);
  EXPECT_EQ(index.entries(), 6);
  index.Drop(0);
  EXPECT_EQ(index.Overlap(both, Chain({1, 2, 3, 4})), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(index.entries(), 3);
  EXPECT_EQ(index.hashes(), 3);
  EXPECT_EQ(index.entries_of(0), 0);
}

TEST(BlockIndexTest, AWalkAsksForTheWorkersNumbersAsTheyAreNow) {
  // A routing thread keeps the numbers of the slots it asked for last;
  // a worker renumbered since must be asked for by its new number. The
  // retired numbers wait for a sweep, their entries with them.
  BlockIndex index({.retired_per_sweep = 16});
  ASSERT_EQ(index.Apply(0, Batch(1, 1, true, {1, 2})), BlockIndex::Applied::kApplied);
  ASSERT_EQ(index.Apply(1, Batch(1, 1, true, {1})), BlockIndex::Applied::kApplied);
  const std::vector<int> both = {0, 1};
  EXPECT_EQ(index.Overlap(both, Chain({1, 2})), (std::vector<int32_t>{2, 1}));
  // Worker 1 restarts: a new number, with its new cache.
  ASSERT_EQ(index.Apply(1, Batch(2, 1, true, {1, 2})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.Overlap(both, Chain({1, 2})), (std::vector<int32_t>{2, 2}));
  // Worker 0 leaves, and worker 2 comes.
  index.Drop(0);
  EXPECT_EQ(index.Overlap(both, Chain({1, 2})), (std::vector<int32_t>{0, 2}));
  ASSERT_EQ(index.Apply(2, Batch(1, 1, true, {1})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.Overlap(std::vector<int>{0, 1, 2}, Chain({1, 2})),
            (std::vector<int32_t>{0, 2, 1}));
  // Another index on the same thread numbers its workers its own way.
  BlockIndex other;
  ASSERT_EQ(other.Apply(1, Batch(1, 1, true, {3})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(other.Overlap(both, Chain({3})), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(other.Overlap(both, Chain({1, 2})), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(index.Overlap(both, Chain({3})), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(index.Overlap(both, Chain({1, 2})), (std::vector<int32_t>{0, 2}));
}

TEST(BlockIndexTest, EntriesStayWithinTheBound) {
  BlockIndex index({.max_entries = 3});
  index.Apply(0, Batch(1, 1, true, {1, 2}));
  index.Apply(1, Batch(2, 1, true, {1, 2}));  // the fourth entry evicts a block
  EXPECT_LE(index.entries(), 3);
  EXPECT_EQ(index.entries() + index.dropped_entries(), 4);
  EXPECT_EQ(index.entries(), index.entries_of(0) + index.entries_of(1));
  index.Apply(1, Batch(2, 2, false, {9, 10, 11}));
  EXPECT_LE(index.entries(), 3);
  EXPECT_EQ(index.entries(), index.entries_of(0) + index.entries_of(1));
  EXPECT_EQ(index.entries() + index.dropped_entries(), 7);
}

TEST(BlockIndexTest, TableGrowthsAreEveryShardsSummed) {
  BlockIndex index({.shards = 4});
  EXPECT_EQ(index.table_growths().count, 0);
  std::vector<uint64_t> blocks(2000);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = i + 1;
  index.Apply(0, Batch(1, 1, true, blocks));
  // Each shard's table starts at 16 slots, so each of the four grew, and
  // each growth moved the keys stored before it, 4/5 of what the next one
  // moves (a table grows by a quarter): under 5 times the keys in all.
  const HolderTable::Growths g = index.table_growths();
  EXPECT_GE(g.count, 4);
  EXPECT_GT(g.keys_moved, g.count);
  EXPECT_LT(g.keys_moved, 5 * static_cast<int64_t>(blocks.size()));
  EXPECT_GT(g.nanos, 0);
}

TEST(BlockIndexTest, PredictionsCountUntilTheirDeadlineOrTheWorkersOwnReport) {
  BlockIndex index({.retired_per_sweep = 1});
  index.Apply(0, Batch(1, 1, true, {1}));
  const absl::Time t0 = absl::Now();
  index.Predict(0, Chain({1, 2, 3}), t0 + absl::Seconds(10));
  const std::vector<int> workers = {0, 1};
  EXPECT_EQ(index.Overlap(workers, Chain({1, 2, 3, 4}), t0), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(index.predicted_entries(), 2);  // 1 is held already
  EXPECT_EQ(index.entries(), 1);            // predictions are not entries
  // Past the deadline only what the worker reported counts.
  EXPECT_EQ(index.Overlap(workers, Chain({1, 2, 3}), t0 + absl::Seconds(11)),
            (std::vector<int32_t>{1, 0}));
  // The worker's report of 2 ends its prediction; 3 stays predicted.
  index.Apply(0, Batch(1, 2, false, {2}));
  EXPECT_EQ(index.predicted_entries(), 1);
  EXPECT_EQ(index.Overlap(workers, Chain({1, 2, 3}), t0), (std::vector<int32_t>{3, 0}));
  // A worker whose stream ends loses its predictions with its entries.
  index.Drop(0);
  EXPECT_EQ(index.predicted_entries(), 0);
  EXPECT_EQ(index.Overlap(workers, Chain({1, 2, 3}), t0), (std::vector<int32_t>{0, 0}));
  // Predictions are bounded like entries.
  BlockIndex small({.max_entries = 2});
  small.Predict(1, Chain({5, 6, 7}), t0 + absl::Seconds(10));
  EXPECT_EQ(small.predicted_entries(), 2);
  EXPECT_EQ(small.dropped_entries(), 1);
}

std::vector<engine::BlockHash> Range(uint64_t from, uint64_t n) {
  std::vector<uint64_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = from + i;
  return Chain(v);
}

TEST(BlockIndexTest, ExpiredPredictionsAreSweptOutAsNewOnesAreMade) {
  BlockIndex index({.shards = 1});
  const absl::Time past = absl::Now() - absl::Seconds(1);
  const absl::Time later = absl::Now() + absl::Hours(1);
  index.Predict(0, Range(1000, 200), later);
  index.Predict(0, Range(2000, 200), past);  // expired as made
  // Held (a count of records, expired ones included) until a sweep...
  EXPECT_EQ(index.predicted_entries(), 400);
  EXPECT_EQ(index.Overlap(std::vector<int>{0}, Range(2000, 200)), std::vector<int32_t>{0});
  // ...which the next prediction in the shard makes, past twice what the
  // last sweep kept: the expired go, the others stay.
  index.Predict(0, Range(3000, 1), later);
  EXPECT_EQ(index.predicted_entries(), 201);
  EXPECT_EQ(index.Overlap(std::vector<int>{0}, Range(1000, 200)), std::vector<int32_t>{200});
  EXPECT_EQ(index.dropped_entries(), 0);
  // A renewal keeps the later deadline of the two.
  const absl::Time t0 = absl::Now();
  index.Predict(1, Chain({7, 8}), t0 + absl::Seconds(20));
  index.Predict(1, Chain({7, 8}), t0 + absl::Seconds(5));
  EXPECT_EQ(index.Overlap(std::vector<int>{1}, Chain({7, 8}), t0 + absl::Seconds(10)),
            std::vector<int32_t>{2});
  index.Predict(1, Chain({7, 8}), t0 + absl::Seconds(30));
  EXPECT_EQ(index.Overlap(std::vector<int>{1}, Chain({7, 8}), t0 + absl::Seconds(25)),
            std::vector<int32_t>{2});
  EXPECT_EQ(index.Overlap(std::vector<int>{1}, Chain({7, 8}), t0 + absl::Seconds(31)),
            std::vector<int32_t>{0});
}

TEST(BlockIndexTest, AtTheBoundExpiredPredictionsMakeRoom) {
  BlockIndex index({.max_predictions = 8, .shards = 4});
  index.Predict(0, Range(1, 8), absl::Now() - absl::Seconds(1));
  EXPECT_EQ(index.predicted_entries(), 8);
  // Full: the expired go first (in every shard), then the new are kept.
  const absl::Time later = absl::Now() + absl::Hours(1);
  index.Predict(0, Range(100, 6), later);
  EXPECT_EQ(index.predicted_entries(), 6);
  EXPECT_EQ(index.dropped_entries(), 0);
  EXPECT_EQ(index.Overlap(std::vector<int>{0}, Range(100, 6)), std::vector<int32_t>{6});
  // Live predictions are not swept: past the bound, the chain's leading
  // blocks are kept.
  index.Predict(0, Range(200, 4), later);
  EXPECT_EQ(index.predicted_entries(), 8);
  EXPECT_EQ(index.dropped_entries(), 2);
  EXPECT_EQ(index.Overlap(std::vector<int>{0}, Range(200, 4)), std::vector<int32_t>{2});
}

}  // namespace
}  // namespace tandem::gateway

namespace tandem::gateway {
namespace {

void AddTier(tandem::v1::BlockEventBatch& b, tandem::v1::KvTier tier,
             const std::vector<uint64_t>& stored, const std::vector<uint64_t>& removed = {}) {
  tandem::v1::TierBlockEvents* t = b.add_tiers();
  t->set_tier(tier);
  for (uint64_t v : stored) {
    t->add_stored()->set_low(H(v).low);
    t->mutable_stored(t->stored_size() - 1)->set_high(H(v).high);
  }
  for (uint64_t v : removed) {
    t->add_removed()->set_low(H(v).low);
    t->mutable_removed(t->removed_size() - 1)->set_high(H(v).high);
  }
}

TEST(BlockIndexTest, TiersAreKeptPerBlockAndTheFastestIsCredited) {
  BlockIndex index;
  // Blocks 1, 2 in the pool; 2 (too), 3 in host RAM; 3 (too), 4 on disk.
  tandem::v1::BlockEventBatch snap = Batch(9, 1, true, {1, 2});
  AddTier(snap, tandem::v1::KV_TIER_HOST, {2, 3});
  AddTier(snap, tandem::v1::KV_TIER_DISK, {3, 4});
  ASSERT_EQ(index.Apply(0, snap), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.entries_of(0), 4);
  const std::vector<int> workers = {0};
  std::vector<TieredOverlap> o = index.OverlapByTier(workers, Chain({1, 2, 3, 4, 5}));
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].blocks, 4);
  EXPECT_EQ(o[0].by_tier, (std::array<int32_t, kNumTiers>{2, 1, 1}));

  // The pool lets 2 go (host still has it) and host lets 3 go (disk has it).
  tandem::v1::BlockEventBatch delta = Batch(9, 2, false, {}, {2});
  AddTier(delta, tandem::v1::KV_TIER_HOST, {}, {3});
  ASSERT_EQ(index.Apply(0, delta), BlockIndex::Applied::kApplied);
  o = index.OverlapByTier(workers, Chain({1, 2, 3, 4}));
  EXPECT_EQ(o[0].blocks, 4);
  EXPECT_EQ(o[0].by_tier, (std::array<int32_t, kNumTiers>{1, 1, 2}));
  // Gone from its last tier: gone.
  tandem::v1::BlockEventBatch gone = Batch(9, 3, false, {});
  AddTier(gone, tandem::v1::KV_TIER_DISK, {}, {3});
  ASSERT_EQ(index.Apply(0, gone), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.Overlap(workers, Chain({1, 2, 3, 4})), std::vector<int32_t>{2});
  EXPECT_EQ(index.entries_of(0), 3);
}

// A batch is applied shard by shard; a key's events (stored, removed, each
// tier's) must still take effect in the batch's order, whatever the shards.
TEST(BlockIndexTest, ABatchAppliedShardByShardKeepsEachKeysEventsInOrder) {
  for (int shards : {1, 4, 256}) {
    SCOPED_TRACE(shards);
    BlockIndex index({.shards = shards});
    std::mt19937_64 rng(shards);
    constexpr uint64_t kKeys = 200;
    std::map<uint64_t, uint8_t> tiers;  // key -> tier bits, as the batches say
    ASSERT_EQ(index.Apply(0, Batch(1, 1, true, {})), BlockIndex::Applied::kApplied);
    for (uint64_t seq = 2; seq < 60; ++seq) {
      auto draw = [&](int n) {
        std::vector<uint64_t> keys;
        for (int i = 0; i < n; ++i) keys.push_back(1 + rng() % kKeys);
        return keys;
      };
      // Stored then removed in one batch, and the same key in several lists.
      const std::vector<uint64_t> stored = draw(40), removed = draw(40);
      const std::vector<uint64_t> host_stored = draw(20), host_removed = draw(20);
      tandem::v1::BlockEventBatch b = Batch(1, seq, false, stored, removed);
      AddTier(b, tandem::v1::KV_TIER_HOST, host_stored, host_removed);
      for (uint64_t k : stored) tiers[k] |= 1;
      for (uint64_t k : removed) tiers[k] &= ~1;
      for (uint64_t k : host_stored) tiers[k] |= 2;
      for (uint64_t k : host_removed) tiers[k] &= ~2;
      ASSERT_EQ(index.Apply(0, b), BlockIndex::Applied::kApplied);
      int64_t held = 0;
      for (uint64_t k = 1; k <= kKeys; ++k) {
        const bool want = tiers[k] != 0;
        held += want;
        ASSERT_EQ(index.Holds(0, H(k)), want) << "key " << k << " after batch " << seq;
        if (!want) continue;
        const std::vector<TieredOverlap> o = index.OverlapByTier(std::vector<int>{0}, Chain({k}));
        EXPECT_EQ(o[0].by_tier[0] + o[0].by_tier[1], 1);
        EXPECT_EQ(o[0].by_tier[0], tiers[k] & 1) << "key " << k;  // the pool's, when held there
      }
      EXPECT_EQ(index.entries_of(0), held);
      EXPECT_EQ(index.entries(), held);
      EXPECT_EQ(index.hashes(), held);
    }
  }
}

}  // namespace
}  // namespace tandem::gateway

namespace tandem::gateway {
namespace {

// One shard, so that the clock's order is the test's.
TEST(BlockIndexTest, EvictionTakesTheBlockNotRoutedToSince) {
  BlockIndex index({.max_entries = 4, .shards = 1});
  index.Apply(0, Batch(1, 1, true, {1, 2, 3, 4}));
  // A fifth entry: every block was just stored (referenced), so the hand
  // clears them all and takes the first; the rest are now unreferenced.
  index.Apply(0, Batch(1, 2, false, {5}));
  EXPECT_EQ(index.entries(), 4);
  EXPECT_EQ(index.dropped_entries(), 1);
  std::vector<uint64_t> kept;
  for (uint64_t b = 1; b <= 5; ++b) {
    if (index.Holds(0, H(b))) kept.push_back(b);  // not a use, unlike a walk
  }
  ASSERT_EQ(kept.size(), 4u);
  // Route to all but one of them (a walk marks what it reads)...
  const uint64_t cold = kept.back();
  kept.pop_back();
  const std::vector<int> w0 = {0};
  for (uint64_t b : kept) index.Overlap(w0, Chain({b}));
  // ...and the next block stored evicts that one.
  index.Apply(0, Batch(1, 3, false, {6}));
  EXPECT_EQ(index.entries(), 4);
  EXPECT_EQ(index.dropped_entries(), 2);
  EXPECT_EQ(index.Overlap(w0, Chain({cold}))[0], 0);
  for (uint64_t b : kept) EXPECT_EQ(index.Overlap(w0, Chain({b}))[0], 1) << b;
  EXPECT_EQ(index.Overlap(w0, Chain({6}))[0], 1);
  EXPECT_EQ(index.entries_of(0), 4);
}

TEST(BlockIndexTest, RetiredWorkersAreNotRoutedToAndAreSweptOutTogether) {
  BlockIndex index({.retired_per_sweep = 3});
  for (int w = 0; w < 4; ++w) {
    // Block 1 is everyone's; 10 + w the worker's own.
    ASSERT_EQ(index.Apply(w, Batch(1, 1, true, {1, 10 + static_cast<uint64_t>(w)})),
              BlockIndex::Applied::kApplied);
  }
  index.Predict(0, Chain({1, 10, 50}), absl::Now() + absl::Hours(1));
  const std::vector<int> all = {0, 1, 2, 3};
  EXPECT_EQ(index.entries(), 8);
  EXPECT_EQ(index.hashes(), 5);
  EXPECT_EQ(index.predicted_entries(), 1);  // 50; 1 and 10 it holds
  // A worker that leaves, and one that restarts (a new epoch's snapshot):
  // not routed to from now on, their entries no longer counted...
  index.Drop(0);
  ASSERT_EQ(index.Apply(1, Batch(2, 1, true, {20})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.Overlap(all, Chain({1, 10, 50})), (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(index.Overlap(all, Chain({11})), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(index.Overlap(all, Chain({20})), (std::vector<int32_t>{0, 1, 0, 0}));
  EXPECT_EQ(index.entries(), 5);
  EXPECT_EQ(index.entries_of(0), 0);
  EXPECT_EQ(index.entries_of(1), 1);
  // ...but held until a sweep takes the retired out together: blocks held
  // only by them count as hashes, and the prediction as held.
  EXPECT_EQ(index.hashes(), 6);
  EXPECT_EQ(index.predicted_entries(), 1);
  index.Drop(2);  // the third retired: the sweep
  EXPECT_EQ(index.entries(), 3);
  EXPECT_EQ(index.hashes(), 3);  // 1, 13 and 20
  EXPECT_EQ(index.predicted_entries(), 0);
  EXPECT_EQ(index.Overlap(all, Chain({1, 13})), (std::vector<int32_t>{0, 0, 0, 2}));
  // Their numbers go to newcomers without their blocks.
  for (int w = 10; w < 13; ++w) {
    ASSERT_EQ(index.Apply(w, Batch(1, 1, true, {30})), BlockIndex::Applied::kApplied);
  }
  const std::vector<int> newcomers = {10, 11, 12};
  EXPECT_EQ(index.Overlap(newcomers, Chain({30})), (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ(index.Overlap(newcomers, Chain({1})), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(index.entries(), 6);
  // A worker routed to before its first snapshot: the snapshot replaces its
  // predictions too.
  index.Predict(20, Chain({40, 41}), absl::Now() + absl::Hours(1));
  EXPECT_EQ(index.Overlap(std::vector<int>{20}, Chain({40, 41})), std::vector<int32_t>{2});
  ASSERT_EQ(index.Apply(20, Batch(1, 1, true, {42})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.Overlap(std::vector<int>{20}, Chain({40, 41})), std::vector<int32_t>{0});
  EXPECT_EQ(index.entries_of(20), 1);
}

TEST(BlockIndexTest, WhenEveryNumberIsTakenTheRetiredAreSweptForANewcomer) {
  BlockIndex index({.retired_per_sweep = 1000});
  const int kNumbers = HolderTable::kMaxId;
  for (int w = 0; w < kNumbers; ++w) {
    ASSERT_EQ(index.Apply(w, Batch(1, 1, true, {static_cast<uint64_t>(w)})),
              BlockIndex::Applied::kApplied);
  }
  EXPECT_EQ(index.entries(), kNumbers);
  index.Drop(5);
  EXPECT_EQ(index.hashes(), kNumbers);  // 5's block waits for a sweep
  // A newcomer finds no number free: the retired one is swept and reused.
  ASSERT_EQ(index.Apply(kNumbers, Batch(1, 1, true, {99999})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.entries_of(kNumbers), 1);
  EXPECT_EQ(index.hashes(), kNumbers);
  const std::vector<int> two = {5, kNumbers};
  EXPECT_EQ(index.Overlap(two, Chain({5})), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(index.Overlap(two, Chain({99999})), (std::vector<int32_t>{0, 1}));
  // With no number to spare, one more is not recorded.
  ASSERT_EQ(index.Apply(kNumbers + 1, Batch(1, 1, true, {77})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.entries_of(kNumbers + 1), 0);
  EXPECT_EQ(index.dropped_entries(), 1);
}

TEST(BlockIndexTest, ABlockHeldByManyIsOneSlotAndLosesOnlyTheWorkerRemoved) {
  BlockIndex index({.retired_per_sweep = 1});
  // 200 workers share blocks 1..50 (their holder sets spill to a list, then
  // to bitmaps); each also holds a block of its own.
  for (int w = 0; w < 200; ++w) {
    std::vector<uint64_t> blocks;
    for (uint64_t b = 1; b <= 50; ++b) blocks.push_back(b);
    blocks.push_back(1000 + w);
    ASSERT_EQ(index.Apply(w, Batch(w + 1, 1, true, blocks)), BlockIndex::Applied::kApplied);
  }
  EXPECT_EQ(index.hashes(), 250);
  EXPECT_EQ(index.entries(), 200 * 51);
  // Interned: far less than a map node per entry.
  EXPECT_LT(index.table_bytes(), 8 * index.entries());
  std::vector<int> all(200);
  for (int w = 0; w < 200; ++w) all[w] = w;
  std::vector<int32_t> o = index.Overlap(all, Chain({1, 2, 3, 1007}));
  for (int w = 0; w < 200; ++w) EXPECT_EQ(o[w], w == 7 ? 4 : 3) << w;
  // A worker that leaves: gone from every set, the others untouched.
  index.Drop(7);
  EXPECT_EQ(index.entries(), 199 * 51);
  EXPECT_EQ(index.hashes(), 249);
  o = index.Overlap(all, Chain({1, 2, 3, 1007}));
  for (int w = 0; w < 200; ++w) EXPECT_EQ(o[w], w == 7 ? 0 : 3) << w;
  // A restart (a new epoch's snapshot) replaces the worker's blocks.
  ASSERT_EQ(index.Apply(9, Batch(77, 0, true, {1, 2})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.entries_of(9), 2);
  EXPECT_EQ(index.Overlap(all, Chain({1, 2, 3}))[9], 2);
  // The number a dropped worker had goes to a newcomer without its blocks.
  ASSERT_EQ(index.Apply(500, Batch(5, 1, true, {2000})), BlockIndex::Applied::kApplied);
  EXPECT_EQ(index.entries_of(500), 1);
  const std::vector<int> newcomer = {500};
  EXPECT_EQ(index.Overlap(newcomer, Chain({1}))[0], 0);
  EXPECT_EQ(index.Overlap(newcomer, Chain({2000}))[0], 1);
  // Workers leaving one by one shrink the sets back to lists and inline.
  for (int w = 0; w < 200; ++w) index.Drop(w);
  EXPECT_EQ(index.entries(), 1);
  EXPECT_EQ(index.hashes(), 1);
}

// The reference: per worker, a map of block -> tier bits and a map of
// predictions, walked once per worker as the index did before.
struct Reference {
  std::map<int, std::map<uint64_t, uint8_t>> held;
  std::map<int, std::map<uint64_t, absl::Time>> predicted;

  TieredOverlap Walk(int w, const std::vector<uint64_t>& chain, absl::Time now,
                     bool with_predictions) const {
    TieredOverlap o;
    for (uint64_t b : chain) {
      int tier = -1;
      auto h = held.find(w);
      if (h != held.end() && h->second.contains(b)) {
        const uint8_t bits = h->second.at(b);
        tier = 0;
        while (tier < kNumTiers - 1 && (bits & (1u << tier)) == 0) ++tier;
      } else if (with_predictions) {
        auto p = predicted.find(w);
        if (p != predicted.end() && p->second.contains(b) && p->second.at(b) > now) tier = 0;
      }
      if (tier < 0) break;
      ++o.blocks;
      ++o.by_tier[static_cast<size_t>(tier)];
    }
    return o;
  }
};

TEST(BlockIndexTest, OneWalkForAllWorkersAnswersAsAWalkPerWorker) {
  std::mt19937_64 rng(34);
  // Stores in any tier alike (popular blocks' bitmaps have a plane per
  // tier), then in the pool alone (bitmaps of the pool's plane alone).
  for (const auto& [shards, pool_percent] :
       {std::pair{1, 34}, std::pair{256, 34}, std::pair{32, 100}}) {
    SCOPED_TRACE(testing::Message() << shards << " shards, " << pool_percent << "% in the pool");
    // Spilled sets loaded ahead with one shard, not with the others.
    BlockIndex index({.shards = shards, .prefetch_spills_from = shards == 1 ? 0 : INT64_MAX});
    Reference ref;
    constexpr int kWorkers = 150;
    std::map<int, uint64_t> sequence;
    const absl::Time t0 = absl::Now();
    // Blocks 1..40: popular ones (low numbers) are held by many workers.
    auto block = [&] { return 1 + std::min<uint64_t>(rng() % 40, rng() % 40); };
    for (int w = 0; w < kWorkers; ++w) {
      index.Apply(w, Batch(1, 0, true, {}));
      sequence[w] = 0;
    }
    // One answer filled again and again, as a router keeps it: nothing of
    // an earlier walk may show through.
    Overlaps got;
    for (int step = 0; step < 6000; ++step) {
      const int w = static_cast<int>(rng() % kWorkers);
      const int what = static_cast<int>(rng() % 100);
      if (what < 2) {  // the worker leaves and comes back empty
        index.Drop(w);
        ref.held.erase(w);
        ref.predicted.erase(w);
        index.Apply(w, Batch(1, 0, true, {}));
        sequence[w] = 0;
        continue;
      }
      if (what < 6) {  // a prediction
        std::vector<uint64_t> chain;
        for (int i = 0; i < 5; ++i) chain.push_back(block());
        const absl::Time until = t0 + absl::Seconds(static_cast<int>(rng() % 20));
        index.Predict(w, Chain(chain), until);
        for (uint64_t b : chain) {
          if (ref.held[w].contains(b)) continue;
          absl::Time& u = ref.predicted[w][b];
          u = std::max(u, until);
        }
        continue;
      }
      tandem::v1::BlockEventBatch b = Batch(1, ++sequence[w], false, {});
      const uint64_t x = block();
      const int tier = static_cast<int>(rng() % 100) < pool_percent
                           ? 0
                           : 1 + static_cast<int>(rng() % (kNumTiers - 1));
      const bool store = rng() % 3 != 0;
      if (tier == 0) {
        b = Batch(1, sequence[w], false, store ? std::vector<uint64_t>{x} : std::vector<uint64_t>{},
                  store ? std::vector<uint64_t>{} : std::vector<uint64_t>{x});
      } else {
        AddTier(b, static_cast<tandem::v1::KvTier>(tier),
                store ? std::vector<uint64_t>{x} : std::vector<uint64_t>{},
                store ? std::vector<uint64_t>{} : std::vector<uint64_t>{x});
      }
      ASSERT_EQ(index.Apply(w, b), BlockIndex::Applied::kApplied);
      if (store) {
        ref.held[w][x] |= static_cast<uint8_t>(1u << tier);
        ref.predicted[w].erase(x);  // the worker's report ends its prediction
      } else if (ref.held[w].contains(x)) {
        ref.held[w][x] &= static_cast<uint8_t>(~(1u << tier));
        if (ref.held[w][x] == 0) ref.held[w].erase(x);
      }
      if (step % 50 != 0) continue;
      // Ask for every worker (and one twice, and one unknown) at once, in
      // either order, or for the first two thirds (the answer shrinks).
      std::vector<int> asked;
      for (int k = 0; k < kWorkers; ++k) asked.push_back(k);
      asked.push_back(3);
      asked.push_back(9999);
      if (step % 150 == 50) std::ranges::reverse(asked);
      if (step % 150 == 100) asked.resize(2 * asked.size() / 3);
      std::vector<uint64_t> chain;
      const int len = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < len; ++i) chain.push_back(1 + rng() % 12);
      const absl::Time now = t0 + absl::Seconds(static_cast<int>(rng() % 20));
      index.OverlapAll(asked, Chain(chain), got, now);
      ASSERT_EQ(got.tiered.size(), asked.size());
      ASSERT_EQ(got.reported.size(), asked.size());
      const std::vector<int32_t> plain = index.Overlap(asked, Chain(chain), now, false);
      int64_t entries = 0;
      for (const auto& [worker, blocks] : ref.held) entries += static_cast<int64_t>(blocks.size());
      ASSERT_EQ(index.entries(), entries) << "step " << step;
      for (size_t k = 0; k < asked.size(); ++k) {
        const TieredOverlap want = ref.Walk(asked[k], chain, now, true);
        ASSERT_EQ(got.tiered[k].blocks, want.blocks) << "step " << step << " worker " << asked[k];
        ASSERT_EQ(got.tiered[k].by_tier, want.by_tier) << "step " << step << " worker " << asked[k];
        const int32_t reported = ref.Walk(asked[k], chain, now, false).blocks;
        ASSERT_EQ(got.reported[k], reported) << "step " << step << " worker " << asked[k];
        ASSERT_EQ(plain[k], reported) << "step " << step << " worker " << asked[k];
      }
    }
  }
}

// Readers walk a chain that worker 0 holds throughout, in the pool, while a
// writer churns other workers' blocks in every tier (sets spilling and
// shrinking, bitmaps gaining planes, tables growing and shifting, all of it
// while the readers hold no lock): every answer is the whole chain, all of
// it in the pool, whatever the interleaving. Deterministic by design: fixed
// work on each side, no sleeps.
TEST(BlockIndexTest, RoutesReadWhileAWriterAppliesAndSeeWhatDidNotChange) {
  // Every stage of the walk; every other retired worker swept at once.
  BlockIndex index({.shards = 4, .prefetch_spills_from = 0, .retired_per_sweep = 2});
  std::vector<uint64_t> fixed;
  for (uint64_t b = 1; b <= 64; ++b) fixed.push_back(b);
  ASSERT_EQ(index.Apply(0, Batch(1, 0, true, fixed)), BlockIndex::Applied::kApplied);
  const std::vector<engine::BlockHash> chain = Chain(fixed);
  std::thread writer([&] {
    std::mt19937_64 rng(7);
    std::map<int, uint64_t> seq;
    for (int w = 1; w <= 64; ++w) index.Apply(w, Batch(1, 0, true, {}));
    for (int i = 0; i < 20000; ++i) {
      const int w = 1 + static_cast<int>(rng() % 64);
      // Blocks 1..64 too, so the fixed chain's holder sets keep changing;
      // half of them among 256 blocks, so that its keys keep moving in their
      // tables as others come and go.
      const uint64_t b = 1 + rng() % (i % 2 == 0 ? 256 : 5000);
      const bool store = rng() % 2 == 0;
      std::vector<uint64_t> stored, removed;
      (store ? stored : removed).push_back(b);
      tandem::v1::BlockEventBatch batch = Batch(1, ++seq[w], false, {}, {});
      if (rng() % 4 == 0) {  // a lower tier: a plane of its own in a bitmap
        AddTier(batch, rng() % 2 == 0 ? tandem::v1::KV_TIER_HOST : tandem::v1::KV_TIER_DISK, stored,
                removed);
      } else {
        batch = Batch(1, seq[w], false, stored, removed);
      }
      index.Apply(w, batch);
      if (i % 5000 == 4999) {
        index.Drop(w);
        index.Apply(w, Batch(2, 0, true, {}));
        seq[w] = 0;
      }
      if (i % 97 == 0) index.Predict(w, Chain({b, b + 1}), absl::Now() + absl::Seconds(5));
    }
  });
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      std::vector<int> asked(65);
      for (int w = 0; w <= 64; ++w) asked[w] = w;
      for (int i = 0; i < 3000; ++i) {
        const Overlaps o = index.OverlapAll(asked, chain);
        if (o.tiered[0].blocks != 64 || o.reported[0] != 64 || o.tiered[0].by_tier[0] != 64) {
          wrong.fetch_add(1);
        }
        for (int w = 1; w <= 64; ++w) {
          if (o.tiered[w].blocks < 0 || o.tiered[w].blocks > 64) wrong.fetch_add(1);
        }
      }
    });
  }
  writer.join();
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(index.entries_of(0), 64);
  int64_t sum = 0;
  for (int w = 0; w <= 64; ++w) sum += index.entries_of(w);
  EXPECT_EQ(index.entries(), sum);
}

TEST(BlockIndexTest, WorkersRestartingOnTwoThreadsAreSweptWhileRoutesRead) {
  BlockIndex index({.shards = 4, .retired_per_sweep = 3});
  constexpr int kPerThread = 16;
  // Thread t's workers are t * kPerThread ..; each restart stores a fresh
  // set of blocks, some shared by all (holder sets that spill).
  auto blocks_of = [](int w, int epoch) {
    std::vector<uint64_t> b = {1, 2, 3};
    for (int i = 0; i < 20; ++i) b.push_back(1000 * static_cast<uint64_t>(w + 1) + 100 * epoch + i);
    return b;
  };
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      for (int i = 0; i < 400; ++i) {
        const int w = t * kPerThread + static_cast<int>(rng() % kPerThread);
        if (rng() % 4 == 0) {
          index.Drop(w);
        } else {
          index.Apply(w, Batch(1 + i, 0, true, blocks_of(w, i % 10)));
        }
        if (i % 7 == 0) index.Predict(w, Chain({1, 2, 3, 4}), absl::Now() + absl::Hours(1));
      }
      // Each worker's last state: a snapshot of epoch 0's blocks.
      for (int w = t * kPerThread; w < (t + 1) * kPerThread; ++w) {
        index.Apply(w, Batch(1000, 0, true, blocks_of(w, 0)));
      }
    });
  }
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::thread reader([&] {
    std::vector<int> asked(2 * kPerThread);
    for (int w = 0; w < 2 * kPerThread; ++w) asked[w] = w;
    while (!done.load()) {
      const Overlaps o = index.OverlapAll(asked, Chain({1, 2, 3}));
      for (const TieredOverlap& x : o.tiered) wrong.fetch_add(x.blocks < 0 || x.blocks > 3);
      wrong.fetch_add(index.entries() < 0);
    }
  });
  for (std::thread& w : writers) w.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  int64_t sum = 0;
  for (int w = 0; w < 2 * kPerThread; ++w) {
    sum += index.entries_of(w);
    EXPECT_EQ(index.entries_of(w), 23) << w;
    const std::vector<uint64_t> b = blocks_of(w, 0);
    EXPECT_EQ(index.Overlap(std::vector<int>{w}, Chain(b), absl::Now(), false),
              std::vector<int32_t>{23})
        << w;
  }
  EXPECT_EQ(index.entries(), sum);
}

}  // namespace
}  // namespace tandem::gateway
