// What a worker spends serving its block events to G gateways: the real
// BlockEventPublisher behind a real gRPC server on loopback, its
// subscribers in a child process (this binary run again, so that their
// CPU is not counted), and the worker process's own CPU time (user and
// system, every thread: Publish, the copies per subscriber, serializing,
// HTTP/2 and the socket writes) over a paced run of engine steps. The cost
// of one more subscriber is the slope of that CPU time over G. It reports;
// it never fails on speed.
#ifndef TANDEM_BENCH_PUBLISHER_COST_H_
#define TANDEM_BENCH_PUBLISHER_COST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::bench {

struct PublisherCostConfig {
  std::vector<int32_t> subscribers = {0, 1, 2, 4, 8, 16};  // G, one run each
  int32_t batches = 4000;             // engine steps published per run
  int32_t events_per_batch = 64;      // half stored, half removed once warm
  int32_t batches_per_second = 500;   // the steps' pace
  int64_t blocks_held = 100000;       // the worker's pool, in blocks
  int32_t coalesce_ms = 5;            // the worker's --block-events-coalesce-ms
  std::string self;                   // this binary, to run the subscribers
};

struct PublisherCostRun {
  int32_t subscribers = 0;
  double seconds = 0;      // wall clock of the run
  double cpu_seconds = 0;  // the worker process's, every thread
};

struct PublisherCostResult {
  std::vector<PublisherCostRun> runs;
  // Least squares over the runs with G >= 1: CPU seconds per second of
  // run per subscriber (a fraction of a core), and the same per event.
  double core_fraction_per_subscriber = 0;
  double ns_per_event_per_subscriber = 0;
  double events_per_second = 0;  // the pace the fraction was measured at
};

absl::StatusOr<PublisherCostResult> RunPublisherCost(const PublisherCostConfig& config);

// The child's side: `subscribers` streams from `address`, each read until
// a batch reports block number `last_block` stored (the run's last, never
// removed); returns the process's exit code.
int RunSubscribers(const std::string& address, int32_t subscribers, int64_t last_block);

std::string PublisherCostJson(const PublisherCostConfig& config,
                              const PublisherCostResult& result);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_PUBLISHER_COST_H_
