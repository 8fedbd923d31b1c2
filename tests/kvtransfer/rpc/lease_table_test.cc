// KV leases: created with a TTL, renewed by use, dropped on release or
// expiry, bounded in number.
#include "kvtransfer/rpc/lease_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::kvtransfer {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const LeasedKv> Kv(int blocks) {
  return std::make_shared<LeasedKv>(LeasedKv{.encoder = nullptr, .blocks = blocks,
                                              .bytes = 100 * blocks});
}

TEST(LeaseTableTest, AcquireReleaseAndStats) {
  LeaseTable t({.ttl = absl::Seconds(30), .max_leases = 8});
  auto a = t.Create(Kv(3));
  auto b = t.Create(Kv(2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(t.stats().leases, 2);
  EXPECT_EQ(t.stats().blocks, 5);
  EXPECT_EQ(t.stats().bytes, 500);
  auto got = t.Acquire(*a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)->blocks, 3);
  EXPECT_TRUE(t.Release(*a));
  EXPECT_FALSE(t.Release(*a));
  auto gone = t.Acquire(*a);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr("lease_id"));
  EXPECT_EQ(t.stats().leases, 1);
}

TEST(LeaseTableTest, ExpiresUnlessRenewed) {
  absl::Time now = absl::FromUnixSeconds(1000);
  LeaseTable t({.ttl = absl::Seconds(10), .max_leases = 8}, [&now] { return now; });
  const std::string kept = *t.Create(Kv(1));
  const std::string lapsed = *t.Create(Kv(1));
  now += absl::Seconds(5);
  EXPECT_EQ(t.Expire(now), 0);
  ASSERT_TRUE(t.Renew(kept));  // lives until 1015
  now += absl::Seconds(6);     // 1011: `lapsed` (1010) is past its TTL
  EXPECT_EQ(t.Expire(now), 1);
  EXPECT_FALSE(t.Acquire(lapsed).ok());
  EXPECT_TRUE(t.Acquire(kept).ok());
  EXPECT_EQ(t.stats().expired_total, 1);
  EXPECT_FALSE(t.Renew(lapsed));
}

TEST(LeaseTableTest, RefusesPastMaxLeases) {
  LeaseTable t({.ttl = absl::Seconds(30), .max_leases = 2});
  ASSERT_TRUE(t.Create(Kv(1)).ok());
  const std::string second = *t.Create(Kv(1));
  auto third = t.Create(Kv(1));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("max_leases"));
  t.Release(second);
  EXPECT_TRUE(t.Create(Kv(1)).ok());
}

TEST(LeaseTableTest, RefusesPastTheByteBudget) {
  LeaseTable t({.ttl = absl::Seconds(30), .max_leases = 8, .max_bytes = 500});
  const std::string a = *t.Create(Kv(3));  // 300 bytes
  auto b = t.Create(Kv(3));                // 600 > 500
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("max_lease_bytes"));
  EXPECT_TRUE(t.Create(Kv(2)).ok());  // exactly 500
  EXPECT_EQ(t.stats().bytes, 500);
  t.Release(a);
  EXPECT_EQ(t.stats().bytes, 200);
  EXPECT_EQ(t.stats().blocks, 2);
  EXPECT_TRUE(t.Create(Kv(3)).ok());
}

TEST(LeaseTableTest, AStripedFetchEndsTheLeaseWhenEveryStripeCompletes) {
  LeaseTable t({.ttl = absl::Seconds(30), .max_leases = 8});
  const std::string id = *t.Create(Kv(5));
  ASSERT_TRUE(t.Acquire(id, 0, 3).ok());
  ASSERT_TRUE(t.Acquire(id, 2, 3).ok());
  EXPECT_FALSE(t.CompleteStripe(id, 2));
  EXPECT_FALSE(t.CompleteStripe(id, 2));  // twice is once
  // A stripe that starts after another finished still finds the lease.
  ASSERT_TRUE(t.Acquire(id, 1, 3).ok());
  EXPECT_FALSE(t.CompleteStripe(id, 0));
  EXPECT_EQ(t.stats().leases, 1);
  EXPECT_TRUE(t.CompleteStripe(id, 1));
  EXPECT_EQ(t.stats().leases, 0);
  EXPECT_EQ(t.stats().bytes, 0);
  EXPECT_EQ(t.Acquire(id, 0, 3).status().code(), absl::StatusCode::kNotFound);
}

