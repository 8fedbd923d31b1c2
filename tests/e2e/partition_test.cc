// A worker cut off by the network, the ways a fleet's network fails. A
// decode worker runs in its own network namespace (tests/e2e/netns.h) and,
// while a greedy stream is on it, every packet to and from it is dropped
// (a blackhole), or the link goes down, or packets are dropped one way
// only. Each fault is proven by a fresh connection that fails. The stream
// moves to the other decode worker and equals an undisturbed run token for
// token, with no error, within about a second with the default flags (the
// progress deadline adapted to the worker's pace; the keepalive would take
// 5 to 15 s); the gateway stops picking the cut-off worker at once. Then
// the network heals and the worker is used again. The same holds when the
// cut falls on a hand-off (the decode worker cut off from the prefill
// worker it fetches the KV from) and on a session's turn (the worker
// keeping the session's KV cut off mid-reply: the turn and those after it
// equal an undisturbed conversation). Needs root and nftables; skips with
// the reason where they are missing.
#include <csignal>
#include <functional>
#include <iostream>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/e2e/burst.h"
#include "tests/e2e/netns.h"
#include "tests/e2e/stack.h"
#include "tests/e2e/synthetic.h"

namespace tandem::testing {
namespace {

using Fault = WorkerNetwork::Fault;

int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// What every test here runs: decode worker 0 behind its own network (with
// both idle it takes the first stream: the lowest index wins a tie), the
// others and the prefill worker on the host, the prefill worker listening
// where the isolated worker reaches it (the host's end of its link) and the
// host does too.
class IsolatedDecodeWorker {
 protected:
  // Starts the stack with decode worker 0 in a network namespace of its
  // own; skips the test where namespaces or nftables cannot be used. The
  // caller returns when IsSkipped() or HasFatalFailure().
  void StartIsolated(StackOptions o) {
    absl::StatusOr<std::unique_ptr<WorkerNetwork>> net = WorkerNetwork::Create();
    if (!net.ok()) GTEST_SKIP() << net.status().message();
    net_ = std::move(*net);
    if (o.model.empty()) o.model = ModelPath();
    o.prefill_host = net_->host_ip();
    o.decode_wrap = {[n = net_.get()](const std::vector<std::string>& argv) {
      return n->Wrap(argv);
    }};
    o.decode_hosts = {net_->worker_ip()};
    stack_ = Stack::Start(o);
    ASSERT_NE(stack_, nullptr);
    ASSERT_TRUE(stack_->AwaitGatewaySynced());
    all_ = MetricValue(stack_->gateway_info().metrics_address,
                       "tandem_decode_kv_capacity_tokens");
    port_ = PortOf(stack_->decode_info(0).grpc_address);
  }
  static bool Stopped() {
    return ::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure();
  }
  // Heals the network; decode worker 0 then answers, is counted and serves
  // again. Stops the stack.
  void HealAndExpectServed();

