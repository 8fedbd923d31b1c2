#include "rpc/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <sstream>
#include <thread>

#include <prometheus/text_serializer.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "common/host_port.h"

namespace tandem::rpc {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->registry_ = std::make_shared<prometheus::Registry>();
  if (listen.empty()) return server;

  ASSIGN_OR_RETURN(const common::HostPort hp, common::SplitHostPort(listen));
  // prometheus-cpp (civetweb) reports a failed bind by throwing; this is the
  // boundary where that becomes a Status.
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", listen, ": ", e.what()));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("metrics: no listening port for ", listen));
  }
  server->exposer_->RegisterCollectable(server->registry_);
  server->address_ = common::JoinHostPort(hp.host, ports.front());
  return server;
}

namespace {

// Opens and drops one TCP connection to `address`, without waiting for it.
void PokeListener(const std::string& address) {
  absl::StatusOr<common::HostPort> hp = common::SplitHostPort(address);
  if (!hp.ok()) return;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string host = common::StripBrackets(hp->host);
  const std::string port = std::to_string(hp->port);
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &list) != 0) return;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family,
                            ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            ai->ai_protocol);
    if (fd < 0) continue;
    [[maybe_unused]] int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    ::close(fd);
  }
  ::freeaddrinfo(list);
}

}  // namespace

MetricsServer::~MetricsServer() {
  if (exposer_ == nullptr) return;
  // Stop serving (civetweb joins its threads) before the registry goes.
  // civetweb's accept thread only notices the stop flag when its poll()
  // returns, which without traffic takes its fixed 2 s quantum, so every
  // process exit would stall 2 s. A connection wakes it; poking until the
  // join finishes covers a poke that lands just before the flag is set.
  // (Rejected: closing the listening socket, which prometheus-cpp hides.)
  absl::Notification stopped;
  std::thread poker([this, &stopped] {
    do {
      PokeListener(address_);
    } while (!stopped.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  });
  exposer_.reset();
  stopped.Notify();
  poker.join();
}

namespace {

void CheckName(const std::string& name) {
  TANDEM_CHECK(absl::StartsWith(name, "tandem_"),
               "Tandem metric names start with tandem_")
      << "name=" << name;
}

}  // namespace

std::vector<double> LatencyBuckets() {
  std::vector<double> buckets;
  double bound = 0.001;
  for (int i = 0; i < 17; ++i) {  // 1 ms .. 65.536 s
    buckets.push_back(bound);
    bound *= 2;
  }
  return buckets;
}

prometheus::Family<prometheus::Histogram>& LatencyHistogramFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help) {
  CheckName(name);
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

prometheus::Histogram& LatencyHistogram(prometheus::Registry& registry,
                                        const std::string& name,
                                        const std::string& help,
                                        const prometheus::Labels& labels) {
  return LatencyHistogramFamily(registry, name, help)
      .Add(labels, LatencyBuckets());
}

prometheus::Family<prometheus::Counter>& CounterFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help) {
  CheckName(name);
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Counter& CounterMetric(prometheus::Registry& registry,
                                   const std::string& name,
                                   const std::string& help,
                                   const prometheus::Labels& labels) {
  return CounterFamily(registry, name, help).Add(labels);
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help) {
  CheckName(name);
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Gauge& GaugeMetric(prometheus::Registry& registry,
                               const std::string& name,
                               const std::string& help,
                               const prometheus::Labels& labels) {
  return GaugeFamily(registry, name, help).Add(labels);
}

std::string ScrapeText(prometheus::Registry& registry) {
  const prometheus::TextSerializer serializer;
  std::ostringstream out;
  serializer.Serialize(out, registry.Collect());
  return out.str();
}

}  // namespace tandem::rpc
