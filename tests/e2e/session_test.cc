// Sessions over real processes with stories260K: a REPREFILL session's
// every turn equals a fresh stateless Generate of the truncated
// conversation (ids and logprobs) over many evictions, whether a turn was
// prefilled on a prefill worker or, holding all but its new tokens, on its
// decode worker; turns alternating
// between two gateways equal a single-gateway run; a decode worker killed
// (kill -9) between turns loses no session, nor do two kills of its KV
// holder with one of three decode workers left (over seeds that vary the
// messages and the turns the kills come before), nor two losses with no turn
// between them (the records are re-replicated at once), nor a worker stuck or
// killed while the record is written to it; a 1000-turn conversation keeps
// the decode worker's pinned KV within its window; closing a session frees
// its KV at once, and its idle TTL reaches its record (the expiry itself is
// tests/decode_worker/session_expiry_test.cc's, on a fake clock); bad
// session requests name their field.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/e2e/stack.h"
#include "tests/test_paths.h"

// ASan's quarantine and shadow memory grow RSS by themselves; leaks there are
// LeakSanitizer's to find.
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_RSS_IS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_RSS_IS_MEANINGFUL 0
#endif
#endif
#ifndef TANDEM_RSS_IS_MEANINGFUL
#define TANDEM_RSS_IS_MEANINGFUL 1
#endif

namespace tandem::testing {
namespace {

using tandem::test_paths::StoriesPath;

tandem::v1::SessionInfo Create(
    tandem::v1::Generation::Stub& stub, int32_t window, grpc::Status* status = nullptr,
    int32_t ttl = 0, tandem::v1::WindowPolicy policy = tandem::v1::WINDOW_POLICY_UNSPECIFIED) {
  grpc::ClientContext ctx;
  tandem::v1::CreateSessionRequest req;
  req.set_system_prompt("A story about a cat named Tom.");
  req.mutable_window()->set_max_tokens(window);
  req.mutable_window()->set_policy(policy);
  req.set_idle_ttl_seconds(ttl);
  tandem::v1::SessionInfo info;
  const grpc::Status s = stub.CreateSession(&ctx, req, &info);
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  return info;
}

Completion Chat(tandem::v1::Generation::Stub& stub, const std::string& session,
                const std::string& message, int32_t max_tokens = 24, bool ignore_eos = false) {
  tandem::v1::ChatRequest req;
  req.set_session_id(session);
  req.set_message(message);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(ignore_eos);
  req.set_top_logprobs(3);
  return testing::Chat(stub, req);
}

tandem::v1::SessionInfo Get(tandem::v1::Generation::Stub& stub, const std::string& session,
                            grpc::Status* status = nullptr) {
  grpc::ClientContext ctx;
  tandem::v1::GetSessionRequest req;
  req.set_session_id(session);
  tandem::v1::SessionInfo info;
  const grpc::Status s = stub.GetSession(&ctx, req, &info);
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  return info;
}

std::string Message(int turn) { return absl::StrCat("Tell me what Tom did on day ", turn, "."); }

// The stateless request a client without sessions would send for the turn
// that produced the last reply of `info`: the conversation before it.
tandem::v1::GenerateRequest Stateless(const tandem::v1::SessionInfo& info, int32_t max_tokens) {
  tandem::v1::GenerateRequest req;
  for (int i = 0; i + 1 < info.messages_size(); ++i) *req.add_messages() = info.messages(i);
  req.set_max_tokens(max_tokens);
  req.set_top_logprobs(3);
  return req;
}

tandem::v1::WorkerStats Stats(Stack& stack, int decode) {
  grpc::ClientContext ctx;
  tandem::v1::WorkerStats stats;
  EXPECT_TRUE(stack.decode(decode).GetWorkerStats(&ctx, {}, &stats).ok());
  return stats;
}

// Polls decode worker 0 until it pins no KV (or 30 s pass); the last count.
int32_t AwaitUnpinned(Stack& stack) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  int32_t pinned = Stats(stack, 0).kv_blocks_pinned();
  while (pinned > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    pinned = Stats(stack, 0).kv_blocks_pinned();
  }
  return pinned;
}

// Kills (kill -9) the decode worker keeping a session's KV, among the
// first `workers` decode workers less those in `dead`, and returns its
// index (-1 when no one of them alone keeps any within 10 s: a previous
// holder lets go of its KV shortly after the turn that moved it).
int KillKvHolder(Stack& stack, int workers = 2, const std::vector<int>& dead = {}) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    std::vector<int> holders;
    for (int i = 0; i < workers; ++i) {
      if (std::find(dead.begin(), dead.end(), i) != dead.end()) continue;
      if (Stats(stack, i).sessions_pinned() > 0) holders.push_back(i);
    }
    if (holders.size() == 1) {
      stack.decode_process(holders[0]).Signal(SIGKILL);
      stack.decode_process(holders[0]).Wait();
      return holders[0];
    }
    if (absl::Now() >= deadline) return -1;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// The version of `session`'s record decode worker `decode` holds (0: none;
// a 5 s deadline: never asked of a stopped worker). A session's record is
// version 1 when created and each turn adds 1; a worker may keep a stale
// copy it was written before the copies moved.
uint64_t RecordVersion(Stack& stack, int decode, const std::string& session) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  tandem::v1::SessionKey key;
  key.set_session_id(session);
  tandem::v1::SessionRecord record;
  return stack.decode(decode).GetSession(&ctx, key, &record).ok() ? record.version() : 0;
}

