// Watches a worker's engine thread for a round that never ends (a stuck
// kernel, a livelock, a step far slower than any sane one): once the engine
// has been busy on one round for longer than the limit, the worker reports
// itself unable to serve (health NOT_SERVING, block event streams ended, so
// gateways route elsewhere and their progress deadlines move its streams);
// when the round ends, it reports itself serving again. The check runs on
// its own thread every limit / 4. Thread-safe.
#ifndef TANDEM_WORKER_STALL_WATCHDOG_H_
#define TANDEM_WORKER_STALL_WATCHDOG_H_

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace tandem::worker {

class StallWatchdog {
 public:
  // `busy_for` is how long the engine has been on its current round
  // (EngineLoop::BusyFor); `on_change(true)` runs on the watchdog's thread
  // when it has been longer than `limit`, `on_change(false)` once it is
  // over. `registry` must outlive the watchdog.
  StallWatchdog(absl::Duration limit, std::function<absl::Duration()> busy_for,
                std::function<void(bool stalled)> on_change, prometheus::Registry& registry);
  // Stops the thread; no callback runs after it returns.
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

 private:
  void Run();

  const absl::Duration limit_;
  const std::function<absl::Duration()> busy_for_;
  const std::function<void(bool)> on_change_;
  prometheus::Gauge& stalled_gauge_;
  prometheus::Counter& stalls_;
  absl::Notification stop_;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_STALL_WATCHDOG_H_
