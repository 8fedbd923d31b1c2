// tandem-index-writers: several threads applying block events to one
// gateway BlockIndex at once (bench/index_writers.h): prints events applied
// per wall second (all threads) and per second of the threads' CPU, and
// checks that the index holds what the workers' caches do; appends one
// JSON line to --out. It reports; it never fails on speed.
#include <bit>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/index_writers.h"
#include "common/flags.h"

int main(int argc, char** argv) {
  const std::vector<tandem::common::FlagSpec> specs = {
      {.name = "workers", .default_value = "1000", .help = "workers whose events apply, 1..8191"},
      {.name = "blocks-per-worker",
       .default_value = "10000",
       .help = "each worker's cache budget in blocks, filled before the measure"},
      {.name = "batch-blocks",
       .default_value = "128",
       .help = "blocks each delta batch stores (and removes, the cache being full)"},
      {.name = "batches-per-worker", .default_value = "10", .help = "delta batches measured"},
      {.name = "shared-fraction",
       .default_value = "0.25",
       .help = "share of stored blocks drawn from a pool every worker draws from, in [0, 1]"},
      {.name = "shared-blocks", .default_value = "100000", .help = "blocks in that pool"},
      {.name = "threads", .default_value = "2", .help = "threads applying at once, 1..64"},
      {.name = "shards",
       .default_value = "32",
       .help = "the index's shards, a power of two in 1..4096 (as --index-shards)"},
      {.name = "seed", .default_value = "1", .help = "the seed of the drawn blocks"},
      {.name = "out", .help = "file to append the JSON line to"},
  };
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-index-writers", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  auto workers = args->IntInRange("workers", 1, 8191);
  auto budget = args->IntInRange("blocks-per-worker", 1, 1 << 24);
  auto batch = args->IntInRange("batch-blocks", 1, 1 << 16);
  auto batches = args->IntInRange("batches-per-worker", 1, 1 << 20);
  auto shared = args->IntInRange("shared-blocks", 1, 1 << 30);
  auto threads = args->IntInRange("threads", 1, 64);
  auto shards = args->IntInRange("shards", 1, 4096);
  auto seed = args->IntInRange("seed", 0, 1 << 30);
  for (const absl::Status& s :
       {workers.status(), budget.status(), batch.status(), batches.status(), shared.status(),
        threads.status(), shards.status(), seed.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-index-writers: " << s.message() << "\n";
      return 2;
    }
  }
  if (!std::has_single_bit(static_cast<unsigned>(*shards))) {
    std::cerr << "tandem-index-writers: --shards: must be a power of two in 1..4096\n";
    return 2;
  }
  absl::StatusOr<double> fraction = args->Double("shared-fraction");
  if (!fraction.ok() || *fraction < 0 || *fraction > 1) {
    std::cerr << "tandem-index-writers: --shared-fraction: must be a number in [0, 1]\n";
    return 2;
  }
  tandem::bench::WritersConfig c;
  c.workers = *workers;
  c.blocks_per_worker = *budget;
  c.batch_blocks = *batch;
  c.batches_per_worker = *batches;
  c.shared_fraction = *fraction;
  c.shared_blocks = *shared;
  c.threads = *threads;
  c.shards = *shards;
  c.seed = static_cast<uint64_t>(*seed);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const tandem::bench::WritersResult r = tandem::bench::RunWriters(c);
  std::cout << absl::StrFormat(
      "index writers: %d workers x %d blocks, %d shards, %d threads\n"
      "  events applied: %d in %.3f s: %.0f per second (all threads), %.0f per second of "
      "the threads' CPU\n"
      "  index: %d entries (workers' caches: %d)\n",
      c.workers, c.blocks_per_worker, c.shards, c.threads, r.events, r.wall_seconds,
      r.events_per_second, r.events_per_cpu_second, r.entries, r.expected_entries);
  if (args->IsSet("out")) {
    std::ofstream out(args->String("out"), std::ios::app);
    out << tandem::bench::WritersJson(c, r) << "\n";
  }
  return r.entries == r.expected_entries ? 0 : 1;
}