// The decode workers among the first `workers`, less those in `dead`,
// holding version `version` (or newer) of `session`'s record.
std::vector<int> RecordHolders(Stack& stack, const std::string& session, uint64_t version,
                               int workers, const std::vector<int>& dead) {
  std::vector<int> out;
  for (int i = 0; i < workers; ++i) {
    if (std::find(dead.begin(), dead.end(), i) != dead.end()) continue;
    if (RecordVersion(stack, i, session) >= version) out.push_back(i);
  }
  return out;
}

// Polls until every live one of the first `workers` decode workers holds
// version `version` of `session`'s record (or 30 s pass); whether they do.
bool AwaitRecordOnEveryLiveWorker(Stack& stack, const std::string& session, uint64_t version,
                                  int workers, const std::vector<int>& dead) {
  const size_t live = static_cast<size_t>(workers) - dead.size();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (RecordHolders(stack, session, version, workers, dead).size() < live) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// The sum of one series over the stack's gateways.
double GatewaysMetric(Stack& stack, int gateways, const std::string& series) {
  double sum = 0;
  for (int g = 0; g < gateways; ++g) {
    sum += std::max(0.0, MetricValue(stack.gateway_info(g).metrics_address, series));
  }
  return sum;
}

void CloseNow(tandem::v1::Generation::Stub& stub, const std::string& session) {
  grpc::ClientContext ctx;
  tandem::v1::CloseSessionRequest close;
  close.set_session_id(session);
  tandem::v1::CloseSessionResponse closed;
  EXPECT_TRUE(stub.CloseSession(&ctx, close, &closed).ok());
}

// The undisturbed run a disturbed one is held to: one session of `window`,
// turn t sending messages[t] through gateway t % gateways, then closed so
// that its KV is no longer pinned. Fails the test when a turn does.
std::vector<Completion> Undisturbed(Stack& stack, int32_t window,
                                    const std::vector<std::string>& messages, int gateways) {
  std::vector<Completion> out;
  const std::string id = Create(stack.gateway(0), window).session_id();
  for (size_t turn = 0; turn < messages.size(); ++turn) {
    out.push_back(Chat(stack.gateway(static_cast<int>(turn) % gateways), id, messages[turn]));
    EXPECT_TRUE(out.back().status.ok()) << out.back().status.error_message();
  }
  CloseNow(stack.gateway(0), id);
  return out;
}

std::vector<std::string> Messages(int turns) {
  std::vector<std::string> out;
  for (int turn = 0; turn < turns; ++turn) out.push_back(Message(turn));
  return out;
}

// VmRSS of process `pid`, in KiB (-1 if unreadable).
int64_t RssKib(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kib = -1;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      return absl::SimpleAtoi(digits, &kib) ? kib : -1;
    }
  }
  return -1;
}

// Param: turns may be prefilled on their decode worker (conditional
// disaggregation), or always on a prefill worker, which then pulls the
// session's blocks from the decode worker keeping them.
class ReprefillTest : public ::testing::TestWithParam<bool> {};

