// Soak: concurrent streams against two prefill and two decode workers while
// a seeded killer kill -9s a random worker and restarts it on the same
// address, over and over. No client may see an error: every stream
// completes with all its tokens. Prints the requests, the kills, the
// migrations, the errors by code and every process's RSS at start and end.
// Runs for $TANDEM_SOAK_SECONDS (default 60; bench/soak.sh runs it for 600)
// with $TANDEM_SOAK_CLIENTS concurrent sessions (default 64).
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/e2e/stack.h"
#include "tests/e2e/synthetic.h"

namespace tandem::testing {
namespace {

int64_t RssKb(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    int64_t kb = 0;
    if (line.rfind("VmRSS:", 0) == 0 && absl::SimpleAtoi(line.substr(6, line.size() - 9), &kb)) {
      return kb;
    }
  }
  return -1;
}

std::string RssLine(Stack& s) {
  return "gateway " + std::to_string(RssKb(s.gateway_process().pid()) / 1024) + " MB, prefill " +
         std::to_string(RssKb(s.prefill_process(0).pid()) / 1024) + "/" +
         std::to_string(RssKb(s.prefill_process(1).pid()) / 1024) + " MB, decode " +
         std::to_string(RssKb(s.decode_process(0).pid()) / 1024) + "/" +
         std::to_string(RssKb(s.decode_process(1).pid()) / 1024) + " MB";
}

std::string StatusCodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

TEST(SoakTest, WorkersKilledAndRestartedAtRandomNeverReachAClient) {
  int seconds = 60;
  if (const char* env = std::getenv("TANDEM_SOAK_SECONDS")) (void)absl::SimpleAtoi(env, &seconds);
  int clients_n = 64;
  if (const char* env = std::getenv("TANDEM_SOAK_CLIENTS")) (void)absl::SimpleAtoi(env, &clients_n);
  StackOptions o;
  o.model = ModelPath();
  o.prefill_workers = 2;
  o.decode_workers = 2;
  // A dead worker is found out within a second; a stream may move often.
  o.gateway_flags = {"--keepalive-ms", "500", "--keepalive-timeout-ms", "500",
                     "--max-migrations", "8"};
  o.decode_flags = {"--fetch-timeout-ms", "5000"};
  auto stack = Stack::Start(o);
  ASSERT_NE(stack, nullptr);
  const std::string start_rss = RssLine(*stack);

  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  std::atomic<int64_t> ok{0}, tokens{0}, migrations{0};
  absl::Mutex mu;
  std::map<std::string, int> errors;  // guarded by mu
  constexpr int32_t kTokens = 48;
  std::vector<std::thread> clients;
  for (int c = 0; c < clients_n; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; absl::Now() < end; ++i) {
        // Conversations of a few prompts share prefixes (the cache and the
        // router matter); every fourth is new.
        const std::vector<int32_t> ids = Prompt(64 + 16 * (c % 3), 8, i, c % 4);
        const Completion r = Generate(stack->gateway(), Request(ids, kTokens));
        if (r.status.ok() && static_cast<int32_t>(r.tokens.size()) == kTokens) {
          ++ok;
          tokens += kTokens;
          migrations += r.usage.migrations();
        } else {
          absl::MutexLock lock(&mu);
          ++errors[r.status.ok() ? "OK but short"
                                 : StatusCodeName(r.status.error_code()) + ": " +
                                       r.status.error_message()];
        }
      }
    });
  }
  std::mt19937 rng(20261124);
  int kills = 0;
  while (absl::Now() < end - absl::Seconds(2)) {
    absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(700, 2000)(rng)));
    const int victim = std::uniform_int_distribution<int>(0, 3)(rng);
    const bool restarted =
        victim < 2 ? stack->RestartPrefill(victim) : stack->RestartDecode(victim - 2);
    EXPECT_TRUE(restarted) << "worker " << victim;
    ++kills;
  }
  for (std::thread& t : clients) t.join();
  const std::string end_rss = RssLine(*stack);

  std::cout << "soak: " << seconds << " s, " << clients_n << " clients, " << ok << " streams ("
            << tokens << " tokens), " << kills << " workers killed and restarted, "
            << migrations << " migrations\n"
            << "soak: RSS at start: " << start_rss << "\nsoak: RSS at end:   " << end_rss
            << "\n";
  absl::MutexLock lock(&mu);
  std::string seen;
  for (const auto& [what, n] : errors) absl::StrAppend(&seen, "soak: error ", n, " x ", what, "\n");
  std::cout << seen;
  EXPECT_TRUE(errors.empty()) << seen
                              << MetricLines(stack->gateway_info().metrics_address,
                                             "tandem_migrations_total");
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(kills, 0);
  EXPECT_TRUE(stack->Stop());
}

}  // namespace
}  // namespace tandem::testing
