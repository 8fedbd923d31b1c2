// Prefix reuse across the fleet, over real processes on a synthetic model
// with a 2048-token context: a decode worker that holds a prompt's leading
// blocks fetches only the rest (delta transfer) and the output is what the
// in-process engine gives; the gateway routes a prompt to the prefill worker
// whose blocks the index says hold its prefix, and away from it when that
// worker is loaded; a worker's death empties its index entries.
#include <signal.h>

#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/kv/block_hash.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "tests/e2e/stack.h"
#include "tests/e2e/synthetic.h"
#include "tests/engine/test_models.h"

namespace tandem::testing {
namespace {

constexpr int32_t kBlockSize = 16;  // the workers' default

TEST(PrefixReuseTest, ADecodeWorkerHoldingThePrefixFetchesOnlyTheNewBlocks) {
  StackOptions o;
  o.model = ModelPath();
  // The prefill worker computes the second prompt's 24 new tokens (not its
  // decode worker, which holds the rest: aggregated_test covers that).
  o.gateway_flags = {"--local-prefill-tokens", "0"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::string decode_metrics = stack->decode_info().metrics_address;
  // Two prompts sharing a 1000-token prefix: 62 full blocks in common.
  const std::vector<int32_t> a = Prompt(1000, 24, 1);
  const std::vector<int32_t> b = Prompt(1000, 24, 2);
  const int32_t n_blocks = (1024 + kBlockSize - 1) / kBlockSize;
  const Completion first = Generate(stack->gateway(), Request(a, 4));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(MetricValue(decode_metrics, "tandem_kv_transfer_blocks_skipped_total"), 0);
  EXPECT_EQ(MetricValue(decode_metrics,
                        Series("tandem_kv_transfer_blocks_total", "direction=\"received\"")),
            n_blocks);

  const Completion second = Generate(stack->gateway(), Request(b, 6));
  ExpectMatches(second, Reference(b, 6));
  EXPECT_EQ(second.usage.cached_prompt_tokens(), 992);  // the prefill worker's cache
  EXPECT_EQ(MetricValue(decode_metrics, "tandem_kv_transfer_blocks_skipped_total"), 62);
  EXPECT_EQ(MetricValue(decode_metrics,
                        Series("tandem_kv_transfer_blocks_total", "direction=\"received\"")),
            n_blocks + (n_blocks - 62));
  EXPECT_EQ(MetricValue(decode_metrics, "tandem_kv_delta_fallbacks_total"), 0);
  EXPECT_TRUE(stack->Stop());
}

class RoutingTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({"--router-pull-min-blocks", "0"}); }
  void Start(std::vector<std::string> gateway_flags) {
    StackOptions o;
    o.model = ModelPath();
    o.prefill_workers = 2;
    o.gateway_flags = {"--log-level", "debug"};
    o.gateway_flags.insert(o.gateway_flags.end(), gateway_flags.begin(), gateway_flags.end());
    stack_ = Stack::Start(o);
    ASSERT_NE(stack_, nullptr);
    gateway_metrics_ = stack_->gateway_info().metrics_address;
    // The gateway knows every worker reachable, so ties go to the lower index.
    EXPECT_TRUE(stack_->AwaitGatewaySynced());
  }

