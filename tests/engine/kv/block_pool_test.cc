#include "engine/kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace tandem::engine {
namespace {

std::vector<BlockId> Ids(const BlockList& list) { return list.ids(); }

void ExpectCounts(const BlockPool& pool, int32_t used, int32_t free,
                  int32_t cached) {
  EXPECT_EQ(pool.num_used(), used);
  EXPECT_EQ(pool.num_free(), free);
  EXPECT_EQ(pool.num_cached(), cached);
  EXPECT_EQ(pool.num_used() + pool.num_free(), pool.num_blocks());
}

// Allocates one block per hash, hashes it and releases it, in order: the
// blocks enter the LRU in the order of `hashes`.
// Tests name hashes by small integers.
BlockHash H(uint64_t v) { return BlockHash{.low = v, .high = 0}; }
std::optional<BlockHash> HO(std::optional<uint64_t> v) {
  return v.has_value() ? std::optional<BlockHash>(H(*v)) : std::nullopt;
}

std::vector<BlockId> FillCache(BlockPool& pool, const std::vector<uint64_t>& hashes) {
  std::vector<BlockList> lists;
  std::vector<BlockId> ids;
  for (const uint64_t h : hashes) {
    lists.push_back(*pool.Allocate(1));
    EXPECT_TRUE(pool.SetHash(lists.back()[0], H(h)));
    ids.push_back(lists.back()[0]);
  }
  for (BlockList& list : lists) list.Reset();
  return ids;
}

TEST(BlockPoolTest, FreshPoolAllocatesAndFrees) {
  BlockPool pool(8);
  EXPECT_EQ(pool.num_blocks(), 8);
  ExpectCounts(pool, 0, 8, 0);
  {
    std::optional<BlockList> list = pool.Allocate(3);
    ASSERT_TRUE(list.has_value());
    EXPECT_EQ(Ids(*list), (std::vector<BlockId>{0, 1, 2}));
    EXPECT_EQ(list->size(), 3);
    EXPECT_EQ(list->pool(), &pool);
    for (const BlockId id : list->ids()) EXPECT_EQ(pool.refcount(id), 1);
    ExpectCounts(pool, 3, 5, 0);
  }
  ExpectCounts(pool, 0, 8, 0);
  EXPECT_EQ(pool.evictions(), 0);
}

TEST(BlockPoolTest, AllocateZeroGivesEmptyBoundList) {
  BlockPool pool(2);
  std::optional<BlockList> list = pool.Allocate(0);
  ASSERT_TRUE(list.has_value());
  EXPECT_TRUE(list->empty());
  EXPECT_EQ(list->pool(), &pool);
  EXPECT_TRUE(pool.Extend(*list, 2));
  EXPECT_EQ(list->size(), 2);
}

TEST(BlockPoolTest, EmptyPool) {
  BlockPool pool(0);
  ExpectCounts(pool, 0, 0, 0);
  EXPECT_FALSE(pool.Allocate(1).has_value());
  EXPECT_TRUE(pool.Allocate(0).has_value());
}

TEST(BlockPoolTest, AllOrNothingLeavesStateUnchanged) {
  BlockPool pool(6);
  const std::vector<BlockId> cached = FillCache(pool, {10, 11});
  BlockList held = *pool.Allocate(3);
  ExpectCounts(pool, 3, 3, 2);  // 1 free + 2 cached

  EXPECT_FALSE(pool.Allocate(4).has_value());
  EXPECT_FALSE(pool.Extend(held, 4));
  EXPECT_EQ(held.size(), 3);
  ExpectCounts(pool, 3, 3, 2);
  EXPECT_EQ(pool.evictions(), 0);
  EXPECT_TRUE(pool.ContainsHash(H(10)));
  EXPECT_TRUE(pool.ContainsHash(H(11)));
  for (const BlockId id : held.ids()) EXPECT_EQ(pool.refcount(id), 1);

  // An unbound list stays unbound after a failed Extend.
  BlockList unbound;
  EXPECT_FALSE(pool.Extend(unbound, 4));
  EXPECT_EQ(unbound.pool(), nullptr);
}

TEST(BlockPoolTest, ExtendAppendsAndBinds) {
  BlockPool pool(5);
  BlockList list;
  ASSERT_TRUE(pool.Extend(list, 2));
  EXPECT_EQ(list.pool(), &pool);
  ASSERT_TRUE(pool.Extend(list, 3));
  EXPECT_EQ(Ids(list), (std::vector<BlockId>{0, 1, 2, 3, 4}));
  ExpectCounts(pool, 5, 0, 0);
}

TEST(BlockPoolTest, SharedBlocksAreRefcounted) {
  BlockPool pool(4);
  BlockList a = *pool.Allocate(2);
  BlockList b = a.Share();
  EXPECT_EQ(Ids(b), Ids(a));
  EXPECT_EQ(pool.refcount(a[0]), 2);
  ExpectCounts(pool, 2, 2, 0);

  // A third holder of one block through Ref + Append.
  BlockList c(&pool);
  pool.Ref(a[1]);
  c.Append(a[1]);
  EXPECT_EQ(pool.refcount(a[1]), 3);

  a.Reset();
  EXPECT_EQ(pool.refcount(b[0]), 1);
  EXPECT_EQ(pool.refcount(b[1]), 2);
  ExpectCounts(pool, 2, 2, 0);
  b.Reset();
  ExpectCounts(pool, 1, 3, 0);
  c.Reset();
  ExpectCounts(pool, 0, 4, 0);
}

TEST(BlockPoolTest, ReleasedBlocksGoToCacheOnlyWhenHashed) {
  BlockPool pool(4);
  BlockList list = *pool.Allocate(2);
  ASSERT_TRUE(pool.SetHash(list[0], H(77)));
  EXPECT_EQ(pool.hash(list[0]), H(77));
  EXPECT_EQ(pool.hash(list[1]), std::nullopt);
  const BlockId hashed = list[0];
  list.Reset();
  ExpectCounts(pool, 0, 4, 1);
  EXPECT_EQ(pool.refcount(hashed), 0);
  EXPECT_EQ(pool.hash(hashed), H(77));  // still holds its contents
}

TEST(BlockPoolTest, EvictsLeastRecentlyReleasedAfterFreeList) {
  BlockPool pool(6);
  // Cache four blocks, released in the order 2, 0, 3, 1 of their hashes.
  std::vector<BlockList> lists;
  for (int i = 0; i < 4; ++i) {
    lists.push_back(*pool.Allocate(1));
    ASSERT_TRUE(pool.SetHash(lists.back()[0], H(100 + i)));
  }
  const std::vector<BlockId> id = {lists[0][0], lists[1][0], lists[2][0], lists[3][0]};
  for (const int i : {2, 0, 3, 1}) lists[i].Reset();
  ExpectCounts(pool, 0, 6, 4);

  std::vector<std::pair<BlockId, uint64_t>> evicted;
  pool.set_eviction_callback(
      [&](BlockId b, const BlockHash& h) { evicted.emplace_back(b, h.low); });

  // Two free blocks first, then the LRU head (hash 102).
  BlockList a = *pool.Allocate(3);
  EXPECT_EQ(a[2], id[2]);
  EXPECT_EQ(pool.evictions(), 1);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], std::make_pair(id[2], uint64_t{102}));
  EXPECT_FALSE(pool.ContainsHash(H(102)));
  EXPECT_EQ(pool.hash(id[2]), std::nullopt);

  BlockList b = *pool.Allocate(2);
  EXPECT_EQ(Ids(b), (std::vector<BlockId>{id[0], id[3]}));
  EXPECT_EQ(pool.evictions(), 3);
  EXPECT_TRUE(pool.ContainsHash(H(101)));
  ExpectCounts(pool, 5, 1, 1);
}

