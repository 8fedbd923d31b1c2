#include "gateway/routing/worker_pace.h"

#include <algorithm>

namespace tandem::gateway {

void WorkerPace::Observe(int index, absl::Duration gap) {
  if (index < 0) return;
  absl::MutexLock lock(&mu_);
  if (static_cast<size_t>(index) >= workers_.size()) workers_.resize(index + 1);
  Worker& w = workers_[index];
  w.gaps[w.next] = absl::ToInt64Microseconds(gap);
  w.next = (w.next + 1) % kWindow;
  w.count = std::min(w.count + 1, kWindow);
  // The p99 of up to 128 gaps is their second largest; recomputed every 8
  // gaps (and at once while there are few), not on every token.
  if (++w.since_update >= 8 || w.count <= kMinSamples) {
    w.since_update = 0;
    std::array<int64_t, kWindow> sorted = w.gaps;
    const int n = w.count;
    const int at = std::max(0, n - 1 - n / 100);  // the 99th percentile's rank
    std::nth_element(sorted.begin(), sorted.begin() + at, sorted.begin() + n);
    w.p99 = sorted[at];
  }
}

absl::Duration WorkerPace::P99(int index) const {
  absl::MutexLock lock(&mu_);
  if (index < 0 || static_cast<size_t>(index) >= workers_.size()) {
    return absl::InfiniteDuration();
  }
  const Worker& w = workers_[index];
  if (w.count < kMinSamples) return absl::InfiniteDuration();
  return absl::Microseconds(w.p99);
}

absl::Duration WorkerPace::Silence(int index, absl::Duration stream_gap, absl::Duration floor,
                                   absl::Duration cap) const {
  const absl::Duration p99 = P99(index);
  const absl::Duration want =
      p99 == absl::InfiniteDuration()
          ? std::max(kUnknownPaceFloors * floor, 2 * stream_gap)
          : std::max(kFactor * p99, 2 * stream_gap);
  return std::clamp(want, std::min(floor, cap), cap);
}

}  // namespace tandem::gateway