TEST_P(ReprefillTest, TurnsEqualFreshRequestsOverManyEvictions) {
  const bool local = GetParam();
  StackOptions o;
  o.model = StoriesPath();
  if (!local) {
    o.gateway_flags = {"--session-local-prefill-tokens", "0", "--local-prefill-tokens", "0"};
  }
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  constexpr int32_t kWindow = 160;
  const tandem::v1::SessionInfo created = Create(stack->gateway(), kWindow);
  ASSERT_FALSE(created.session_id().empty());
  EXPECT_EQ(created.window().max_tokens(), kWindow);
  EXPECT_EQ(created.window().policy(), tandem::v1::WINDOW_POLICY_REPREFILL);
  EXPECT_GT(created.window().keep_first(), 0);  // the system prompt's tokens
  int64_t evicted = 0;
  for (int turn = 0; turn < 14; ++turn) {
    const Completion reply = Chat(stack->gateway(), created.session_id(), Message(turn));
    ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
    ASSERT_FALSE(reply.tokens.empty());
    const int32_t prompt = reply.usage.prompt_tokens();
    EXPECT_LE(prompt + reply.usage.completion_tokens(), kWindow) << "turn " << turn;
    evicted += reply.usage.session_tokens_evicted();
    const tandem::v1::SessionInfo info = Get(stack->gateway(), created.session_id());
    ASSERT_GE(info.messages_size(), 3);
    EXPECT_EQ(info.messages(0).role(), "system");
    EXPECT_EQ(info.messages(info.messages_size() - 2).content(), Message(turn));
    EXPECT_EQ(info.messages(info.messages_size() - 1).content(), reply.text);
    EXPECT_EQ(info.tokens_evicted(), evicted);
    EXPECT_LE(info.tokens_held(), kWindow) << "turn " << turn;
    const Completion fresh =
        Generate(stack->gateway(), Stateless(info, std::min(24, kWindow - prompt)));
    ASSERT_TRUE(fresh.status.ok()) << fresh.status.error_message();
    EXPECT_EQ(fresh.usage.prompt_tokens(), prompt) << "turn " << turn;
    ExpectSameTokens(reply, fresh, absl::StrCat("turn ", turn));
  }
  const tandem::v1::SessionInfo info = Get(stack->gateway(), created.session_id());
  EXPECT_GE(info.turns_evicted(), 5);
  EXPECT_GT(evicted, 0);
  EXPECT_EQ(info.turns_held() + info.turns_evicted(), 14);
  const double local_prefills =
      MetricValue(stack->gateway_info().metrics_address, "tandem_local_prefills_total");
  if (local) {
    // Turns whose decode worker held all but their new tokens were
    // prefilled there, and still equal the fresh requests.
    EXPECT_GT(local_prefills, 0);
  } else {
    EXPECT_EQ(local_prefills, 0);
    // The prefill worker took the session's blocks from the decode worker.
    EXPECT_GT(MetricValue(stack->decode_info().metrics_address,
                          "tandem_requests_total{code=\"OK\",method=\"ExportPrefix\"}"),
              0);
    EXPECT_GT(MetricValue(stack->prefill_info().metrics_address,
                          "tandem_prefix_pulled_tokens_total"),
              0);
  }
  // The kept system prompt's blocks came from the cache on later turns.
  EXPECT_GT(MetricValue(stack->decode_info().metrics_address,
                        "tandem_prefix_cache_hit_tokens_total{tier=\"device\"}") +
                MetricValue(stack->prefill_info().metrics_address,
                            "tandem_prefix_cache_hit_tokens_total{tier=\"device\"}"),
            0);
  EXPECT_TRUE(stack->Stop());
}

