// Worker faults never reach the client, over real processes: a decode worker
// killed (kill -9) in the middle of a stream, with a second decode worker
// up, and the stream completes, equal token for token to an uninterrupted
// greedy (or seeded) run, with the migration in its usage; a prefill worker
// killed under its request or during its hand-off, and the request is
// prefilled elsewhere; a stopped worker left at the keepalive or at the
// progress deadline; decode workers down at a stream's hand-off, waited for
// with its lease (no second migration) or failing it after the wait; the
// gateway's health follows whether its workers are reachable; SIGTERM
// drains the gateway's streams before it exits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <iostream>
#include <thread>
#include <tuple>

#include "rpc/health.h"
#include "tests/e2e/stack.h"
#include "tests/e2e/synthetic.h"

namespace tandem::testing {
namespace {

// A stream read to its end; the first `pause_after` tokens are read before
// `at_pause` runs (the fault is injected there).
Completion ReadWithFault(tandem::v1::Generation::Stub& stub,
                         const tandem::v1::GenerateRequest& req, size_t pause_after,
                         const std::function<void()>& at_pause,
                         absl::Duration* longest_gap = nullptr) {
  Completion c;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub.Generate(&ctx, req);
  tandem::v1::GenerateResponse resp;
  bool paused = false;
  absl::Time last = absl::Now();
  while (reader->Read(&resp)) {
    // The client's view of the fault: its longest wait between messages.
    const absl::Time now = absl::Now();
    if (longest_gap != nullptr) *longest_gap = std::max(*longest_gap, now - last);
    last = now;
    for (const auto& t : resp.tokens()) c.tokens.push_back(t);
    if (resp.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) c.usage = resp.usage();
    if (!paused && c.tokens.size() >= pause_after) {
      paused = true;
      at_pause();
    }
  }
  c.status = reader->Finish();
  return c;
}

// (sampled, speculating): greedy or seeded sampling, and decode workers
// that speculate by prompt lookup (the stream resumes on the other worker,
// which speculates from where it took over) or not.
class DecodeKillTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(DecodeKillTest, ADecodeWorkerKilledMidStreamIsInvisibleToTheClient) {
  // Greedy, or seeded sampling: the sampler continues where it was.
  const auto [sampled, speculating] = GetParam();
  StackOptions o;
  o.model = ModelPath();
  o.decode_workers = 2;
  if (speculating) o.decode_flags = {"--speculative=prompt-lookup"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::vector<int32_t> ids = Prompt(40, 8, 11);
  constexpr int32_t kTokens = 1500;
  tandem::v1::GenerateRequest req = Request(ids, kTokens);
  engine::SamplingParams sampling;
  if (sampled) {
    sampling.temperature = 0.8f;
    sampling.seed = 7;
    req.mutable_sampling()->set_temperature(0.8f);
    req.mutable_sampling()->set_seed(7);
  }
  int killed = -1;
  absl::Duration stall;
  const Completion c = ReadWithFault(
      stack->gateway(), req, 3,
      [&] {
        killed = BusyDecodeWorker(*stack, 2);
        ASSERT_GE(killed, 0);
        // Stopped first so it cannot finish the stream before it dies.
        stack->decode_process(killed).Signal(SIGSTOP);
        stack->decode_process(killed).Signal(SIGKILL);
      },
      &stall);
  std::cout << "decode worker killed: the client's longest wait " << stall << "\n";
  ExpectMatches(c, Reference(ids, kTokens, sampling));
  EXPECT_EQ(c.usage.migrations(), 1);
  EXPECT_EQ(c.usage.completion_tokens(), kTokens);
  EXPECT_EQ(MetricValue(stack->gateway_info().metrics_address, "tandem_migrations_total"), 1);
  if (speculating) {
    EXPECT_GT(c.usage.speculative_proposed_tokens(), 0);
    if (!sampled) {
      EXPECT_GT(c.usage.speculative_accepted_tokens(), 0);
    }
  } else {
    EXPECT_EQ(c.usage.speculative_proposed_tokens(), 0);
  }
  stack->Stop();  // the killed worker exits by SIGKILL, not 0
}

INSTANTIATE_TEST_SUITE_P(GreedySampledAndSpeculating, DecodeKillTest,
                         ::testing::Values(std::make_tuple(false, false),
                                           std::make_tuple(true, false),
                                           std::make_tuple(false, true),
                                           std::make_tuple(true, true)));

TEST(MigrationTest, APrefillWorkerDyingUnderItsRequestIsInvisibleToTheClient) {
  // Two idle prefill workers: a tie goes to worker 0, which is stopped before
  // the request arrives and killed once the gateway has sent it there; the
  // request is prefilled again on worker 1.
  StackOptions o;
  o.model = ModelPath();
  o.prefill_workers = 2;
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::string gateway = stack->gateway_info().metrics_address;
  // Routed: by the index (nothing cached anywhere), or before the index has
  // heard from any worker.
  auto routed = [&] {
    double n = 0;
    for (const char* reason : {"no_overlap", "no_index"}) {
      n += std::max(0.0, MetricValue(gateway, Series("tandem_router_decisions_total",
                                                      std::string("reason=\"") + reason +
                                                          "\",role=\"prefill\"")));
    }
    return n;
  };
  // The gateway knows both prefill workers reachable: a tie goes to worker 0.
  EXPECT_TRUE(stack->AwaitGatewaySynced());
  process::Subprocess& p0 = stack->prefill_process(0);
  p0.Signal(SIGSTOP);
  const std::vector<int32_t> ids = Prompt(300, 8, 12);
  Completion c;
  const absl::Time asked = absl::Now();
  absl::Time answered;
  std::thread client([&] {
    c = Generate(stack->gateway(), Request(ids, 40));
    answered = absl::Now();
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (routed() < 1 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(routed(), 1);
  const absl::Time killed = absl::Now();
  p0.Signal(SIGKILL);
  client.join();
  std::cout << "prefill worker killed under its request: answered " << (answered - killed)
            << " after the kill (" << (answered - asked) << " after the request)\n";
  ExpectMatches(c, Reference(ids, 40));
  EXPECT_EQ(MetricValue(gateway, "tandem_prefill_retries_total"), 1);
  stack->Stop();  // worker 0 exits by SIGKILL, not 0
}

// A prefill worker stopped (SIGSTOP) under its request, and left stopped:
// its prefill sends nothing until it ends, so the gateway probes the worker
// while the call is out; the probe goes unanswered, the request is
// prefilled on worker 1 with no error, and once continued worker 0 serves
// again.
TEST(MigrationTest, APrefillWorkerStoppedUnderItsRequestIsInvisibleToTheClient) {
  StackOptions o;
  o.model = ModelPath();
  o.prefill_workers = 2;
  // Its later 32-token prompts go to a prefill worker, not the decode one.
  o.gateway_flags = {"--local-prefill-tokens", "0"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  EXPECT_TRUE(stack->AwaitGatewaySynced());
  const std::string gateway = stack->gateway_info().metrics_address;
  process::Subprocess& p0 = stack->prefill_process(0);
  p0.Signal(SIGSTOP);
  const std::vector<int32_t> ids = Prompt(300, 8, 13);
  const absl::Time asked = absl::Now();
  const Completion c = Generate(stack->gateway(), Request(ids, 40));
  std::cout << "prefill worker stopped under its request: answered " << (absl::Now() - asked)
            << " after the request\n";
  ExpectMatches(c, Reference(ids, 40));
  EXPECT_EQ(MetricValue(gateway, "tandem_prefill_retries_total"), 1);
  EXPECT_EQ(MetricValue(gateway, "tandem_progress_timeouts_total"), 1);

  p0.Signal(SIGCONT);
  const std::string p0_metrics = stack->prefill_info(0).metrics_address;
  const double before = MetricValue(p0_metrics, "tandem_prompt_tokens_total");
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    // A prompt no worker holds any of: a tie, which worker 0 wins once
    // the gateway counts it again.
    const Completion after =
        Generate(stack->gateway(), Request(Prompt(24, 8, 50 + i, /*group=*/100 + i), 8));
    EXPECT_TRUE(after.status.ok()) << after.status.error_message();
    served = MetricValue(p0_metrics, "tandem_prompt_tokens_total") > before;
  }
  EXPECT_TRUE(served) << "the continued prefill worker served nothing";
  stack->Stop();
}

// The gateway's health (for "" and for tandem.v1.Generation by name)
// follows its workers: NOT_SERVING once no prefill worker is reachable.
TEST(GatewayHealthTest, FollowsTheWorkers) {
  auto stack = Stack::Start(ModelPath());
  ASSERT_NE(stack, nullptr);
  auto channel =
      grpc::CreateChannel(stack->gateway_info().grpc_address, grpc::InsecureChannelCredentials());
  auto await = [&](const std::string& service, rpc::HealthState want) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    absl::StatusOr<rpc::HealthState> got = rpc::CheckHealth(channel, service);
    while ((!got.ok() || *got != want) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
      got = rpc::CheckHealth(channel, service);
    }
    return got.ok() && *got == want;
  };
  EXPECT_TRUE(await("", rpc::HealthState::kServing));
  EXPECT_TRUE(await("tandem.v1.Generation", rpc::HealthState::kServing));
  stack->prefill_process().Signal(SIGKILL);
  EXPECT_TRUE(await("", rpc::HealthState::kNotServing));
  EXPECT_TRUE(await("tandem.v1.Generation", rpc::HealthState::kNotServing));
  channel.reset();
  stack->Stop();
}

// SIGTERM drains: the gateway refuses new streams, lets the one in flight
// finish, and exits 0. Its plaintext health port (the kubelet's probes)
// turns not ready at once and stays live until the process exits.
TEST(DrainTest, ASigtermedGatewayFinishesItsStreamsAndExitsZero) {
  StackOptions o;
  o.model = ModelPath();
  o.gateway_flags = {"--health-listen=127.0.0.1:0"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  auto probe = grpc::CreateChannel(stack->gateway_info().health_address,
                                   grpc::InsecureChannelCredentials());
  const std::vector<int32_t> ids = Prompt(40, 8, 13);
  constexpr int32_t kTokens = 1500;
  Completion late;
  absl::StatusOr<rpc::HealthState> ready;
  absl::StatusOr<rpc::HealthState> live;
  const Completion c = ReadWithFault(stack->gateway(), Request(ids, kTokens), 3, [&] {
    stack->gateway_process().Signal(SIGTERM);
    // Once the drain has begun, new streams are refused while the old one
    // finishes.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    ready = rpc::CheckHealth(probe);
    while (ready.ok() && *ready == rpc::HealthState::kServing && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
      ready = rpc::CheckHealth(probe);
    }
    live = rpc::CheckHealth(probe, "liveness");
    auto fresh = grpc::CreateChannel(stack->gateway_info().grpc_address,
                                     grpc::InsecureChannelCredentials());
    late = Generate(*tandem::v1::Generation::NewStub(fresh), Request(ids, 4));
  });
  ExpectMatches(c, Reference(ids, kTokens));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(*ready, rpc::HealthState::kNotServing);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(*live, rpc::HealthState::kServing);
  EXPECT_FALSE(late.status.ok());
  EXPECT_EQ(stack->gateway_process().Wait(), 0);
  EXPECT_TRUE(stack->Stop());
}

// A decode worker that stops answering (SIGSTOP) mid-stream is found out,
// and the stream moves on: by the gateway's keepalive pings, or, with
// keepalive off, by the per-step progress deadline alone (the worker holds
// its stream open but sends nothing).
struct StoppedWorkerCase {
  const char* name;
  std::vector<std::string> gateway_flags;
  double progress_timeouts;  // tandem_progress_timeouts_total after the stream
};

class StoppedDecodeWorkerTest : public ::testing::TestWithParam<StoppedWorkerCase> {};

TEST_P(StoppedDecodeWorkerTest, TheStreamMovesOn) {
  StackOptions o;
  o.model = ModelPath();
  o.decode_workers = 2;
  o.gateway_flags = GetParam().gateway_flags;
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::vector<int32_t> ids = Prompt(40, 8, 14);
  constexpr int32_t kTokens = 1500;
  int stopped = -1;
  absl::Duration stall;
  const Completion c = ReadWithFault(
      stack->gateway(), Request(ids, kTokens), 3,
      [&] {
        stopped = BusyDecodeWorker(*stack, 2);
        ASSERT_GE(stopped, 0);
        stack->decode_process(stopped).Signal(SIGSTOP);
      },
      &stall);
  ASSERT_GE(stopped, 0);
  std::cout << GetParam().name << ": the client's longest wait " << stall << "\n";
  ExpectMatches(c, Reference(ids, kTokens));
  EXPECT_EQ(c.usage.migrations(), 1);
  EXPECT_EQ(MetricValue(stack->gateway_info().metrics_address, "tandem_progress_timeouts_total"),
            GetParam().progress_timeouts);
  stack->decode_process(stopped).Signal(SIGKILL);
  stack->Stop();
}

INSTANTIATE_TEST_SUITE_P(
    KeepaliveOrProgressDeadline, StoppedDecodeWorkerTest,
    ::testing::Values(
        // The pings alone (the adaptive deadline held off).
        StoppedWorkerCase{"Keepalive",
                          {"--keepalive-ms", "300", "--keepalive-timeout-ms", "300",
                           "--progress-timeout-floor-ms", "15000"},
                          0},
        StoppedWorkerCase{"ProgressDeadline",
                          {"--keepalive-ms", "0", "--progress-timeout-ms", "500"},
                          1},
        // The defaults (pings every 10 s): the deadline adapted to the
        // worker's pace moves the stream after about a second.
        StoppedWorkerCase{"AdaptiveDeadline", {}, 1}),
    [](const ::testing::TestParamInfo<StoppedWorkerCase>& info) { return info.param.name; });

// A hand-off whose decode worker cannot be reached (one restarting refuses
// connections) loses nothing but the attempt: the lease is kept and the
// stream waits for a worker to come back, with no further migration. Both
// decode workers go down under a stream: the idle one first (the gateway
// sees it go), then the stream's own, which migrates the stream once;
// neither is reachable for its hand-off.
struct BothDecodeWorkersDown {
  std::unique_ptr<Stack> stack;
  int busy = -1;
  Completion c;
};

BothDecodeWorkersDown KillBothDecodeWorkersUnderAStream(
    const std::vector<std::string>& gateway_flags, const std::vector<int32_t>& ids, int32_t tokens,
    const std::function<void(Stack&, int busy)>& while_down) {
  BothDecodeWorkersDown r;
  StackOptions o;
  o.model = ModelPath();
  o.decode_workers = 2;
  o.gateway_flags = gateway_flags;
  r.stack = Stack::Start(o);
  if (r.stack == nullptr) return r;
  EXPECT_TRUE(r.stack->AwaitGatewaySynced());
  Stack& s = *r.stack;
  const std::string metrics = s.gateway_info().metrics_address;
  r.c = ReadWithFault(s.gateway(), Request(ids, tokens), 3, [&] {
    r.busy = BusyDecodeWorker(s, 2);
    ASSERT_GE(r.busy, 0);
    process::Subprocess& idle = s.decode_process(1 - r.busy);
    idle.Signal(SIGKILL);
    idle.Wait();
    EXPECT_LE(AwaitMetric(
                  metrics, "tandem_synced_workers{role=\"decode\"}",
                  [](double v) { return v <= 1; }, absl::Seconds(30)),
              1);
    s.decode_process(r.busy).Signal(SIGKILL);
    s.decode_process(r.busy).Wait();
    // The migrated stream's hand-off found them both down.
    EXPECT_GE(AwaitMetric(
                  metrics, "tandem_decode_retries_total", [](double v) { return v >= 2; },
                  absl::Seconds(30)),
              2);
    while_down(s, r.busy);
  });
  return r;
}

TEST(MigrationTest, DecodeWorkersRestartingAtTheHandOffCostNoFurtherMigration) {
  const std::vector<int32_t> ids = Prompt(40, 8, 17);
  constexpr int32_t kTokens = 1500;
  BothDecodeWorkersDown r = KillBothDecodeWorkersUnderAStream(
      {"--keepalive-ms", "300", "--keepalive-timeout-ms", "300"}, ids, kTokens,
      [](Stack& s, int busy) { EXPECT_TRUE(s.RestartDecode(1 - busy)); });
  ASSERT_NE(r.stack, nullptr);
  ASSERT_TRUE(r.c.status.ok()) << r.c.status.error_message();
  ExpectMatches(r.c, Reference(ids, kTokens));
  EXPECT_EQ(r.c.usage.migrations(), 1);
  const std::string metrics = r.stack->gateway_info().metrics_address;
  EXPECT_EQ(MetricValue(metrics, "tandem_migrations_total"), 1);
  EXPECT_TRUE(r.stack->RestartDecode(r.busy));
  EXPECT_TRUE(WorkersIdle(*r.stack, absl::Seconds(30)));
  EXPECT_TRUE(r.stack->Stop());
}

// Ones that do not come back within --unavailable-wait-ms fail the stream
// UNAVAILABLE, saying so, and its lease is released.
TEST(MigrationTest, DecodeWorkersThatStayDownFailTheStreamAfterTheWait) {
  BothDecodeWorkersDown r = KillBothDecodeWorkersUnderAStream(
      {"--keepalive-ms", "300", "--keepalive-timeout-ms", "300", "--unavailable-wait-ms", "700"},
      Prompt(40, 8, 18), 1500, [](Stack&, int) {});
  ASSERT_NE(r.stack, nullptr);
  EXPECT_EQ(r.c.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.c.status.error_message(),
              ::testing::HasSubstr("no decode worker could be reached"));
  EXPECT_EQ(MetricValue(r.stack->gateway_info().metrics_address, "tandem_migrations_total"), 1);
  EXPECT_TRUE(r.stack->RestartDecode(0));
  EXPECT_TRUE(r.stack->RestartDecode(1));
  EXPECT_TRUE(WorkersIdle(*r.stack, absl::Seconds(30)));
  EXPECT_TRUE(r.stack->Stop());
}

// A prefill worker that dies after its prefill answered but before the
// decode worker fetched the KV (the hand-off): the decode worker is held
// (SIGSTOP) while the request's first token reaches the client, the prefill
// worker holding the lease is killed, and the decode worker let go: its
// fetch fails, and the stream is prefilled again on the other worker.
TEST(MigrationTest, APrefillWorkerDyingDuringTheHandOffIsInvisibleToTheClient) {
  StackOptions o;
  o.model = ModelPath();
  o.prefill_workers = 2;
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::vector<int32_t> ids = Prompt(300, 8, 16);
  // Connected to every worker before the decode worker stops: the Decode
  // call then waits on an open connection.
  EXPECT_TRUE(stack->AwaitGatewaySynced());
  process::Subprocess& decode = stack->decode_process();
  decode.Signal(SIGSTOP);
  int killed = -1;
  const Completion c = ReadWithFault(stack->gateway(), Request(ids, 40), 1, [&] {
    // The first token came from a prefill whose lease waits for the
    // stopped decode worker.
    for (int i = 0; i < 2 && killed < 0; ++i) {
      grpc::ClientContext ctx;
      tandem::v1::WorkerStats stats;
      if (stack->prefill(i).GetWorkerStats(&ctx, {}, &stats).ok() && stats.leases() > 0) {
        killed = i;
      }
    }
    ASSERT_GE(killed, 0);
    stack->prefill_process(killed).Signal(SIGKILL);
    stack->prefill_process(killed).Wait();
    decode.Signal(SIGCONT);
  });
  ExpectMatches(c, Reference(ids, 40));
  EXPECT_EQ(c.usage.migrations(), 1);
  stack->Stop();  // the killed worker exits by SIGKILL, not 0
}

}  // namespace
}  // namespace tandem::testing
