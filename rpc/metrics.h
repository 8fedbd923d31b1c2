// Prometheus metrics for every Tandem process: a MetricsServer owns the
// registry each module registers its families in, and (optionally) the HTTP
// exposer that serves it at /metrics. A binary's main starts one and hands
// registry() to the objects it builds. MetricsServer is thread-safe (the
// registry and metrics are); the helpers below may be called from any thread.
#ifndef TANDEM_RPC_METRICS_H_
#define TANDEM_RPC_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"

namespace tandem::rpc {

class MetricsServer {
 public:
  // `listen` is "host:port" (port 0 picks a free port) or "" for no HTTP
  // exposer (the registry still works, e.g. for ScrapeText in tests).
  // InvalidArgument for a malformed address, Unavailable when binding fails.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen);

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  ~MetricsServer();

  // The bound "host:port" (the real port when 0 was asked), or "" when no
  // exposer runs. Pass it to PrintReady.
  std::string address() const { return address_; }

  prometheus::Registry& registry() { return *registry_; }
  const std::shared_ptr<prometheus::Registry>& shared_registry() const {
    return registry_;
  }

 private:
  MetricsServer() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  // Declared after registry_ so it stops serving before the registry dies.
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

// Tandem's metric conventions (ARCHITECTURE.md, "Observability"): names start
// with "tandem_" (checked: a wrong name is a programming error), base units,
// histograms in seconds. The registry merges by name, so calling a helper
// twice with the same name and labels returns the same metric; the same name
// with another metric type aborts (prometheus-cpp throws).

// Exponential second buckets 1 ms .. ~65 s (x2 each), for latencies from a
// decode step to a whole long generation.
std::vector<double> LatencyBuckets();

prometheus::Family<prometheus::Histogram>& LatencyHistogramFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help);
// One histogram with LatencyBuckets(); `labels` picks the series.
prometheus::Histogram& LatencyHistogram(prometheus::Registry& registry,
                                        const std::string& name,
                                        const std::string& help,
                                        const prometheus::Labels& labels = {});

prometheus::Family<prometheus::Counter>& CounterFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help);
prometheus::Counter& CounterMetric(prometheus::Registry& registry,
                                   const std::string& name,
                                   const std::string& help,
                                   const prometheus::Labels& labels = {});

prometheus::Family<prometheus::Gauge>& GaugeFamily(
    prometheus::Registry& registry, const std::string& name,
    const std::string& help);
prometheus::Gauge& GaugeMetric(prometheus::Registry& registry,
                               const std::string& name,
                               const std::string& help,
                               const prometheus::Labels& labels = {});

// The registry in Prometheus text exposition format (what /metrics serves).
std::string ScrapeText(prometheus::Registry& registry);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_METRICS_H_
