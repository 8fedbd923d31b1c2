// The KV-aware router over a real BlockIndex and WorkerPicker: a prompt
// goes to the worker holding its prefix; when that worker is loaded enough
// that computing elsewhere is cheaper, it does not; without index data it
// is least-loaded; every decision is counted by reason.
#include "gateway/kv_router.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "rpc/metrics.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kBlock = 16;
constexpr uint64_t kFingerprint = 1234;

std::vector<int32_t> Prompt(int n, int32_t first = 1) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(first + i * 3);
  return p;
}

// Worker `slot` holds the full blocks of `tokens`.
void Hold(BlockIndex& index, int slot, const std::vector<int32_t>& tokens) {
  tandem::v1::BlockEventBatch b;
  b.set_epoch(1);
  b.set_sequence(1);
  b.set_snapshot(true);
  b.set_model_fingerprint(kFingerprint);
  b.set_block_size(kBlock);
  for (const engine::BlockHash& h : engine::PrefixBlockHashes(tokens, kBlock, kFingerprint)) {
    auto* p = b.add_stored();
    p->set_low(h.low);
    p->set_high(h.high);
  }
  ASSERT_EQ(index.Apply(slot, b), BlockIndex::Applied::kApplied);
}

TEST(KvRouterTest, RoutesToTheHolderUnlessItIsLoaded) {
  prometheus::Registry registry;
  BlockIndex index;
  WorkerPicker picker({"a:1", "b:2"});
  KvRouter router(index, 0, {.overlap_weight = 1.0, .load_weight = 1.0}, registry, "prefill");
  const std::vector<int32_t> prompt = Prompt(160);  // 10 blocks, 9 reusable
  Hold(index, 0, Prompt(16));   // worker a: 1 block of it
  Hold(index, 1, Prompt(144));  // worker b: 9 blocks

  RouteDecision d = router.Route(picker, prompt, {});
  ASSERT_TRUE(d.pick.valid());
  EXPECT_EQ(d.pick.address(), "b:2");
  EXPECT_EQ(d.overlap_blocks, 9);
  EXPECT_EQ(d.prompt_blocks, 10);
  EXPECT_EQ(d.reason, "kv_overlap");

  // b now has 160 prompt tokens (10 blocks) in flight: 1 + 10 > a's 9 + 0.
  RouteDecision second = router.Route(picker, prompt, {});
  EXPECT_EQ(second.pick.address(), "a:1");
  EXPECT_EQ(second.overlap_blocks, 1);
  EXPECT_EQ(second.reason, "kv_overlap");
  d = RouteDecision();  // b's load is released
  second = RouteDecision();

  // A prompt nobody holds: the least loaded (a tie: lower index).
  RouteDecision fresh = router.Route(picker, Prompt(40, 2), {});
  EXPECT_EQ(fresh.pick.address(), "a:1");
  EXPECT_EQ(fresh.reason, "no_overlap");
  const std::string text = rpc::ScrapeText(registry);
  EXPECT_THAT(text, HasSubstr("tandem_router_decisions_total{reason=\"kv_overlap\",role=\"prefill\"} 2"));
  EXPECT_THAT(text, HasSubstr("tandem_router_decisions_total{reason=\"no_overlap\",role=\"prefill\"} 1"));
}

TEST(KvRouterTest, WithoutIndexDataItIsLeastLoaded) {
  prometheus::Registry registry;
  BlockIndex index;
  WorkerPicker picker({"a:1", "b:2"});
  KvRouter router(index, 0, {}, registry, "prefill");
  RouteDecision first = router.Route(picker, Prompt(40), {});
  RouteDecision second = router.Route(picker, Prompt(40), {});
  EXPECT_EQ(first.pick.address(), "a:1");
  EXPECT_EQ(second.pick.address(), "b:2");
  EXPECT_EQ(first.reason, "no_index");
  // Excluded workers (a failed attempt) are never picked.
  RouteDecision retry = router.Route(picker, Prompt(40), {0});
  EXPECT_EQ(retry.pick.address(), "b:2");
  EXPECT_EQ(retry.reason, "retry");
  EXPECT_FALSE(router.Route(picker, Prompt(40), {0, 1}).pick.valid());
}

TEST(KvRouterTest, TheLastPromptTokensBlockIsNeverCountedAsReusable) {
  prometheus::Registry registry;
  BlockIndex index;
  WorkerPicker picker({"a:1"});
  KvRouter router(index, 0, {}, registry, "prefill");
  Hold(index, 0, Prompt(64));
  // 64 tokens = 4 full blocks, but the engine recomputes the last one.
  EXPECT_EQ(router.Route(picker, Prompt(64), {}).overlap_blocks, 3);
  EXPECT_EQ(router.Route(picker, Prompt(65), {}).overlap_blocks, 4);
}

}  // namespace
}  // namespace tandem::gateway