INSTANTIATE_TEST_SUITE_P(LocalPrefill, ReprefillTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OnDecode" : "Pulled"; });

TEST(SessionTest, TurnsAlternatingBetweenTwoGatewaysEqualOneGateway) {
  StackOptions o;
  o.model = StoriesPath();
  o.gateways = 2;
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::string alternating = Create(stack->gateway(0), 128).session_id();
  const std::string single = Create(stack->gateway(0), 128).session_id();
  for (int turn = 0; turn < 8; ++turn) {
    const Completion a = Chat(stack->gateway(turn % 2), alternating, Message(turn));
    const Completion b = Chat(stack->gateway(0), single, Message(turn));
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    ASSERT_TRUE(b.status.ok()) << b.status.error_message();
    ExpectSameTokens(a, b, absl::StrCat("turn ", turn));
  }
  const tandem::v1::SessionInfo from_second = Get(stack->gateway(1), alternating);
  EXPECT_EQ(from_second.turns_held() + from_second.turns_evicted(), 8);
  {
    // Scoped: a live context keeps its connection, which the gateway's
    // shutdown would wait for.
    grpc::ClientContext ctx;
    tandem::v1::ListSessionsResponse list;
    ASSERT_TRUE(stack->gateway(1).ListSessions(&ctx, {}, &list).ok());
    EXPECT_EQ(list.sessions_size(), 2);
  }
  EXPECT_TRUE(stack->Stop());
}

TEST(SessionTest, DecodeWorkerKilledBetweenTurnsLosesNoSession) {
  StackOptions o;
  o.model = StoriesPath();
  o.decode_workers = 2;
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::string id = Create(stack->gateway(), 128).session_id();
  ASSERT_TRUE(Chat(stack->gateway(), id, Message(0)).status.ok());
  ASSERT_TRUE(Chat(stack->gateway(), id, Message(1)).status.ok());
  // The worker keeping the session's KV.
  const int holder = KillKvHolder(*stack);
  ASSERT_GE(holder, 0);

  const Completion reply = Chat(stack->gateway(), id, Message(2));
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_TRUE(reply.usage.session_rebuilt());
  const tandem::v1::SessionInfo info = Get(stack->gateway(), id);
  EXPECT_EQ(info.turns_held() + info.turns_evicted(), 3);
  const Completion fresh = Generate(
      stack->gateway(), Stateless(info, std::min(24, 128 - reply.usage.prompt_tokens())));
  ASSERT_TRUE(fresh.status.ok()) << fresh.status.error_message();
  ExpectSameTokens(reply, fresh, "after the kill");
  // The survivor holds the session's KV now.
  EXPECT_GT(Stats(*stack, 1 - holder).sessions_pinned(), 0);
  // A dead worker exits non-zero; only the others are checked.
  EXPECT_FALSE(stack->Stop());
}

// Param: the seed that draws the turns' messages and the turns the two
// kills come before; 0 is the fixed scenario (kills before turns 5 and 9,
// counting from 1).
class SessionLossTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SessionLossTest, KvHolderKilledTwiceWithADecodeWorkerLeftLosesNoSession) {
  constexpr int32_t kWindow = 160;
  constexpr int kTurns = 12;
  std::mt19937 rng(GetParam());
  // The first kill before turn 2..5, the second 2..8 turns later (at most
  // before turn 10): each lands on a holder that has served turns.
  int first_kill = 4, second_kill = 8;
  if (GetParam() != 0) {
    first_kill = 2 + static_cast<int>(rng() % 4);
    second_kill = first_kill + 2 + static_cast<int>(rng() % (9 - first_kill));
  }
  const std::vector<std::string> names = {"Tom", "Lily", "Ben", "Sue", "Max"};
  const std::vector<std::string> places = {"park", "sea", "farm", "shop", "hill"};
  std::vector<std::string> messages;
  for (int turn = 0; turn < kTurns; ++turn) {
    const std::string& name = names[rng() % names.size()];
    const std::string& place = places[rng() % places.size()];
    if (GetParam() == 0) {
      messages.push_back(Message(turn));
    } else {
      messages.push_back(rng() % 2 == 0
                             ? absl::StrCat("Tell me what ", name, " did on day ", turn, ".")
                             : absl::StrCat("What did ", name, " see at the ", place, "?"));
    }
  }
  SCOPED_TRACE(absl::StrCat("seed ", GetParam(), ": kills before turns ", first_kill, " and ",
                            second_kill));
  StackOptions o;
  o.model = StoriesPath();
  o.decode_workers = 3;
  o.gateways = 2;
  o.gateway_flags = {"--keepalive-ms", "500", "--keepalive-timeout-ms", "1000"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  // The undisturbed run, then closed so that its KV is no longer pinned.
  const std::vector<Completion> undisturbed = Undisturbed(*stack, kWindow, messages, 2);
  if (HasFailure()) return;
  const std::string id = Create(stack->gateway(0), kWindow).session_id();
  std::vector<int> dead;
  for (int turn = 0; turn < kTurns; ++turn) {
    const bool kill = turn == first_kill || turn == second_kill;
    if (kill) {
      // The worker keeping the session's KV (and a copy of its record).
      const int holder = KillKvHolder(*stack, 3, dead);
      ASSERT_GE(holder, 0) << "turn " << turn;
      dead.push_back(holder);
      // Before the turn, the gateways have copied the record (its version
      // after `turn` turns) to every worker left (two after the first kill).
      EXPECT_TRUE(AwaitRecordOnEveryLiveWorker(*stack, id, turn + 1, 3, dead))
          << "turn " << turn;
    }
    const Completion reply = Chat(stack->gateway(turn % 2), id, messages[turn]);
    ASSERT_TRUE(reply.status.ok()) << "turn " << turn << ": " << reply.status.error_message();
    if (kill) {
      EXPECT_TRUE(reply.usage.session_rebuilt()) << "turn " << turn;
    }
    ExpectSameTokens(reply, undisturbed[turn], absl::StrCat("turn ", turn));
    EXPECT_LE(reply.usage.session_tokens_held(), kWindow) << "turn " << turn;
    const tandem::v1::SessionInfo info = Get(stack->gateway((turn + 1) % 2), id);
    EXPECT_EQ(info.turns_held() + info.turns_evicted(), turn + 1);
    EXPECT_LE(info.tokens_held(), kWindow) << "turn " << turn;
  }
  EXPECT_GE(GatewaysMetric(*stack, 2, "tandem_session_records_rereplicated_total"), 1);
  EXPECT_FALSE(stack->Stop());  // the killed workers' exits are not 0
}

INSTANTIATE_TEST_SUITE_P(Seeded, SessionLossTest, ::testing::Values(0u, 1u, 2u, 3u),
                         [](const auto& info) { return absl::StrCat("Seed", info.param); });

TEST(SessionTest, TwoLossesWithNoTurnBetweenLoseNoSession) {
  // The KV holder and the other worker with the record are lost one after
  // the other, no turn between: only the copy the gateway made after the
  // first loss keeps the session.
  constexpr int32_t kWindow = 160;
  constexpr int kTurns = 4;
  StackOptions o;
  o.model = StoriesPath();
  o.decode_workers = 3;
  o.gateway_flags = {"--keepalive-ms", "500", "--keepalive-timeout-ms", "1000"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::vector<Completion> undisturbed = Undisturbed(*stack, kWindow, Messages(kTurns), 1);
  if (HasFailure()) return;
  const std::string id = Create(stack->gateway(), kWindow).session_id();
  for (int turn = 0; turn < 2; ++turn) {
    const Completion reply = Chat(stack->gateway(), id, Message(turn));
    ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
    ExpectSameTokens(reply, undisturbed[turn], absl::StrCat("turn ", turn));
  }
  // Two turns: version 3, on the KV holder and one other worker (a third
  // may keep a stale copy from before the first turn moved them).
  std::vector<int> copies = RecordHolders(*stack, id, 3, 3, {});
  ASSERT_EQ(copies.size(), 2u);
  std::vector<int> dead;
  const int holder = KillKvHolder(*stack, 3);
  ASSERT_GE(holder, 0);
  dead.push_back(holder);
  ASSERT_NE(std::find(copies.begin(), copies.end(), holder), copies.end());
  const int second = copies[0] == holder ? copies[1] : copies[0];
  // Without a turn, the record is on both workers left...
  ASSERT_TRUE(AwaitRecordOnEveryLiveWorker(*stack, id, /*version=*/3, 3, dead));
  EXPECT_GE(MetricValue(stack->gateway_info().metrics_address,
                        "tandem_session_records_rereplicated_total"),
            1);
  // ...so losing the one that had a copy before leaves it on the other.
  stack->decode_process(second).Signal(SIGKILL);
  stack->decode_process(second).Wait();
  for (int turn = 2; turn < kTurns; ++turn) {
    const Completion reply = Chat(stack->gateway(), id, Message(turn));
    ASSERT_TRUE(reply.status.ok()) << "turn " << turn << ": " << reply.status.error_message();
    if (turn == 2) {
      EXPECT_TRUE(reply.usage.session_rebuilt());
    }
    ExpectSameTokens(reply, undisturbed[turn], absl::StrCat("turn ", turn));
  }
  EXPECT_FALSE(stack->Stop());  // the killed workers' exits are not 0
}

TEST(SessionTest, ARecordWriteToAStuckOrDyingWorkerNeitherHangsNorLosesTheSession) {
  // Keepalive off: a stopped worker keeps its connections open and the
  // gateways cannot tell it from a slow one, as with a worker that hangs.
  // Each store call's deadline is 2 s.
  constexpr int32_t kWindow = 160;
  constexpr int kTurns = 6;
  StackOptions o;
  o.model = StoriesPath();
  o.decode_workers = 3;
  o.gateways = 2;
  o.gateway_flags = {"--keepalive-ms", "0", "--session-store-timeout-ms", "2000"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::vector<Completion> undisturbed = Undisturbed(*stack, kWindow, Messages(kTurns), 2);
  if (HasFailure()) return;
  const std::string id = Create(stack->gateway(0), kWindow).session_id();
  std::vector<int> dead;
  // The worker other than the KV holder (as the record names it) with a
  // copy of the record as it is after `turns` turns.
  auto other_copy = [&](int turns) {
    for (int i : RecordHolders(*stack, id, turns + 1, 3, dead)) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      tandem::v1::SessionKey key;
      key.set_session_id(id);
      tandem::v1::SessionRecord record;
      if (!stack->decode(i).GetSession(&ctx, key, &record).ok()) continue;
      if (record.kv_holder() != stack->decode_info(i).grpc_address) return i;
    }
    return -1;
  };
  // A turn run on another thread while the test stops and kills workers.
  auto start_turn = [&](int turn, Completion* out) {
    return std::thread([&stack, &id, turn, out] {
      tandem::v1::ChatRequest req;
      req.set_session_id(id);
      req.set_message(Message(turn));
      req.set_max_tokens(24);
      req.set_top_logprobs(3);
      *out = testing::Chat(stack->gateway(turn % 2), req);
    });
  };
  for (int turn = 0; turn < kTurns; ++turn) {
    Completion reply;
    if (turn == 2) {
      // The copy's worker stops; once the turn's write to it is in flight
      // it is killed under it. The write goes on to the third worker.
      const int victim = other_copy(turn);
      ASSERT_GE(victim, 0);
      stack->decode_process(victim).Signal(SIGSTOP);
      std::thread t = start_turn(turn, &reply);
      const double in_flight = AwaitMetric(
          stack->gateway_info(turn % 2).metrics_address,
          absl::StrCat("tandem_session_store_calls_in_flight{method=\"PutSession\",worker=\"",
                       stack->decode_info(victim).grpc_address, "\"}"),
          [](double v) { return v >= 1; }, absl::Seconds(30));
      // Where the turn's writes went instead, should they not go there.
      EXPECT_GE(in_flight, 1) << "victim " << stack->decode_info(victim).grpc_address << "\n"
                              << MetricLines(stack->gateway_info(turn % 2).metrics_address,
                                             "tandem_session_store_calls");
      stack->decode_process(victim).Signal(SIGKILL);
      stack->decode_process(victim).Wait();
      dead.push_back(victim);
      t.join();
    } else if (turn == 4) {
      // The copy's worker hangs through the whole turn: its read and its
      // write each end at their deadline, and the turn completes with the
      // record on the KV holder alone.
      const int victim = other_copy(turn);
      ASSERT_GE(victim, 0);
      stack->decode_process(victim).Signal(SIGSTOP);
      std::thread t = start_turn(turn, &reply);
      t.join();
      stack->decode_process(victim).Signal(SIGKILL);
      stack->decode_process(victim).Wait();
      dead.push_back(victim);
      EXPECT_GE(MetricValue(stack->gateway_info(turn % 2).metrics_address,
                            "tandem_session_records_under_replicated_total"),
                1);
    } else {
      reply = Chat(stack->gateway(turn % 2), id, Message(turn));
    }
    ASSERT_TRUE(reply.status.ok()) << "turn " << turn << ": " << reply.status.error_message();
    ExpectSameTokens(reply, undisturbed[turn], absl::StrCat("turn ", turn));
  }
  const tandem::v1::SessionInfo info = Get(stack->gateway(0), id);
  EXPECT_EQ(info.turns_held() + info.turns_evicted(), kTurns);
  EXPECT_FALSE(stack->Stop());  // the killed workers' exits are not 0
}

TEST(SessionTest, ThousandTurnsStayWithinTheWindowsBlocks) {
  constexpr int32_t kWindow = 256;
  constexpr int32_t kBlockSize = 16;
  // A 4 MiB pool (100 blocks) and a 1 MiB host tier: every page of both is
  // touched within the first turns (the prefix cache keeps what it can, the
  // host tier what the pool evicts), so later growth would be a leak, not a
  // cache filling.
  auto stack = Stack::Start(StoriesPath(), {"--block-size", absl::StrCat(kBlockSize),
                                            "--kv-budget-mb", "4", "--host-cache-mb", "1"});
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::string id = Create(stack->gateway(), kWindow).session_id();
  const int pid = stack->decode_process().pid();
  int64_t rss_at_100 = 0, max_pinned = 0, max_used = 0;
  for (int turn = 0; turn < 1000; ++turn) {
    const Completion reply = Chat(stack->gateway(), id, Message(turn), 16);
    ASSERT_TRUE(reply.status.ok()) << "turn " << turn << ": " << reply.status.error_message();
    const tandem::v1::WorkerStats stats = Stats(*stack, 0);
    max_pinned = std::max<int64_t>(max_pinned, stats.kv_blocks_pinned());
    max_used = std::max<int64_t>(max_used, stats.kv_blocks_used());
    ASSERT_LE(stats.kv_blocks_used(), kWindow / kBlockSize + 2) << "turn " << turn;
    if (turn == 100) rss_at_100 = RssKib(pid);
  }
  const int64_t rss_at_1000 = RssKib(pid);
  const tandem::v1::SessionInfo info = Get(stack->gateway(), id);
  EXPECT_EQ(info.turns_held() + info.turns_evicted(), 1000);
  EXPECT_LE(info.tokens_held(), kWindow);
  std::cout << "[ figures ] 1000 turns, window " << kWindow << ": decode worker KV blocks used "
            << "at most " << max_used << " (pinned " << max_pinned << "), RSS " << rss_at_100
            << " KiB at turn 100, " << rss_at_1000 << " KiB at turn 1000\n";
  EXPECT_GT(max_pinned, 0);
  if (TANDEM_RSS_IS_MEANINGFUL) {
    EXPECT_LT(rss_at_1000 - rss_at_100, 8 * 1024);
  }
  EXPECT_TRUE(stack->Stop());
}

TEST(SessionTest, CloseFreesAtOnceAndTheTtlReachesTheRecord) {
  auto stack = Stack::Start(StoriesPath());
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  const std::string closing = Create(stack->gateway(), 128).session_id();
  ASSERT_TRUE(Chat(stack->gateway(), closing, Message(0)).status.ok());
  EXPECT_GT(Stats(*stack, 0).kv_blocks_pinned(), 0);
  {
    grpc::ClientContext ctx;
    tandem::v1::CloseSessionRequest req;
    req.set_session_id(closing);
    tandem::v1::CloseSessionResponse resp;
    ASSERT_TRUE(stack->gateway().CloseSession(&ctx, req, &resp).ok());
  }
  grpc::Status status;
  Get(stack->gateway(), closing, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("session_id"));
  // The worker lets go of the KV between two engine steps.
  EXPECT_EQ(AwaitUnpinned(*stack), 0);

  // A session's own idle TTL goes with its record to the decode worker,
  // whose clock expires it: tests/decode_worker/session_expiry_test.cc moves
  // a fake one past the TTL instead of waiting it out here.
  const std::string idle = Create(stack->gateway(), 128, nullptr, /*ttl=*/600).session_id();
  ASSERT_TRUE(Chat(stack->gateway(), idle, Message(0)).status.ok());
  EXPECT_EQ(Get(stack->gateway(), idle).idle_ttl_seconds(), 600);
  {
    grpc::ClientContext ctx;
    tandem::v1::ListSessionsResponse list;
    ASSERT_TRUE(stack->gateway().ListSessions(&ctx, {}, &list).ok());
    ASSERT_EQ(list.sessions_size(), 1);
    EXPECT_EQ(list.sessions(0).session_id(), idle);
    EXPECT_EQ(list.sessions(0).idle_ttl_seconds(), 600);
  }
  {
    grpc::ClientContext ctx;
    tandem::v1::ListSessionRecordsResponse records;
    ASSERT_TRUE(stack->decode().ListSessions(&ctx, {}, &records).ok());
    ASSERT_EQ(records.records_size(), 1);
    EXPECT_EQ(records.records(0).session_id(), idle);
    EXPECT_EQ(records.records(0).idle_ttl_seconds(), 600);
  }
  EXPECT_TRUE(stack->Stop());
}

TEST(SessionTest, ShiftSessionsKeepTheirKvAcrossEvictionsPrivately) {
  StackOptions o;
  o.model = StoriesPath();
  o.decode_workers = 2;
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  // Turns of ~55 tokens: an eviction (down to 75%) keeps the later turns,
  // whose KV is shifted.
  constexpr int32_t kWindow = 256;
  const tandem::v1::SessionInfo created =
      Create(stack->gateway(), kWindow, nullptr, 0, tandem::v1::WINDOW_POLICY_SHIFT);
  EXPECT_EQ(created.window().policy(), tandem::v1::WINDOW_POLICY_SHIFT);
  int shifted_turns = 0;
  for (int turn = 0; turn < 14; ++turn) {
    const Completion reply = Chat(stack->gateway(), created.session_id(), Message(turn));
    ASSERT_TRUE(reply.status.ok()) << "turn " << turn << ": " << reply.status.error_message();
    ASSERT_FALSE(reply.tokens.empty());
    const int32_t prompt = reply.usage.prompt_tokens();
    EXPECT_LE(prompt + reply.usage.completion_tokens(), kWindow);
    EXPECT_LE(reply.usage.session_tokens_held(), kWindow);
    if (turn > 0) {
      // Only the new turn's tokens (~30) and at most two partial blocks (the
      // pin's tail, the cut's) are computed, also right after an eviction:
      // the KV after the cut was shifted, not recomputed.
      EXPECT_GE(reply.usage.cached_prompt_tokens(), prompt - 64) << "turn " << turn;
    }
    if (reply.usage.session_tokens_evicted() > 0) {
      ++shifted_turns;
      EXPECT_GT(reply.usage.cached_prompt_tokens(), 64) << "turn " << turn;  // after the cut too
    }
  }
  EXPECT_GE(shifted_turns, 2);
  const tandem::v1::SessionInfo info = Get(stack->gateway(), created.session_id());
  EXPECT_GE(info.turns_evicted(), 4);
  EXPECT_EQ(info.turns_held() + info.turns_evicted(), 14);
  // The shifted KV was never offered to the index.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(MetricValue(stack->decode_info(i).metrics_address,
                          "tandem_kv_block_events_total{event=\"stored\"}"),
              0)
        << "decode worker " << i;
  }
  // Losing the holder: the next turn is rebuilt from the session's tokens
  // on the other decode worker.
  const int holder = KillKvHolder(*stack);
  ASSERT_GE(holder, 0);
  const Completion rebuilt = Chat(stack->gateway(), created.session_id(), Message(14));
  ASSERT_TRUE(rebuilt.status.ok()) << rebuilt.status.error_message();
  EXPECT_TRUE(rebuilt.usage.session_rebuilt());
  EXPECT_GT(Stats(*stack, 1 - holder).sessions_pinned(), 0);
  EXPECT_FALSE(stack->Stop());  // the killed worker's exit is not 0
}

