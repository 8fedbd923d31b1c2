// Which workers of a simulated fleet hold each block, exactly: the fleet
// simulator's oracle (bench/fleet_oracle.h) reads a prompt's blocks here,
// one lookup a block, rather than asking each worker's own cache.
#ifndef TANDEM_BENCH_EXACT_HOLDERS_H_
#define TANDEM_BENCH_EXACT_HOLDERS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "engine/kv/block_hash.h"

namespace tandem::bench {

class ExactHolders {
 public:
  // Workers are numbered 0..workers-1 (at most 65536).
  explicit ExactHolders(int workers);

  // Records that `worker` stored the blocks `stored` (none it held
  // already), then evicted the blocks `removed`; blocks by their low half,
  // as the index and the workers key them.
  void Change(int worker, std::span<const uint64_t> stored, std::span<const uint64_t> removed);

  // Sets held[w] to how many leading blocks of `chain` worker w holds, for
  // every worker (`held` is resized to their number).
  void LeadingHeld(std::span<const engine::BlockHash> chain, std::vector<int32_t>& held) const;

  int64_t entries() const { return entries_; }

 private:
  void Add(uint64_t block, int worker);
  void Remove(uint64_t block, int worker);

  const int workers_;
  int64_t entries_ = 0;
  absl::flat_hash_map<uint64_t, absl::InlinedVector<uint16_t, 4>> holders_;
};

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_EXACT_HOLDERS_H_
