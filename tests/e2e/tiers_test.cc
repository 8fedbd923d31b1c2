// The cache tiers over real processes: a prefill worker restarted on the
// same --disk-cache-dir serves a 2000-token prefix it computed before the
// restart from disk (cached_prompt_tokens, output equal to a cold run), and
// the gateway's index learns of it from the new process's snapshot; with
// --hot-cache-only a worker creates no directory and runs no writer thread.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/common/temp_paths.h"
#include "tests/common/thread_names.h"
#include "tests/e2e/stack.h"
#include "tests/e2e/synthetic.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  return TempPathRemovedAtExit(absl::StrCat("tiers_e2e_", name));
}

TEST(TiersTest, ARestartedWorkerServesAPrefixFromItsDiskTier) {
  const std::string dir = FreshDir("restart");
  StackOptions o;
  o.model = ModelPath();
  o.prefill_flags = {"--disk-cache-dir", dir};
  // The repeated prompt goes to the prefill worker's disk tier, not to the
  // decode worker that holds it too.
  o.gateway_flags = {"--local-prefill-tokens", "0"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::vector<int32_t> prompt = Prompt(2000, 0, 1);
  constexpr int32_t kFullBlocks = 2000 / 16;   // computed and written through
  constexpr int32_t kCachedTokens = 1999 / 16 * 16;  // the last token is always computed
  const std::vector<engine::SampledToken> cold = Reference(prompt, 6);
  const Completion first = Generate(stack->gateway(), Request(prompt, 6));
  ExpectMatches(first, cold);
  EXPECT_EQ(first.usage.cached_prompt_tokens(), 0);
  const std::string disk_blocks = Series("tandem_kv_tier_blocks", "tier=\"disk\"");
  ASSERT_GE(AwaitMetric(stack->prefill_info().metrics_address, disk_blocks,
                        [](double v) { return v >= kFullBlocks; }, absl::Seconds(30)),
            kFullBlocks);

  ASSERT_TRUE(stack->RestartPrefill(0));  // SIGKILL: only the files remain
  const std::string prefill_metrics = stack->prefill_info().metrics_address;
  EXPECT_GE(MetricValue(prefill_metrics, disk_blocks), kFullBlocks);
  // The gateway learns of the blocks from the new process's snapshot.
  EXPECT_GE(AwaitMetric(stack->gateway_info().metrics_address,
                        Series("tandem_block_index_entries",
                               "worker=\"" + stack->prefill_info().grpc_address + "\""),
                        [](double v) { return v >= kFullBlocks; }, absl::Seconds(30)),
            kFullBlocks);

  const Completion again = Generate(stack->gateway(), Request(prompt, 6));
  ExpectMatches(again, cold);
  EXPECT_EQ(again.usage.cached_prompt_tokens(), kCachedTokens);
  EXPECT_EQ(MetricValue(prefill_metrics,
                        Series("tandem_prefix_cache_hit_tokens_total", "tier=\"disk\"")),
            kCachedTokens);
  EXPECT_EQ(MetricValue(prefill_metrics,
                        Series("tandem_kv_tier_promotions_total", "tier=\"disk\"")),
            kCachedTokens / 16);
  EXPECT_TRUE(stack->Stop());
}

TEST(TiersTest, HotCacheOnlyWorkersTouchNoDiskAndRunNoWriter) {
  const std::string hot_dir = FreshDir("hot");
  const std::string disk_dir = FreshDir("disk");
  StackOptions o;
  o.model = ModelPath();
  o.prefill_flags = {"--disk-cache-dir", hot_dir, "--hot-cache-only"};
  o.decode_flags = {"--disk-cache-dir", disk_dir};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const Completion c = Generate(stack->gateway(), Request(Prompt(300, 0, 2), 4));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_FALSE(fs::exists(hot_dir));
  EXPECT_THAT(ThreadNames(stack->prefill_process().pid()),
              ::testing::Not(::testing::Contains("tandem-kvdisk")));
  EXPECT_EQ(MetricValue(stack->prefill_info().metrics_address,
                        Series("tandem_kv_tier_blocks", "tier=\"disk\"")),
            -1);  // no disk tier, no disk series
  // The decode worker, without the switch, has both.
  EXPECT_TRUE(fs::is_directory(disk_dir));
  EXPECT_THAT(ThreadNames(stack->decode_process().pid()),
              ::testing::Contains("tandem-kvdisk"));
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
