// A fleet of workers simulated in one process against the gateway's real
// block index and KV router (no processes, no network): each worker keeps
// an LRU cache of KV blocks within its budget and reports what it stores
// and evicts as BlockEventBatches, applied to the index as the subscriber
// does; prompts (a Zipf-popular system prompt, then a Zipf-popular
// conversation's own blocks) are routed by the KvRouter, computed on the
// chosen worker, and measured against an oracle that knows every worker's
// exact cache. Workers restart now and then (a new epoch and an empty
// cache). Extra router threads route prompts while the events stream in, so
// routing latency includes contention with the apply path. Seeded and
// deterministic in what it simulates (the timings are the machine's).
#ifndef TANDEM_BENCH_FLEET_SIM_H_
#define TANDEM_BENCH_FLEET_SIM_H_

#include <cstdint>
#include <string>

#include "bench/machine_state.h"

namespace tandem::bench {

struct FleetConfig {
  int32_t workers = 16;
  int64_t blocks_per_worker = 4096;  // each worker's cache budget, blocks
  int32_t block_size = 16;           // tokens per block
  int32_t system_prompts = 64;       // shared prefixes, Zipf-popular
  int32_t system_blocks = 64;        // blocks of each system prompt
  int32_t conversations = 4096;      // each prompt continues one, Zipf-popular
  int32_t prompt_blocks = 256;       // a prompt's blocks in all (4k tokens at 16)
  double zipf_s = 1.1;               // the popularity exponent of both draws
  int64_t requests = 20000;          // prompts routed, computed and measured
  // Prompts routed and computed first, to fill the caches, without the
  // oracle or the latencies (their events count, and their apply time).
  int64_t warmup_requests = 0;
  // Requests in flight: a routed request's load stays on its worker (as
  // the router weighs it) until this many later ones were routed; 0: the
  // workers' number times 4.
  int32_t in_flight = 0;
  // A worker's batch reaches the index this many requests after it was
  // made (the event stream's lag); until then the router works from what
  // it knew, and its predictions.
  int32_t event_lag = 4;
  int32_t router_threads = 1;        // extra threads routing while events apply
  double restart_probability = 0.0005;  // per request, a random worker restarts
  int64_t max_entries = int64_t{48} << 20;  // the index's bound (BlockIndexOptions)
  int32_t shards = 32;                      // the index's shards (BlockIndexOptions)
  int32_t retired_per_sweep = 16;           // BlockIndexOptions::retired_per_sweep
  uint64_t seed = 1;
  // Also asks every worker's own cache for the oracle, and counts where it
  // and the oracle's view of the caches (bench/exact_holders.h) disagree:
  // a check of the simulator for its tests (slow at fleet size).
  bool check_oracle = false;
  // The machine's state (bench/machine_state.h), measured before the run
  // and after its measured requests: its interruptions of a busy thread
  // over this long (0: not measured), and its memory's latency over a
  // buffer of this many bytes (0: not measured).
  double noise_scan_seconds = 0.5;
  int64_t memory_probe_bytes = int64_t{768} << 20;
};

struct FleetResult {
  int64_t events = 0;             // stored and removed hashes applied
  double apply_seconds = 0;       // time in BlockIndex::Apply (the steady clock)
  int64_t snapshots = 0;          // snapshot batches among them (starts, restarts, resyncs)
  double snapshot_seconds = 0;    // their share: each sweeps the worker's old entries
  int64_t snapshot_events = 0;    // the blocks those snapshots carried
  // Delta batches applied: one for each request that changed its worker's
  // cache (one that held the whole prompt sends none), and those of the
  // measured requests.
  int64_t delta_batches = 0;
  int64_t measured_delta_batches = 0;
  // Events of the delta batches per second of their own apply time: the
  // steady stream, without the sweeps of workers' restarts.
  double delta_events_per_second = 0;
  // The same over the measured requests alone, while the extra router
  // threads route: the steady stream once the warm-up has filled the
  // caches (the warm-up's batches store into tables still growing; a full
  // cache's store comes with an eviction).
  int64_t measured_stored = 0;
  int64_t measured_removed = 0;
  double measured_delta_seconds = 0;
  double measured_delta_events_per_second = 0;
  // A measured delta event's core cycles, at the mean of the core's clock
  // before the run and after the measured requests (Machine::core_ghz; 0
  // when the clock is not measured).
  double measured_cycles_per_event = 0;
  double events_per_second = 0;  // per second of apply_seconds
  // The index's tables' growths (gateway::HolderTable::Growths), their
  // time within apply_seconds: all of them, and those within the measured
  // requests (by a delta or a snapshot batch).
  int64_t growths = 0;
  int64_t growth_keys_moved = 0;
  double growth_seconds = 0;
  int64_t measured_growths = 0;
  int64_t measured_growth_keys_moved = 0;
  double measured_growth_seconds = 0;
  // The applying (main) thread's CPU time over its wall time while the
  // measured requests ran: below 1, the core was taken away from it now
  // and then, and apply_seconds counts some of that too.
  double main_thread_on_cpu = 0;
  // What one read of each clock costs here: the steady clock's times each
  // batch's Apply, the thread CPU clock's each route's CPU time.
  double steady_clock_read_ns = 0;
  double thread_clock_read_ns = 0;
  Machine machine_before;         // at the start
  Machine machine_after;          // once the measured requests are done
  int64_t entries = 0;            // (block, worker) entries at the end
  int64_t hashes = 0;             // distinct blocks among them
  int64_t oracle_entries = 0;     // the workers' caches, summed
  double bytes_per_entry = 0;     // the index's heap per entry (the allocator's count)
  double table_bytes_per_entry = 0;  // the same by the index's own count of its tables
  int64_t peak_rss_bytes = 0;     // the whole simulation's, workers' caches included
  int64_t routes = 0;             // Route calls timed, every thread's
  double route_p50_us = 0;
  double route_p99_us = 0;
  double route_p999_us = 0;
  double hash_p50_us = 0;  // hashing a prompt's blocks, which each route does first
  // The routing thread's CPU time per route: the cost without the waits for
  // a core (the machine is shared) that the wall clock figures include.
  double route_cpu_p50_us = 0;
  double route_cpu_p99_us = 0;
  // The same by who routes: the fleet's own routes, which record their
  // predictions as a gateway's do (taking a shard's lock for each shard
  // the prompt's blocks fall in), and the extra threads', which do not.
  // Their shares of the figures above follow how fast each loop runs.
  double predicting_route_cpu_p50_us = 0;
  double predicting_route_cpu_p99_us = 0;
  double side_route_cpu_p50_us = 0;
  double side_route_cpu_p99_us = 0;
  // Blocks of the routed prompts the chosen worker really held, over those
  // the oracle's choice held: the same cost (blocks to compute plus load)
  // weighed with every worker's exact cache instead of the index. 1 is the
  // oracle's hit rate.
  int64_t hit_blocks = 0;
  int64_t oracle_hit_blocks = 0;
  double hit_rate_vs_oracle = 0;
  // With check_oracle: (measured route, worker) pairs whose leading blocks
  // held the oracle's view got wrong.
  int64_t oracle_disagreements = 0;
  int64_t restarts = 0;
  int64_t dropped_entries = 0;  // not recorded: the index was full
  int64_t predictions = 0;      // held at the end (expired ones included)
};

// Runs the simulation; the timings are wall clock on this machine.
FleetResult RunFleet(const FleetConfig& config);

// One line of JSON: the config's sizes and the result.
std::string FleetJson(const FleetConfig& config, const FleetResult& result);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_FLEET_SIM_H_