TEST(SessionTest, AReplyLongerThanTheWindowRollsInIt) {
  auto stack = Stack::Start(StoriesPath());
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  for (auto policy : {tandem::v1::WINDOW_POLICY_REPREFILL, tandem::v1::WINDOW_POLICY_SHIFT}) {
    const std::string id = Create(stack->gateway(), 128, nullptr, 0, policy).session_id();
    ASSERT_TRUE(Chat(stack->gateway(), id, Message(0)).status.ok());
    const Completion longer = Chat(stack->gateway(), id, Message(1), 300, /*ignore_eos=*/true);
    ASSERT_TRUE(longer.status.ok()) << longer.status.error_message();
    EXPECT_EQ(longer.tokens.size(), 300u);  // far past the window's 128
    EXPECT_EQ(longer.finish, tandem::v1::FINISH_REASON_LENGTH);
    // The session's context is the window, full (the record keeps the
    // whole reply's text).
    EXPECT_EQ(longer.usage.session_tokens_held(), 128);
    const tandem::v1::SessionInfo rolled = Get(stack->gateway(), id);
    EXPECT_EQ(rolled.tokens_held(), 128);
    EXPECT_EQ(rolled.messages(rolled.messages_size() - 1).content(), longer.text);
    // What the decode worker keeps of it stays within the window.
    EXPECT_LE(Stats(*stack, 0).kv_blocks_pinned(), 128 / 16 + 2);
    // The next turn evicts the long one and goes on.
    const Completion next = Chat(stack->gateway(), id, Message(2));
    ASSERT_TRUE(next.status.ok()) << next.status.error_message();
    EXPECT_GT(next.usage.session_tokens_evicted(), 0);
    EXPECT_LE(next.usage.prompt_tokens(), 128);
    EXPECT_LE(next.usage.session_tokens_held(), 128);
    EXPECT_LE(Get(stack->gateway(), id).tokens_held(), 128);
    grpc::ClientContext ctx;
    tandem::v1::CloseSessionRequest close;
    close.set_session_id(id);
    tandem::v1::CloseSessionResponse closed;
    ASSERT_TRUE(stack->gateway().CloseSession(&ctx, close, &closed).ok());
    EXPECT_EQ(AwaitUnpinned(*stack), 0);
  }
  EXPECT_TRUE(stack->Stop());
}

