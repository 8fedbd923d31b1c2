// The gateway's admission queue (gateway/routing/admission_queue.h): first
// come first served behind a head that is still short, refusals at once when
// full or when the deadline is sooner than the expected wait, expiry in the
// queue, cancels, and every waiter ended when the queue goes. The waiters'
// capacity is a counter the test controls; every wait is on an event.
#include "gateway/routing/admission_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "prometheus/registry.h"

namespace tandem::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Slots the waiters take; Release gives one back and notifies the queue.
class Capacity {
 public:
  explicit Capacity(int free) : free_(free) {}
  absl::Status Take(int need) {
    absl::MutexLock lock(&mu_);
    if (free_ < need) return absl::ResourceExhaustedError("short");
    free_ -= need;
    return absl::OkStatus();
  }
  void Release(AdmissionQueue& queue, int n = 1) {
    {
      absl::MutexLock lock(&mu_);
      free_ += n;
    }
    queue.Notify();
  }

 private:
  absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_);
};

// What became of the waiters, in the order it happened.
class Log {
 public:
  void Add(std::string event) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }
  // Waits for `n` events (and returns them all).
  std::vector<std::string> Await(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return events_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
    return events_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
};

class AdmissionQueueTest : public ::testing::Test {
 protected:
  // A long retry interval: only Notify (or a deadline) wakes the queue, so
  // each step below is caused by the test.
  void Make(int32_t max_waiting) {
    queue_ = std::make_unique<AdmissionQueue>(
        AdmissionQueueOptions{.max_waiting = max_waiting, .retry_interval = absl::Hours(1)},
        registry_);
  }

  AdmissionQueue::Waiter Named(const std::string& name, int need = 1,
                                absl::Time deadline = absl::InfiniteFuture()) {
    return {.try_admit = [this, need] { return capacity_.Take(need); },
            .done =
                [this, name](absl::Status s) {
                  log_.Add(name + (s.ok() ? " admitted" : " " + std::string(s.message())));
                },
            .deadline = deadline};
  }

  prometheus::Registry registry_;
  Capacity capacity_{0};
  Log log_;
  std::unique_ptr<AdmissionQueue> queue_;
};

TEST_F(AdmissionQueueTest, AdmitsInArrivalOrderAsCapacityComesBack) {
  Make(8);
  ASSERT_TRUE(queue_->Enqueue(Named("a")).ok());
  ASSERT_TRUE(queue_->Enqueue(Named("b")).ok());
  ASSERT_TRUE(queue_->Enqueue(Named("c")).ok());
  EXPECT_EQ(queue_->depth(), 3);
  capacity_.Release(*queue_);
  EXPECT_THAT(log_.Await(1), ElementsAre("a admitted"));
  capacity_.Release(*queue_, 2);
  EXPECT_THAT(log_.Await(3), ElementsAre("a admitted", "b admitted", "c admitted"));
  EXPECT_EQ(queue_->depth(), 0);
}

TEST_F(AdmissionQueueTest, ALargeHeadIsNotOvertakenBySmallerRequests) {
  Make(8);
  ASSERT_TRUE(queue_->Enqueue(Named("big", 3)).ok());
  ASSERT_TRUE(queue_->Enqueue(Named("small", 1)).ok());
  capacity_.Release(*queue_, 2);  // enough for "small", not for "big"
  capacity_.Release(*queue_, 1);  // now "big" fits, and then nothing is left
  EXPECT_THAT(log_.Await(1), ElementsAre("big admitted"));
  capacity_.Release(*queue_);
  EXPECT_THAT(log_.Await(2), ElementsAre("big admitted", "small admitted"));
}