TEST(BlockPoolTest, ABlockLackingTheDraftsKvSaysSoUntilFilledOrEvicted) {
  BlockPool pool(2);
  BlockList a = *pool.Allocate(2);
  ASSERT_TRUE(pool.SetHash(a[0], H(1)));
  ASSERT_TRUE(pool.SetHash(a[1], H(2)));
  pool.SetDraftMissing(a[0], true);
  pool.SetDraftMissing(a[1], true);
  EXPECT_TRUE(pool.draft_missing(a[0]));
  pool.SetDraftMissing(a[1], false);  // the draft filled it
  EXPECT_FALSE(pool.draft_missing(a[1]));
  const BlockId lacking = a[0];
  a.Reset();
  // Cached, it still lacks it; the eviction callback sees that, and the
  // block's next use starts without the mark.
  EXPECT_TRUE(pool.draft_missing(lacking));
  std::vector<bool> seen;
  pool.set_eviction_callback(
      [&](BlockId b, const BlockHash&) { seen.push_back(pool.draft_missing(b)); });
  BlockList b = *pool.Allocate(2);
  EXPECT_EQ(seen, (std::vector<bool>{false, true}));  // released back to front
  EXPECT_FALSE(pool.draft_missing(lacking));
}

TEST(BlockPoolTest, ListsReleaseBackToFront) {
  // A sequence's last blocks are the least shareable: they reach the LRU
  // first and are evicted first.
  BlockPool pool(3);
  BlockList list = *pool.Allocate(3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.SetHash(list[i], H(200 + i)));
  const std::vector<BlockId> ids = Ids(list);
  list.Reset();
  BlockList first = *pool.Allocate(1);
  EXPECT_EQ(first[0], ids[2]);
  EXPECT_TRUE(pool.ContainsHash(H(200)));
  EXPECT_TRUE(pool.ContainsHash(H(201)));
}

