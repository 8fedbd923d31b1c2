// The gateway's block index: snapshots replace, deltas must follow in
// order within an epoch (else a resync is asked for), a dropped worker's
// entries go at once, overlap counts leading blocks only, and the entry
// bound holds.
#include "gateway/routing/block_index.h"

#include <gtest/gtest.h>

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
  BlockIndex index;
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

TEST(BlockIndexTest, EntriesStayWithinTheBound) {
  BlockIndex index({.max_entries = 3});
  index.Apply(0, Batch(1, 1, true, {1, 2}));
  index.Apply(1, Batch(2, 1, true, {1, 2}));  // the fourth entry is not kept
  EXPECT_EQ(index.entries(), 3);
  EXPECT_EQ(index.dropped_entries(), 1);
  index.Apply(0, Batch(1, 2, false, {}, {1}));  // room again
  index.Apply(1, Batch(2, 2, false, {9}));
  EXPECT_EQ(index.entries(), 3);
}

TEST(BlockIndexTest, PredictionsCountUntilTheirDeadlineOrTheWorkersOwnReport) {
  BlockIndex index;
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

}  // namespace
}  // namespace tandem::gateway