  std::unique_ptr<WorkerNetwork> net_;
  std::unique_ptr<Stack> stack_;
  double all_ = 0;  // the decode KV capacity with every worker counted
  int port_ = 0;    // decode worker 0's gRPC port
};

// Reads a Generate or Chat stream to its end. `inject` runs after each
// message with the tokens so far until it returns true (it made the fault);
// from then on the longest wait between messages is measured.
struct Watched {
  Completion c;
  absl::Duration longest;  // after the fault
};
Watched ReadWatched(grpc::ClientReader<tandem::v1::GenerateResponse>& reader,
                    const std::function<bool(size_t tokens)>& inject) {
  Watched w;
  tandem::v1::GenerateResponse resp;
  absl::Time last = absl::Now();
  bool injected = false;
  while (reader.Read(&resp)) {
    const absl::Time now = absl::Now();
    if (injected) w.longest = std::max(w.longest, now - last);
    last = now;
    for (const auto& t : resp.tokens()) w.c.tokens.push_back(t);
    if (resp.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) w.c.usage = resp.usage();
    if (!injected && inject(w.c.tokens.size())) {
      injected = true;
      last = absl::Now();
    }
  }
  w.c.status = reader.Finish();
  return w;
}

// Once the gateway counts every decode worker again (the worker's event
// stream may wait out TCP's retransmission backoff), requests go on until
// decode worker 0 has served one, each completing without error wherever
// it runs (the gateway's old connection may still be stuck, or its
// keepalive may break it now).
void IsolatedDecodeWorker::HealAndExpectServed() {
  ASSERT_TRUE(net_->Heal().ok());
  EXPECT_TRUE(net_->Connects(port_, absl::Seconds(5)));
  const double all = all_;
  EXPECT_EQ(AwaitMetric(stack_->gateway_info().metrics_address,
                        "tandem_decode_kv_capacity_tokens",
                        [all](double v) { return v >= all; }, absl::Seconds(30)),
            all);
  const std::string worker_metrics = stack_->decode_info(0).metrics_address;
  const double before = MetricValue(worker_metrics, "tandem_generated_tokens_total");
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    const Completion after = Generate(stack_->gateway(), Request(Prompt(24, 8, 30 + i), 16));
    EXPECT_TRUE(after.status.ok()) << after.status.error_message();
    served = MetricValue(worker_metrics, "tandem_generated_tokens_total") > before;
  }
  EXPECT_TRUE(served) << "the healed worker served nothing";
  stack_->Stop();
}

class PartitionTest : public ::testing::TestWithParam<Fault>, protected IsolatedDecodeWorker {};
class PartitionHandOffTest : public ::testing::Test, protected IsolatedDecodeWorker {};
class PartitionSessionTest : public ::testing::Test, protected IsolatedDecodeWorker {};
class PartitionBurstTest : public ::testing::Test, protected IsolatedDecodeWorker {};

TEST_P(PartitionTest, AStreamOnACutOffDecodeWorkerMovesOnAndTheWorkerReturnsWhenHealed) {
  StackOptions o;
  o.decode_workers = 2;
  // Least-loaded routing: with both idle the lowest index wins, so the
  // requests after the heal go to the healed worker whatever the others'
  // caches hold.
  o.gateway_flags = {"--router", "least-loaded"};
  StartIsolated(o);
  if (Stopped()) return;
  WorkerNetwork& n = *net_;
  Stack* stack = stack_.get();
  const std::string gateway = stack->gateway_info().metrics_address;
  const int port = port_;
  ASSERT_TRUE(n.Connects(port, absl::Seconds(5)));

  const std::vector<int32_t> ids = Prompt(40, 8, 21);
  constexpr int32_t kTokens = 1500;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  auto reader = stack->gateway().Generate(&ctx, Request(ids, kTokens));
  const Watched w = ReadWatched(*reader, [&](size_t tokens) {
    if (tokens < 3) return false;
    // The stream is on the isolated worker.
    grpc::ClientContext stats_ctx;
    tandem::v1::WorkerStats stats;
    EXPECT_TRUE(stack->decode(0).GetWorkerStats(&stats_ctx, {}, &stats).ok());
    EXPECT_GT(stats.running(), 0) << "the stream is not on the isolated worker";
    EXPECT_TRUE(n.Inject(GetParam()).ok());
    // The fault holds: a fresh connection does not get through.
    EXPECT_FALSE(n.Connects(port, absl::Milliseconds(300))) << FaultName(GetParam());
    return true;
  });
  std::cout << FaultName(GetParam()) << ": the client's longest wait after the fault "
            << w.longest << "\n";
  ExpectMatches(w.c, Reference(ids, kTokens));
  EXPECT_EQ(w.c.usage.migrations(), 1);

  // The gateway stopped counting the cut-off worker the moment the stream
  // left it, and no longer picks it: a new stream runs on the other worker
  // without a migration.
  const double one = MetricValue(gateway, "tandem_decode_kv_capacity_tokens");
  EXPECT_LT(one, all_);
  const Completion next = Generate(stack->gateway(), Request(Prompt(24, 8, 29), 32));
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(next.usage.migrations(), 0);

  HealAndExpectServed();
}

// A hand-off whose KV fetch is cut off: the decode worker, which took the
// stream, can no longer reach the prefill worker (every packet between them
// dropped on the connection it fetched over before) while both still
// answer the gateway. The fetch receives nothing; after its stall timeout
// the decode worker gives the stream back and the gateway resumes it on the
// other decode worker. The client sees its first token, a pause of about a
// second, then the rest, equal to an undisturbed run.
TEST_F(PartitionHandOffTest, AHandOffWhoseKvFetchIsCutOffResumesOnAnotherDecodeWorker) {
  StackOptions o;
  o.decode_workers = 2;
  o.gateway_flags = {"--router", "least-loaded"};
  StartIsolated(o);
  if (Stopped()) return;
  WorkerNetwork& n = *net_;
  Stack* stack = stack_.get();
  const int prefill_port = PortOf(stack->prefill_info(0).grpc_address);
  const std::string isolated = stack->decode_info(0).metrics_address;
  const std::string gateway = stack->gateway_info().metrics_address;

  // A first stream on the isolated worker: it fetches from the prefill
  // worker, so the connection the cut falls on is an established one.
  const Completion warm = Generate(stack->gateway(), Request(Prompt(16, 8, 40), 8));
  ASSERT_TRUE(warm.status.ok()) << warm.status.error_message();
  ASSERT_GT(MetricValue(isolated, "tandem_generated_tokens_total"), 0)
      << "the first stream did not run on the isolated worker";
  ASSERT_TRUE(n.ConnectsFromWorker(prefill_port, absl::Seconds(5)));

  ASSERT_TRUE(n.CutFromHostPort(prefill_port).ok());
  // The cut holds, and only on that path: the gateway still reaches the
  // decode worker.
  ASSERT_FALSE(n.ConnectsFromWorker(prefill_port, absl::Milliseconds(300)));
  ASSERT_TRUE(n.Connects(port_, absl::Seconds(5)));
  const double failures_before =
      MetricValue(isolated, "tandem_kv_transfer_failures_total{side=\"decode\"}");

  const std::vector<int32_t> ids = Prompt(40, 8, 41);
  constexpr int32_t kTokens = 200;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  auto reader = stack->gateway().Generate(&ctx, Request(ids, kTokens));
  // The fault is in place before the hand-off: the wait is measured from
  // the first token (the prefill's), which arrives before the fetch.
  const Watched w = ReadWatched(*reader, [](size_t tokens) { return tokens >= 1; });
  std::cout << "hand-off fetch cut off: the client's longest wait after its first token "
            << w.longest << "\n";
  ExpectMatches(w.c, Reference(ids, kTokens));
  EXPECT_EQ(w.c.usage.migrations(), 1);
  // It was the fetch that failed, on the isolated worker.
  EXPECT_EQ(MetricValue(isolated, "tandem_kv_transfer_failures_total{side=\"decode\"}"),
            failures_before + 1);
  // The decode worker was not at fault as far as the gateway can tell: it
  // still counts.
  EXPECT_EQ(MetricValue(gateway, "tandem_decode_kv_capacity_tokens"), all_);

  // Serving again after the heal takes a fetch from the prefill worker.
  HealAndExpectServed();
}

// Turn 1's reply is long: the fault falls in it.
tandem::v1::ChatRequest Turn(const std::string& session, int turn) {
  tandem::v1::ChatRequest req;
  req.set_session_id(session);
  req.set_message(absl::StrCat("Tell me what Tom did on day ", turn, "."));
  req.set_max_tokens(turn == 1 ? 1200 : 24);
  req.set_ignore_eos(true);
  req.set_top_logprobs(3);
  return req;
}

std::string NewSession(tandem::v1::Generation::Stub& stub) {
  grpc::ClientContext ctx;
  tandem::v1::CreateSessionRequest req;
  req.set_system_prompt("A story about a cat named Tom.");
  req.mutable_window()->set_max_tokens(1800);
  tandem::v1::SessionInfo info;
  const grpc::Status s = stub.CreateSession(&ctx, req, &info);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return info.session_id();
}

// A session's turn while the decode worker keeping its KV (and a copy of
// its record) is cut off mid-reply: the reply moves to the other decode
// worker, and it and the turns after it equal an undisturbed conversation,
// each turn's first token coming within the progress deadline's second or
// two (nothing waits on the cut-off worker once the gateway knows).
TEST_F(PartitionSessionTest, ATurnWhoseKvHolderIsCutOffMovesOnAndTheSessionGoesOn) {
  StackOptions o;
  o.decode_workers = 2;
  o.gateway_flags = {"--router", "least-loaded"};
  StartIsolated(o);
  if (Stopped()) return;
  WorkerNetwork& n = *net_;
  Stack* stack = stack_.get();
  const int port = port_;
  constexpr int kTurns = 4;
  std::vector<Completion> undisturbed;
  {
    const std::string id = NewSession(stack->gateway());
    for (int turn = 0; turn < kTurns; ++turn) {
      undisturbed.push_back(Chat(stack->gateway(), Turn(id, turn)));
      ASSERT_TRUE(undisturbed.back().status.ok()) << undisturbed.back().status.error_message();
    }
    grpc::ClientContext ctx;
    tandem::v1::CloseSessionRequest close;
    close.set_session_id(id);
    tandem::v1::CloseSessionResponse closed;
    ASSERT_TRUE(stack->gateway().CloseSession(&ctx, close, &closed).ok());
  }
  auto pinned = [&](int worker) {
    grpc::ClientContext ctx;
    tandem::v1::WorkerStats stats;
    EXPECT_TRUE(stack->decode(worker).GetWorkerStats(&ctx, {}, &stats).ok());
    return stats.sessions_pinned();
  };
  // Both idle again once the closed session's KV is let go.
  const absl::Time idle_by = absl::Now() + absl::Seconds(10);
  while ((pinned(0) > 0 || pinned(1) > 0) && absl::Now() < idle_by) {
    absl::SleepFor(absl::Milliseconds(20));
  }

  const std::string id = NewSession(stack->gateway());
  ExpectSameTokens(Chat(stack->gateway(), Turn(id, 0)), undisturbed[0], "turn 0");
  ASSERT_GT(pinned(0), 0) << "the session's KV is not on the isolated worker";
  absl::Duration worst;
  for (int turn = 1; turn < kTurns; ++turn) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
    const absl::Time asked = absl::Now();
    absl::Time first_token = absl::InfiniteFuture();
    auto reader = stack->gateway().Chat(&ctx, Turn(id, turn));
    const Watched w = ReadWatched(*reader, [&](size_t tokens) {
      if (tokens == 0) return false;
      if (first_token == absl::InfiniteFuture()) first_token = absl::Now();
      if (turn != 1 || tokens < 3) return turn != 1;
      EXPECT_TRUE(n.Inject(Fault::kBlackhole).ok());
      EXPECT_FALSE(n.Connects(port, absl::Milliseconds(300)));
      return true;
    });
    ExpectSameTokens(w.c, undisturbed[turn], absl::StrCat("turn ", turn));
    if (turn == 1) {
      EXPECT_EQ(w.c.usage.migrations(), 1);
    }
    worst = std::max({worst, w.longest, first_token - asked});
    std::cout << "turn " << turn << ": first token after " << (first_token - asked)
              << ", longest wait after the fault " << w.longest << "\n";
  }
  std::cout << "session turns with the KV holder cut off: the client's longest wait " << worst
            << "\n";

