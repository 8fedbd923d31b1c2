// KvBudget: requests are charged whole blocks of prompt + max_tokens, refused
// past capacity x overcommit with a message saying so, and returned when
// their ticket goes; unknown capacity or overcommit 0 refuses nothing.
#include "gateway/routing/kv_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "prometheus/registry.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

TEST(KvBudgetTest, ChargesWholeBlocksAndRefusesPastTheBudget) {
  prometheus::Registry registry;
  KvBudget budget(1.0, registry);
  budget.SetCapacity(100, 16);
  absl::StatusOr<KvBudget::Ticket> a = budget.TryCharge(50);  // 4 blocks: 64
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(budget.charged(), 64);
  absl::StatusOr<KvBudget::Ticket> b = budget.TryCharge(40);  // 48 more: 112 > 100
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("64 of 100 tokens (100 on the decode workers x --kv-overcommit 1)"));
  absl::StatusOr<KvBudget::Ticket> c = budget.TryCharge(30);  // 32: 96 fits
  ASSERT_TRUE(c.ok());
  a->Reset();
  EXPECT_EQ(budget.charged(), 32);
  EXPECT_TRUE(budget.TryCharge(40).ok());  // the ticket goes at once
  EXPECT_EQ(budget.charged(), 32);
}

TEST(KvBudgetTest, OvercommitScalesTheBudget) {
  prometheus::Registry registry;
  KvBudget budget(2.0, registry);
  budget.SetCapacity(64, 16);
  std::vector<KvBudget::Ticket> held;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<KvBudget::Ticket> t = budget.TryCharge(16);
    ASSERT_TRUE(t.ok()) << i;
    held.push_back(std::move(*t));
  }
  EXPECT_FALSE(budget.TryCharge(1).ok());  // 128 of 128
}

TEST(KvBudgetTest, ALoneRequestIsNeverRefused) {
  prometheus::Registry registry;
  KvBudget budget(1.0, registry);
  budget.SetCapacity(32, 16);
  absl::StatusOr<KvBudget::Ticket> big = budget.TryCharge(1000);
  EXPECT_TRUE(big.ok());  // the workers' own limits judge it
  EXPECT_FALSE(budget.TryCharge(1).ok());
}

TEST(KvBudgetTest, UnknownCapacityOrOvercommitZeroRefusesNothing) {
  prometheus::Registry registry;
  KvBudget unknown(1.0, registry);
  prometheus::Registry registry2;
  KvBudget off(0.0, registry2);
  off.SetCapacity(16, 16);
  std::vector<KvBudget::Ticket> held;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<KvBudget::Ticket> a = unknown.TryCharge(100);
    absl::StatusOr<KvBudget::Ticket> b = off.TryCharge(100);
    ASSERT_TRUE(a.ok() && b.ok());
    held.push_back(std::move(*a));
    held.push_back(std::move(*b));
  }
  EXPECT_EQ(off.charged(), 4 * 112);
}

}  // namespace
}  // namespace tandem::gateway
