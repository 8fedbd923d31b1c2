// Several threads applying block events to one gateway BlockIndex at once,
// as a gateway's gRPC threads do with many workers' streams: what the
// shards' writer locks cost when writers meet (no routes, no network).
// Each worker keeps a FIFO cache of blocks within its budget, filled first
// (unmeasured); then every worker's delta batches (new blocks stored, a
// share of them blocks every worker may hold, the oldest removed) are
// applied by `threads` threads, each owning every threads-th worker, as
// fast as they go. Seeded; the timings are the machine's.
#ifndef TANDEM_BENCH_INDEX_WRITERS_H_
#define TANDEM_BENCH_INDEX_WRITERS_H_

#include <cstdint>
#include <string>

namespace tandem::bench {

struct WritersConfig {
  int32_t workers = 1000;
  int64_t blocks_per_worker = 10000;  // each worker's cache budget
  int32_t batch_blocks = 128;         // blocks stored per batch (as many removed)
  int32_t batches_per_worker = 10;    // measured, after the fill
  // The share of stored blocks drawn from a pool every worker draws from
  // (shared prefixes: their holder sets grow), the rest the worker's own.
  double shared_fraction = 0.25;
  int64_t shared_blocks = 100000;
  int32_t threads = 2;
  int32_t shards = 32;  // BlockIndexOptions::shards
  uint64_t seed = 1;
};

struct WritersResult {
  int64_t events = 0;                // stored and removed blocks applied, measured
  double wall_seconds = 0;           // from the first thread's start to the last's end
  double cpu_seconds = 0;            // the applying threads' CPU time, summed
  double events_per_second = 0;      // all threads together, per wall second
  double events_per_cpu_second = 0;  // per second of applying threads' CPU ("per core")
  int64_t entries = 0;               // the index's (block, worker) entries at the end
  int64_t expected_entries = 0;      // the workers' caches, summed
};

WritersResult RunWriters(const WritersConfig& config);

// One line of JSON: the config and the result.
std::string WritersJson(const WritersConfig& config, const WritersResult& result);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_INDEX_WRITERS_H_
