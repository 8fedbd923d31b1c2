// The progress deadline's pace: too few gaps say little (two floors);
// then five times the worker's p99 gap, at least twice the stream's own
// longest wait, within [floor, cap]; workers are kept apart.
#include "gateway/routing/worker_pace.h"

#include <gtest/gtest.h>

namespace tandem::gateway {
namespace {

constexpr absl::Duration kFloor = absl::Milliseconds(100);
constexpr absl::Duration kCap = absl::Seconds(20);

TEST(WorkerPaceTest, FewGapsSayLittle) {
  WorkerPace pace;
  const absl::Duration unknown = WorkerPace::kUnknownPaceFloors * kFloor;
  EXPECT_EQ(pace.Silence(0, absl::ZeroDuration(), kFloor, kCap), unknown);
  for (int i = 0; i < WorkerPace::kMinSamples - 1; ++i) pace.Observe(0, absl::Milliseconds(5));
  EXPECT_EQ(pace.Silence(0, absl::ZeroDuration(), kFloor, kCap), unknown);
  // The stream's own long wait counts even so, and the cap still holds.
  EXPECT_EQ(pace.Silence(0, absl::Milliseconds(400), kFloor, kCap), absl::Milliseconds(800));
  EXPECT_EQ(pace.Silence(0, absl::ZeroDuration(), kFloor, absl::Milliseconds(150)),
            absl::Milliseconds(150));
  pace.Observe(0, absl::Milliseconds(5));
  EXPECT_EQ(pace.Silence(0, absl::ZeroDuration(), kFloor, kCap), kFloor);
  // Another worker has no gaps of its own.
  EXPECT_EQ(pace.Silence(1, absl::ZeroDuration(), kFloor, kCap), unknown);
}

TEST(WorkerPaceTest, FiveTimesTheP99WithinTheBounds) {
  WorkerPace pace;
  // 99 gaps of 40 ms and one of 400 ms: the p99 of 100 is 40 ms.
  for (int i = 0; i < 99; ++i) pace.Observe(2, absl::Milliseconds(40));
  pace.Observe(2, absl::Milliseconds(400));
  EXPECT_EQ(pace.P99(2), absl::Milliseconds(40));
  EXPECT_EQ(pace.Silence(2, absl::ZeroDuration(), kFloor, kCap), absl::Milliseconds(200));
  // The stream's own longest wait, twice over, when longer.
  EXPECT_EQ(pace.Silence(2, absl::Milliseconds(300), kFloor, kCap), absl::Milliseconds(600));
  // Never past the cap.
  EXPECT_EQ(pace.Silence(2, absl::Seconds(30), kFloor, kCap), kCap);
  // Two more slow gaps in the window make the p99 slow (seen within the
  // next 8 gaps).
  pace.Observe(2, absl::Milliseconds(400));
  pace.Observe(2, absl::Milliseconds(400));
  for (int i = 0; i < 6; ++i) pace.Observe(2, absl::Milliseconds(40));
  EXPECT_EQ(pace.P99(2), absl::Milliseconds(400));
}

TEST(WorkerPaceTest, OnlyTheRecentWindowCounts) {
  WorkerPace pace;
  for (int i = 0; i < WorkerPace::kWindow; ++i) pace.Observe(0, absl::Seconds(1));
  for (int i = 0; i < WorkerPace::kWindow; ++i) pace.Observe(0, absl::Milliseconds(10));
  EXPECT_EQ(pace.P99(0), absl::Milliseconds(10));
}

}  // namespace
}  // namespace tandem::gateway
