// The block index under several writers at once (bench/index_writers.h) at
// a small size: whatever the shards, once every thread's batches are
// applied the index holds exactly the workers' caches. Speed is the
// benchmark's to report, not this test's.
#include "bench/index_writers.h"

#include <gtest/gtest.h>

namespace tandem::bench {
namespace {

TEST(IndexWritersTest, ThreadsApplyingAtOnceLeaveTheIndexExact) {
  for (int shards : {1, 4, 64}) {
    for (int threads : {1, 3}) {
      SCOPED_TRACE(testing::Message() << shards << " shards, " << threads << " threads");
      WritersConfig c;
      c.workers = 24;
      c.blocks_per_worker = 300;
      c.batch_blocks = 40;
      c.batches_per_worker = 12;
      c.shared_fraction = 0.5;
      c.shared_blocks = 500;  // blocks many workers hold: lists and bitmaps
      c.threads = threads;
      c.shards = shards;
      c.seed = 3;
      const WritersResult r = RunWriters(c);
      EXPECT_EQ(r.events, int64_t{24} * 12 * 40 * 2);
      EXPECT_EQ(r.expected_entries, int64_t{24} * 300);
      EXPECT_EQ(r.entries, r.expected_entries);
      EXPECT_GT(r.wall_seconds, 0);
    }
  }
}

}  // namespace
}  // namespace tandem::bench