TEST(BlockPoolTest, AcquireCachedHitAndMiss) {
  BlockPool pool(3);
  const std::vector<BlockId> ids = FillCache(pool, {1, 2});
  EXPECT_EQ(pool.AcquireCached(H(99)), std::nullopt);
  ExpectCounts(pool, 0, 3, 2);

  // A hit on a cached block takes it out of the LRU.
  const std::optional<BlockId> hit = pool.AcquireCached(H(1));
  ASSERT_EQ(hit, ids[0]);
  BlockList seq(&pool);
  seq.Append(*hit);
  EXPECT_EQ(pool.refcount(ids[0]), 1);
  ExpectCounts(pool, 1, 2, 1);

  // A hit on a used block shares it.
  BlockList other(&pool);
  other.Append(*pool.AcquireCached(H(1)));
  EXPECT_EQ(pool.refcount(ids[0]), 2);
  ExpectCounts(pool, 1, 2, 1);

  // Allocations cannot evict it while it is held.
  BlockList rest = *pool.Allocate(2);
  EXPECT_FALSE(pool.Allocate(1).has_value());
  EXPECT_TRUE(pool.ContainsHash(H(1)));
  EXPECT_FALSE(pool.ContainsHash(H(2)));
}

TEST(BlockPoolTest, AcquireThenReleaseRefreshesRecency) {
  BlockPool pool(2);
  const std::vector<BlockId> ids = FillCache(pool, {1, 2});  // LRU: 1, 2
  {
    BlockList touch(&pool);
    touch.Append(*pool.AcquireCached(H(1)));
  }  // LRU: 2, 1
  BlockList a = *pool.Allocate(1);
  EXPECT_EQ(a[0], ids[1]);
  EXPECT_TRUE(pool.ContainsHash(H(1)));
}

