// The CUDA backend's host-side arithmetic (engine/cuda/step_plan.h), which
// needs no device: graph buckets, the step metadata's layout and contents,
// and the out-of-memory message.
#include "engine/cuda/step_plan.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/backend.h"

namespace tandem::engine {
namespace {

// A step of `rows_per_seq` rows for each of `n_seqs` sequences, one logits
// row per sequence (its last row).
StepMetadata StepOf(int32_t n_seqs, int32_t rows_per_seq) {
  StepMetadata m;
  for (int32_t s = 0; s < n_seqs; ++s) {
    const int32_t first = m.n_tokens();
    m.seqs.push_back({.first_row = first, .n_rows = rows_per_seq, .kv_start = 0,
                      .table_offset = s, .n_blocks = 1});
    m.block_tables.push_back(s);
    for (int32_t i = 0; i < rows_per_seq; ++i) {
      m.tokens.push_back(1);
      m.positions.push_back(i);
      m.slot_mapping.push_back(int64_t{s} * 16 + i);
    }
    m.logit_rows.push_back(first + rows_per_seq - 1);
    m.logit_top_k.push_back(1);
    m.logit_target.push_back(-1);
  }
  return m;
}

TEST(StepPlanTest, DecodeStepsGoToPowerOfTwoBucketsWithinTheCaps) {
  const StepLimits limits{.max_tokens = 512, .max_seqs = 64, .max_table_entries = 4096,
                          .max_logit_rows = 100};
  for (const auto& [n, bucket] : std::vector<std::pair<int32_t, int32_t>>{
           {1, 1}, {2, 2}, {3, 4}, {5, 8}, {8, 8}, {9, 16}, {33, 64}, {64, 64}, {65, 100},
           {100, 100}}) {
    EXPECT_EQ(cuda::GraphBucket(StepOf(n, 1), 256, limits), bucket) << n << " sequences";
  }
  // Past the buffers' rows, past --cuda-graph-max-batch, or graphs off: eager.
  EXPECT_EQ(cuda::GraphBucket(StepOf(101, 1), 256, limits), 0);
  EXPECT_EQ(cuda::GraphBucket(StepOf(17, 1), 16, limits), 0);
  EXPECT_EQ(cuda::GraphBucket(StepOf(9, 1), 16, limits), 16);
  EXPECT_EQ(cuda::GraphBucket(StepOf(3, 1), 0, limits), 0);
  // A prefill chunk (several rows of a sequence) is never a graph step, nor
  // a step whose rows are not each their own logits row.
  EXPECT_EQ(cuda::GraphBucket(StepOf(2, 3), 256, limits), 0);
  StepMetadata reordered = StepOf(2, 1);
  std::swap(reordered.logit_rows[0], reordered.logit_rows[1]);
  EXPECT_EQ(cuda::GraphBucket(reordered, 256, limits), 0);
  EXPECT_EQ(cuda::GraphBucket(StepMetadata{}, 256, limits), 0);
}

TEST(StepPlanTest, MetadataRegionsAreAlignedDisjointAndHoldTheLimits) {
  const StepLimits limits{.max_tokens = 37, .max_seqs = 5, .max_table_entries = 71,
                          .max_logit_rows = 9};
  const cuda::MetaLayout m = cuda::MetaLayout::For(limits);
  struct Region {
    int64_t offset, bytes;
  };
  const std::vector<Region> regions = {
      {m.tokens, 37 * 4},      {m.positions, 37 * 4},   {m.slots, 37 * 8},
      {m.kv_len, 37 * 4},      {m.table_offset, 37 * 4}, {m.block_table, 71 * 4},
      {m.logit_rows, 9 * 4},   {m.top_k, 9 * 4},        {m.target, 9 * 4}};
  for (size_t i = 0; i < regions.size(); ++i) {
    EXPECT_EQ(regions[i].offset % 256, 0) << "region " << i;
    EXPECT_LE(regions[i].offset + regions[i].bytes, m.bytes) << "region " << i;
    if (i + 1 < regions.size()) {
      EXPECT_LE(regions[i].offset + regions[i].bytes, regions[i + 1].offset) << "region " << i;
    }
  }
}

// A decode step of 3 sequences padded to a bucket of 4: the real rows as
// the step holds them, the pad row inert, each array copied once in full.
TEST(StepPlanTest, MetadataIsWrittenWithInertPadRows) {
  const StepLimits limits{.max_tokens = 8, .max_seqs = 8, .max_table_entries = 8,
                          .max_logit_rows = 8};
  const cuda::MetaLayout m = cuda::MetaLayout::For(limits);
  StepMetadata step = StepOf(3, 1);
  step.seqs[1].kv_start = 5;
  step.tokens = {7, 8, 9};
  std::vector<uint8_t> host(m.bytes, 0xAB);
  std::map<int64_t, int64_t> copied;
  cuda::WriteStepMeta(step, m, 4, 4, host.data(),
                      [&](int64_t offset, int64_t bytes) { copied[offset] += bytes; });
  const auto i32 = [&](int64_t offset, int i) {
    int32_t v;
    std::memcpy(&v, host.data() + offset + 4 * i, 4);
    return v;
  };
  const auto i64 = [&](int64_t offset, int i) {
    int64_t v;
    std::memcpy(&v, host.data() + offset + 8 * i, 8);
    return v;
  };
  EXPECT_EQ((std::vector<int32_t>{i32(m.tokens, 0), i32(m.tokens, 1), i32(m.tokens, 2),
                                  i32(m.tokens, 3)}),
            (std::vector<int32_t>{7, 8, 9, 0}));
  EXPECT_EQ(i64(m.slots, 1), 16);
  EXPECT_EQ(i64(m.slots, 3), -1);
  EXPECT_EQ((std::vector<int32_t>{i32(m.kv_len, 0), i32(m.kv_len, 1), i32(m.kv_len, 2),
                                  i32(m.kv_len, 3)}),
            (std::vector<int32_t>{1, 6, 1, 0}));
  EXPECT_EQ(i32(m.table_offset, 2), 2);
  EXPECT_EQ(i32(m.table_offset, 3), 0);
  EXPECT_EQ(i32(m.block_table, 2), 2);
  EXPECT_EQ(i32(m.logit_rows, 3), 0);
  EXPECT_EQ(i32(m.top_k, 2), 1);
  EXPECT_EQ(i32(m.top_k, 3), -1);
  EXPECT_EQ(i32(m.target, 3), -1);
  EXPECT_EQ(copied, (std::map<int64_t, int64_t>{{m.tokens, 16},
                                                {m.positions, 16},
                                                {m.slots, 32},
                                                {m.kv_len, 16},
                                                {m.table_offset, 16},
                                                {m.block_table, 12},
                                                {m.logit_rows, 16},
                                                {m.top_k, 16},
                                                {m.target, 16}}));
}

TEST(StepPlanTest, AnAllocationThatDoesNotFitSaysWhatAndWhichFlags) {
  const std::string m = cuda::OutOfMemoryMessage(
      "weights", int64_t{3} << 30, "cuda:0 (NVIDIA H200)", int64_t{1} << 30,
      int64_t{140} << 30, {{"KV", int64_t{120} << 30}, {"step", int64_t{5} << 20}});
  EXPECT_EQ(m,
            "weights: cannot allocate 3072 MiB on cuda:0 (NVIDIA H200) (1024 MiB free of 143360 "
            "MiB; this process holds KV 122880 MiB, step 5 MiB): lower --kv-budget-mb (the KV "
            "pool) or --max-batch-tokens (the step's scratch), or use a smaller model");
}

}  // namespace
}  // namespace tandem::engine
