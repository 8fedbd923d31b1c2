#include "bench/fleet_sim.h"

#include <malloc.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/fleet_oracle.h"
#include "bench/machine_state.h"
#include "bench/sim_worker.h"
#include "engine/kv/block_hash.h"
#include "gateway/routing/block_index.h"
#include "gateway/routing/huge_pages.h"
#include "gateway/routing/kv_router.h"
#include "gateway/routing/worker_picker.h"
#include "prometheus/registry.h"

// The heap's bytes in use: the allocator's own count (ASan replaces
// malloc, and glibc's mallinfo2 then counts nothing).
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_FLEET_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_FLEET_SIM_ASAN 1
#endif
#endif
#ifdef TANDEM_FLEET_SIM_ASAN
#include <sanitizer/allocator_interface.h>
#endif

namespace tandem::bench {
namespace {

// The heap's bytes in use, and the slot arrays mapped on their own
// (gateway/routing/huge_pages.h), which the heap's count does not see.
size_t HeapInUse() {
#ifdef TANDEM_FLEET_SIM_ASAN
  return __sanitizer_get_current_allocated_bytes() + gateway::MappedBytes();
#else
  // Large blocks (a big table) are mapped on their own, outside uordblks.
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd + gateway::MappedBytes();
#endif
}

using Clock = std::chrono::steady_clock;
constexpr uint64_t kFingerprint = 0x5eedf1ee7ull;

// This thread's CPU time. Linux reads it with a system call (no vDSO):
// 0.2-1.2 us a read on the VMs measured (docs/benchmarks.md), so it times
// what takes far longer than that (a route, a whole run), never a batch.
Clock::duration ThreadCpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                    std::chrono::nanoseconds(ts.tv_nsec));
}

// What one read of `clock` costs, in ns: the mean over many reads (each a
// call into the C library, which the compiler keeps).
template <typename F>
double ReadCostNs(F clock) {
  constexpr int kReads = 20000;
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < kReads; ++i) clock();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kReads;
}

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Draws from [0, n) with P(k) proportional to 1 / (k + 1)^s.
class Zipf {
 public:
  Zipf(int32_t n, double s) : cdf_(static_cast<size_t>(n)) {
    double sum = 0;
    for (int32_t k = 0; k < n; ++k) cdf_[k] = sum += 1.0 / std::pow(k + 1.0, s);
    for (double& c : cdf_) c /= sum;
  }
  int32_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<int32_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

// The prompts: conversation c continues system prompt system_of[c]; its
// tokens are a deterministic function of the seed and the ids.
class Prompts {
 public:
  explicit Prompts(const FleetConfig& c)
      : config_(c), systems_(c.system_prompts, c.zipf_s), conversations_(c.conversations, c.zipf_s) {
    std::mt19937_64 rng(c.seed);
    for (int32_t i = 0; i < c.conversations; ++i) system_of_.push_back(systems_(rng));
  }
  // A prompt's tokens, drawn.
  std::vector<int32_t> Draw(std::mt19937_64& rng) const {
    const int32_t conversation = conversations_(rng);
    const int32_t system = system_of_[conversation];
    const int32_t bs = config_.block_size;
    std::vector<int32_t> tokens;
    tokens.reserve(static_cast<size_t>(config_.prompt_blocks) * bs);
    for (int64_t i = 0; i < int64_t{config_.system_blocks} * bs; ++i) {
      tokens.push_back(Token((uint64_t{1} << 40) + system, i));
    }
    for (int64_t i = 0; i < int64_t{config_.prompt_blocks - config_.system_blocks} * bs; ++i) {
      tokens.push_back(Token(conversation, i));
    }
    return tokens;
  }

 private:
  int32_t Token(uint64_t stream, uint64_t i) const {
    return 3 + static_cast<int32_t>(Mix(config_.seed ^ Mix(stream) ^ (i * 0x100000001b3ull)) %
                                    32000);
  }
  const FleetConfig& config_;
  Zipf systems_;
  Zipf conversations_;
  std::vector<int32_t> system_of_;
};

double Percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return sorted[i];
}

}  // namespace

