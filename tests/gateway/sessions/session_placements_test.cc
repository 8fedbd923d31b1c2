// Where a gateway remembers sessions' record copies
// (gateway/sessions/session_placements.h): bounded, least recently used
// forgotten first, and a lost worker names the sessions it held a copy of.
#include "gateway/sessions/session_placements.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SessionPlacementsTest, ALostWorkerNamesTheSessionsWithACopyThere) {
  SessionPlacements p(16);
  p.Set("s-1", {"a", "b"});
  p.Set("s-2", {"b", "c"});
  p.Set("s-3", {"a", "c"});
  EXPECT_THAT(p.TakeWorker("a"), ElementsAre("s-1", "s-3"));
  // Taken out of their copies: a second loss of `a` names nothing.
  EXPECT_THAT(p.TakeWorker("a"), IsEmpty());
  EXPECT_THAT(p.Copies("s-1"), ElementsAre("b"));
  // A repair adds copies to a known session only.
  p.Add("s-1", {"c", "b"});
  p.Add("unknown", {"c"});
  EXPECT_THAT(p.Copies("s-1"), ElementsAre("b", "c"));
  EXPECT_THAT(p.Copies("unknown"), IsEmpty());
  EXPECT_EQ(p.size(), 3);
  p.Erase("s-2");
  EXPECT_THAT(p.TakeWorker("b"), ElementsAre("s-1"));
}

TEST(SessionPlacementsTest, PastItsCapacityTheLeastRecentlyUsedIsForgotten) {
  SessionPlacements p(2);
  p.Set("s-1", {"a"});
  p.Set("s-2", {"a"});
  p.Set("s-1", {"a", "b"});  // used again: s-2 is now the oldest
  p.Set("s-3", {"a"});
  EXPECT_EQ(p.size(), 2);
  EXPECT_THAT(p.Copies("s-2"), IsEmpty());
  EXPECT_THAT(p.TakeWorker("a"), ElementsAre("s-1", "s-3"));

  SessionPlacements off(0);
  off.Set("s-1", {"a"});
  EXPECT_EQ(off.size(), 0);
}

}  // namespace
}  // namespace tandem::gateway