TEST(BlockPoolTest, SetHashRules) {
  BlockPool pool(3);
  BlockList list = *pool.Allocate(3);
  EXPECT_TRUE(pool.SetHash(list[0], H(5)));
  EXPECT_TRUE(pool.SetHash(list[0], H(5)));   // same again: fine
  EXPECT_FALSE(pool.SetHash(list[1], H(5)));  // another block has it
  EXPECT_EQ(pool.hash(list[1]), std::nullopt);
  list.Reset();
  ExpectCounts(pool, 0, 3, 1);  // only the registered one is cached
  EXPECT_EQ(pool.AcquireCached(H(5)), 0);
  BlockList holder(&pool);
  holder.Append(0);
}

TEST(BlockPoolTest, MovesTransferOwnership) {
  BlockPool pool(6);
  BlockList a = *pool.Allocate(2);
  const std::vector<BlockId> ids = Ids(a);
  BlockList b(std::move(a));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): documented state
  EXPECT_EQ(Ids(b), ids);
  ExpectCounts(pool, 2, 4, 0);

  BlockList c = *pool.Allocate(3);
  c = std::move(b);  // c's own three blocks are released
  EXPECT_EQ(Ids(c), ids);
  ExpectCounts(pool, 2, 4, 0);

  BlockList& alias = c;
  c = std::move(alias);  // self-move keeps the blocks
  EXPECT_EQ(Ids(c), ids);
  ExpectCounts(pool, 2, 4, 0);

  std::vector<BlockList> many;
  for (int i = 0; i < 4; ++i) many.push_back(*pool.Allocate(1));  // grows
  ExpectCounts(pool, 6, 0, 0);
  many.clear();
  c.Reset();
  ExpectCounts(pool, 0, 6, 0);
}

TEST(BlockPoolTest, TruncatePopBackDropFront) {
  BlockPool pool(8);
  BlockList list = *pool.Allocate(6);  // 0..5
  list.PopBack();
  EXPECT_EQ(Ids(list), (std::vector<BlockId>{0, 1, 2, 3, 4}));
  list.Truncate(3);
  EXPECT_EQ(Ids(list), (std::vector<BlockId>{0, 1, 2}));
  list.DropFront(2);
  EXPECT_EQ(Ids(list), (std::vector<BlockId>{2}));
  ExpectCounts(pool, 1, 7, 0);
  list.Truncate(1);
  list.DropFront(0);
  EXPECT_EQ(list.size(), 1);
}

TEST(BlockPoolDeathTest, MisuseIsABug) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.Ref(0), "Ref needs a used block");
  EXPECT_DEATH(pool.refcount(2), "out of range");
  EXPECT_DEATH(pool.Allocate(-1), "negative");
  EXPECT_DEATH(pool.SetHash(1, H(3)), "held block");
  BlockList list = *pool.Allocate(1);
  EXPECT_DEATH(pool.SetDraftMissing(list[0], true), "only a hashed block");
  ASSERT_TRUE(pool.SetHash(list[0], H(3)));
  EXPECT_DEATH(pool.SetHash(list[0], H(4)), "hash is fixed");
  EXPECT_DEATH(list.Truncate(2), "Truncate");
  BlockList unbound;
  EXPECT_DEATH(unbound.Append(0), "bound");
  BlockPool other(1);
  EXPECT_DEATH(other.Extend(list, 1), "another pool");
  EXPECT_DEATH(
      {
        auto doomed = std::make_unique<BlockPool>(1);
        BlockList held = *doomed->Allocate(1);
        doomed.reset();
      },
      "outlive");
}

// --- Randomized stress against a simple model ------------------------------