FleetResult RunFleet(const FleetConfig& config) {
  FleetResult r;
  r.steady_clock_read_ns = ReadCostNs([] { return Clock::now().time_since_epoch(); });
  r.thread_clock_read_ns = ReadCostNs(ThreadCpu);
  r.machine_before = MeasureMachine(config.noise_scan_seconds, config.memory_probe_bytes);
  const Prompts prompts(config);
  std::vector<std::string> addresses;
  for (int32_t i = 0; i < config.workers; ++i) addresses.push_back(absl::StrFormat("w%d", i));
  gateway::WorkerPicker picker(addresses);
  auto owned_index = std::make_unique<gateway::BlockIndex>(
      gateway::BlockIndexOptions{.max_entries = config.max_entries,
                                 .shards = config.shards,
                                 .retired_per_sweep = config.retired_per_sweep});
  gateway::BlockIndex& index = *owned_index;
  prometheus::Registry registry;
  gateway::KvRouter router(index, 0, {}, registry, gateway::RouteRole::kPrefill);

  std::mt19937_64 rng(config.seed);
  std::vector<SimWorker> workers;
  workers.reserve(static_cast<size_t>(config.workers));
  // Time in Apply, by the steady clock around each batch: a vDSO read of
  // about 50 ns against a batch's few us (the thread's CPU clock, a system
  // call, took 5-13% of it on the VMs measured). The wall clock also counts
  // what the core was taken away for, so the main thread's CPU time over
  // the measured requests is set beside its wall time (main_thread_on_cpu):
  // at 1, what Apply took was all CPU.
  Clock::duration applying{};
  Clock::duration resetting{};  // snapshots' share: the worker's old entries swept
  Clock::duration measured_deltas{};  // the deltas' while the measured requests run
  bool in_measure = false;
  gateway::HolderTable::Growths growths_before;  // when the measured requests begin
  auto apply = [&](int worker, const tandem::v1::BlockEventBatch& batch) {
    const Clock::time_point t0 = Clock::now();
    const gateway::BlockIndex::Applied applied = index.Apply(worker, batch);
    const Clock::duration took = Clock::now() - t0;
    applying += took;
    if (batch.snapshot()) {
      resetting += took;
      ++r.snapshots;
      r.snapshot_events += batch.stored_size();
    } else {
      ++r.delta_batches;
      if (in_measure) {
        ++r.measured_delta_batches;
        measured_deltas += took;
        r.measured_stored += batch.stored_size();
        r.measured_removed += batch.removed_size();
      }
    }
    r.events += batch.stored_size() + batch.removed_size();
    return applied;
  };
  for (int32_t i = 0; i < config.workers; ++i) {
    workers.emplace_back(config.blocks_per_worker, config.block_size, kFingerprint, rng());
    apply(i, workers.back().Start(rng()));
  }

  // Routing beside the events: each extra thread routes drawn prompts
  // until the fleet is done, through a router of its own that predicts
  // nothing and a picker of its own, so what it routes (and never
  // computes) does not sway the fleet's own routing.
  std::atomic<bool> done{false};
  // Wall clock (what a request waits) and the thread's CPU time (what the
  // route costs, whatever else the machine runs).
  struct Timed {
    std::vector<double> wall_us;
    std::vector<double> cpu_us;
  };
  // The extra router threads start with the measured requests (the warm-up
  // only fills the caches).
  absl::Notification measuring;
  if (config.warmup_requests == 0) measuring.Notify();
  absl::Mutex latencies_mu;
  Timed latencies;
  auto route_timed = [](gateway::KvRouter& by, gateway::WorkerPicker& among,
                        const std::vector<int32_t>& tokens, Timed* out) {
    const Clock::time_point t0 = Clock::now();
    const Clock::duration c0 = ThreadCpu();
    gateway::RouteDecision d = by.Route(among, tokens, {});
    const Clock::duration cpu = ThreadCpu() - c0;
    if (out != nullptr) {
      out->wall_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      out->cpu_us.push_back(std::chrono::duration<double, std::micro>(cpu).count());
    }
    return d;
  };
  gateway::WorkerPicker side_picker(addresses);
  prometheus::Registry side_registry;
  gateway::KvRouter side_router(index, 0, {.prediction_ttl = absl::ZeroDuration()},
                                side_registry, gateway::RouteRole::kPrefill);
  std::vector<std::thread> routers;
  for (int32_t t = 0; t < config.router_threads; ++t) {
    routers.emplace_back([&, t] {
      std::mt19937_64 own(config.seed * 7919 + t + 1);
      Timed mine;
      measuring.WaitForNotification();
      while (!done.load(std::memory_order_relaxed)) {
        route_timed(side_router, side_picker, prompts.Draw(own), &mine);
      }
      absl::MutexLock lock(&latencies_mu);
      latencies.wall_us.insert(latencies.wall_us.end(), mine.wall_us.begin(), mine.wall_us.end());
      latencies.cpu_us.insert(latencies.cpu_us.end(), mine.cpu_us.begin(), mine.cpu_us.end());
    });
  }

  // Batches made and not yet applied (the event streams' lag), in order, as
  // the bytes a worker sends: each is parsed when it arrives and applied
  // at once, as the subscriber does (the parse is the stream's, untimed), so
  // the index reads a batch as fresh as a subscriber's, not one made
  // `--event-lag` requests ago.
  // A request whose worker sent nothing (it held the whole prompt) keeps
  // its place with no bytes, so that the lag stays counted in requests.
  std::deque<std::pair<int, std::optional<std::string>>> lagging;
  tandem::v1::BlockEventBatch arrived;
  auto deliver = [&] {
    const int w = lagging.front().first;
    if (!lagging.front().second.has_value()) {
      lagging.pop_front();
      return;
    }
    if (!arrived.ParseFromString(*lagging.front().second)) {
      std::fprintf(stderr, "tandem-fleet-sim: a batch does not parse\n");
      std::abort();
    }
    if (apply(w, arrived) == gateway::BlockIndex::Applied::kNeedsResync) {
      apply(w, workers[w].Snapshot());  // as the subscriber's resubscribe
    }
    lagging.pop_front();
  };
  Timed main_latencies;
  std::deque<gateway::WorkerPicker::Pick> in_flight;
  const size_t max_in_flight =
      static_cast<size_t>(config.in_flight > 0 ? config.in_flight : 4 * config.workers);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<double> hash_latencies;
  // Per worker, before each measured route: tokens and requests in flight.
  std::vector<FleetOracle::Load> loads(static_cast<size_t>(config.workers));
  // What the oracle needs of the measured requests, scored after the run.
  std::optional<FleetOracle> oracle_log;
  const int64_t total_requests = config.warmup_requests + config.requests;
  Clock::time_point measure_wall_start;
  Clock::duration measure_cpu_start{};
  for (int64_t q = 0; q < total_requests; ++q) {
    const bool measured = q >= config.warmup_requests;
    in_measure = measured;
    if (q == config.warmup_requests) {
      measure_wall_start = Clock::now();
      measure_cpu_start = ThreadCpu();
      growths_before = index.table_growths();
      oracle_log.emplace(config.workers, config.prompt_blocks, config.block_size);
      for (int32_t i = 0; i < config.workers; ++i) oracle_log->Begin(i, workers[i].Snapshot());
      if (!measuring.HasBeenNotified()) measuring.Notify();
    }
    if (unit(rng) < config.restart_probability) {
      const int w = static_cast<int>(rng() % static_cast<uint64_t>(config.workers));
      if (oracle_log.has_value()) oracle_log->LogRestart(w, workers[w].Snapshot());
      lagging.emplace_back(w, workers[w].Start(rng()).SerializeAsString());
      while (static_cast<int32_t>(lagging.size()) > config.event_lag) deliver();
      ++r.restarts;
    }
    const std::vector<int32_t> tokens = prompts.Draw(rng);
    const Clock::time_point hash_start = Clock::now();
    const std::vector<engine::BlockHash> chain =
        engine::PrefixBlockHashes(tokens, config.block_size, kFingerprint);
    if (measured) {
      hash_latencies.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - hash_start).count());
    }
    // The loads the router sees, for the oracle (bench/fleet_oracle.h),
    // before the route adds its own.
    if (measured) {
      for (int i = 0; i < config.workers; ++i) {
        loads[static_cast<size_t>(i)] = {picker.in_flight_tokens(i), picker.in_flight(i)};
      }
    }
    gateway::RouteDecision d =
        route_timed(router, picker, tokens, measured ? &main_latencies : nullptr);
    const int chosen = d.pick.valid() ? d.pick.index() : 0;
    in_flight.push_back(std::move(d.pick));  // its load ends max_in_flight requests on
    if (in_flight.size() > max_in_flight) in_flight.pop_front();
    if (measured) {
      // The last block is always computed.
      std::vector<engine::BlockHash> lookup(chain.begin(), chain.end() - 1);
      std::vector<int32_t> expected;
      if (config.check_oracle) {
        for (const SimWorker& w : workers) expected.push_back(w.Holds(lookup));
      }
      oracle_log->LogRoute(std::move(lookup), loads, chosen, std::move(expected));
    }
    const tandem::v1::BlockEventBatch computed = workers[chosen].Compute(chain);
    if (oracle_log.has_value()) oracle_log->LogChange(chosen, computed);
    lagging.emplace_back(chosen, computed.stored().empty() && computed.removed().empty()
                                     ? std::nullopt
                                     : std::optional(computed.SerializeAsString()));
    while (static_cast<int32_t>(lagging.size()) > config.event_lag) deliver();
  }
  while (!lagging.empty()) deliver();
  if (config.requests > 0) {
    const double wall = std::chrono::duration<double>(Clock::now() - measure_wall_start).count();
    const double cpu = std::chrono::duration<double>(ThreadCpu() - measure_cpu_start).count();
    r.main_thread_on_cpu = wall > 0 ? cpu / wall : 0;
  }
  done.store(true);
  if (!measuring.HasBeenNotified()) measuring.Notify();
  for (std::thread& t : routers) t.join();
  r.machine_after = MeasureMachine(config.noise_scan_seconds, config.memory_probe_bytes);
  if (oracle_log.has_value()) {
    const FleetOracle::Score score = oracle_log->Replay();
    r.hit_blocks = score.hit_blocks;
    r.oracle_hit_blocks = score.oracle_hit_blocks;
    r.oracle_disagreements = score.disagreements;
    oracle_log.reset();
  }
  {
    std::vector<double> own = main_latencies.cpu_us;
    std::vector<double> side = latencies.cpu_us;
    std::sort(own.begin(), own.end());
    std::sort(side.begin(), side.end());
    r.predicting_route_cpu_p50_us = Percentile(own, 0.50);
    r.predicting_route_cpu_p99_us = Percentile(own, 0.99);
    r.side_route_cpu_p50_us = Percentile(side, 0.50);
    r.side_route_cpu_p99_us = Percentile(side, 0.99);
  }
  latencies.wall_us.insert(latencies.wall_us.end(), main_latencies.wall_us.begin(),
                           main_latencies.wall_us.end());
  latencies.cpu_us.insert(latencies.cpu_us.end(), main_latencies.cpu_us.begin(),
                          main_latencies.cpu_us.end());

  r.apply_seconds = std::chrono::duration<double>(applying).count();
  r.measured_delta_seconds = std::chrono::duration<double>(measured_deltas).count();
  if (r.measured_delta_seconds > 0) {
    r.measured_delta_events_per_second =
        (r.measured_stored + r.measured_removed) / r.measured_delta_seconds;
  }
  // At the clock measured on either side of the measured requests: the
  // VM's clock moves between stretches, an event's cycles much less.
  const double ghz = (r.machine_before.core_ghz + r.machine_after.core_ghz) / 2;
  if (r.measured_delta_events_per_second > 0 && r.machine_before.core_ghz > 0 &&
      r.machine_after.core_ghz > 0) {
    r.measured_cycles_per_event = ghz * 1e9 / r.measured_delta_events_per_second;
  }
  r.snapshot_seconds = std::chrono::duration<double>(resetting).count();
  if (r.apply_seconds > r.snapshot_seconds) {
    r.delta_events_per_second =
        (r.events - r.snapshot_events) / (r.apply_seconds - r.snapshot_seconds);
  }
  std::sort(hash_latencies.begin(), hash_latencies.end());
  r.hash_p50_us = Percentile(hash_latencies, 0.50);
  r.events_per_second = r.apply_seconds > 0 ? r.events / r.apply_seconds : 0;
  const gateway::HolderTable::Growths growths = index.table_growths();
  r.growths = growths.count;
  r.growth_keys_moved = growths.keys_moved;
  r.growth_seconds = static_cast<double>(growths.nanos) * 1e-9;
  r.measured_growths = growths.count - growths_before.count;
  r.measured_growth_keys_moved = growths.keys_moved - growths_before.keys_moved;
  r.measured_growth_seconds = static_cast<double>(growths.nanos - growths_before.nanos) * 1e-9;
  r.entries = index.entries();
  r.hashes = index.hashes();
  r.dropped_entries = index.dropped_entries();
  r.predictions = index.predicted_entries();
  for (const SimWorker& w : workers) r.oracle_entries += w.size();
  std::sort(latencies.wall_us.begin(), latencies.wall_us.end());
  std::sort(latencies.cpu_us.begin(), latencies.cpu_us.end());
  r.routes = static_cast<int64_t>(latencies.wall_us.size());
  r.route_p50_us = Percentile(latencies.wall_us, 0.50);
  r.route_p99_us = Percentile(latencies.wall_us, 0.99);
  r.route_p999_us = Percentile(latencies.wall_us, 0.999);
  r.route_cpu_p50_us = Percentile(latencies.cpu_us, 0.50);
  r.route_cpu_p99_us = Percentile(latencies.cpu_us, 0.99);
  r.hit_rate_vs_oracle =
      r.oracle_hit_blocks > 0 ? static_cast<double>(r.hit_blocks) / r.oracle_hit_blocks : 1.0;

  // The index's own heap for the fleet's final state: the live index
  // goes, then a fresh one is fed every worker's snapshot (one at a time,
  // so that only the index grows), measured by the allocator's bytes in
  // use and by the index's own count of its tables.
  owned_index.reset();
  {
    const size_t before = HeapInUse();
    auto fresh = std::make_unique<gateway::BlockIndex>(
        gateway::BlockIndexOptions{.max_entries = config.max_entries,
                                   .shards = config.shards,
                                   .retired_per_sweep = config.retired_per_sweep});
    for (int32_t i = 0; i < config.workers; ++i) fresh->Apply(i, workers[i].Snapshot());
    const size_t after = HeapInUse();
    if (fresh->entries() > 0) {
      r.bytes_per_entry = static_cast<double>(after - before) / fresh->entries();
      r.table_bytes_per_entry = static_cast<double>(fresh->table_bytes()) / fresh->entries();
    }
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  r.peak_rss_bytes = int64_t{usage.ru_maxrss} * 1024;
  return r;
}