  // Runs `ids` through prefill worker `w` directly (and ends the lease), then
  // waits until the gateway's index shows that worker holding its blocks.
  void Warm(int w, const std::vector<int32_t>& ids) {
    grpc::ClientContext ctx;
    tandem::v1::PrefillRequest req;
    req.set_request_id("warm");
    req.mutable_prompt_token_ids()->Assign(ids.begin(), ids.end());
    tandem::v1::PrefillResponse resp;
    ASSERT_TRUE(stack_->prefill(w).Prefill(&ctx, req, &resp).ok());
    grpc::ClientContext rctx;
    tandem::v1::ReleaseKvRequest release;
    release.set_lease_id(resp.lease_id());
    release.set_ok(true);
    tandem::v1::ReleaseKvResponse released;
    ASSERT_TRUE(stack_->prefill(w).ReleaseKv(&rctx, release, &released).ok());
    const double held = static_cast<double>(ids.size() / kBlockSize);
    EXPECT_GE(AwaitMetric(gateway_metrics_, Entries(w), [&](double v) { return v >= held; },
                          absl::Seconds(30)),
              held);
  }
  std::string Entries(int w) const {
    return Series("tandem_block_index_entries",
                  "worker=\"" + stack_->prefill_info(w).grpc_address + "\"");
  }
  double Decisions(const std::string& reason) const {
    return MetricValue(gateway_metrics_,
                       Series("tandem_router_decisions_total",
                              "reason=\"" + reason + "\",role=\"prefill\""));
  }
  double PrefixHits(int w) const {
    return MetricValue(stack_->prefill_info(w).metrics_address,
                       "tandem_prefix_cache_hit_tokens_total{tier=\"device\"}");
  }