// The pool's contract, written the obvious way: sets and a std::list.
struct Model {
  explicit Model(int32_t n) : refcount(n, 0), hash(n) {
    for (BlockId id = 0; id < n; ++id) free.insert(id);
  }
  int32_t num_free() const {
    return static_cast<int32_t>(free.size() + lru.size());
  }
  void Release(BlockId id) {
    ASSERT_GT(refcount[id], 0);
    if (--refcount[id] > 0) return;
    if (hash[id].has_value()) {
      lru.push_back(id);
    } else {
      free.insert(id);
    }
  }
  void ReleaseList(const std::vector<BlockId>& ids, size_t from = 0) {
    for (size_t i = ids.size(); i > from; --i) Release(ids[i - 1]);
  }
  // Checks what the pool handed out against the contract and updates.
  void Took(const std::vector<BlockId>& got, int32_t n) {
    ASSERT_EQ(static_cast<int32_t>(got.size()), n);
    const int32_t from_free = std::min<int32_t>(n, static_cast<int32_t>(free.size()));
    for (int32_t i = 0; i < n; ++i) {
      const BlockId id = got[i];
      if (i < from_free) {
        ASSERT_EQ(free.erase(id), 1u) << "not from the free list: " << id;
      } else {
        ASSERT_EQ(id, lru.front()) << "not the least recently used";
        lru.pop_front();
        by_hash.erase(*hash[id]);
        hash[id].reset();
        ++evictions;
      }
      refcount[id] = 1;
    }
  }

  std::vector<int32_t> refcount;
  std::vector<std::optional<uint64_t>> hash;
  std::set<BlockId> free;
  std::list<BlockId> lru;  // front: evicted first
  std::map<uint64_t, BlockId> by_hash;
  int64_t evictions = 0;
};

void ExpectMatches(const BlockPool& pool, const Model& model,
                   const std::vector<BlockList>& lists) {
  ASSERT_EQ(pool.num_free(), model.num_free());
  ASSERT_EQ(pool.num_cached(), static_cast<int32_t>(model.lru.size()));
  ASSERT_EQ(pool.num_used(), pool.num_blocks() - model.num_free());
  ASSERT_EQ(pool.evictions(), model.evictions);
  std::vector<int32_t> held(model.refcount.size(), 0);
  for (const BlockList& list : lists) {
    for (const BlockId id : list.ids()) ++held[id];
  }
  for (BlockId id = 0; id < pool.num_blocks(); ++id) {
    ASSERT_EQ(pool.refcount(id), model.refcount[id]) << "block " << id;
    ASSERT_EQ(held[id], model.refcount[id]) << "block " << id;
    ASSERT_EQ(pool.hash(id), HO(model.hash[id])) << "block " << id;
  }
  for (uint64_t h = 0; h < 48; ++h) {
    ASSERT_EQ(pool.ContainsHash(H(h)), model.by_hash.contains(h)) << "hash " << h;
  }
}

