// The KV-aware router over a real BlockIndex and WorkerPicker: a prompt
// goes to the worker holding its prefix; when that worker is loaded enough
// that computing elsewhere is cheaper, it does not; without index data it
// is least-loaded; a prompt follows an earlier one of its prefix still being
// computed (predictions); a block in a worker's pool counts more than one in
// its host RAM, which counts more than one on its disk; every decision is
// counted by reason.
#include "gateway/routing/kv_router.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// Worker `slot` holds the full blocks of `tokens`, in its pool or only in
// a lower tier.
void Hold(BlockIndex& index, int slot, const std::vector<int32_t>& tokens,
          tandem::v1::KvTier tier = tandem::v1::KV_TIER_DEVICE) {
  tandem::v1::BlockEventBatch b;
  b.set_epoch(1);
  b.set_sequence(1);
  b.set_snapshot(true);
  b.set_model_fingerprint(kFingerprint);
  b.set_block_size(kBlock);
  tandem::v1::TierBlockEvents* lower = nullptr;
  if (tier != tandem::v1::KV_TIER_DEVICE) {
    lower = b.add_tiers();
    lower->set_tier(tier);
  }
  for (const engine::BlockHash& h : engine::PrefixBlockHashes(tokens, kBlock, kFingerprint)) {
    auto* p = lower != nullptr ? lower->add_stored() : b.add_stored();
    p->set_low(h.low);
    p->set_high(h.high);
  }
  ASSERT_EQ(index.Apply(slot, b), BlockIndex::Applied::kApplied);
}

TEST(KvRouterTest, RoutesToTheHolderUnlessItIsLoaded) {
  prometheus::Registry registry;
  BlockIndex index;
  WorkerPicker picker({"a:1", "b:2"});
  KvRouter router(index, 0,
                  {.overlap_weight = 1.0, .load_weight = 1.0,
                   .prediction_ttl = absl::ZeroDuration()},
                  registry, RouteRole::kPrefill);
  const std::vector<int32_t> prompt = Prompt(160);  // 10 blocks, 9 reusable
  Hold(index, 0, Prompt(16));   // worker a: 1 block of it
  Hold(index, 1, Prompt(144));  // worker b: 9 blocks

  // Each request on b charges the one block b computes: b costs 1 + k with
  // k in flight, a costs 9, so b takes 8 and the ninth goes to a.
  std::vector<RouteDecision> held;
  for (int k = 0; k < 8; ++k) {
    held.push_back(router.Route(picker, prompt, {}));
    ASSERT_TRUE(held.back().pick.valid());
    EXPECT_EQ(held.back().pick.address(), "b:2") << k;
    EXPECT_EQ(held.back().overlap_blocks, 9);
    EXPECT_EQ(held.back().prompt_blocks, 10);
    EXPECT_EQ(held.back().reason, "kv_overlap");
  }
  EXPECT_EQ(picker.in_flight_tokens(1), 8 * 16);
  RouteDecision ninth = router.Route(picker, prompt, {});
  EXPECT_EQ(ninth.pick.address(), "a:1");
  EXPECT_EQ(ninth.overlap_blocks, 1);
  EXPECT_EQ(ninth.reason, "kv_overlap");
  EXPECT_EQ(picker.in_flight_tokens(0), 160 - 16);
  held.clear();  // b's load is released
  ninth = RouteDecision();

  // A prompt nobody holds: the least loaded (a tie: lower index).
  RouteDecision fresh = router.Route(picker, Prompt(40, 2), {});
  EXPECT_EQ(fresh.pick.address(), "a:1");
  EXPECT_EQ(fresh.reason, "no_overlap");
  const std::string text = rpc::ScrapeText(registry);
  EXPECT_THAT(text,
              HasSubstr("tandem_router_decisions_total{reason=\"kv_overlap\",role=\"prefill\"} 9"));
  EXPECT_THAT(text,
              HasSubstr("tandem_router_decisions_total{reason=\"no_overlap\",role=\"prefill\"} 1"));
  // Every reason's series is there from the start, so a rate over it
  // begins at 0 rather than at its first decision.
  EXPECT_THAT(text,
              HasSubstr("tandem_router_decisions_total{reason=\"retry\",role=\"prefill\"} 0"));
  EXPECT_THAT(text, HasSubstr("tandem_router_decisions_total{reason=\"load\",role=\"prefill\"} 0"));
}

