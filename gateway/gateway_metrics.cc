#include "gateway/gateway_metrics.h"

#include "rpc/metrics.h"

namespace tandem::gateway {

GatewayMetrics::GatewayMetrics(prometheus::Registry& registry)
    : requests(rpc::CounterFamily(registry, "tandem_requests_total",
                                  "RPCs served, by method and final status code")),
      malformed_requests(rpc::CounterFamily(
          registry, "tandem_malformed_requests_total",
          "Requests that were no valid message (e.g. invalid UTF-8 in a string field), by "
          "method")),
      auth_failures(rpc::CounterFamily(
          registry, "tandem_auth_failures_total",
          "Calls refused UNAUTHENTICATED (no, malformed or unknown API key), by method and "
          "reason")),
      prompt_tokens(rpc::CounterMetric(registry, "tandem_prompt_tokens_total",
                                       "Prompt tokens of accepted requests")),
      generated_tokens(rpc::CounterMetric(registry, "tandem_generated_tokens_total",
                                          "Tokens streamed to clients")),
      prefill_retries(rpc::CounterMetric(registry, "tandem_prefill_retries_total",
                                         "Prefills retried on another worker")),
      migrations(rpc::CounterMetric(registry, "tandem_migrations_total",
                                    "Streams moved to another worker after a worker failed "
                                    "under them")),
      progress_timeouts(rpc::CounterMetric(
          registry, "tandem_progress_timeouts_total",
          "Worker calls given up on for no sign of life: a decode stream silent past its "
          "progress deadline, or a prefill whose worker did not answer a probe")),
      hand_off_refusals(rpc::CounterMetric(
          registry, "tandem_hand_off_refusals_total",
          "Hand-offs a decode worker refused for capacity; the stream went to another "
          "worker or waited for room")),
      decode_retries(rpc::CounterMetric(
          registry, "tandem_decode_retries_total",
          "Hand-offs retried on another decode worker (or after a wait) because the one "
          "picked could not be reached; no migration, no second prefill")),
      local_prefills(rpc::CounterMetric(
          registry, "tandem_local_prefills_total",
          "Requests prefilled on their decode worker (conditional disaggregation: few "
          "uncached tokens, a session turn's KV holder, or no prefill worker)")),
      session_records_under_replicated(
          rpc::CounterMetric(registry, "tandem_session_records_under_replicated_total",
                             "Session record writes that landed on fewer decode workers than "
                             "min(--session-replicas, reachable decode workers)")),
      session_records_rereplicated(rpc::CounterMetric(
          registry, "tandem_session_records_rereplicated_total",
          "Session records copied to another decode worker after one holding a copy was "
          "found down, before the session's next turn")),
      session_store_calls_in_flight(rpc::GaugeFamily(
          registry, "tandem_session_store_calls_in_flight",
          "Calls to decode workers' session stores in flight, by worker and method")),
      synced_workers(rpc::GaugeFamily(
          registry, "tandem_synced_workers",
          "Workers whose block event stream this gateway has synced (a snapshot applied, the "
          "stream unbroken), by role: those routing and the decode capacity count")),
      decode_stream_capacity(rpc::GaugeMetric(
          registry, "tandem_decode_stream_capacity",
          "Streams the reachable decode workers take at once, as of the last admission: "
          "--decode-worker-streams each, or fewer where a worker reports a bound of its own "
          "(--itl-target-ms)")),
      time_to_first_token(
          rpc::LatencyHistogram(registry, "tandem_time_to_first_token_seconds",
                                "From a Generate call's arrival to its first token being sent")),
      inter_token_latency(rpc::LatencyHistogram(registry, "tandem_inter_token_latency_seconds",
                                                "Gap between consecutive tokens sent to a client")),
      e2e_latency(rpc::LatencyHistogram(registry, "tandem_e2e_latency_seconds",
                                        "From a Generate call's arrival to its end")),
      queue_time(rpc::LatencyHistogram(registry, "tandem_queue_seconds",
                                       "Time a request waited before its prefill ran")) {}

}  // namespace tandem::gateway