TEST_F(AdmissionQueueTest, AFullQueueRefusesAtOnce) {
  Make(2);
  ASSERT_TRUE(queue_->Enqueue(Named("a")).ok());
  ASSERT_TRUE(queue_->Enqueue(Named("b")).ok());
  const absl::StatusOr<uint64_t> refused = queue_->Enqueue(Named("c"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--admission-queue 2"));
}

TEST_F(AdmissionQueueTest, AWaiterWhoseDeadlinePassesEndsDeadlineExceeded) {
  Make(8);
  ASSERT_TRUE(queue_->Enqueue(Named("late", 1, absl::Now() + absl::Milliseconds(20))).ok());
  ASSERT_TRUE(queue_->Enqueue(Named("patient")).ok());
  const std::vector<std::string> events = log_.Await(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0], HasSubstr("late the request's deadline passed"));
  EXPECT_EQ(queue_->depth(), 1);
  capacity_.Release(*queue_);
  EXPECT_EQ(log_.Await(2).back(), "patient admitted");
}

TEST_F(AdmissionQueueTest, ACancelledWaiterIsNeitherAdmittedNorEnded) {
  Make(8);
  const absl::StatusOr<uint64_t> a = queue_->Enqueue(Named("a"));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(queue_->Enqueue(Named("b")).ok());
  queue_->Cancel(*a);
  EXPECT_EQ(queue_->depth(), 1);
  capacity_.Release(*queue_);
  EXPECT_THAT(log_.Await(1), ElementsAre("b admitted"));
  queue_->Cancel(*a);  // gone already: nothing
}

TEST_F(AdmissionQueueTest, AWaiterWhoseCallEndedIsDroppedWithItsStatus) {
  Make(8);
  ASSERT_TRUE(queue_
                  ->Enqueue({.try_admit = [] { return absl::CancelledError("call ended"); },
                             .done = [this](absl::Status s) {
                               log_.Add(std::string(s.message()));
                             }})
                  .ok());
  ASSERT_TRUE(queue_->Enqueue(Named("b")).ok());
  capacity_.Release(*queue_);
  EXPECT_THAT(log_.Await(2), ElementsAre("call ended", "b admitted"));
}

TEST_F(AdmissionQueueTest, ADeadlineSoonerThanTheExpectedWaitIsRefusedAtOnce) {
  Make(16);
  EXPECT_EQ(queue_->EstimatedWait(3), absl::ZeroDuration());  // nothing measured yet
  // Three admitted one after another while others wait: the queue learns
  // an interval between admissions.
  for (const char* name : {"a", "b", "c", "d"}) ASSERT_TRUE(queue_->Enqueue(Named(name)).ok());
  for (size_t i = 1; i <= 3; ++i) {
    capacity_.Release(*queue_);
    log_.Await(i);
  }
  const absl::Duration interval = queue_->EstimatedWait(0);
  EXPECT_GT(interval, absl::ZeroDuration());
  EXPECT_EQ(queue_->EstimatedWait(9), interval * 10);
  const absl::StatusOr<uint64_t> hurried =
      queue_->Enqueue(Named("hurried", 1, absl::Now() + interval / 4));
  EXPECT_EQ(hurried.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(hurried.status().message(), HasSubstr("past its deadline"));
  EXPECT_TRUE(queue_->Enqueue(Named("patient", 1, absl::Now() + absl::Hours(1))).ok());
}

TEST_F(AdmissionQueueTest, DestroyingTheQueueEndsEveryWaiterUnavailable) {
  Make(8);
  ASSERT_TRUE(queue_->Enqueue(Named("a")).ok());
  ASSERT_TRUE(queue_->Enqueue(Named("b")).ok());
  queue_.reset();
  const std::vector<std::string> events = log_.Await(2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_THAT(events[0], HasSubstr("shutting down"));
  EXPECT_THAT(events[1], HasSubstr("shutting down"));
}

TEST_F(AdmissionQueueTest, ADisabledQueueStartsNoThreadAndIsOff) {
  Make(0);
  EXPECT_FALSE(queue_->enabled());
}

}  // namespace
}  // namespace tandem::gateway
