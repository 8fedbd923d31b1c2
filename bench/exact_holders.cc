#include "bench/exact_holders.h"

#include <algorithm>

#include "common/check.h"

namespace tandem::bench {

ExactHolders::ExactHolders(int workers) : workers_(workers) {
  TANDEM_CHECK(workers >= 0 && workers <= 65536, "exact holders: 0..65536 workers")
      << "got " << workers;
}

void ExactHolders::Add(uint64_t block, int worker) {
  holders_[block].push_back(static_cast<uint16_t>(worker));
  ++entries_;
}

void ExactHolders::Remove(uint64_t block, int worker) {
  const auto it = holders_.find(block);
  TANDEM_CHECK(it != holders_.end(), "exact holders: a block nobody holds was evicted")
      << "worker " << worker;
  auto& v = it->second;
  const auto at = std::find(v.begin(), v.end(), static_cast<uint16_t>(worker));
  TANDEM_CHECK(at != v.end(), "exact holders: a worker evicted a block it did not hold")
      << "worker " << worker;
  *at = v.back();
  v.pop_back();
  --entries_;
  if (v.empty()) holders_.erase(it);
}

void ExactHolders::Change(int worker, std::span<const uint64_t> stored,
                          std::span<const uint64_t> removed) {
  for (const uint64_t block : stored) Add(block, worker);
  for (const uint64_t block : removed) Remove(block, worker);
}

void ExactHolders::LeadingHeld(std::span<const engine::BlockHash> chain,
                               std::vector<int32_t>& held) const {
  held.assign(static_cast<size_t>(workers_), 0);
  // held[w] == i: w holds blocks 0..i-1, so far as read; block i then
  // moves on only those.
  for (size_t i = 0; i < chain.size(); ++i) {
    const auto it = holders_.find(chain[i].low);
    if (it == holders_.end()) return;
    bool any = false;
    for (const uint16_t w : it->second) {
      if (held[w] == static_cast<int32_t>(i)) {
        held[w] = static_cast<int32_t>(i + 1);
        any = true;
      }
    }
    if (!any) return;
  }
}

}  // namespace tandem::bench
