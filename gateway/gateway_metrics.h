// The gateway's Prometheus metrics, registered once per process and shared
// by every request. Thread-safe (prometheus-cpp metrics are).
#ifndef TANDEM_GATEWAY_GATEWAY_METRICS_H_
#define TANDEM_GATEWAY_GATEWAY_METRICS_H_

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tandem::gateway {

struct GatewayMetrics {
  explicit GatewayMetrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& requests;  // by method and code
  // Requests whose bytes were no valid message (by method); also counted in
  // `requests` as INVALID_ARGUMENT.
  prometheus::Family<prometheus::Counter>& malformed_requests;
  // Calls refused for their API key, by method and reason (never the key).
  prometheus::Family<prometheus::Counter>& auth_failures;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generated_tokens;
  prometheus::Counter& prefill_retries;
  prometheus::Counter& migrations;
  prometheus::Counter& progress_timeouts;
  // Hand-offs a decode worker refused for capacity (the stream went on to
  // another worker, or waited for room).
  prometheus::Counter& hand_off_refusals;
  prometheus::Counter& decode_retries;
  // Requests (session turns or not) whose prompt their decode worker
  // computed itself.
  prometheus::Counter& local_prefills;
  // Session record writes that left fewer copies than aimed for.
  prometheus::Counter& session_records_under_replicated;
  // Sessions whose record got a new copy after a decode worker holding one
  // was lost (before their next turn).
  prometheus::Counter& session_records_rereplicated;
  // Calls to the decode workers' session stores in flight, by worker and
  // method: a stuck worker shows its calls piling up to the deadline.
  prometheus::Family<prometheus::Gauge>& session_store_calls_in_flight;
  // Workers whose block event stream is synced (a snapshot applied, the
  // stream unbroken), by role: what routing, health and the decode
  // capacity count as reachable. Set after those are updated.
  prometheus::Family<prometheus::Gauge>& synced_workers;
  // Streams the reachable decode workers take at once, as of the last
  // admission: --decode-worker-streams each, or fewer where a worker
  // reports a bound of its own (--itl-target-ms).
  prometheus::Gauge& decode_stream_capacity;
  prometheus::Histogram& time_to_first_token;
  prometheus::Histogram& inter_token_latency;
  prometheus::Histogram& e2e_latency;
  prometheus::Histogram& queue_time;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_GATEWAY_METRICS_H_
