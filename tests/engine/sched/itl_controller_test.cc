// The inter-token latency target's step budget: it settles where full steps
// take the target, whatever the fixed and per-token costs; steps that met
// the target with nothing held back leave it; one slow step moves it a little;
// it stays within [1, max_tokens].
#include "engine/sched/itl_controller.h"

#include <gtest/gtest.h>

#include <limits>

namespace tandem::engine {
namespace {

// Full steps at a cost of fixed + per_token * tokens, n times.
void RunFull(ItlController& c, double fixed, double per_token, int n) {
  for (int i = 0; i < n; ++i)
    c.Observe(c.tokens(), fixed + per_token * c.tokens(), /*limited=*/true);
}

TEST(ItlControllerTest, SettlesWhereFullStepsTakeTheTarget) {
  // 3 ms + 0.2 ms a token: 20 tokens take 7 ms.
  ItlController up(0.007, 512, 8);
  RunFull(up, 0.003, 0.0002, 200);
  EXPECT_NEAR(up.tokens(), 20, 1);
  // From above, too, and with no fixed cost.
  ItlController down(0.007, 512, 400);
  RunFull(down, 0.003, 0.0002, 200);
  EXPECT_NEAR(down.tokens(), 20, 1);
  ItlController linear(0.010, 512, 8);
  RunFull(linear, 0, 0.0005, 200);
  EXPECT_NEAR(linear.tokens(), 20, 1);
}

TEST(ItlControllerTest, StepsThatHeldNothingBackAndMetTheTargetLeaveIt) {
  ItlController c(0.007, 512, 8);
  RunFull(c, 0.003, 0.0002, 200);
  const int32_t settled = c.tokens();
  for (int i = 0; i < 100; ++i) c.Observe(3, 0.0036, /*limited=*/false);
  EXPECT_EQ(c.tokens(), settled);
  // A small step over the target says the budget is too big.
  for (int i = 0; i < 100; ++i) c.Observe(3, 0.009, /*limited=*/false);
  EXPECT_LT(c.tokens(), 3);
}

TEST(ItlControllerTest, OneSlowStepMovesTheBudgetALittle) {
  ItlController c(0.007, 512, 8);
  RunFull(c, 0.003, 0.0002, 200);
  const int32_t settled = c.tokens();
  c.Observe(settled, 0.1, /*limited=*/true);  // the machine stalled for 100 ms once
  EXPECT_GE(c.tokens(), settled * 9 / 10 - 1);
  RunFull(c, 0.003, 0.0002, 50);
  EXPECT_NEAR(c.tokens(), settled, 1);
}

TEST(ItlControllerTest, StaysWithinOneAndTheCeiling) {
  ItlController loose(10.0, 64, 8);
  RunFull(loose, 0.003, 0.0002, 100);
  EXPECT_EQ(loose.tokens(), 64);
  ItlController tight(1e-9, 64, 8);
  RunFull(tight, 0.003, 0.0002, 100);
  EXPECT_EQ(tight.tokens(), 1);
  // Nothing to learn from these.
  const int64_t seen = tight.observed();
  tight.Observe(0, 0.001, true);
  tight.Observe(4, -1, true);
  tight.Observe(4, std::numeric_limits<double>::quiet_NaN(), true);
  tight.Observe(4, std::numeric_limits<double>::infinity(), true);
  EXPECT_EQ(tight.observed(), seen);
}

}  // namespace
}  // namespace tandem::engine
