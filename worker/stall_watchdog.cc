#include "worker/stall_watchdog.h"

#include <algorithm>

#include "rpc/metrics.h"

namespace tandem::worker {

StallWatchdog::StallWatchdog(absl::Duration limit, std::function<absl::Duration()> busy_for,
                             std::function<void(bool stalled)> on_change,
                             prometheus::Registry& registry)
    : limit_(limit),
      busy_for_(std::move(busy_for)),
      on_change_(std::move(on_change)),
      stalled_gauge_(rpc::GaugeMetric(
          registry, "tandem_engine_stalled",
          "1 while the engine thread has been on one round past --engine-stall-timeout-ms")),
      stalls_(rpc::CounterMetric(registry, "tandem_engine_stalls_total",
                                 "Times the engine thread stalled past --engine-stall-timeout-ms")),
      thread_([this] { Run(); }) {}

StallWatchdog::~StallWatchdog() {
  stop_.Notify();
  thread_.join();
}

void StallWatchdog::Run() {
  const absl::Duration period = std::max(limit_ / 4, absl::Milliseconds(5));
  bool stalled = false;
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    const bool now = busy_for_() > limit_;
    if (now == stalled) continue;
    stalled = now;
    stalled_gauge_.Set(stalled ? 1 : 0);
    if (stalled) stalls_.Increment();
    on_change_(stalled);
  }
}

}  // namespace tandem::worker
