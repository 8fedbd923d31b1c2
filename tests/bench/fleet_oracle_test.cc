// The fleet simulator's oracle (bench/fleet_oracle.h): routes logged among
// the workers' cache changes are scored after the run against the caches as
// they were when each route ran, by the router's own cost rule.
#include "bench/fleet_oracle.h"

#include <gtest/gtest.h>

#include <vector>

namespace tandem::bench {
namespace {

constexpr int32_t kPromptBlocks = 4;
constexpr int32_t kBlockSize = 16;

std::vector<engine::BlockHash> Lookup(std::initializer_list<uint64_t> lows) {
  std::vector<engine::BlockHash> chain;
  for (uint64_t low : lows) chain.push_back(engine::BlockHash{.low = low, .high = ~low});
  return chain;
}

tandem::v1::BlockEventBatch Batch(std::initializer_list<uint64_t> stored,
                                  std::initializer_list<uint64_t> removed = {}) {
  tandem::v1::BlockEventBatch b;
  for (uint64_t low : stored) b.add_stored()->set_low(low);
  for (uint64_t low : removed) b.add_removed()->set_low(low);
  return b;
}

TEST(FleetOracleTest, EachRouteIsScoredOnTheCachesAsTheyWereWhenItRan) {
  FleetOracle oracle(2, kPromptBlocks, kBlockSize);
  oracle.Begin(0, Batch({1, 2, 3}));
  oracle.Begin(1, Batch({1}));
  const std::vector<FleetOracle::Load> idle = {{0, 0}, {0, 0}};
  // Worker 0 holds 3 blocks: the oracle picks it; the router picked 1.
  oracle.LogRoute(Lookup({1, 2, 3}), idle, /*chosen=*/1);
  // Worker 0 evicts all but block 1 and worker 1 stores 2 and 3: now worker
  // 1 is the oracle's, and the router's.
  oracle.LogChange(0, Batch({}, {2, 3}));
  oracle.LogChange(1, Batch({2, 3}));
  oracle.LogRoute(Lookup({1, 2, 3}), idle, /*chosen=*/1);
  const FleetOracle::Score score = oracle.Replay();
  EXPECT_EQ(score.hit_blocks, 1 + 3);
  EXPECT_EQ(score.oracle_hit_blocks, 3 + 3);
  EXPECT_EQ(score.disagreements, 0);
}

TEST(FleetOracleTest, LoadInFlightWeighsAsBlocksAndTiesGoToFewerRequestsThenTheLowerIndex) {
  FleetOracle oracle(3, kPromptBlocks, kBlockSize);
  oracle.Begin(0, Batch({1, 2}));
  oracle.Begin(1, Batch({1}));
  oracle.Begin(2, Batch({1}));
  // Worker 0 saves one block more, but has two blocks' tokens in flight:
  // costs 2 + 2 = 4 against 3 + 0 = 3 on workers 1 and 2; worker 2 has
  // fewer requests in flight.
  oracle.LogRoute(Lookup({1, 2}), {{2 * kBlockSize, 1}, {0, 1}, {0, 0}}, /*chosen=*/0);
  // All equal: the lower index.
  oracle.LogRoute(Lookup({1, 2}), {{kBlockSize, 1}, {0, 1}, {0, 1}}, /*chosen=*/0);
  const FleetOracle::Score score = oracle.Replay();
  EXPECT_EQ(score.hit_blocks, 2 + 2);
  EXPECT_EQ(score.oracle_hit_blocks, 1 + 2);
}

TEST(FleetOracleTest, RestartsEmptyAWorkerAndExpectedBlocksHeldAreChecked) {
  FleetOracle oracle(2, kPromptBlocks, kBlockSize);
  oracle.Begin(0, Batch({1, 2}));
  oracle.Begin(1, Batch({1, 2}));
  oracle.LogRestart(0, Batch({1, 2}));
  // The log's own view: worker 0 holds nothing, worker 1 both; a check
  // that says otherwise for worker 0 is one disagreement.
  oracle.LogRoute(Lookup({1, 2}), {{0, 0}, {0, 0}}, /*chosen=*/1, /*expected=*/{2, 2});
  const FleetOracle::Score score = oracle.Replay();
  EXPECT_EQ(score.hit_blocks, 2);
  EXPECT_EQ(score.oracle_hit_blocks, 2);
  EXPECT_EQ(score.disagreements, 1);
}

}  // namespace
}  // namespace tandem::bench
