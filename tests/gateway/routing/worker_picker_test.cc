#include "gateway/routing/worker_picker.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tandem::gateway