  HealAndExpectServed();
}

// 2048 streams at once while a decode worker is cut off (every packet
// dropped) and the gateway cannot know it yet (no reset; the keepalive is
// 10 s away): the streams sent there move on after the progress deadline,
// and the other worker's refusals at the hand-off wait for room. Every
// stream completes or is refused before its first token.
TEST_F(PartitionBurstTest, ABurstDuringABlackholeIsRefusedOnlyBeforeItsFirstToken) {
  StackOptions o;
  o.decode_workers = 2;
  StartIsolated(o);
  if (Stopped()) return;
  WorkerNetwork& n = *net_;
  Stack* stack = stack_.get();
  ASSERT_TRUE(n.Inject(Fault::kBlackhole).ok());
  ASSERT_FALSE(n.Connects(port_, absl::Milliseconds(300)));
  constexpr int kStreams = 2048;
  constexpr int32_t kTokens = 32;
  Outcomes outcomes;
  ASSERT_TRUE(RunBurst(stack->gateway(), kStreams, kTokens, absl::Seconds(600), outcomes));
  const auto [completed, refused] = ExpectCompletedOrRefusedEarly(outcomes, kTokens);
  std::cout << "burst during a blackhole: " << completed << " completed, " << refused
            << " refused before their first token\n";
  EXPECT_GT(completed, 0);
  ASSERT_TRUE(n.Heal().ok());
  stack_->Stop();
}

INSTANTIATE_TEST_SUITE_P(Faults, PartitionTest,
                         ::testing::Values(Fault::kBlackhole, Fault::kLinkDown,
                                           Fault::kDropToWorker, Fault::kDropFromWorker),
                         [](const ::testing::TestParamInfo<Fault>& info) {
                           return std::string(FaultName(info.param));
                         });

// Networks made side by side (here in one process; ctest runs test
// processes side by side too) never share a subnet: if they did, one
// test's packets would be routed into the other's namespace.
TEST(WorkerNetworkTest, NetworksMadeSideBySideHaveSubnetsOfTheirOwn) {
  std::vector<std::unique_ptr<WorkerNetwork>> nets;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::unique_ptr<WorkerNetwork>> net = WorkerNetwork::Create();
    if (!net.ok()) GTEST_SKIP() << net.status().message();
    for (const auto& other : nets) {
      EXPECT_NE((*net)->host_ip(), other->host_ip());
      EXPECT_NE((*net)->worker_ip(), other->worker_ip());
    }
    nets.push_back(std::move(*net));
  }
}

}  // namespace
}  // namespace tandem::testing