TEST(SessionTest, BadSessionRequestsNameTheirField) {
  auto stack = Stack::Start(StoriesPath());
  ASSERT_NE(stack, nullptr);
  ASSERT_TRUE(stack->AwaitGatewaySynced());
  grpc::Status status;
  Create(stack->gateway(), -1, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("window.max_tokens"));
  Create(stack->gateway(), 1 << 20, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  Create(stack->gateway(), 4, &status);  // the system prompt alone overflows it
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("system_prompt"));
  Create(stack->gateway(), 128, &status, /*ttl=*/-5);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("idle_ttl_seconds"));
  {
    grpc::ClientContext ctx;
    tandem::v1::CreateSessionRequest req;
    req.mutable_window()->set_policy(static_cast<tandem::v1::WindowPolicy>(7));
    tandem::v1::SessionInfo info;
    status = stack->gateway().CreateSession(&ctx, req, &info);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), ::testing::HasSubstr("window.policy"));
  }
  const Completion unknown = Chat(stack->gateway(), "no-such-session", "hello");
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(unknown.status.error_message(), ::testing::HasSubstr("session_id"));
  const std::string id = Create(stack->gateway(), 64).session_id();
  EXPECT_EQ(Chat(stack->gateway(), id, "").status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Chat(stack->gateway(), id, "hi", -1).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // A message that cannot fit the window even alone.
  std::string huge;
  for (int i = 0; i < 100; ++i) huge += "Tom ran to the big red house. ";
  const Completion too_long = Chat(stack->gateway(), id, huge);
  EXPECT_EQ(too_long.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_long.status.error_message(), ::testing::HasSubstr("message"));
  // The session is untouched by the failed turns.
  EXPECT_EQ(Get(stack->gateway(), id).turns_held(), 0);
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