TEST(LeaseTableTest, RefusesBadStripesNamingTheField) {
  LeaseTable t({.ttl = absl::Seconds(30), .max_leases = 8});
  const std::string id = *t.Create(Kv(2));
  auto bad = t.Acquire(id, 2, 2);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("stripe:"));
  bad = t.Acquire(id, 0, LeaseTable::kMaxStripes + 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("stripes:"));
  ASSERT_TRUE(t.Acquire(id, 0, 2).ok());
  bad = t.Acquire(id, 0, 1);  // the lease is being fetched in 2
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("fetched in 2"));
  // A single-stream fetch completes with its one stripe.
  const std::string one = *t.Create(Kv(1));
  ASSERT_TRUE(t.Acquire(one).ok());
  EXPECT_TRUE(t.CompleteStripe(one, 0));
}

TEST(LeaseTableTest, ADeltaFetchNamesAFirstBlockThatLeavesOneAndKeepsIt) {
  LeaseTable t({.ttl = absl::Seconds(30), .max_leases = 8});
  const std::string id = *t.Create(Kv(4));
  auto bad = t.Acquire(id, 0, 1, 4);  // nothing left to fetch
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("first_block:"));
  bad = t.Acquire(id, 0, 1, -1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(t.Acquire(id, 0, 2, 3).ok());
  bad = t.Acquire(id, 1, 2, 2);  // another stream of the fetch must agree
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("from block 3"));
  ASSERT_TRUE(t.Acquire(id, 1, 2, 3).ok());
  EXPECT_FALSE(t.CompleteStripe(id, 0));
  EXPECT_TRUE(t.CompleteStripe(id, 1));
}

// The gateway hands a lease to another decode worker when the first was
// lost mid-fetch; that worker holds other blocks, so its fetch names
// another layout under its own id. It takes the lease over: the lost
// fetch's streams neither end the lease nor start again, and the layout
// rule still holds within the new fetch.
TEST(LeaseTableTest, AFetchUnderANewIdTakesTheLeaseOverFromALostOne) {
  LeaseTable t({.ttl = absl::Seconds(30), .max_leases = 8});
  const std::string id = *t.Create(Kv(6));
  constexpr uint64_t kLost = 7, kNext = 9, kThird = 11;
  ASSERT_TRUE(t.Acquire(id, 0, 2, 0, kLost).ok());
  ASSERT_TRUE(t.Acquire(id, 1, 2, 0, kLost).ok());
  EXPECT_FALSE(t.CompleteStripe(id, 0, kLost));
  // The next worker holds the first 4 blocks and fetches the rest on one
  // stream.
  ASSERT_TRUE(t.Acquire(id, 0, 1, 4, kNext).ok());
  auto bad = t.Acquire(id, 0, 2, 4, kNext);  // the same fetch must agree
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("fetched in 1"));
  // The lost fetch's streams: a late one is refused, one that broke off or
  // completes leaves the lease to the new fetch.
  bad = t.Acquire(id, 1, 2, 0, kLost);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("superseded"));
  EXPECT_FALSE(t.AbandonFetch(id, kLost));
  EXPECT_FALSE(t.CompleteStripe(id, 1, kLost));
  EXPECT_EQ(t.stats().leases, 1);
  EXPECT_TRUE(t.CompleteStripe(id, 0, kNext));
  EXPECT_EQ(t.stats().leases, 0);

  // The current fetch's stream breaking off ends the lease, as before.
  const std::string other = *t.Create(Kv(2));
  ASSERT_TRUE(t.Acquire(other, 0, 1, 0, kNext).ok());
  ASSERT_TRUE(t.Acquire(other, 0, 1, 1, kThird).ok());
  EXPECT_FALSE(t.AbandonFetch(other, kNext));
  EXPECT_TRUE(t.AbandonFetch(other, kThird));
  EXPECT_EQ(t.Acquire(other).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::kvtransfer