std::string FleetJson(const FleetConfig& c, const FleetResult& r) {
  return absl::StrFormat(
      "{\"bench\":\"fleet\",\"workers\":%d,\"blocks_per_worker\":%d,\"prompt_blocks\":%d,"
      "\"requests\":%d,\"in_flight\":%d,\"event_lag\":%d,\"router_threads\":%d,\"events\":%d,"
      "\"events_per_second\":%.0f,"
      "\"entries\":%d,\"bytes_per_entry\":%.1f,\"routes\":%d,\"route_p50_us\":%.1f,"
      "\"route_p99_us\":%.1f,\"route_p999_us\":%.1f,\"hit_rate_vs_oracle\":%.4f,"
      "\"restarts\":%d,\"dropped_entries\":%d,\"warmup_requests\":%d,\"conversations\":%d,"
      "\"system_prompts\":%d,\"hashes\":%d,\"table_bytes_per_entry\":%.1f,\"snapshots\":%d,"
      "\"snapshot_seconds\":%.3f,\"hash_p50_us\":%.1f,\"route_cpu_p50_us\":%.1f,"
      "\"route_cpu_p99_us\":%.1f,\"peak_rss_bytes\":%d,\"delta_events_per_second\":%.0f,"
      "\"predictions\":%d,\"shards\":%d,\"measured_stored\":%d,\"measured_removed\":%d,"
      "\"measured_delta_events_per_second\":%.0f,\"predicting_route_cpu_p50_us\":%.1f,"
      "\"predicting_route_cpu_p99_us\":%.1f,\"side_route_cpu_p50_us\":%.1f,"
      "\"side_route_cpu_p99_us\":%.1f,\"retired_per_sweep\":%d,\"main_thread_on_cpu\":%.4f,"
      "\"steady_clock_read_ns\":%.1f,\"thread_clock_read_ns\":%.1f,\"growths\":%d,"
      "\"growth_keys_moved\":%d,\"growth_seconds\":%.3f,\"measured_growths\":%d,"
      "\"measured_growth_keys_moved\":%d,\"measured_growth_seconds\":%.3f,"
      "\"interruptions_before_per_second\":%.0f,\"interruption_before_median_us\":%.2f,"
      "\"interrupted_before_fraction\":%.4f,\"dependent_read_before_ns\":%.1f,"
      "\"interruptions_after_per_second\":%.0f,\"interruption_after_median_us\":%.2f,"
      "\"interrupted_after_fraction\":%.4f,\"dependent_read_after_ns\":%.1f,"
      "\"core_ghz_before\":%.3f,\"core_ghz_after\":%.3f,\"delta_batches\":%d,"
      "\"measured_delta_batches\":%d,\"measured_cycles_per_event\":%.1f}",
      c.workers, c.blocks_per_worker, c.prompt_blocks, c.requests, c.in_flight, c.event_lag,
      c.router_threads, r.events, r.events_per_second, r.entries, r.bytes_per_entry, r.routes,
      r.route_p50_us, r.route_p99_us, r.route_p999_us, r.hit_rate_vs_oracle, r.restarts,
      r.dropped_entries, c.warmup_requests, c.conversations, c.system_prompts, r.hashes,
      r.table_bytes_per_entry, r.snapshots, r.snapshot_seconds, r.hash_p50_us, r.route_cpu_p50_us,
      r.route_cpu_p99_us, r.peak_rss_bytes, r.delta_events_per_second, r.predictions, c.shards,
      r.measured_stored, r.measured_removed, r.measured_delta_events_per_second,
      r.predicting_route_cpu_p50_us, r.predicting_route_cpu_p99_us, r.side_route_cpu_p50_us,
      r.side_route_cpu_p99_us, c.retired_per_sweep, r.main_thread_on_cpu, r.steady_clock_read_ns,
      r.thread_clock_read_ns, r.growths, r.growth_keys_moved, r.growth_seconds, r.measured_growths,
      r.measured_growth_keys_moved, r.measured_growth_seconds,
      r.machine_before.interruptions_per_second, r.machine_before.interruption_median_us,
      r.machine_before.interrupted_fraction, r.machine_before.dependent_read_ns,
      r.machine_after.interruptions_per_second, r.machine_after.interruption_median_us,
      r.machine_after.interrupted_fraction, r.machine_after.dependent_read_ns,
      r.machine_before.core_ghz, r.machine_after.core_ghz, r.delta_batches,
      r.measured_delta_batches, r.measured_cycles_per_event);
}

}  // namespace tandem::bench
