#include "gateway/routing/worker_picker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tandem::gateway {
namespace {

TEST(WorkerPickerTest, PicksTheLeastLoadedLowestIndexFirst) {
  WorkerPicker picker({"a:1", "b:2", "c:3"});
  WorkerPicker::Pick p0 = picker.Acquire();
  EXPECT_EQ(p0.address(), "a:1");
  WorkerPicker::Pick p1 = picker.Acquire();
  EXPECT_EQ(p1.address(), "b:2");
  WorkerPicker::Pick p2 = picker.Acquire();
  EXPECT_EQ(p2.address(), "c:3");
  WorkerPicker::Pick p3 = picker.Acquire();
  EXPECT_EQ(p3.index(), 0);  // all at one: lowest index
  EXPECT_EQ(picker.in_flight(0), 2);
}

TEST(WorkerPickerTest, APickHoldsItsSlotUntilDestroyedOrMoved) {
  WorkerPicker picker({"a:1", "b:2"});
  {
    WorkerPicker::Pick p = picker.Acquire();
    EXPECT_EQ(picker.in_flight(0), 1);
    WorkerPicker::Pick moved = std::move(p);
    EXPECT_FALSE(p.valid());
    EXPECT_EQ(picker.in_flight(0), 1);
    moved = WorkerPicker::Pick();  // assigning releases the old slot
    EXPECT_EQ(picker.in_flight(0), 0);
  }
  EXPECT_EQ(picker.in_flight(0), 0);
  EXPECT_EQ(picker.in_flight(1), 0);
}

TEST(WorkerPickerTest, SkipsExcludedWorkersAndSaysWhenNoneIsLeft) {
  WorkerPicker picker({"a:1", "b:2"});
  EXPECT_EQ(picker.Acquire({0}).address(), "b:2");
  EXPECT_FALSE(picker.Acquire({0, 1}).valid());
  WorkerPicker none({});
  EXPECT_FALSE(none.Acquire().valid());
}

TEST(WorkerPickerTest, AddressesThatComeAndGoKeepTheirIndex) {
  WorkerPicker picker({"a:1", "b:2"});
  WorkerPicker::Pick on_b = picker.Acquire({0});
  EXPECT_EQ(on_b.address(), "b:2");
  picker.SetAddresses({"a:1", "c:3"});  // b vanishes, c appears
  EXPECT_EQ(picker.size(), 3);
  EXPECT_FALSE(picker.active(1));
  EXPECT_EQ(on_b.address(), "b:2");  // a pick in flight stays valid
  EXPECT_EQ(picker.in_flight(1), 1);
  WorkerPicker::Pick p = picker.Acquire({0});
  EXPECT_EQ(p.address(), "c:3");  // never the vanished b
  EXPECT_EQ(p.index(), 2);
  on_b = WorkerPicker::Pick();
  EXPECT_EQ(picker.in_flight(1), 0);
  picker.SetAddresses({"b:2"});  // b comes back where it was
  EXPECT_TRUE(picker.active(1));
  WorkerPicker::Pick again = picker.Acquire();
  EXPECT_EQ(again.index(), 1);
  picker.SetAddresses({});
  EXPECT_FALSE(picker.Acquire().valid());
}

// The router's linear cost picks as the same cost given as a function: by
// base plus load, a worker past the base at `beyond`, ties to fewer in
// flight, excluded workers skipped.
TEST(WorkerPickerTest, ALinearCostRanksAsTheSameCostFunction) {
  const std::vector<std::string> addresses = {"a:1", "b:2", "c:3", "d:4"};
  WorkerPicker linear_picker(addresses);
  WorkerPicker function_picker(addresses);
  const std::vector<double> base = {10, 4, 6};  // d:4 is past it
  const WorkerPicker::LinearCost linear{
      .base = base, .beyond = 5, .per_token = 2, .token_divisor = 16};
  const WorkerPicker::Cost function = [&](int i, const WorkerPicker::Load& load) {
    const double b = i < 3 ? base[static_cast<size_t>(i)] : 5.0;
    return b + 2.0 * static_cast<double>(load.in_flight_tokens) / 16;
  };
  const WorkerPicker::Charge charge = [](int i) -> int64_t { return 16 * (i + 1); };
  std::vector<WorkerPicker::Pick> held;
  std::vector<int> linear_order, function_order;
  for (int k = 0; k < 12; ++k) {
    const std::vector<int> exclude = k % 5 == 4 ? std::vector<int>{1} : std::vector<int>{};
    held.push_back(linear_picker.Acquire(exclude, charge, linear));
    held.push_back(function_picker.Acquire(exclude, charge, function));
    linear_order.push_back(held[held.size() - 2].index());
    function_order.push_back(held.back().index());
  }
  EXPECT_EQ(linear_order, function_order);
  EXPECT_EQ(linear_order[0], 1);  // base 4
  EXPECT_EQ(linear_order[1], 3);  // beyond: 5 against 4 + 2 x 32 / 16
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(linear_picker.in_flight_tokens(i), function_picker.in_flight_tokens(i));
  }
}

// Over many workers whose costs tie, as a fleet's sharing prefixes do, a
// pick is the lowest cost, then the fewest in flight, then the lowest
// index, among the reachable workers not excluded (the unreachable only
// when none is left).
TEST(WorkerPickerTest, PicksTheLowestCostThenFewestInFlightThenLowestIndex) {
  constexpr int kWorkers = 200;
  std::vector<std::string> addresses;
  for (int i = 0; i < kWorkers; ++i) addresses.push_back("w:" + std::to_string(i));
  WorkerPicker picker(addresses);
  std::mt19937 rng(7);
  std::vector<WorkerPicker::Pick> held;
  for (int round = 0; round < 300; ++round) {
    std::vector<double> base(kWorkers);
    for (double& b : base) b = static_cast<double>(rng() % 3);
    // An eighth unreachable; every 50th round all of them.
    for (int i = 0; i < kWorkers; ++i) picker.SetReachable(i, rng() % 8 != 0 && round % 50 != 49);
    std::vector<int> exclude;
    if (round % 3 == 0) exclude = {static_cast<int>(rng() % kWorkers)};
    // Every other round the load counts too: one a block of 16 tokens in flight.
    const double per_token = round % 2;
    const WorkerPicker::LinearCost cost{.base = base, .per_token = per_token, .token_divisor = 16};
    auto cost_of = [&](int i) {
      return base[static_cast<size_t>(i)] +
             per_token * static_cast<double>(picker.in_flight_tokens(i)) / 16;
    };
    auto eligible = [&](int i, bool reachable) {
      return picker.reachable(i) == reachable &&
             std::find(exclude.begin(), exclude.end(), i) == exclude.end();
    };
    int want = -1;
    for (const bool reachable : {true, false}) {
      for (int i = 0; i < kWorkers; ++i) {
        if (!eligible(i, reachable)) continue;
        if (want < 0 || cost_of(i) < cost_of(want) ||
            (cost_of(i) == cost_of(want) && picker.in_flight(i) < picker.in_flight(want))) {
          want = i;
        }
      }
      if (want >= 0) break;
    }
    WorkerPicker::Pick pick = picker.Acquire(
        exclude, [](int) { return int64_t{8}; }, cost);
    ASSERT_EQ(pick.index(), want) << "round " << round;
    // Most picks stay in flight a while, so loads differ and break ties.
    held.push_back(std::move(pick));
    if (rng() % 4 == 0) held.erase(held.begin() + static_cast<long>(rng() % held.size()));
  }
}

}  // namespace
}  // namespace tandem::gateway
