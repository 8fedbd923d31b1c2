#include "gateway/gateway_metrics.h"

#include "server/metrics.h"

namespace tandem::gateway {

GatewayMetrics::GatewayMetrics(prometheus::Registry& registry)
    : requests(server::CounterFamily(registry, "tandem_requests_total",
                                     "RPCs served, by method and final status code")),
      prompt_tokens(server::CounterMetric(registry, "tandem_prompt_tokens_total",
                                          "Prompt tokens of accepted requests")),
      generated_tokens(server::CounterMetric(registry, "tandem_generated_tokens_total",
                                             "Tokens streamed to clients")),
      prefill_retries(server::CounterMetric(registry, "tandem_prefill_retries_total",
                                            "Prefills retried on another worker")),
      time_to_first_token(server::LatencyHistogram(
          registry, "tandem_time_to_first_token_seconds",
          "From a Generate call's arrival to its first token being sent")),
      inter_token_latency(server::LatencyHistogram(
          registry, "tandem_inter_token_latency_seconds",
          "Gap between consecutive tokens sent to a client")),
      e2e_latency(server::LatencyHistogram(registry, "tandem_e2e_latency_seconds",
                                           "From a Generate call's arrival to its end")),
      queue_time(server::LatencyHistogram(registry, "tandem_queue_seconds",
                                          "Time a request waited before its prefill ran")) {}

}  // namespace tandem::gateway
