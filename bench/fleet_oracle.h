// The fleet simulator's oracle (bench/fleet_sim.h): for each measured
// route, the blocks of the prompt the router's choice held, and those held
// by the choice its own cost rule (blocks to compute plus the load in
// flight, ties to fewer requests, then the lower index) makes over every
// worker's exact cache. The simulator logs what the oracle needs as it runs
// (the workers' cache changes; each route's prompt, loads and choice) and
// the routes are scored after the run. Scored as they ran, on the thread
// that also applies the fleet's events to the index, the oracle's reads of
// every worker's cache left the index's memory cold for each batch and
// charged it nearly 30% of its apply time for work no gateway does
// (docs/benchmarks.md).
#ifndef TANDEM_BENCH_FLEET_ORACLE_H_
#define TANDEM_BENCH_FLEET_ORACLE_H_

#include <cstdint>
#include <utility>
#include <variant>
#include <vector>

#include "bench/exact_holders.h"
#include "engine/kv/block_hash.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::bench {

class FleetOracle {
 public:
  // Tokens and requests in flight on a worker.
  using Load = std::pair<int64_t, int>;
  FleetOracle(int workers, int32_t prompt_blocks, int32_t block_size);

  // Worker `worker`'s cache as logging starts: its snapshot.
  void Begin(int worker, const tandem::v1::BlockEventBatch& snapshot);
  // The worker restarts empty; `snapshot`: what it held.
  void LogRestart(int worker, const tandem::v1::BlockEventBatch& snapshot);
  // The worker stored and evicted what `batch` says.
  void LogChange(int worker, const tandem::v1::BlockEventBatch& batch);
  // A route to `chosen` of the prompt whose leading blocks `lookup` are
  // (all but the last, which is always computed), with every worker's load
  // as the router saw it. `expected`, when not empty: each worker's leading
  // blocks held, read from its own cache, to check the log against.
  void LogRoute(std::vector<engine::BlockHash> lookup, std::vector<Load> loads, int chosen,
                std::vector<int32_t> expected = {});

  struct Score {
    int64_t hit_blocks = 0;         // held by the router's choices
    int64_t oracle_hit_blocks = 0;  // held by the oracle's
    // (route, worker) pairs whose blocks held differ from `expected`.
    int64_t disagreements = 0;
  };
  // Replays the log in order, scoring each route; consumes it.
  Score Replay();

 private:
  struct Change {
    int worker;
    std::vector<uint64_t> stored;  // blocks' low halves
    std::vector<uint64_t> removed;
  };
  struct Route {
    std::vector<engine::BlockHash> lookup;
    std::vector<Load> loads;
    int chosen;
    std::vector<int32_t> expected;
  };
  // The oracle's choice for `route`, given each worker's blocks held.
  int Choose(const Route& route, const std::vector<int32_t>& held) const;

  const int workers_;
  const int32_t prompt_blocks_;
  const int32_t block_size_;
  ExactHolders holders_;
  std::vector<std::variant<Change, Route>> log_;
};

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_FLEET_ORACLE_H_
