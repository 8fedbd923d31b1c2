#include "gateway/routing/worker_picker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

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

// The router's sparse cost (its prompt's holders listed, every other worker
// at `rest`) picks as the same bases given for every worker, over a seeded
// run of picks and releases with workers excluded, unreachable and gone:
// ties by cost (equal bases, and loads that round to the same cost beside
// a huge `rest`), then in flight, then index; and a load weight of 0.
TEST(WorkerPickerTest, ASparseLinearCostPicksAsTheSameCostForEveryWorker) {
  constexpr int kWorkers = 24;
  std::vector<std::string> addresses;
  for (int i = 0; i < kWorkers; ++i) addresses.push_back(absl::StrCat("w", i, ":1"));
  WorkerPicker sparse_picker(addresses);
  WorkerPicker dense_picker(addresses);
  std::mt19937_64 rng(20261206);
  std::vector<WorkerPicker::Pick> sparse_held, dense_held;
  std::vector<std::string> present = addresses;
  int picked = 0;
  for (int step = 0; step < 6000; ++step) {
    const int what = static_cast<int>(rng() % 20);
    if (what == 0) {  // reachability changes
      const int i = static_cast<int>(rng() % kWorkers);
      const bool reachable = rng() % 3 != 0;
      sparse_picker.SetReachable(i, reachable);
      dense_picker.SetReachable(i, reachable);
      continue;
    }
    if (what == 1) {  // an address goes, or all come back
      if (rng() % 2 == 0 && present.size() > 1) {
        present.erase(present.begin() + static_cast<std::ptrdiff_t>(rng() % present.size()));
      } else {
        present = addresses;
      }
      sparse_picker.SetAddresses(present);
      dense_picker.SetAddresses(present);
      continue;
    }
    if (what < 8 && !sparse_held.empty()) {  // a release
      const size_t k = rng() % sparse_held.size();
      sparse_held.erase(sparse_held.begin() + static_cast<std::ptrdiff_t>(k));
      dense_held.erase(dense_held.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    // A pick: a few workers listed with bases drawn from few values.
    std::vector<int> listed;
    std::vector<double> base;
    for (int i = 0; i < kWorkers; ++i) {
      if (rng() % 4 != 0) continue;
      listed.push_back(i);
      base.push_back(static_cast<double>(4 * (rng() % 4)));
    }
    std::shuffle(listed.begin(), listed.end(), rng);  // any order
    const double rest = rng() % 8 == 0 ? 1e17 : static_cast<double>(4 * (rng() % 4));
    const double per_token = rng() % 10 == 0 ? 0.0 : 0.5 * static_cast<double>(1 + rng() % 3);
    const double divisor = rng() % 2 == 0 ? 16.0 : 3.0;
    std::vector<int> exclude;
    if (rng() % 4 == 0) exclude.push_back(static_cast<int>(rng() % kWorkers));
    std::vector<double> dense_base(kWorkers - 2 * (rng() % 2), rest);  // some past it
    for (size_t k = 0; k < listed.size(); ++k) {
      if (static_cast<size_t>(listed[k]) < dense_base.size()) {
        dense_base[static_cast<size_t>(listed[k])] = base[k];
      } else {
        base[k] = rest;  // a worker past the dense base costs `beyond`
      }
    }
    const WorkerPicker::Charge charge = [](int i) -> int64_t { return 1 + 5 * (i % 4); };
    sparse_held.push_back(
        sparse_picker.Acquire(exclude, charge,
                              WorkerPicker::SparseLinearCost{.listed = listed,
                                                             .base = base,
                                                             .rest = rest,
                                                             .per_token = per_token,
                                                             .token_divisor = divisor}));
    dense_held.push_back(dense_picker.Acquire(
        exclude, charge,
        WorkerPicker::LinearCost{
            .base = dense_base, .beyond = rest, .per_token = per_token, .token_divisor = divisor}));
    ASSERT_EQ(sparse_held.back().index(), dense_held.back().index()) << "step " << step;
    picked += sparse_held.back().valid() ? 1 : 0;
  }
  EXPECT_GT(picked, 2000);
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_EQ(sparse_picker.in_flight_tokens(i), dense_picker.in_flight_tokens(i));
    EXPECT_EQ(sparse_picker.in_flight(i), dense_picker.in_flight(i));
  }
}

}  // namespace
}  // namespace tandem::gateway