  std::unique_ptr<Stack> stack_;
  std::string gateway_metrics_;
};

TEST_F(RoutingTest, APromptGoesToTheWorkerHoldingItsPrefixUnlessThatWorkerIsLoaded) {
  // Worker 1 holds a 768-token prefix (48 blocks); worker 0 holds nothing.
  const std::vector<int32_t> prefix = Prompt(768, 0, 0, 1);
  Warm(1, prefix);
  const double hits_before = PrefixHits(1);

  const std::vector<int32_t> ids = Prompt(768, 40, 3, 1);
  const Completion routed = Generate(stack_->gateway(), Request(ids, 4));
  ASSERT_TRUE(routed.status.ok()) << routed.status.error_message();
  EXPECT_EQ(routed.usage.cached_prompt_tokens(), 768);
  EXPECT_EQ(Decisions("kv_overlap"), 1);
  EXPECT_EQ(PrefixHits(1) - hits_before, 768);
  EXPECT_EQ(PrefixHits(0), 0);

  // Worker 1 stops answering with a prompt in flight whose 1200 uncached
  // tokens (75 blocks) it has to compute: more load than the 48 blocks it
  // would save, so the next prompt of the same prefix goes to worker 0.
  process::Subprocess& worker1 = stack_->prefill_process(1);
  worker1.Signal(SIGSTOP);
  Completion stuck;
  std::thread in_flight([&] {
    stuck = Generate(stack_->gateway(), Request(Prompt(768, 1200, 4, 1), 2));
  });
  EXPECT_EQ(AwaitMetric(gateway_metrics_,
                        Series("tandem_router_decisions_total",
                               "reason=\"kv_overlap\",role=\"prefill\""),
                        [](double v) { return v >= 2; }, absl::Seconds(30)),
            2);
  const Completion moved = Generate(stack_->gateway(), Request(Prompt(768, 40, 5, 1), 2));
  EXPECT_TRUE(moved.status.ok()) << moved.status.error_message();
  EXPECT_EQ(Decisions("load"), 1);
  EXPECT_EQ(moved.usage.cached_prompt_tokens(), 0);
  worker1.Signal(SIGCONT);
  in_flight.join();
  EXPECT_TRUE(stuck.status.ok()) << stuck.status.error_message();
  EXPECT_TRUE(stack_->Stop());
}

TEST_F(RoutingTest, AWorkersDeathEmptiesItsIndexEntries) {
  Warm(1, Prompt(320, 0, 0, 2));
  EXPECT_GE(MetricValue(gateway_metrics_, Entries(1)), 20);
  stack_->prefill_process(1).Signal(SIGKILL);
  EXPECT_EQ(AwaitMetric(gateway_metrics_, Entries(1), [](double v) { return v == 0; },
                        absl::Seconds(30)),
            0);
  // The survivor still serves.
  const Completion c = Generate(stack_->gateway(), Request(Prompt(40, 8, 9), 3));
  EXPECT_TRUE(c.status.ok()) << c.status.error_message();
  stack_->Stop();  // worker 1 exits by SIGKILL, not 0
}

// Routing that ignores overlap (weight 0) sends the prompt to idle worker 0
// while worker 1 has reported its prefix: worker 0 pulls the blocks.
class PullTest : public RoutingTest {
 protected:
  void SetUp() override { Start({"--router-overlap-weight", "0"}); }
  double Pulls(int w, const std::string& outcome) const {
    return MetricValue(stack_->prefill_info(w).metrics_address,
                       Series("tandem_prefix_pulls_total", "outcome=\"" + outcome + "\""));
  }
};

TEST_F(PullTest, AWorkerWithoutThePrefixPullsItFromTheHolder) {
  Warm(1, Prompt(768, 0, 0, 3));
  const std::vector<int32_t> ids = Prompt(768, 40, 6, 3);
  const Completion c = Generate(stack_->gateway(), Request(ids, 5));
  ExpectMatches(c, Reference(ids, 5));
  EXPECT_EQ(c.usage.cached_prompt_tokens(), 768);  // none of it computed
  EXPECT_EQ(Pulls(0, "ok"), 1);
  EXPECT_EQ(MetricValue(stack_->prefill_info(0).metrics_address,
                        "tandem_prefix_pulled_tokens_total"),
            768);
  EXPECT_EQ(MetricValue(gateway_metrics_,
                        Series("tandem_router_prefix_pulls_total", "role=\"prefill\"")),
            1);
  EXPECT_TRUE(stack_->Stop());
}

TEST_F(PullTest, AFailedPullIsComputedInstead) {
  // Asked directly to pull from an address where nothing listens.
  const std::vector<int32_t> ids = Prompt(200, 8, 7);
  tandem::v1::PrefillRequest req;
  req.mutable_prompt_token_ids()->Assign(ids.begin(), ids.end());
  req.set_prefix_holder("127.0.0.1:1");
  req.set_prefix_blocks(8);
  {
    // Contexts end before Stop(): one holds its connection open.
    grpc::ClientContext ctx;
    tandem::v1::PrefillResponse resp;
    const grpc::Status s = stack_->prefill(0).Prefill(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.cached_prompt_tokens(), 0);
    EXPECT_EQ(resp.first_token().id(), Reference(ids, 1)[0].id);
    EXPECT_EQ(Pulls(0, "failed"), 1);
  }
  {
    // A prefix that would leave nothing to compute names the field.
    grpc::ClientContext ctx;
    tandem::v1::PrefillResponse resp;
    req.set_prefix_blocks(13);  // 208 tokens > the 199 before the last
    const grpc::Status s = stack_->prefill(0).Prefill(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("prefix_blocks"));
  }
  EXPECT_TRUE(stack_->Stop());
}

TEST(DnsTargetsTest, WorkersNamedByDnsAreSubscribedAndServe) {
  StackOptions o;
  o.model = ModelPath();
  o.prefill_workers = 2;
  o.dns_targets = true;
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::string metrics = stack->gateway_info().metrics_address;
  const std::vector<int32_t> ids = Prompt(100, 8, 1);
  const Completion c = Generate(stack->gateway(), Request(ids, 4));
  ExpectMatches(c, Reference(ids, 4));
  // Every worker the names resolved to has a stream and an index entry count.
  for (int w = 0; w < 2; ++w) {
    EXPECT_GE(MetricValue(metrics, Series("tandem_block_index_entries",
                                          "worker=\"" + stack->prefill_info(w).grpc_address +
                                              "\"")),
              0);
  }
  EXPECT_GE(MetricValue(metrics, Series("tandem_block_index_entries",
                                        "worker=\"" + stack->decode_info().grpc_address + "\"")),
            0);
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