TEST(KvRouterTest, APoolHitOutweighsAHostHitWhichOutweighsADiskHit) {
  prometheus::Registry registry;
  BlockIndex index;
  WorkerPicker picker({"disk:1", "host:2", "pool:3"});
  KvRouter router(index, 0,
                  {.overlap_weight = 1.0, .tier_weights = {1.0, 0.8, 0.5}, .load_weight = 1.0,
                   .prediction_ttl = absl::ZeroDuration()},
                  registry, RouteRole::kPrefill);
  const std::vector<int32_t> prompt = Prompt(160);  // 9 reusable blocks
  Hold(index, 0, Prompt(144), tandem::v1::KV_TIER_DISK);
  Hold(index, 1, Prompt(144), tandem::v1::KV_TIER_HOST);
  Hold(index, 2, Prompt(144));
  // Every holder computes one block, whatever the tier: each request
  // charges one block to its worker. Costs 10 - credit + requests in
  // flight: pool 1 + k, host 2.8 + k, disk 5.5 + k. Only when the pool and
  // host holders are busy enough does the disk holder win.
  std::vector<RouteDecision> held;
  for (const char* want : {"pool:3", "pool:3", "host:2", "pool:3", "host:2", "pool:3", "host:2",
                           "pool:3", "disk:1"}) {
    held.push_back(router.Route(picker, prompt, {}));
    ASSERT_TRUE(held.back().pick.valid());
    EXPECT_EQ(held.back().pick.address(), want) << held.size();
    EXPECT_EQ(held.back().overlap_blocks, 9);
    EXPECT_EQ(held.back().reason, "kv_overlap");
  }
}

TEST(KvRouterTest, APromptFollowsTheOneOfItsPrefixRoutedBeforeIt) {
  // Worker a is sent a prompt nobody holds and is still computing it; the
  // same prefix arriving next goes to a (predicted) rather than computing it
  // again on idle b. Without predictions it would go to b.
  for (const bool predict : {true, false}) {
    prometheus::Registry registry;
    BlockIndex index;
    Hold(index, 1, Prompt(16, 999));  // the workers have reported; nobody holds the prompt
    WorkerPicker picker({"a:1", "b:2"});
    KvRouter router(index, 0,
                    {.overlap_weight = 1.0, .load_weight = 0.5,
                     .prediction_ttl = predict ? absl::Seconds(60) : absl::ZeroDuration()},
                    registry, RouteRole::kPrefill);
    const RouteDecision first = router.Route(picker, Prompt(160), {});
    EXPECT_EQ(first.pick.address(), "a:1");
    EXPECT_EQ(first.reason, "no_overlap");
    // a: 1 block to compute + 0.5 x 10 in flight = 6; b: 10.
    const RouteDecision second = router.Route(picker, Prompt(170), {});
    EXPECT_EQ(second.pick.address(), predict ? "a:1" : "b:2") << predict;
    EXPECT_EQ(second.overlap_blocks, predict ? 10 : 0) << predict;
  }
}

TEST(KvRouterTest, WithoutIndexDataItIsLeastLoaded) {
  prometheus::Registry registry;
  BlockIndex index;
  WorkerPicker picker({"a:1", "b:2"});
  KvRouter router(index, 0, {}, registry, RouteRole::kPrefill);
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
  KvRouter router(index, 0, {}, registry, RouteRole::kPrefill);
  Hold(index, 0, Prompt(64));
  // 64 tokens = 4 full blocks, but the engine recomputes the last one.
  EXPECT_EQ(router.Route(picker, Prompt(64), {}).overlap_blocks, 3);
  EXPECT_EQ(router.Route(picker, Prompt(65), {}).overlap_blocks, 4);
}

TEST(KvRouterTest, TheChosenWorkerPullsAPrefixAnotherHasReported) {
  prometheus::Registry registry;
  BlockIndex index;
  WorkerPicker picker({"a:1", "b:2"});
  // Overlap weight 0: routing by load alone, so idle a is chosen.
  KvRouter router(index, 0, {.overlap_weight = 0.0, .load_weight = 1.0, .pull_min_blocks = 4},
                  registry, RouteRole::kPrefill);
  Hold(index, 0, Prompt(32));   // a: 2 blocks of it
  Hold(index, 1, Prompt(144));  // b: 9 blocks
  RouteDecision d = router.Route(picker, Prompt(160), {});
  EXPECT_EQ(d.pick.address(), "a:1");
  EXPECT_EQ(d.pull_from, "b:2");
  EXPECT_EQ(d.pull_blocks, 9);
  d = RouteDecision();  // a idle again
  // A margin under the threshold is computed, not pulled.
  Hold(index, 0, Prompt(96));  // a: 6 blocks, b 3 more
  const RouteDecision close = router.Route(picker, Prompt(160), {});
  EXPECT_EQ(close.pick.address(), "a:1");
  EXPECT_TRUE(close.pull_from.empty());
  // Predicted blocks are still being computed: nothing to pull yet.
  BlockIndex fresh;
  Hold(fresh, 0, Prompt(16, 999));
  fresh.Predict(1, engine::PrefixBlockHashes(Prompt(160), kBlock, kFingerprint),
                absl::Now() + absl::Seconds(60));
  KvRouter predicted(fresh, 0, {.overlap_weight = 0.0, .load_weight = 1.0, .pull_min_blocks = 4},
                     registry, RouteRole::kPrefill);
  WorkerPicker idle({"a:1", "b:2"});
  const RouteDecision p = predicted.Route(idle, Prompt(160), {});
  EXPECT_EQ(p.pick.address(), "a:1");
  EXPECT_TRUE(p.pull_from.empty());
}

