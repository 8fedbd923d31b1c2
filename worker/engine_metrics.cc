#include "worker/engine_metrics.h"

#include <array>
#include <string>

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
  // By the tier that held the blocks: the pool (device), or host RAM and
  // disk, whose blocks were copied back into the pool.
  std::array<prometheus::Counter*, engine::kNumKvTiers> hit;
  for (int t = 0; t < engine::kNumKvTiers; ++t) {
    const std::string tier(engine::KvTierName(static_cast<engine::KvTier>(t)));
    hit[t] = &rpc::CounterMetric(registry, "tandem_prefix_cache_hit_tokens_total",
                                 "Prompt tokens whose KV the prefix cache supplied, by the "
                                 "tier that held it",
                                 {{"tier", tier}});
  }
  auto* device_bytes = &rpc::GaugeMetric(registry, "tandem_kv_tier_bytes",
                                        "Bytes of KV blocks each cache tier holds",
                                        {{"tier", "device"}});
  auto* device_blocks = &rpc::GaugeMetric(registry, "tandem_kv_tier_blocks",
                                         "KV blocks each cache tier holds", {{"tier", "device"}});
  auto* device_evictions = &rpc::CounterMetric(registry, "tandem_kv_tier_evictions_total",
                                              "KV blocks a cache tier let go, by cause",
                                              {{"tier", "device"}, {"cause", "capacity"}});
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
  // By method: prompt_lookup, draft.
  auto& proposed_family = rpc::CounterFamily(registry, "tandem_speculative_proposed_tokens_total",
                                             "Tokens proposed by speculative decoding, by method");
  auto& accepted_family = rpc::CounterFamily(
      registry, "tandem_speculative_accepted_tokens_total",
      "Proposed tokens the model kept (its own pick was the proposal), by method");
  auto* lookup_proposed = &proposed_family.Add({{"method", "prompt_lookup"}});
  auto* lookup_accepted = &accepted_family.Add({{"method", "prompt_lookup"}});
  auto* draft_proposed = &proposed_family.Add({{"method", "draft"}});
  auto* draft_accepted = &accepted_family.Add({{"method", "draft"}});
  auto* draft_computed = &rpc::CounterMetric(
      registry, "tandem_speculative_draft_computed_tokens_total",
      "Tokens whose KV the draft model computed (--draft-model): prompts and output, not "
      "those that came computed with a hand-off, a pulled prefix or the prefix cache");
  auto* itl_tokens =
      &rpc::GaugeMetric(registry, "tandem_engine_itl_step_tokens",
                        "Most tokens a step may hold under --itl-target-ms (0: no target)");
  auto* itl_running =
      &rpc::GaugeMetric(registry, "tandem_engine_itl_max_running",
                        "Most sequences running under --itl-target-ms (0: no target)");
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
    // Blocks holding KV: in use, or cached for reuse.
    device_blocks->Set(s.blocks_used + s.blocks_cached);
    device_bytes->Set(
        static_cast<double>(int64_t{s.blocks_used + s.blocks_cached} * s.block_bytes));
    for (const engine::BlockEvent& e : out.blocks) {
      (e.kind == engine::BlockEvent::Kind::kStored ? stored : removed)->Increment();
      if (e.kind == engine::BlockEvent::Kind::kRemoved) device_evictions->Increment();
    }
    preemptions->Increment(static_cast<double>(s.preemptions - counted.preemptions));
    queried->Increment(static_cast<double>(s.prefix_queried_tokens -
                                           counted.prefix_queried_tokens));
    for (size_t t = 0; t < hit.size(); ++t) {
      hit[t]->Increment(static_cast<double>(s.prefix_hit_tokens_by_tier[t] -
                                            counted.prefix_hit_tokens_by_tier[t]));
    }
    pulled->Increment(static_cast<double>(s.prefix_pulled_tokens - counted.prefix_pulled_tokens));
    fallbacks->Increment(static_cast<double>(s.delta_fallbacks - counted.delta_fallbacks));
    const auto delta = [](int64_t now, int64_t before) { return static_cast<double>(now - before); };
    draft_proposed->Increment(delta(s.spec_draft_proposed, counted.spec_draft_proposed));
    draft_accepted->Increment(delta(s.spec_draft_accepted, counted.spec_draft_accepted));
    lookup_proposed->Increment(delta(s.spec_proposed - s.spec_draft_proposed,
                                     counted.spec_proposed - counted.spec_draft_proposed));
    lookup_accepted->Increment(delta(s.spec_accepted - s.spec_draft_accepted,
                                     counted.spec_accepted - counted.spec_draft_accepted));
    draft_computed->Increment(delta(s.draft_computed_tokens, counted.draft_computed_tokens));
    itl_tokens->Set(s.itl_step_tokens);
    itl_running->Set(s.itl_max_running);
    counted = s;
    step->Observe(absl::ToDoubleSeconds(took));
  };
}

}  // namespace tandem::worker
