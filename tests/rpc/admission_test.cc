#include "rpc/admission.h"

#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"

namespace tandem::rpc {
namespace {

absl::Status OverCap() { return absl::ResourceExhaustedError("over the cap"); }

TEST(AdmissionTest, TheLimitsAreCheckedBeforeTheCap) {
  Admission admission("gateway", {.max_in_flight = 1});
  auto first = admission.TryAdmit(10, 5, OverCap);
  ASSERT_TRUE(first.ok());
  const auto second = admission.TryAdmit(10, 1, OverCap);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr("max_in_flight 1"));
  EXPECT_EQ(admission.in_flight(), 1);
}

TEST(AdmissionTest, TheCapRefusesWithItsOwnStatusAndTakesNothing) {
  Admission admission("gateway", {});
  auto first = admission.TryAdmit(10, 1, OverCap);
  ASSERT_TRUE(first.ok());
  const auto second = admission.TryAdmit(10, 1, OverCap);
  EXPECT_EQ(second.status(), OverCap());
  EXPECT_EQ(admission.in_flight(), 1);
  EXPECT_EQ(admission.queued_tokens(), 10);
  // A ticket returned makes room under the cap again.
  first = absl::ResourceExhaustedError("dropped");
  EXPECT_TRUE(admission.TryAdmit(10, 1, OverCap).ok());
}

// A burst of callers, all holding what they get: exactly `cap` pass. (A
// count read after taking a ticket lets two callers each see the other's
// and both refuse, or two read before either takes and both pass.)
TEST(AdmissionTest, ABurstPassesTheCapExactly) {
  constexpr int kThreads = 16;
  constexpr int kCap = 3;
  for (int round = 0; round < 50; ++round) {
    Admission admission("gateway", {});
    absl::Barrier* start = new absl::Barrier(kThreads);
    absl::Mutex mu;
    std::vector<Admission::Ticket> held;
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&] {
        if (start->Block()) delete start;
        absl::StatusOr<Admission::Ticket> t = admission.TryAdmit(1, kCap, OverCap);
        if (t.ok()) {
          absl::MutexLock lock(&mu);
          held.push_back(std::move(*t));
        }
      });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_EQ(held.size(), static_cast<size_t>(kCap)) << "round " << round;
    EXPECT_EQ(admission.in_flight(), kCap);
  }
}

}  // namespace
}  // namespace tandem::rpc