TEST(BlockPoolStressTest, MatchesModel) {
  constexpr int32_t kBlocks = 32;
  BlockPool pool(kBlocks);
  Model model(kBlocks);
  std::vector<BlockList> lists;
  std::vector<std::pair<BlockId, uint64_t>> evicted;
  pool.set_eviction_callback(
      [&](BlockId id, const BlockHash& h) { evicted.emplace_back(id, h.low); });
  std::mt19937_64 rng(20240601);
  const auto uniform = [&rng](int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  const auto any_list = [&]() -> BlockList& {
    return lists[static_cast<size_t>(uniform(0, static_cast<int64_t>(lists.size()) - 1))];
  };

  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(uniform(0, 9));
    if (lists.empty() && op >= 2) continue;
    if (op == 0) {  // Allocate
      const int32_t n = static_cast<int32_t>(uniform(0, 8));
      const auto lru_before = model.lru;
      evicted.clear();
      std::optional<BlockList> got = pool.Allocate(n);
      if (n > model.num_free()) {
        ASSERT_FALSE(got.has_value());
      } else {
        ASSERT_TRUE(got.has_value());
        ASSERT_NO_FATAL_FAILURE(model.Took(got->ids(), n));
        lists.push_back(std::move(*got));
      }
      // The callback saw exactly the evicted blocks, oldest first.
      ASSERT_LE(evicted.size(), lru_before.size());
      auto it = lru_before.begin();
      for (const auto& [id, h] : evicted) {
        ASSERT_EQ(id, *it++);
        ASSERT_FALSE(pool.ContainsHash(H(h)));
      }
    } else if (op == 1) {  // AcquireCached into a new or existing list
      const uint64_t h = static_cast<uint64_t>(uniform(0, 47));
      const std::optional<BlockId> got = pool.AcquireCached(H(h));
      const auto it = model.by_hash.find(h);
      if (it == model.by_hash.end()) {
        ASSERT_FALSE(got.has_value());
      } else {
        ASSERT_EQ(got, it->second);
        if (model.refcount[*got]++ == 0) model.lru.remove(*got);
        if (lists.empty() || uniform(0, 1) == 0) lists.emplace_back(&pool);
        lists.back().Append(*got);
      }
    } else if (op == 2) {  // Extend
      BlockList& list = any_list();
      const int32_t n = static_cast<int32_t>(uniform(0, 4));
      const std::vector<BlockId> before = list.ids();
      if (pool.Extend(list, n)) {
        ASSERT_LE(n, model.num_free());
        const std::vector<BlockId> added(list.ids().begin() + static_cast<ptrdiff_t>(before.size()),
                                         list.ids().end());
        ASSERT_NO_FATAL_FAILURE(model.Took(added, n));
      } else {
        ASSERT_GT(n, model.num_free());
        ASSERT_EQ(list.ids(), before);
      }
    } else if (op == 3) {  // Destroy a list
      const size_t i = static_cast<size_t>(uniform(0, static_cast<int64_t>(lists.size()) - 1));
      const std::vector<BlockId> ids = lists[i].ids();
      std::swap(lists[i], lists.back());
      lists.pop_back();
      ASSERT_NO_FATAL_FAILURE(model.ReleaseList(ids));
    } else if (op == 4) {  // Truncate
      BlockList& list = any_list();
      const int32_t size = static_cast<int32_t>(uniform(0, list.size()));
      const std::vector<BlockId> ids = list.ids();
      list.Truncate(size);
      ASSERT_NO_FATAL_FAILURE(model.ReleaseList(ids, static_cast<size_t>(size)));
    } else if (op == 5) {  // DropFront
      BlockList& list = any_list();
      const int32_t n = static_cast<int32_t>(uniform(0, list.size()));
      const std::vector<BlockId> ids = list.ids();
      list.DropFront(n);
      ASSERT_NO_FATAL_FAILURE(model.ReleaseList(
          std::vector<BlockId>(ids.begin(), ids.begin() + n)));
    } else if (op == 6 || op == 7) {  // SetHash on a held block
      BlockList& list = any_list();
      if (list.empty()) continue;
      const BlockId id = list[static_cast<int32_t>(uniform(0, list.size() - 1))];
      const uint64_t h = model.hash[id].value_or(static_cast<uint64_t>(uniform(0, 47)));
      const bool expect = model.hash[id].has_value() || !model.by_hash.contains(h);
      ASSERT_EQ(pool.SetHash(id, H(h)), expect);
      if (expect && !model.hash[id].has_value()) {
        model.hash[id] = h;
        model.by_hash[h] = id;
      }
    } else if (op == 8) {  // Share
      const BlockList& list = any_list();
      for (const BlockId id : list.ids()) ++model.refcount[id];
      lists.push_back(list.Share());
    } else {  // Move-assign one list over another
      BlockList& to = any_list();
      BlockList& from = any_list();
      if (&to == &from) continue;
      const std::vector<BlockId> dropped = to.ids();
      to = std::move(from);
      ASSERT_NO_FATAL_FAILURE(model.ReleaseList(dropped));
    }
    ASSERT_NO_FATAL_FAILURE(ExpectMatches(pool, model, lists)) << "step " << step;
  }
  EXPECT_GT(pool.evictions(), 100);  // the run did exercise eviction
  lists.clear();
  EXPECT_EQ(pool.num_used(), 0);
}

}  // namespace
}  // namespace tandem::engine
