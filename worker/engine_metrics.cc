#include "worker/engine_metrics.h"

#include "rpc/metrics.h"

namespace tandem::worker {

EngineLoop::StepObserver MakeEngineStepObserver(prometheus::Registry& registry) {
  auto* running = &rpc::GaugeMetric(registry, "tandem_running_sequences",
                               "Sequences in the engine's running batch");
  auto* waiting =
      &rpc::GaugeMetric(registry, "tandem_waiting_sequences", "Sequences queued for the engine");
  auto* used = &rpc::GaugeMetric(registry, "tandem_kv_blocks_used", "KV blocks in use");
  auto* free = &rpc::GaugeMetric(registry, "tandem_kv_blocks_free", "KV blocks free");
  auto* preemptions = &rpc::CounterMetric(
      registry, "tandem_preemptions_total", "Sequences preempted (KV freed, recomputed later)");
  auto* cached = &rpc::GaugeMetric(registry, "tandem_kv_blocks_cached",
                                  "Free KV blocks that still hold a hashed, reusable block");
  auto* stored = &rpc::CounterMetric(registry, "tandem_kv_block_events_total",
                                     "Full KV blocks hashed into the prefix cache (stored) and "
                                     "evicted from it (removed)",
                                     {{"event", "stored"}});
  auto* removed = &rpc::CounterMetric(registry, "tandem_kv_block_events_total",
                                      "Full KV blocks hashed into the prefix cache (stored) and "
                                      "evicted from it (removed)",
                                      {{"event", "removed"}});
  auto* queried = &rpc::CounterMetric(
      registry, "tandem_prefix_cache_queried_tokens_total",
      "Prompt tokens looked up in the prefix cache when their sequence was admitted");
  auto* hit = &rpc::CounterMetric(registry, "tandem_prefix_cache_hit_tokens_total",
                                  "Prompt tokens whose KV the prefix cache supplied");
  auto* pulled = &rpc::CounterMetric(
      registry, "tandem_prefix_pulled_tokens_total",
      "Prompt tokens whose KV was pulled from another worker instead of computed");
  auto* fallbacks = &rpc::CounterMetric(
      registry, "tandem_kv_delta_fallbacks_total",
      "Delta KV transfers whose held leading blocks were evicted before admission (the "
      "prompt was computed instead)");
  auto* pinned = &rpc::GaugeMetric(registry, "tandem_session_kv_blocks_pinned",
                                  "KV blocks kept pinned for sessions' next turns");
  auto* pins = &rpc::GaugeMetric(registry, "tandem_session_kv_pins",
                                "Sessions whose KV this worker keeps between turns");
  auto* pins_dropped = &rpc::CounterMetric(
      registry, "tandem_session_kv_pins_dropped_total",
      "Sessions' kept KV let go early (over --session-kv-percent, or to make room)");
  auto* step = &rpc::LatencyHistogram(registry, "tandem_engine_step_seconds",
                                 "Duration of one engine step (forward pass + sampling)");
  // EngineStats counts since start; the counters take the deltas.
  return [=, counted = engine::EngineStats{}](const engine::EngineStats& s,
                                              const engine::StepOutput& out,
                                              absl::Duration took) mutable {
    running->Set(s.running);
    waiting->Set(s.waiting);
    used->Set(s.blocks_used);
    free->Set(s.blocks_free);
    cached->Set(s.blocks_cached);
    pinned->Set(s.blocks_pinned);
    pins->Set(s.pins);
    pins_dropped->Increment(static_cast<double>(s.pins_dropped - counted.pins_dropped));
    for (const engine::BlockEvent& e : out.blocks) {
      (e.kind == engine::BlockEvent::Kind::kStored ? stored : removed)->Increment();
    }
    preemptions->Increment(static_cast<double>(s.preemptions - counted.preemptions));
    queried->Increment(static_cast<double>(s.prefix_queried_tokens -
                                           counted.prefix_queried_tokens));
    hit->Increment(static_cast<double>(s.prefix_hit_tokens - counted.prefix_hit_tokens));
    pulled->Increment(static_cast<double>(s.prefix_pulled_tokens - counted.prefix_pulled_tokens));
    fallbacks->Increment(static_cast<double>(s.delta_fallbacks - counted.delta_fallbacks));
    counted = s;
    step->Observe(absl::ToDoubleSeconds(took));
  };
}

}  // namespace tandem::worker
