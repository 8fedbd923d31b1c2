// tandem-fleet-sim: the gateway's block index and KV router under a
// simulated fleet (bench/fleet_sim.h): prints events applied per second,
// the index's bytes per (block, worker) entry, routing latency p50/p99/p999
// with router threads beside the events, and the hit rate against an
// oracle that knows every worker's cache; appends one JSON line to --out.
// It reports; it never fails on speed.
#include <bit>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/fleet_sim.h"
#include "common/flags.h"

int main(int argc, char** argv) {
  const std::vector<tandem::common::FlagSpec> specs = {
      {.name = "workers", .default_value = "16", .help = "workers in the fleet, 1..4096"},
      {.name = "blocks-per-worker",
       .default_value = "4096",
       .help = "each worker's cache budget in blocks (at least --prompt-blocks)"},
      {.name = "prompt-blocks",
       .default_value = "256",
       .help = "blocks of each prompt (256 x 16 tokens: 4k tokens)"},
      {.name = "system-blocks",
       .default_value = "64",
       .help = "blocks of each shared system prompt (below --prompt-blocks)"},
      {.name = "system-prompts", .default_value = "64", .help = "shared system prompts"},
      {.name = "conversations", .default_value = "4096", .help = "conversations prompts continue"},
      {.name = "zipf", .default_value = "1.1", .help = "popularity exponent of both draws"},
      {.name = "requests",
       .default_value = "20000",
       .help = "prompts routed, computed and measured (hit rate, latency)"},
      {.name = "warmup-requests",
       .default_value = "0",
       .help = "prompts routed and computed first to fill the caches, unmeasured"},
      {.name = "in-flight",
       .default_value = "0",
       .help = "requests whose load stays on their worker (0: 4 per worker)"},
      {.name = "router-threads",
       .default_value = "1",
       .help = "extra threads routing while the events apply"},
      {.name = "max-entries",
       .default_value = "50331648",
       .help = "the index's bound in (block, worker) entries (as --index-max-entries)"},
      {.name = "shards",
       .default_value = "32",
       .help = "the index's shards, a power of two in 1..4096 (as --index-shards)"},
      {.name = "retired-per-sweep",
       .default_value = "16",
       .help = "restarted workers swept out of the index together, 1..1024 (as "
               "--index-retired-per-sweep)"},
      {.name = "restart-probability",
       .default_value = "0.0005",
       .help = "per request, the chance that a random worker restarts (a new epoch, an "
               "empty cache); 0 = none, so the caches fill"},
      {.name = "seed", .default_value = "1", .help = "the simulation's seed"},
      {.name = "noise-scan-ms",
       .default_value = "500",
       .help = "how long the machine's own interruptions of a busy thread are measured, "
               "before the run and after its measured requests, 0..60000 (0: not)"},
      {.name = "memory-probe-mib",
       .default_value = "768",
       .help = "the buffer the machine's memory latency is measured over, before the run and "
               "after its measured requests, 0..65536 MiB (0: not)"},
      {.name = "out", .help = "file to append the JSON line to"},
  };
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-fleet-sim", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  tandem::bench::FleetConfig c;
  auto workers = args->IntInRange("workers", 1, 4096);
  auto budget = args->IntInRange("blocks-per-worker", 1, 1 << 30);
  auto prompt = args->IntInRange("prompt-blocks", 2, 1 << 16);
  auto system = args->IntInRange("system-blocks", 1, 1 << 16);
  auto systems = args->IntInRange("system-prompts", 1, 1 << 24);
  auto conversations = args->IntInRange("conversations", 1, 1 << 24);
  auto requests = args->IntInRange("requests", 1, 1 << 30);
  auto warmup = args->IntInRange("warmup-requests", 0, 1 << 30);
  auto in_flight = args->IntInRange("in-flight", 0, 1 << 24);
  auto routers = args->IntInRange("router-threads", 0, 64);
  auto max_entries = args->IntInRange("max-entries", 1, 1 << 30);
  auto shards = args->IntInRange("shards", 1, 4096);
  auto retired_per_sweep = args->IntInRange("retired-per-sweep", 1, 1024);
  auto seed = args->IntInRange("seed", 0, 1 << 30);
  auto noise_scan_ms = args->IntInRange("noise-scan-ms", 0, 60000);
  auto memory_probe_mib = args->IntInRange("memory-probe-mib", 0, 65536);
  for (const absl::Status& s :
       {workers.status(), budget.status(), prompt.status(), system.status(), systems.status(),
        conversations.status(), requests.status(), warmup.status(), in_flight.status(),
        routers.status(), max_entries.status(), shards.status(), retired_per_sweep.status(),
        seed.status(), noise_scan_ms.status(), memory_probe_mib.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-fleet-sim: " << s.message() << "\n";
      return 2;
    }
  }
  if (*system >= *prompt || *budget < *prompt) {
    std::cerr << "tandem-fleet-sim: --system-blocks must be below --prompt-blocks, and "
                 "--blocks-per-worker at least --prompt-blocks\n";
    return 2;
  }
  absl::StatusOr<double> zipf = args->Double("zipf");
  if (!zipf.ok() || *zipf <= 0 || *zipf > 4) {
    std::cerr << "tandem-fleet-sim: --zipf: must be a number in (0, 4]\n";
    return 2;
  }
  c.workers = *workers;
  c.blocks_per_worker = *budget;
  c.prompt_blocks = *prompt;
  c.system_blocks = *system;
  c.system_prompts = *systems;
  c.conversations = *conversations;
  c.requests = *requests;
  c.warmup_requests = *warmup;
  c.in_flight = *in_flight;
  c.router_threads = *routers;
  c.max_entries = *max_entries;
  if (!std::has_single_bit(static_cast<unsigned>(*shards))) {
    std::cerr << "tandem-fleet-sim: --shards: must be a power of two in 1..4096\n";
    return 2;
  }
  c.shards = static_cast<int32_t>(*shards);
  c.retired_per_sweep = static_cast<int32_t>(*retired_per_sweep);
  c.seed = static_cast<uint64_t>(*seed);
  c.noise_scan_seconds = static_cast<double>(*noise_scan_ms) / 1000;
  c.memory_probe_bytes = int64_t{*memory_probe_mib} << 20;
  c.zipf_s = *zipf;
  absl::StatusOr<double> restart = args->Double("restart-probability");
  if (!restart.ok() || *restart < 0 || *restart > 1) {
    std::cerr << "tandem-fleet-sim: --restart-probability: must be a number in [0, 1]\n";
    return 2;
  }
  c.restart_probability = *restart;
  // Abseil's mutex deadlock detector (on in Debian's build) costs every
  // lock a graph lookup; the gateway turns it off too.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const tandem::bench::FleetResult r = tandem::bench::RunFleet(c);
  std::cout << absl::StrFormat(
      "fleet: %d workers x %d blocks, %d requests of %d blocks, %d router threads\n"
      "  events applied: %d, %.0f per second in Apply (the applying thread on a core "
      "%.1f%% of the measured time)\n"
      "  events applied: %.3f s in snapshots (%d: each sweeps a worker's old entries); "
      "the deltas alone %.0f per second\n"
      "  while routing (the measured requests): %d delta events (%d stored, %d removed) in %d "
      "batches, %.0f per second (%.0f cycles an event at the core's clock)\n"
      "  table growths: %d (%d keys moved, %.3f s of the apply time); while routing %d "
      "(%d keys moved, %.3f s)\n"
      "  index: %d entries over %d blocks (workers' caches: %d), %.1f bytes per entry "
      "(tables alone: %.1f), %d evicted, %d predictions held\n"
      "  routing: %d routes, p50 %.1f us, p99 %.1f us, p999 %.1f us (hashing the prompt: "
      "p50 %.1f us); CPU time per route p50 %.1f us, p99 %.1f us\n"
      "  CPU time per route by router: the fleet's own, predicting, p50 %.1f us, p99 %.1f us; "
      "the extra threads', p50 %.1f us, p99 %.1f us\n"
      "  peak RSS: %.2f GiB; a clock read: steady %.0f ns, thread CPU %.0f ns\n"
      "  the machine (nothing else running): a busy thread interrupted for over 1 us %.0f "
      "times a second (median %.1f us, %.2f%% of its time), a dependent read over the probe "
      "%.0f ns, the core's clock %.2f GHz, before the run; %.0f, %.1f us, %.2f%%, %.0f ns, "
      "%.2f GHz after\n"
      "  hit rate vs oracle: %.4f (%d of %d blocks), %d restarts\n",
      c.workers, c.blocks_per_worker, c.requests, c.prompt_blocks, c.router_threads, r.events,
      r.events_per_second, 100 * r.main_thread_on_cpu, r.snapshot_seconds, r.snapshots,
      r.delta_events_per_second, r.measured_stored + r.measured_removed, r.measured_stored,
      r.measured_removed, r.measured_delta_batches, r.measured_delta_events_per_second,
      r.measured_cycles_per_event, r.growths, r.growth_keys_moved, r.growth_seconds,
      r.measured_growths, r.measured_growth_keys_moved, r.measured_growth_seconds, r.entries,
      r.hashes, r.oracle_entries, r.bytes_per_entry, r.table_bytes_per_entry, r.dropped_entries,
      r.predictions, r.routes, r.route_p50_us, r.route_p99_us, r.route_p999_us, r.hash_p50_us,
      r.route_cpu_p50_us, r.route_cpu_p99_us, r.predicting_route_cpu_p50_us,
      r.predicting_route_cpu_p99_us, r.side_route_cpu_p50_us, r.side_route_cpu_p99_us,
      static_cast<double>(r.peak_rss_bytes) / (1 << 30), r.steady_clock_read_ns,
      r.thread_clock_read_ns, r.machine_before.interruptions_per_second,
      r.machine_before.interruption_median_us, 100 * r.machine_before.interrupted_fraction,
      r.machine_before.dependent_read_ns, r.machine_before.core_ghz,
      r.machine_after.interruptions_per_second, r.machine_after.interruption_median_us,
      100 * r.machine_after.interrupted_fraction, r.machine_after.dependent_read_ns,
      r.machine_after.core_ghz, r.hit_rate_vs_oracle, r.hit_blocks, r.oracle_hit_blocks,
      r.restarts);
  if (args->IsSet("out")) {
    std::ofstream out(args->String("out"), std::ios::app);
    out << tandem::bench::FleetJson(c, r) << "\n";
  }
  return 0;
}
