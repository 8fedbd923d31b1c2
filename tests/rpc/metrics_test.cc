#include "rpc/metrics.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "process/http_get.h"
#include "tests/rpc/loopback_socket.h"

namespace tandem::rpc {
namespace {

TEST(MetricsServerTest, ServesCountersOverHttpOnAnEphemeralPort) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  ASSERT_TRUE(absl::StartsWith(address, "127.0.0.1:")) << address;
  EXPECT_NE(address, "127.0.0.1:0");

  CounterMetric((*server)->registry(), "tandem_test_requests_total",
                "Requests seen by the test.", {{"code", "OK"}})
      .Increment(3);
  absl::StatusOr<std::string> body = process::HttpGet(address, "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_TRUE(absl::StrContains(*body, "# TYPE tandem_test_requests_total counter"))
      << *body;
  EXPECT_TRUE(absl::StrContains(*body, "tandem_test_requests_total{code=\"OK\"} 3"))
      << *body;
}

TEST(MetricsServerTest, NoListenAddressMeansNoExposerButARegistry) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start("");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->address(), "");
  GaugeMetric((*server)->registry(), "tandem_test_blocks", "Blocks.").Set(7);
  EXPECT_TRUE(absl::StrContains(ScrapeText((*server)->registry()),
                                "tandem_test_blocks 7"));
}

TEST(MetricsServerTest, MalformedAddressIsInvalidArgument) {
  EXPECT_EQ(MetricsServer::Start("no-port").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start("127.0.0.1:99999").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsHelpersTest, LatencyHistogramUsesSecondBuckets) {
  prometheus::Registry registry;
  prometheus::Histogram& h = LatencyHistogram(
      registry, "tandem_test_latency_seconds", "Latency.", {{"stage", "ttft"}});
  h.Observe(0.003);
  h.Observe(2.0);
  // Same name and labels: the same series, not a second one.
  EXPECT_EQ(&LatencyHistogram(registry, "tandem_test_latency_seconds",
                              "Latency.", {{"stage", "ttft"}}),
            &h);
  const std::string text = ScrapeText(registry);
  EXPECT_TRUE(absl::StrContains(
      text, "tandem_test_latency_seconds_bucket{stage=\"ttft\",le=\"0.004\"} 1"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "tandem_test_latency_seconds_bucket{stage=\"ttft\",le=\"+Inf\"} 2"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "tandem_test_latency_seconds_count{stage=\"ttft\"} 2"))
      << text;

  const std::vector<double> buckets = LatencyBuckets();
  ASSERT_FALSE(buckets.empty());
  EXPECT_DOUBLE_EQ(buckets.front(), 0.001);
  EXPECT_GE(buckets.back(), 60.0);
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_GT(buckets[i], buckets[i - 1]);
}

TEST(MetricsHelpersDeathTest, NamesMustStartWithTandem) {
  prometheus::Registry registry;
  EXPECT_DEATH(CounterMetric(registry, "requests_total", "No prefix."),
               "tandem_");
}

TEST(HttpGetTest, NonOkStatusAndRefusedConnectionAreErrors) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::string> missing = process::HttpGet((*server)->address(), "/nope");
  EXPECT_FALSE(missing.ok());

  // A port that was just free: bind, note it, close, then connect.
  testing::LoopbackSocket freed(/*listen=*/false);
  ASSERT_TRUE(freed.ok());
  freed.Close();
  absl::StatusOr<std::string> refused = process::HttpGet(freed.address(), "/metrics");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
      << refused.status();
}

TEST(HttpGetTest, TimesOutOnASilentServer) {
  // A listening socket that never accepts: the kernel completes the
  // handshake, nobody ever answers.
  testing::LoopbackSocket silent(/*listen=*/true);
  ASSERT_TRUE(silent.ok());
  absl::StatusOr<std::string> body =
      process::HttpGet(silent.address(), "/metrics", absl::Milliseconds(200));
  EXPECT_EQ(body.status().code(), absl::StatusCode::kDeadlineExceeded)
      << body.status();
}

}  // namespace
}  // namespace tandem::rpc
