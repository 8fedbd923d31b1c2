// The fleet simulator's view of every worker's cache (bench/exact_holders.h):
// stores, evictions and restarts kept, and each worker's leading blocks of
// a chain counted.
#include "bench/exact_holders.h"

#include <gtest/gtest.h>

#include <vector>

namespace tandem::bench {
namespace {

std::vector<engine::BlockHash> Chain(std::initializer_list<uint64_t> lows) {
  std::vector<engine::BlockHash> chain;
  for (uint64_t low : lows) chain.push_back(engine::BlockHash{.low = low, .high = ~low});
  return chain;
}

void Change(ExactHolders& holders, int worker, std::vector<uint64_t> stored,
            std::vector<uint64_t> removed = {}) {
  holders.Change(worker, stored, removed);
}

TEST(ExactHoldersTest, EachWorkerHoldsTheLeadingBlocksItStoredUpToItsFirstMiss) {
  ExactHolders holders(4);
  Change(holders, 0, {1, 2, 3});
  Change(holders, 1, {1, 3});  // a gap at block 2
  Change(holders, 2, {2, 3});  // not the first block
  std::vector<int32_t> held;
  holders.LeadingHeld(Chain({1, 2, 3, 4}), held);
  EXPECT_EQ(held, (std::vector<int32_t>{3, 1, 0, 0}));
  EXPECT_EQ(holders.entries(), 7);
}

TEST(ExactHoldersTest, EvictionsAndRestartsTakeTheWorkerOffItsBlocks) {
  ExactHolders holders(3);
  Change(holders, 0, {1, 2, 3});
  Change(holders, 1, {1, 2, 3});
  Change(holders, 2, {1, 2});
  Change(holders, 0, {4}, {2});       // stores block 4, evicts block 2
  Change(holders, 1, {}, {1, 2, 3});  // restarts empty
  std::vector<int32_t> held;
  holders.LeadingHeld(Chain({1, 2, 3}), held);
  EXPECT_EQ(held, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(holders.entries(), 5);
  // Held again once stored again.
  Change(holders, 1, {1, 2});
  holders.LeadingHeld(Chain({1, 2, 3}), held);
  EXPECT_EQ(held, (std::vector<int32_t>{1, 2, 2}));
}

TEST(ExactHoldersTest, AnEmptyChainOrUnknownBlockLeavesEveryWorkerAtZero) {
  ExactHolders holders(2);
  Change(holders, 0, {1});
  std::vector<int32_t> held = {7, 7, 7};
  holders.LeadingHeld(Chain({}), held);
  EXPECT_EQ(held, (std::vector<int32_t>{0, 0}));
  holders.LeadingHeld(Chain({9, 1}), held);
  EXPECT_EQ(held, (std::vector<int32_t>{0, 0}));
}

TEST(ExactHoldersDeathTest, AnEvictionOfABlockNotHeldIsASimulatorBug) {
  ExactHolders holders(2);
  Change(holders, 0, {1});
  EXPECT_DEATH(Change(holders, 1, {}, {1}), "did not hold");
  EXPECT_DEATH(Change(holders, 0, {}, {5}), "nobody holds");
}

}  // namespace
}  // namespace tandem::bench
