// GenerateCall's phase table (gateway/calls/call_phase.h): every transition
// the table lists is legal, every other pair of phases is not, and each phase
// has a name for the CHECK message.
#include "gateway/calls/call_phase.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace tandem::gateway {
namespace {

using P = CallPhase;

constexpr P kAll[] = {P::kOpened,    P::kQueued,     P::kPrefilling, P::kHandingOff, P::kDecoding,
                      P::kMigrating, P::kCommitting, P::kEnding,     P::kFinished};

// The table in call_phase.h, written out again.
const std::set<std::pair<P, P>>& Legal() {
  static const auto* legal = new std::set<std::pair<P, P>>{
      {P::kOpened, P::kPrefilling},     {P::kOpened, P::kDecoding},
      {P::kOpened, P::kEnding},         {P::kOpened, P::kQueued},
      {P::kQueued, P::kPrefilling},     {P::kQueued, P::kDecoding},
      {P::kQueued, P::kEnding},         {P::kPrefilling, P::kPrefilling},
      {P::kPrefilling, P::kHandingOff}, {P::kPrefilling, P::kEnding},
      {P::kHandingOff, P::kDecoding},   {P::kHandingOff, P::kCommitting},
      {P::kHandingOff, P::kEnding},     {P::kHandingOff, P::kPrefilling},
      {P::kDecoding, P::kMigrating},    {P::kDecoding, P::kCommitting},
      {P::kDecoding, P::kEnding},       {P::kDecoding, P::kHandingOff},
      {P::kMigrating, P::kPrefilling},  {P::kMigrating, P::kEnding},
      {P::kMigrating, P::kDecoding},    {P::kCommitting, P::kEnding},
      {P::kEnding, P::kFinished},
  };
  return *legal;
}

TEST(CallPhaseTest, TheTablesTransitionsAreLegal) {
  for (const auto& [from, to] : Legal()) {
    EXPECT_TRUE(IsLegalTransition(from, to)) << CallPhaseName(from) << " -> " << CallPhaseName(to);
  }
}

TEST(CallPhaseTest, EveryOtherTransitionIsRejected) {
  int rejected = 0;
  for (P from : kAll) {
    for (P to : kAll) {
      if (Legal().count({from, to}) > 0) continue;
      EXPECT_FALSE(IsLegalTransition(from, to))
          << CallPhaseName(from) << " -> " << CallPhaseName(to);
      ++rejected;
    }
  }
  EXPECT_EQ(rejected, 81 - static_cast<int>(Legal().size()));
}

TEST(CallPhaseTest, SampleOfIllegalTransitions) {
  // Decode never starts before a prefill answered (or a local prefill).
  EXPECT_FALSE(IsLegalTransition(P::kPrefilling, P::kDecoding));
  // A committing turn cannot migrate or go back to decoding.
  EXPECT_FALSE(IsLegalTransition(P::kCommitting, P::kMigrating));
  EXPECT_FALSE(IsLegalTransition(P::kCommitting, P::kDecoding));
  // Ending happens once, and Finish only after it.
  EXPECT_FALSE(IsLegalTransition(P::kEnding, P::kEnding));
  EXPECT_FALSE(IsLegalTransition(P::kDecoding, P::kFinished));
  EXPECT_FALSE(IsLegalTransition(P::kOpened, P::kFinished));
  // A queued request starts nothing before the queue admits it, and is not
  // queued twice.
  EXPECT_FALSE(IsLegalTransition(P::kQueued, P::kHandingOff));
  EXPECT_FALSE(IsLegalTransition(P::kQueued, P::kQueued));
  EXPECT_FALSE(IsLegalTransition(P::kPrefilling, P::kQueued));
  // Nothing leaves kFinished.
  for (P to : kAll) EXPECT_FALSE(IsLegalTransition(P::kFinished, to));
  // Usable in constant expressions.
  static_assert(IsLegalTransition(P::kEnding, P::kFinished));
  static_assert(!IsLegalTransition(P::kFinished, P::kEnding));
}

TEST(CallPhaseTest, EveryPhaseHasItsOwnName) {
  std::set<std::string_view> names;
  for (P p : kAll) {
    EXPECT_NE(CallPhaseName(p), "?");
    names.insert(CallPhaseName(p));
  }
  EXPECT_EQ(names.size(), std::size(kAll));
}

}  // namespace
}  // namespace tandem::gateway
