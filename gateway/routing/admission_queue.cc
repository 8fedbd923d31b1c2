#include "gateway/routing/admission_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rpc/metrics.h"

namespace tandem::gateway {
namespace {

// Weight of the newest interval in the moving average.
constexpr double kIntervalWeight = 0.2;

}  // namespace

AdmissionQueue::AdmissionQueue(const AdmissionQueueOptions& options,
                               prometheus::Registry& registry)
    : options_(options),
      depth_gauge_(rpc::GaugeMetric(registry, "tandem_admission_queue_depth",
                                    "requests waiting in the gateway's admission queue")),
      wait_(rpc::LatencyHistogram(
          registry, "tandem_admission_queue_wait_seconds",
          "time requests admitted out of the admission queue waited there")),
      refused_(rpc::CounterFamily(
          registry, "tandem_admission_queue_refused_total",
          "requests the admission queue refused at once, by reason (full, deadline)")),
      expired_(rpc::CounterMetric(
          registry, "tandem_admission_queue_expired_total",
          "requests whose deadline passed while they waited in the admission queue")) {
  if (enabled()) thread_ = std::thread([this] { Loop(); });
}

AdmissionQueue::~AdmissionQueue() {
  std::deque<Entry> left;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    wake_.Signal();
  }
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock lock(&mu_);
    left.swap(waiting_);
    depth_gauge_.Set(0);
  }
  for (Entry& e : left) e.waiter.done(absl::UnavailableError("the gateway is shutting down"));
}

absl::StatusOr<uint64_t> AdmissionQueue::Enqueue(Waiter waiter) {
  absl::MutexLock lock(&mu_);
  const int32_t waiting = WaitingLocked();
  if (waiting >= options_.max_waiting) {
    refused_.Add({{"reason", "full"}}).Increment();
    return absl::ResourceExhaustedError(absl::StrCat(
        "admission queue: ", waiting, " requests wait for capacity already (--admission-queue ",
        options_.max_waiting, "); retry later"));
  }
  const absl::Time now = absl::Now();
  const absl::Duration expected = EstimatedWaitLocked(waiting);
  if (waiter.deadline <= now + expected) {
    refused_.Add({{"reason", "deadline"}}).Increment();
    return absl::ResourceExhaustedError(absl::StrCat(
        "admission queue: ", waiting, " requests wait for capacity, about ",
        absl::FormatDuration(expected), " ahead of this one, past its deadline (in ",
        absl::FormatDuration(std::max(waiter.deadline - now, absl::ZeroDuration())),
        "); retry later or with a later deadline"));
  }
  const uint64_t id = next_id_++;
  waiting_.push_back({.id = id, .enqueued = now, .waiter = std::move(waiter)});
  depth_gauge_.Set(static_cast<double>(waiting_.size()));
  // Tried once at once: capacity may have come back since its caller found
  // none (a release between the two finds the queue empty).
  notified_ = true;
  wake_.Signal();
  return id;
}

void AdmissionQueue::Cancel(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (trying_ == id) {
    trying_cancelled_ = true;
    return;
  }
  const auto it = std::find_if(waiting_.begin(), waiting_.end(),
                               [id](const Entry& e) { return e.id == id; });
  if (it == waiting_.end()) return;
  waiting_.erase(it);
  depth_gauge_.Set(static_cast<double>(waiting_.size()));
}

void AdmissionQueue::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
  wake_.Signal();
}

int32_t AdmissionQueue::depth() const {
  absl::MutexLock lock(&mu_);
  return WaitingLocked();
}

int32_t AdmissionQueue::WaitingLocked() const {
  return static_cast<int32_t>(waiting_.size()) + (trying_ != 0 ? 1 : 0);
}

absl::Duration AdmissionQueue::EstimatedWait(int32_t position) const {
  absl::MutexLock lock(&mu_);
  return EstimatedWaitLocked(position);
}

absl::Duration AdmissionQueue::EstimatedWaitLocked(int32_t position) const {
  return interval_ * (position + 1);
}

std::deque<AdmissionQueue::Entry> AdmissionQueue::TakeExpired(absl::Time now) {
  std::deque<Entry> expired;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->waiter.deadline <= now) {
      expired.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  if (!expired.empty()) depth_gauge_.Set(static_cast<double>(waiting_.size()));
  return expired;
}

absl::Time AdmissionQueue::NextWake(absl::Time now) const {
  if (waiting_.empty()) return absl::InfiniteFuture();
  absl::Time wake = now + options_.retry_interval;
  for (const Entry& e : waiting_) wake = std::min(wake, e.waiter.deadline);
  return wake;
}

void AdmissionQueue::Loop() {
  for (;;) {
    std::deque<Entry> expired;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && !notified_) {
        const absl::Time now = absl::Now();
        const absl::Time wake = NextWake(now);
        if (wake <= now) break;
        if (wake == absl::InfiniteFuture()) {
          wake_.Wait(&mu_);
        } else if (wake_.WaitWithDeadline(&mu_, wake)) {
          break;  // the wake time came
        }
      }
      if (stop_) return;
      notified_ = false;
      expired = TakeExpired(absl::Now());
    }
    for (Entry& e : expired) {
      expired_.Increment();
      e.waiter.done(absl::DeadlineExceededError(absl::StrCat(
          "the request's deadline passed after ",
          absl::FormatDuration(absl::Now() - e.enqueued),
          " in the gateway's admission queue, waiting for capacity")));
    }
    Drain();
  }
}

void AdmissionQueue::Drain() {
  for (;;) {
    Entry head;
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || waiting_.empty()) return;
      head = std::move(waiting_.front());
      waiting_.pop_front();
      trying_ = head.id;
      trying_cancelled_ = false;
    }
    const absl::Status status = head.waiter.try_admit();
    bool cancelled = false;
    {
      absl::MutexLock lock(&mu_);
      trying_ = 0;
      cancelled = trying_cancelled_;
      if (absl::IsResourceExhausted(status) && !cancelled) {
        waiting_.push_front(std::move(head));  // still short: it keeps its place
        depth_gauge_.Set(static_cast<double>(waiting_.size()));
        return;
      }
      depth_gauge_.Set(static_cast<double>(waiting_.size()));
      if (status.ok()) Admitted(head.enqueued, absl::Now());
    }
    if (status.ok()) {
      // Admitted: the request starts even when its client left meanwhile
      // (its call sees that itself).
      head.waiter.done(absl::OkStatus());
    } else if (!cancelled && !absl::IsResourceExhausted(status)) {
      head.waiter.done(status);
    }
  }
}

void AdmissionQueue::Admitted(absl::Time enqueued, absl::Time now) {
  wait_.Observe(absl::ToDoubleSeconds(now - enqueued));
  if (last_admit_.has_value()) {
    interval_ = interval_ * (1 - kIntervalWeight) + (now - *last_admit_) * kIntervalWeight;
  }
  // Intervals count only while requests wait behind one another.
  if (waiting_.empty()) {
    last_admit_.reset();
  } else {
    last_admit_ = now;
  }
}

}  // namespace tandem::gateway
