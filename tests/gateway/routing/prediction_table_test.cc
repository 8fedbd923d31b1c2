// One shard's predictions: records stay findable through growth, linear
// probing's backward-shift erasure (runs that wrap the array's end
// included) and sweeps that shrink the table, against a map.
#include "gateway/routing/prediction_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>

namespace tandem::gateway {
namespace {

using Ref = std::map<std::pair<uint64_t, uint16_t>, int64_t>;  // (key, id) -> until

void ExpectMatches(const PredictionTable& t, const Ref& ref) {
  ASSERT_EQ(t.size(), ref.size());
  std::map<uint64_t, Ref> by_key;
  for (const auto& [k, until] : ref) by_key[k.first][k] = until;
  for (const auto& [k, records] : by_key) {
    const uint64_t key = k;  // a lambda may not capture a structured binding (clang)
    Ref seen;
    t.ForEachOf(key, [&](uint16_t id, int64_t until) {
      EXPECT_TRUE(seen.emplace(std::pair(key, id), until).second) << "twice: " << key << "/" << id;
    });
    EXPECT_EQ(seen, records) << "key " << key;
  }
}

TEST(PredictionTableTest, MatchesAMapThroughGrowthErasuresAndSweeps) {
  std::mt19937_64 rng(29);
  PredictionTable t;
  Ref ref;
  EXPECT_EQ(t.Find(1, 1), nullptr);
  EXPECT_FALSE(t.Erase(1, 1));
  for (int step = 0; step < 100000; ++step) {
    // Keys whose home bits (above the low 24) collide often, and ids of a
    // few workers, so that runs are long and hold one key several times.
    const uint64_t key = (rng() % 64) << 24 | (rng() % 3);
    const auto id = static_cast<uint16_t>(1 + rng() % 5);
    const int op = static_cast<int>(rng() % 10);
    int64_t* until = t.Find(key, id);
    const auto it = ref.find({key, id});
    ASSERT_EQ(until != nullptr, it != ref.end()) << "step " << step;
    if (until != nullptr) {
      ASSERT_EQ(*until, it->second);
    }
    if (op < 5) {
      if (until == nullptr) {
        const auto u = static_cast<int64_t>(rng() % 1000);
        t.Insert(key, id, u);
        ref[{key, id}] = u;
      } else {
        *until = std::max<int64_t>(*until, 500);
        it->second = *until;
      }
    } else if (op < 9) {
      EXPECT_EQ(t.Erase(key, id), it != ref.end());
      if (it != ref.end()) ref.erase(it);
    } else if (step % 97 == 0) {
      // A sweep: the expired go (each reported once), the rest stay.
      const int64_t now = static_cast<int64_t>(rng() % 1000);
      int64_t reported = 0;
      const int64_t n =
          t.EraseIf([&](uint16_t, int64_t u) { return u <= now; }, [&](uint64_t) { ++reported; });
      int64_t expected = 0;
      for (auto r = ref.begin(); r != ref.end();) {
        if (r->second <= now) {
          r = ref.erase(r);
          ++expected;
        } else {
          ++r;
        }
      }
      EXPECT_EQ(n, expected);
      EXPECT_EQ(reported, expected);
      ExpectMatches(t, ref);
    }
  }
  ExpectMatches(t, ref);
  // Half full at most.
  EXPECT_LE(2 * t.size(), t.capacity());
}

TEST(PredictionTableTest, ASweepThatLeavesItMostlyEmptyShrinksIt) {
  PredictionTable t;
  for (uint64_t k = 0; k < 4096; ++k) t.Insert(k << 24, 1, static_cast<int64_t>(k));
  const size_t grown = t.capacity();
  EXPECT_GE(grown, 8192u);
  EXPECT_EQ(t.EraseIf([](uint16_t, int64_t u) { return u >= 16; }, [](uint64_t) {}), 4080);
  EXPECT_EQ(t.size(), 16u);
  EXPECT_LT(t.capacity(), grown / 16);
  for (uint64_t k = 0; k < 16; ++k) ASSERT_NE(t.Find(k << 24, 1), nullptr) << k;
  // A sweep that erases nothing changes nothing.
  EXPECT_EQ(t.EraseIf([](uint16_t, int64_t) { return false; }, [](uint64_t) {}), 0);
  EXPECT_EQ(t.size(), 16u);
}

}  // namespace
}  // namespace tandem::gateway