// A route picks the worker its cost ranks first, recomputed here from each
// worker's overlap (by tier, from the index) and load: the least cost, ties
// to fewer in flight, then the lower index. Seeded prompts held by few
// workers or by most, in every tier, with requests in flight and a worker
// excluded now and then.
TEST(KvRouterTest, ARoutePicksAsAPassOverEveryWorker) {
  constexpr int kWorkers = 40;
  prometheus::Registry registry;
  BlockIndex index;
  std::vector<std::string> addresses;
  for (int i = 0; i < kWorkers; ++i) addresses.push_back(absl::StrCat("w", i, ":1"));
  WorkerPicker picker(addresses);
  const RouterOptions options{.overlap_weight = 1.0,
                              .load_weight = 0.25,
                              .prediction_ttl = absl::ZeroDuration(),
                              .pull_min_blocks = 0};
  KvRouter router(index, 0, options, registry, RouteRole::kPrefill);
  std::mt19937_64 rng(61206);
  const tandem::v1::KvTier tiers[] = {tandem::v1::KV_TIER_DEVICE, tandem::v1::KV_TIER_HOST,
                                      tandem::v1::KV_TIER_DISK};
  // Four prompts of 12 blocks; worker i holds a leading part of some.
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 4; ++p) prompts.push_back(Prompt(12 * kBlock, 1 + 1000 * p));
  for (int i = 0; i < kWorkers; ++i) {
    // Prompt 0: most workers; prompt 1: a few; prompts 2 and 3: some.
    const int p = i % 10 < 7 ? 0 : (i % 10 == 7 ? 1 : 2 + (i % 2));
    const int blocks = 1 + static_cast<int>(rng() % 12);
    Hold(index, i, std::vector<int32_t>(prompts[p].begin(), prompts[p].begin() + blocks * kBlock),
         tiers[rng() % 3]);
  }
  std::vector<RouteDecision> in_flight;
  for (int step = 0; step < 400; ++step) {
    const std::vector<int32_t>& prompt = prompts[rng() % prompts.size()];
    std::vector<int> exclude;
    if (rng() % 5 == 0) exclude.push_back(static_cast<int>(rng() % kWorkers));
    // The expected pick, from each worker's overlap and load.
    std::vector<int> slots;
    for (int i = 0; i < kWorkers; ++i) slots.push_back(i);
    const std::vector<engine::BlockHash> chain =
        engine::PrefixBlockHashes(prompt, kBlock, kFingerprint);
    const std::vector<TieredOverlap> overlap =
        index.OverlapByTier(slots, std::span(chain).first(chain.size() - 1));
    const double prompt_blocks = static_cast<double>(prompt.size() / kBlock);
    int want = -1;
    double want_cost = 0;
    for (int i = 0; i < kWorkers; ++i) {
      if (std::find(exclude.begin(), exclude.end(), i) != exclude.end()) continue;
      double credit = 0;
      for (size_t t = 0; t < kNumTiers; ++t) {
        credit += options.tier_weights[t] * overlap[static_cast<size_t>(i)].by_tier[t];
      }
      const double cost =
          options.overlap_weight * (prompt_blocks - credit) +
          options.load_weight * static_cast<double>(picker.in_flight_tokens(i)) / kBlock;
      if (want < 0 || cost < want_cost ||
          (cost == want_cost && picker.in_flight(i) < picker.in_flight(want))) {
        want = i;
        want_cost = cost;
      }
    }
    in_flight.push_back(router.Route(picker, prompt, exclude));
    ASSERT_TRUE(in_flight.back().pick.valid());
    ASSERT_EQ(in_flight.back().pick.index(), want) << "step " << step;
    if (rng() % 3 == 0) in_flight.erase(in_flight.begin() + rng() % in_flight.size());
  }
}

}  // namespace
}  // namespace tandem::gateway
