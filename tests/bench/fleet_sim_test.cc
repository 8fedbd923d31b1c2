// The fleet simulator (bench/fleet_sim.h) at a small size: the index it
// drives mirrors every simulated worker's cache exactly (the apply path,
// restarts and lagging events included), with no lag routing by it makes
// the oracle's choices, and its figures are filled in. Speed is the
// benchmark's to report, not this test's.
#include "bench/fleet_sim.h"

#include <gtest/gtest.h>

namespace tandem::bench {
namespace {

FleetConfig Small() {
  FleetConfig c;
  c.workers = 8;
  c.blocks_per_worker = 512;
  c.prompt_blocks = 32;
  c.system_blocks = 8;
  c.system_prompts = 8;
  c.conversations = 256;
  c.requests = 3000;
  c.router_threads = 1;
  c.restart_probability = 0.002;
  c.event_lag = 0;
  c.seed = 7;
  c.check_oracle = true;
  c.noise_scan_seconds = 0;  // the machine is measured in a test of its own
  c.memory_probe_bytes = 0;
  return c;
}

TEST(FleetSimTest, TheIndexMirrorsTheFleetAndRoutingFindsTheOraclesOverlap) {
  const FleetResult r = RunFleet(Small());
  EXPECT_GT(r.restarts, 0);
  EXPECT_EQ(r.dropped_entries, 0);
  // Every (block, worker) pair the workers hold, and nothing else.
  EXPECT_EQ(r.entries, r.oracle_entries);
  EXPECT_GT(r.entries, 0);
  // With no event lag the index is exact, so the router's choice is the
  // oracle's (its own cost rule over the workers' exact caches).
  EXPECT_GT(r.oracle_hit_blocks, 0);
  EXPECT_EQ(r.hit_blocks, r.oracle_hit_blocks);
  EXPECT_DOUBLE_EQ(r.hit_rate_vs_oracle, 1.0);
  EXPECT_EQ(r.oracle_disagreements, 0);
  EXPECT_GT(r.events, 0);
  EXPECT_GT(r.events_per_second, 0);
  // The tables grew as the caches filled, within the apply time; the
  // measured requests' growths are among them.
  EXPECT_GT(r.growths, 0);
  EXPECT_GE(r.growth_keys_moved, r.growths);
  EXPECT_GT(r.growth_seconds, 0);
  EXPECT_LE(r.growth_seconds, r.apply_seconds);
  EXPECT_LE(r.measured_growths, r.growths);
  EXPECT_LE(r.measured_growth_keys_moved, r.growth_keys_moved);
  EXPECT_GT(r.bytes_per_entry, 0);
  EXPECT_GE(r.routes, Small().requests);
  EXPECT_GT(r.route_p99_us, 0);
  EXPECT_GE(r.route_p999_us, r.route_p99_us);
  EXPECT_GE(r.route_p99_us, r.route_p50_us);
  // Both routers' routes, apart.
  EXPECT_GT(r.predicting_route_cpu_p50_us, 0);
  EXPECT_GE(r.predicting_route_cpu_p99_us, r.predicting_route_cpu_p50_us);
  EXPECT_GT(r.side_route_cpu_p50_us, 0);
  EXPECT_GE(r.side_route_cpu_p99_us, r.side_route_cpu_p50_us);
}

TEST(FleetSimTest, LaggingEventsStillLeaveTheIndexExactOnceApplied) {
  FleetConfig c = Small();
  c.event_lag = 16;
  const FleetResult r = RunFleet(c);
  EXPECT_EQ(r.entries, r.oracle_entries);
  EXPECT_EQ(r.dropped_entries, 0);
  EXPECT_GT(r.hit_blocks, 0);
}

TEST(FleetSimTest, TheStreamWhileRoutingIsTheMeasuredRequestsDeltasAlone) {
  FleetConfig c = Small();
  // Enough to fill the caches (8 x 512 blocks), so that the measured
  // requests' stores come with evictions.
  c.warmup_requests = 3000;
  const FleetResult r = RunFleet(c);
  EXPECT_GT(r.measured_stored, 0);
  EXPECT_GT(r.measured_removed, 0);
  // Neither the warm-up's batches nor the snapshots.
  EXPECT_LT(r.measured_stored + r.measured_removed, r.events - r.snapshot_events);
  EXPECT_GT(r.measured_delta_seconds, 0);
  EXPECT_GT(r.measured_delta_events_per_second, 0);
  EXPECT_EQ(r.entries, r.oracle_entries);
}

TEST(FleetSimTest, AWorkerThatHeldTheWholePromptSendsNoBatch) {
  // Few prompts, drawn again and again: most requests find their whole
  // prompt on the worker they go to. As the worker's publisher, such a
  // worker sends nothing and numbers nothing, so no later batch comes
  // after a gap (which would take a snapshot to resync).
  FleetConfig c = Small();
  c.conversations = 64;
  c.system_prompts = 2;
  c.restart_probability = 0;
  c.warmup_requests = 200;
  const FleetResult r = RunFleet(c);
  EXPECT_EQ(r.snapshots, c.workers);  // the workers' first, and no resync
  EXPECT_GT(r.delta_batches, 0);
  EXPECT_LT(r.delta_batches, (c.warmup_requests + c.requests) / 2);
  EXPECT_GT(r.measured_delta_batches, 0);
  EXPECT_LT(r.measured_delta_batches, r.delta_batches);
  EXPECT_EQ(r.entries, r.oracle_entries);
  EXPECT_DOUBLE_EQ(r.hit_rate_vs_oracle, 1.0);
}

TEST(FleetSimTest, TheOraclesViewOfTheCachesIsEveryWorkersOwn) {
  // Built from the workers' caches once the warm-up has filled them, then
  // kept by their stores, evictions and restarts.
  FleetConfig c = Small();
  c.warmup_requests = 3000;
  c.restart_probability = 0.01;
  c.event_lag = 4;
  const FleetResult r = RunFleet(c);
  EXPECT_GT(r.restarts, 10);
  EXPECT_GT(r.measured_removed, 0);
  EXPECT_GT(r.oracle_hit_blocks, 0);
  EXPECT_EQ(r.oracle_disagreements, 0);
}

TEST(FleetSimTest, TheSameSeedSimulatesTheSameFleet) {
  FleetConfig c = Small();
  c.router_threads = 0;
  const FleetResult a = RunFleet(c);
  const FleetResult b = RunFleet(c);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.entries, b.entries);
  EXPECT_EQ(a.hit_blocks, b.hit_blocks);
  EXPECT_EQ(a.restarts, b.restarts);
  EXPECT_EQ(a.measured_stored, b.measured_stored);
  EXPECT_EQ(a.measured_removed, b.measured_removed);
}

TEST(FleetSimTest, TheMachinesStateIsMeasuredBeforeAndAfter) {
  FleetConfig c = Small();
  c.requests = 100;
  const FleetResult unmeasured = RunFleet(c);
  EXPECT_EQ(unmeasured.machine_before.interruptions_per_second, 0);
  EXPECT_EQ(unmeasured.machine_after.dependent_read_ns, 0);
  EXPECT_EQ(unmeasured.machine_before.core_ghz, 0);
  EXPECT_EQ(unmeasured.measured_cycles_per_event, 0);
  c.noise_scan_seconds = 0.05;
  c.memory_probe_bytes = int64_t{4} << 20;
  const FleetResult r = RunFleet(c);
  for (const Machine& m : {r.machine_before, r.machine_after}) {
    EXPECT_GE(m.interruptions_per_second, 0);
    EXPECT_LT(m.interrupted_fraction, 1);
    // Each gap counted is over 1 us, so they take at least 1 us a second each.
    EXPECT_GE(m.interrupted_fraction, m.interruptions_per_second * 1e-6);
    if (m.interruptions_per_second > 0) {
      EXPECT_GT(m.interruption_median_us, 1);
    } else {
      EXPECT_EQ(m.interruption_median_us, 0);
    }
    // A read from memory: more than a cycle, less than a millisecond.
    EXPECT_GT(m.dependent_read_ns, 0.1);
    EXPECT_LT(m.dependent_read_ns, 1e6);
#if defined(__x86_64__)
    // A core's clock, within what any core runs at (an emulator's or a
    // throttled VM's included).
    EXPECT_GT(m.core_ghz, 0.05);
    EXPECT_LT(m.core_ghz, 10);
#endif
  }
#if defined(__x86_64__)
  // The measured events' rate at the two clocks' mean.
  ASSERT_GT(r.measured_delta_events_per_second, 0);
  EXPECT_NEAR(r.measured_cycles_per_event * r.measured_delta_events_per_second,
              (r.machine_before.core_ghz + r.machine_after.core_ghz) / 2 * 1e9, 1e3);
#endif
}

}  // namespace
}  // namespace tandem::bench
