// The gateway's admission queue. A request that cannot start now (the
// gateway's in-flight or queued-token bound, the decode workers' streams or
// their KV budget are taken) waits here, in arrival order, instead of being
// refused: as vLLM's and llama-server's schedulers queue what they cannot
// run yet. It is refused at once, still before any work, only when the queue
// is full or its deadline falls before the wait the queue expects; one whose
// deadline passes while it waits ends with DEADLINE_EXCEEDED, having cost no
// worker anything.
//
// Order is first come, first served, head of line: a large request at the
// head is not overtaken by smaller ones behind it, so none waits forever.
// The head is tried again whenever a request in flight releases capacity
// (Notify) and at least every retry_interval (capacity that comes back
// without a release: a decode worker joining, its KV growing).
//
// Waiters are called on the queue's own thread, never under its lock, so
// they may take their call's lock; Notify and Cancel only take the queue's
// lock, so a call may use them under its own. Thread-safe.
#ifndef TANDEM_GATEWAY_ROUTING_ADMISSION_QUEUE_H_
#define TANDEM_GATEWAY_ROUTING_ADMISSION_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tandem::gateway {

struct AdmissionQueueOptions {
  // Requests waiting at most; 0: no queue (refused at once, as before).
  int32_t max_waiting = 1024;
  // The head is tried at least this often while requests wait.
  absl::Duration retry_interval = absl::Milliseconds(50);
};

class AdmissionQueue {
 public:
  struct Waiter {
    // Takes what the request needs to start: OK when it got it (it starts);
    // ResourceExhausted when it is still short (it stays at the head); any
    // other status drops it (its call ended meanwhile).
    std::function<absl::Status()> try_admit;
    // The wait's end, once: OK after try_admit admitted it, DeadlineExceeded
    // when its deadline passed first, Unavailable when the queue is
    // destroyed, or the status try_admit dropped it with. Not called for a
    // waiter Cancel removed.
    std::function<void(absl::Status)> done;
    absl::Time deadline = absl::InfiniteFuture();
  };

  // `registry` must outlive the queue. Starts the queue's thread.
  AdmissionQueue(const AdmissionQueueOptions& options, prometheus::Registry& registry);
  // Ends every waiter with Unavailable and joins the thread.
  ~AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  bool enabled() const { return options_.max_waiting > 0; }

  // Queues `waiter` behind the others and returns its id, or refuses with
  // ResourceExhausted when max_waiting wait already or when its deadline is
  // sooner than the wait expected (EstimatedWait of its place).
  absl::StatusOr<uint64_t> Enqueue(Waiter waiter);
  // Takes a waiter out (its client went away); its done is not called.
  // Nothing when it already left.
  void Cancel(uint64_t id);
  // Capacity was released: the head is tried again now.
  void Notify();

  int32_t depth() const;
  // The wait expected for the request at 0-based `position`: (position + 1)
  // times the recent interval between admissions out of the queue (a moving
  // average); zero before the queue has admitted two in a row.
  absl::Duration EstimatedWait(int32_t position) const;

 private:
  struct Entry {
    uint64_t id;
    absl::Time enqueued;
    Waiter waiter;
  };

  void Loop();
  // Waiters whose deadline passed, taken out.
  std::deque<Entry> TakeExpired(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NextWake(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration EstimatedWaitLocked(int32_t position) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Those queued and the head being tried.
  int32_t WaitingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tries the head until one stays short or none is left.
  void Drain();
  void Admitted(absl::Time enqueued, absl::Time now);

  const AdmissionQueueOptions options_;
  prometheus::Gauge& depth_gauge_;
  prometheus::Histogram& wait_;
  prometheus::Family<prometheus::Counter>& refused_;
  prometheus::Counter& expired_;

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  std::deque<Entry> waiting_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The head taken out for a try (0: none), and whether Cancel asked for it
  // meanwhile.
  uint64_t trying_ ABSL_GUARDED_BY(mu_) = 0;
  bool trying_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Moving average of the interval between admissions out of the queue.
  std::optional<absl::Time> last_admit_ ABSL_GUARDED_BY(mu_);
  absl::Duration interval_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::thread thread_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_ADMISSION_QUEUE_H_
