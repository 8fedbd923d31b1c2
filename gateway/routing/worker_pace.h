// How often each decode worker's streams hear from it: the recent gaps
// between one stream's messages (tokens or heartbeats), per worker, and the
// silence a stream may allow its worker before it moves the stream
// elsewhere (the progress deadline). A worker that has been quick is given
// up on quickly when it goes silent (a blackhole, a stopped process); one
// whose steps are slow (heavy load, long prefill chunks) is given time in
// proportion. Thread-safe.
#ifndef TANDEM_GATEWAY_ROUTING_WORKER_PACE_H_
#define TANDEM_GATEWAY_ROUTING_WORKER_PACE_H_

#include <array>
#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem::gateway {

class WorkerPace {
 public:
  // The gaps kept per worker, and the fewest that say anything: with fewer,
  // Silence allows kUnknownPaceFloors floors (the worker's heartbeats, every
  // 250 ms by default, keep a live one well inside that).
  static constexpr int kWindow = 128;
  static constexpr int kMinSamples = 16;
  static constexpr int kUnknownPaceFloors = 2;
  // Silence allowed: this many times the worker's p99 gap.
  static constexpr int kFactor = 5;

  // A stream on worker `index` waited `gap` for its next message.
  void Observe(int index, absl::Duration gap);
  // The silence a stream on worker `index` allows before giving up on it:
  // kFactor x the worker's p99 gap, and at least `stream_gap` (the longest
  // wait the stream itself has seen) twice over, within [floor, cap];
  // kUnknownPaceFloors x floor (and that twice-over gap; at most cap) while
  // the worker has fewer than kMinSamples gaps.
  absl::Duration Silence(int index, absl::Duration stream_gap, absl::Duration floor,
                         absl::Duration cap) const;
  // The worker's p99 gap (infinite with fewer than kMinSamples gaps).
  absl::Duration P99(int index) const;

 private:
  struct Worker {
    std::array<int64_t, kWindow> gaps{};  // microseconds, a ring
    int count = 0;                      // gaps seen, up to kWindow
    int next = 0;                       // the ring's next slot
    int since_update = 0;
    int64_t p99 = 0;  // microseconds, refreshed every 8 gaps
  };
  mutable absl::Mutex mu_;
  std::deque<Worker> workers_ ABSL_GUARDED_BY(mu_);  // by picker index
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_WORKER_PACE_H_
