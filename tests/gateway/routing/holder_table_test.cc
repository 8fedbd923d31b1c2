// One shard of the block index: keys stay findable through growth and
// backward-shift deletion, holder sets keep their tiers as they move inline
// -> list -> bitmaps and back, a worker's removal takes it off every key,
// and the clock evicts whole keys.
#include "gateway/routing/holder_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "gateway/routing/huge_pages.h"
#include "gateway/routing/reclaimer.h"
#include "gateway/routing/seq_lock.h"

namespace tandem::gateway {
namespace {

using Holders = std::map<uint16_t, uint8_t>;  // id -> tier bits

Holders Read(const HolderTable& t, uint64_t key) {
  Holders h;
  t.ForEachHolder(key, [&](uint16_t id, uint8_t tiers) {
    EXPECT_FALSE(h.contains(id)) << "holder " << id << " twice";
    h[id] = tiers;
  });
  return h;
}

TEST(HolderTableTest, MatchesAMapThroughGrowthSpillsAndRemovals) {
  std::mt19937_64 rng(34);
  HolderTable table(4);
  std::map<uint64_t, Holders> ref;
  int64_t entries = 0;
  for (int step = 0; step < 200000; ++step) {
    // Keys: a few popular ones (many holders) and many rare ones.
    const uint64_t key = rng() % 4 == 0 ? rng() % 8 : 1000 + rng() % 5000;
    const uint16_t id = static_cast<uint16_t>(1 + (rng() % 4 == 0 ? rng() % 600 : rng() % 6));
    const int tier = static_cast<int>(rng() % 3);
    if (rng() % 3 != 0) {
      const bool fresh = table.Add(key, id, tier);
      EXPECT_EQ(fresh, !ref[key].contains(id));
      entries += fresh;
      ref[key][id] |= static_cast<uint8_t>(1u << tier);
    } else {
      const bool gone = table.Remove(key, id, tier);
      auto it = ref.find(key);
      bool want = false;
      if (it != ref.end() && it->second.contains(id) && (it->second[id] >> tier) & 1) {
        it->second[id] &= static_cast<uint8_t>(~(1u << tier));
        if (it->second[id] == 0) {
          it->second.erase(id);
          want = true;
        }
        if (it->second.empty()) ref.erase(it);
      }
      EXPECT_EQ(gone, want);
      entries -= gone;
    }
    if (step % 20000 == 19999) {  // a worker leaves
      const uint16_t leaving = static_cast<uint16_t>(1 + rng() % 6);
      int64_t had = 0;
      for (auto it = ref.begin(); it != ref.end();) {
        had += it->second.erase(leaving);
        it = it->second.empty() ? ref.erase(it) : std::next(it);
      }
      EXPECT_EQ(table.RemoveWorker(leaving), had);
      entries -= had;
    }
  }
  ASSERT_EQ(table.size(), ref.size());
  for (const auto& [key, holders] : ref) EXPECT_EQ(Read(table, key), holders) << key;
  for (uint64_t key = 1000; key < 6000; ++key) {
    if (!ref.contains(key)) {
      EXPECT_FALSE(table.ForEachHolder(key, [](uint16_t, uint8_t) {}));
    }
  }
  // Growth kept it at most 65% full; at least half once it has grown.
  EXPECT_LE(table.size() * 20, table.capacity() * 13);
  EXPECT_GE(table.size() * 2, table.capacity() - 2 * 4);
  // Evicting everything returns every entry once.
  int64_t evicted = 0;
  while (int64_t n = table.EvictOne([](uint16_t) {})) evicted += n;
  EXPECT_EQ(evicted, entries);
  EXPECT_EQ(table.size(), 0u);
}

TEST(HolderTableTest, AWorkersRemovalMatchesItsIdInAnyLaneAndNoOther) {
  // Ids alike in their low bits, the largest, and ones a lane-wise match
  // could mistake for each other, in every lane of the inline word and in
  // spills, with every tier.
  const std::vector<uint16_t> ids = {
      1, 2, 5, 4096 + 5, 2048 + 5, HolderTable::kMaxId, HolderTable::kMaxId - 1, 64, 4096, 4097};
  std::mt19937_64 rng(7);
  HolderTable table(4);
  std::map<uint64_t, Holders> ref;
  for (uint64_t key = 0; key < 3000; ++key) {
    const int n = 1 + static_cast<int>(rng() % (key % 5 == 0 ? 8 : 3));  // some spill
    for (int i = 0; i < n; ++i) {
      const uint16_t id = ids[rng() % ids.size()];
      const int tier = static_cast<int>(rng() % 3);
      table.Add(key, id, tier);
      ref[key][id] |= static_cast<uint8_t>(1u << tier);
    }
  }
  for (uint16_t leaving : ids) {
    int64_t had = 0;
    for (auto it = ref.begin(); it != ref.end();) {
      had += it->second.erase(leaving);
      it = it->second.empty() ? ref.erase(it) : std::next(it);
    }
    EXPECT_EQ(table.RemoveWorker(leaving), had) << "id " << leaving;
    ASSERT_EQ(table.size(), ref.size());
    for (const auto& [key, holders] : ref) ASSERT_EQ(Read(table, key), holders) << key;
  }
  EXPECT_EQ(table.size(), 0u);
  // Several at once, in one pass: each entry removed is reported with its id.
  for (uint64_t key = 0; key < 3000; ++key) {
    for (int i = 0; i < 1 + static_cast<int>(rng() % 8); ++i) {
      const uint16_t id = ids[rng() % ids.size()];
      table.Add(key, id, static_cast<int>(rng() % 3));
      ref[key][id] |= 1;
    }
  }
  const std::vector<uint16_t> leaving = {5, 4096 + 5, HolderTable::kMaxId, 64};
  std::map<uint16_t, int64_t> want, got;
  for (auto it = ref.begin(); it != ref.end();) {
    for (uint16_t id : leaving) want[id] += it->second.erase(id);
    it = it->second.empty() ? ref.erase(it) : std::next(it);
  }
  int64_t all = 0;
  for (const auto& [id, n] : want) all += n;
  EXPECT_EQ(table.RemoveWorkers(leaving, INT64_MAX, nullptr, [&](uint16_t id) { ++got[id]; }), all);
  EXPECT_EQ(got, want);
  ASSERT_EQ(table.size(), ref.size());
  for (const auto& [key, holders] : ref) {
    Holders left = Read(table, key);
    ASSERT_EQ(left.size(), holders.size()) << key;
    for (const auto& [id, tiers] : holders) EXPECT_TRUE(left.contains(id)) << key << " " << id;
  }
}

TEST(HolderTableTest, AGrowthPlacesKeysWhereLookupsFindThem) {
  // A growth places the keys in order rather than probing for each
  // (HolderTable::Grow). Half the keys here have homes in the last 64th
  // of any slot array, so they pile up at its end and wrap round to its
  // start, and keys that shared a home part at the larger capacity; a
  // lookup stops early where Robin Hood's order says the key would have
  // been, so any key out of that order is lost.
  std::mt19937_64 rng(7);
  HolderTable table;
  std::vector<uint64_t> keys;
  const uint64_t crowded = ~uint64_t{0} / 64 * 63;
  int growths = 0;
  int64_t moved = 0;  // the keys held when each growth came
  while (keys.size() < 20000) {
    const uint64_t key = rng();
    if (keys.size() % 2 == 1 && (HolderTable::Mix(key) << 12) < crowded) continue;
    keys.push_back(key);
    const size_t capacity = table.capacity();
    ASSERT_TRUE(table.Add(key, 1, 0));
    if (table.capacity() == capacity) continue;
    ++growths;
    moved += static_cast<int64_t>(keys.size()) - 1;  // grown before the new key went in
    for (uint64_t held : keys) ASSERT_TRUE(table.Holds(held, 1)) << "after growth " << growths;
  }
  EXPECT_GE(growths, 15);
  // The table's own count of them, for the benchmarks.
  EXPECT_EQ(table.growths().count, growths);
  EXPECT_EQ(table.growths().keys_moved, moved);
  EXPECT_GT(table.growths().nanos, 0);
  EXPECT_EQ(table.size(), keys.size());
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(table.Holds(rng(), 1));
  // And stay findable as keys leave (backward shifts over the wrapped run).
  for (size_t i = 0; i < keys.size(); i += 2) ASSERT_TRUE(table.Remove(keys[i], 1, 0));
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(table.Holds(keys[i], 1), i % 2 == 1);
}

TEST(HolderTableTest, ATableGrowsOntoHugePagesAndRetiresItsArraysThroughALimbo) {
  // Past 2 MiB of slots (131072), the arrays are mappings of their own
  // (gateway/routing/huge_pages.h); the outgrown ones wait in the limbo and
  // go with it, the last one with the table.
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  {
    HolderTable table;
    table.set_limbo(&limbo);
    std::mt19937_64 rng(5);
    std::vector<uint64_t> keys;
    while (table.capacity() * 16 < 2 * kHugePageBytes) {
      keys.push_back(rng());
      table.Add(keys.back(), static_cast<uint16_t>(1 + keys.size() % 7), 0);
      reclaimer.Advance();
      limbo.Collect();
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(table.Holds(keys[i], static_cast<uint16_t>(1 + (i + 1) % 7))) << i;
    }
    EXPECT_GE(table.MemoryBytes(), 2 * kHugePageBytes);
  }
  reclaimer.Advance();
  limbo.Collect();
  EXPECT_EQ(limbo.pending(), 0u);
}

TEST(HolderTableTest, SpillsWaitingInALimboThatOutlivesTheTableGoWithTheTable) {
  // Spills come from the table's arena: those retired to a limbo that
  // outlives the table go back to the arena before it goes (the sanitizers'
  // run checks that none is freed twice, read after, or leaked).
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  {
    HolderTable table;
    table.set_limbo(&limbo);
    Reclaimer::ReadSection reading(reclaimer);  // holds everything retired
    // The list grows (each outgrown spill retired), turns into a bitmap,
    // then back into a list and inline.
    for (uint16_t id = 1; id <= 200; ++id) table.Add(7, id, 0);
    for (uint16_t id = 1; id <= 200; ++id) EXPECT_TRUE(table.Remove(7, id, 0));
    EXPECT_EQ(table.size(), 0u);
    EXPECT_EQ(table.spill_bytes(), 0u);
    EXPECT_GT(limbo.pending(), 0u);
  }
  EXPECT_EQ(limbo.pending(), 0u);
}

// The key whose mix is `mixed` (HolderTable::Mix inverted).
uint64_t Unmix(uint64_t x) {
  x ^= (x >> 31) ^ (x >> 62);
  x *= 0x319642b2d24d8ec3ull;
  x ^= (x >> 27) ^ (x >> 54);
  x *= 0x96de1b173f119089ull;
  return x ^ (x >> 30) ^ (x >> 60);
}

TEST(HolderTableTest, SmallTablesGrowWhatWrapsRoundTheirEnd) {
  // Small tables whose keys' homes crowd both ends of the slot array, so
  // that the run at the end wraps round onto the start: a growth must keep
  // the wrapped keys after the end's and before the start's.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> end(0.80, 1.0), start(0.0, 0.06);
  for (int trial = 0; trial < 3000; ++trial) {
    HolderTable table(16);
    std::vector<uint64_t> keys;
    while (table.capacity() < 36) {
      const double at = keys.size() % 3 == 2 ? start(rng) : end(rng);
      const uint64_t key = Unmix(static_cast<uint64_t>(at * 0x1p52));
      ASSERT_EQ(HolderTable::Mix(key) >> 52, 0u);
      if (!table.Add(key, 1, 0)) continue;  // drawn twice
      keys.push_back(key);
      for (uint64_t held : keys) {
        ASSERT_TRUE(table.Holds(held, 1)) << "trial " << trial << ", " << keys.size() << " keys";
      }
    }
  }
}

TEST(HolderTableTest, APopularBlocksHoldersKeepTheirTiersAcrossRepresentations) {
  HolderTable table;
  // 1000 holders: inline, then a list, then bitmaps; tiers vary by id.
  for (uint16_t id = 1; id <= 1000; ++id) {
    EXPECT_TRUE(table.Add(42, id, id % 3));
    if (id % 7 == 0) {
      EXPECT_FALSE(table.Add(42, id, 2));  // a second tier
    }
  }
  Holders h = Read(table, 42);
  ASSERT_EQ(h.size(), 1000u);
  EXPECT_EQ(h[5], 1u << 2);
  EXPECT_EQ(h[7], (1u << 1) | (1u << 2));
  EXPECT_EQ(h[9], 1u << 0);
  int bitmap_visits = 0;
  table.Visit(42, [](std::span<const HolderTable::Holder>) {},
              [&](HolderTable::Bitmap) { ++bitmap_visits; });
  EXPECT_EQ(bitmap_visits, 1);
  // Back down to two holders: inline again, tiers intact.
  for (uint16_t id = 1; id <= 1000; ++id) {
    if (id == 7 || id == 500) continue;
    EXPECT_EQ(table.RemoveWorker(id), 1);
  }
  h = Read(table, 42);
  EXPECT_EQ(h, (Holders{{7, (1u << 1) | (1u << 2)}, {500, 1u << 2}}));
  EXPECT_FALSE(table.Remove(42, 7, 1));  // still on disk
  EXPECT_TRUE(table.Remove(42, 7, 2));
  EXPECT_TRUE(table.Remove(42, 500, 2));
  EXPECT_EQ(table.size(), 0u);
}

TEST(HolderTableTest, APoolOnlyBlocksBitmapsAreABitPerWorker) {
  HolderTable table;
  for (uint16_t id = 1; id <= 1000; ++id) table.Add(42, id, 0);
  auto planes = [&] {
    uint8_t seen = 0;
    table.Visit(
        42, [](std::span<const HolderTable::Holder>) { ADD_FAILURE() << "a list"; },
        [&](HolderTable::Bitmap b) {
          EXPECT_EQ(b.words, 16u);
          seen = b.planes;
        });
    return seen;
  };
  EXPECT_EQ(planes(), 1u);  // the pool's alone
  // Its header, 16 words, and the 48 bytes that let the words start on a
  // cache line (HolderTable::NewBitmap).
  EXPECT_EQ(table.spill_bytes(), 48 + 16 + 16 * sizeof(uint64_t));
  // One holder in the host tier adds that tier's plane, a bit per worker.
  EXPECT_FALSE(table.Add(42, 500, 1));
  EXPECT_EQ(planes(), 0b011u);
  EXPECT_EQ(table.spill_bytes(), 16 + 2 * 16 * sizeof(uint64_t));
  Holders h = Read(table, 42);
  ASSERT_EQ(h.size(), 1000u);
  EXPECT_EQ(h[500], 0b011u);
  EXPECT_EQ(h[501], 0b001u);
  // The pool's holders do not move when a third tier comes.
  EXPECT_TRUE(table.Add(42, 1001, 2));
  EXPECT_EQ(planes(), 0b111u);
  h = Read(table, 42);
  ASSERT_EQ(h.size(), 1001u);
  EXPECT_EQ(h[1], 0b001u);
  EXPECT_EQ(h[500], 0b011u);
  EXPECT_EQ(h[1001], 0b100u);
}

TEST(SeqLockTest, TryLockGivesUpWhileAnotherWriterHoldsIt) {
  SeqLock lock;
  ASSERT_TRUE(lock.TryLock(0));
  // Held (by this thread: the lock is not reentrant), so every try fails,
  // after its pauses and without yielding.
  EXPECT_FALSE(lock.TryLock(0));
  EXPECT_FALSE(lock.TryLock(64));
  EXPECT_FALSE(lock.TryLock(1000));
  lock.Unlock();
  EXPECT_TRUE(lock.TryLock(64));
  lock.Unlock();
  { SeqLockWriter hold(&lock); }
  EXPECT_TRUE(lock.TryLock(0));
  lock.Unlock();
}

// One change a writer makes, holding `lock`, around the keys 0..fixed-1
// that readers look for: other keys come and go among them, and they gain
// and lose other holders (ids 2..201), in every tier. An add grows the
// table first where it must: a growth readers need not wait for (no
// version change).
void ChurnAround(HolderTable& table, SeqLock& lock, uint64_t fixed, std::mt19937_64& rng) {
  const uint64_t key = rng() % 4 == 0 ? rng() % fixed : fixed + rng() % 48;
  const auto id = static_cast<uint16_t>(2 + rng() % 200);
  const int tier = static_cast<int>(rng() % 3);
  if (rng() % 2 == 0) {
    table.Reserve(1);
    SeqLockChange change(lock);
    table.Add(key, id, tier);
  } else {
    SeqLockChange change(lock);
    table.Remove(key, id, tier);
  }
}

// A reader without the lock, through the table's view under a SeqLock, as
// the block index reads it, while a writer churns the keys around a fixed
// set (probes shifting, sets spilling, bitmaps gaining planes, the table
// growing): every fixed key is found, with its fixed holder in the pool.
// Fixed work for the writer; the reader reads until it is done.
TEST(HolderTableTest, AReaderWithoutTheLockSeesWhatAWriterLeftWhole) {
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  SeqLock lock;
  HolderTable table(4);
  table.set_limbo(&limbo);
  constexpr uint64_t kFixed = 32;
  for (uint64_t key = 0; key < kFixed; ++key) table.Add(key, 1, 0);
  std::atomic<bool> done{false};
  std::atomic<int64_t> wrong{0}, reads{0};
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      const Reclaimer::ReadSection reading(reclaimer);
      for (uint64_t key = 0; key < kFixed; ++key) {
        bool found = false;
        uint8_t tiers = 0;
        lock.Read([&] {
          tiers = 0;
          found = table.VisitConcurrent(
              HolderTable::MixKey(key),
              [&](std::span<const HolderTable::Holder> list) {
                for (const HolderTable::Holder& h : list) {
                  if (HolderTable::IdOf(HolderTable::Load(h)) == 1) {
                    tiers = HolderTable::TiersOf(HolderTable::Load(h));
                  }
                }
              },
              [&](HolderTable::Bitmap b) { tiers = HolderTable::BitmapTiers(b, 1); });
        });
        if (!found || tiers != 1) wrong.fetch_add(1);
        reads.fetch_add(1);
      }
    }
  });
  std::mt19937_64 rng(29);
  for (int i = 0; i < 300000; ++i) {
    SeqLockWriter hold(&lock);
    ChurnAround(table, lock, kFixed, rng);
    if (i % 1000 == 999) {  // a sweep: readers read between its removals
      table.RemoveWorker(static_cast<uint16_t>(2 + rng() % 200), INT64_MAX, &lock);
    }
    limbo.Collect();
  }
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(wrong.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 0);
}

// What a lock-free reader collects of `key`'s holders, from its slot as a
// load ahead found it (`found`) or from a probe of its own.
Holders ReadConcurrent(const HolderTable& table, uint64_t key, const HolderTable::Found* found,
                       bool* present) {
  Holders got;
  auto on_list = [&](std::span<const HolderTable::Holder> list) {
    for (const HolderTable::Holder& held : list) {
      const HolderTable::Holder h = HolderTable::Load(held);
      got[HolderTable::IdOf(h)] |= HolderTable::TiersOf(h);
    }
  };
  auto on_bitmap = [&](HolderTable::Bitmap b) {
    for (size_t id = 0; id < 64 * b.words; ++id) {
      const uint8_t tiers = HolderTable::BitmapTiers(b, static_cast<uint16_t>(id));
      if (tiers != 0) got[static_cast<uint16_t>(id)] = tiers;
    }
  };
  *present = found != nullptr ? table.VisitConcurrentAt(*found, on_list, on_bitmap)
                              : table.VisitConcurrent(HolderTable::MixKey(key), on_list, on_bitmap);
  return got;
}

// A bitmap of the pool's plane alone (most popular blocks') is read
// without its header where that saves a line (its words fill their last
// line, or nearly): its words start on a cache line and a lock-free reader
// takes their number from the holder word, whole lines of them, zero past
// the last. What it reads is what the locked read finds, lined or not,
// from one word to past the most the word can say (15 lines), as holders
// come and go and the words grow where they are.
TEST(HolderTableTest, APoolOnlyBitmapIsReadLockFreeFromItsLinesAlone) {
  HolderTable table;
  std::mt19937_64 rng(31);
  // Lined: 15-16 words (1000 workers) and 23-24; not: 4, 9, 18 (no line
  // saved), 110 (likewise) and 126 (past 15 lines).
  const std::map<uint16_t, bool> lined = {{200, false},  {520, false},  {959, true},
                                          {1000, true},  {1100, false}, {1500, true},
                                          {7000, false}, {8000, false}};
  for (const auto& entry : lined) {
    // Copies: clang's C++20 does not let a lambda capture a structured binding.
    const uint16_t top = entry.first;
    const bool expect_lined = entry.second;
    const uint64_t key = top;
    for (uint16_t id = 1; id <= 40; ++id) table.Add(key, id, 0);
    for (int round = 0; round < 4; ++round) {
      // Upwards to `top` (the words grow), then some leave.
      for (int i = 0; i < 400; ++i) table.Add(key, static_cast<uint16_t>(1 + rng() % top), 0);
      table.Add(key, top, 0);
      for (int i = 0; i < 100; ++i) table.Remove(key, static_cast<uint16_t>(1 + rng() % top), 0);
      bool present = false;
      const Holders lock_free = ReadConcurrent(table, key, nullptr, &present);
      ASSERT_TRUE(present) << top;
      EXPECT_EQ(lock_free, Read(table, key)) << top << " round " << round;
      const HolderTable::Found found = table.FindHoldersConcurrent(HolderTable::MixKey(key));
      EXPECT_EQ(ReadConcurrent(table, key, &found, &present), lock_free) << top;
      table.VisitConcurrent(
          HolderTable::MixKey(key), [&](std::span<const HolderTable::Holder>) {},
          [&](HolderTable::Bitmap b) {
            EXPECT_EQ(b.planes, 1u);
            // A lined one's words are read by the line.
            EXPECT_EQ(b.words, expect_lined ? (top / 64 + 8) / 8 * 8 : top / 64 + 1u) << top;
            if (expect_lined) {
              EXPECT_EQ(reinterpret_cast<uintptr_t>(b.bits) % 64, 0u) << top;
            }
          });
    }
  }
  // A holder in a slower tier makes it an ordinary bitmap, read as before.
  table.Add(1000, 3, 1);
  bool present = false;
  EXPECT_EQ(ReadConcurrent(table, 1000, nullptr, &present), Read(table, 1000));
  // A small fleet's bitmap (one word) is not lined: it takes a line either
  // way, and 128 bytes for a few holders would be over an entry's worst.
  HolderTable small;
  for (uint16_t id = 1; id <= 8; ++id) small.Add(7, id, 0);
  EXPECT_EQ(small.spill_bytes(), 16 + sizeof(uint64_t));
}

// A walk probes each block once, as it loads the block's holders ahead,
// and reads the slot it found if the shard's version has not moved since:
// what it reads then is what a probe of its own would find, for inline
// holders, lists, bitmaps and absent keys alike. A change in between moves
// the version, so the walk probes again.
TEST(HolderTableTest, ALoadAheadsProbeStandsWhileTheVersionHasNotMoved) {
  SeqLock lock;
  HolderTable table(4);
  std::map<uint64_t, Holders> ref;
  for (uint64_t key = 0; key < 64; ++key) {
    // 1 to 200 holders: inline, a spilled list, bitmaps.
    for (uint16_t id = 1; id <= 1 + (key * key) % 200; ++id) {
      const int tier = static_cast<int>((key + id) % 3);
      table.Add(key, id, tier);
      ref[key][id] |= static_cast<uint8_t>(1u << tier);
    }
  }
  for (uint64_t key = 0; key < 96; ++key) {  // 64..95 are absent
    const uint64_t v = lock.BeginRead();
    const HolderTable::Found found = table.FindHoldersConcurrent(HolderTable::MixKey(key));
    ASSERT_TRUE(lock.Unchanged(v)) << key;
    bool kept_present = false, own_present = false;
    const Holders kept = ReadConcurrent(table, key, &found, &kept_present);
    const Holders own = ReadConcurrent(table, key, nullptr, &own_present);
    EXPECT_EQ(kept_present, key < 64) << key;
    EXPECT_EQ(own_present, key < 64) << key;
    EXPECT_EQ(kept, own) << key;
    if (key < 64) {
      EXPECT_EQ(kept, ref[key]) << key;
    }
  }
  const uint64_t v = lock.BeginRead();
  {
    SeqLockWriter hold(&lock);
    SeqLockChange change(lock);
    table.Add(1000, 7, 0);
  }
  EXPECT_FALSE(lock.Unchanged(v));
  {
    SeqLockWriter hold(&lock);
    lock.BeginChange();  // under way: a probe then keeps nothing
    EXPECT_FALSE(lock.Unchanged(lock.BeginRead()));
    lock.EndChange();
  }
}

// The walk's way under a writer: each key probed ahead (its version noted),
// then read inside a Read from the slot kept when the version is the one
// noted, else probed again. Every fixed key is found whole, with its fixed
// holder in the pool, whatever the interleaving; once the writer is done,
// every read is from a kept slot.
TEST(HolderTableTest, AReadFromALoadAheadsSlotSeesWhatAWriterLeftWhole) {
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  SeqLock lock;
  HolderTable table(4);
  table.set_limbo(&limbo);
  constexpr uint64_t kFixed = 32;
  for (uint64_t key = 0; key < kFixed; ++key) table.Add(key, 1, 0);
  std::atomic<bool> done{false};
  std::atomic<int64_t> wrong{0};
  auto read_all = [&](int64_t* kept_reads) {
    const Reclaimer::ReadSection reading(reclaimer);
    // Every key probed ahead first, so that the writer works in between.
    struct Probed {
      HolderTable::Found found;
      uint64_t version = 1;
    };
    std::vector<Probed> probed(kFixed);
    for (uint64_t key = 0; key < kFixed; ++key) {
      Probed& p = probed[key];
      p.version = lock.BeginRead();
      p.found = table.FindHoldersConcurrent(HolderTable::MixKey(key));
      if (!lock.Unchanged(p.version)) p.version = 1;
    }
    for (uint64_t key = 0; key < kFixed; ++key) {
      bool present = false;
      Holders got;
      lock.Read([&] {
        const bool kept = lock.Unchanged(probed[key].version);
        got = ReadConcurrent(table, key, kept ? &probed[key].found : nullptr, &present);
        if (kept && kept_reads != nullptr) ++*kept_reads;
      });
      const auto it = got.find(1);
      if (!present || it == got.end() || it->second != 1) wrong.fetch_add(1);
    }
  };
  std::atomic<int64_t> passes{0};
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      read_all(nullptr);
      passes.fetch_add(1, std::memory_order_release);
    }
  });
  std::mt19937_64 rng(31);
  for (int64_t round = 0; round < 2000; ++round) {
    for (int i = 0; i < 50; ++i) {
      SeqLockWriter hold(&lock);
      ChurnAround(table, lock, kFixed, rng);
      limbo.Collect();
    }
    // The reader's passes and the writer's rounds interleave: a round waits
    // for a pass begun after the one before it.
    while (passes.load(std::memory_order_acquire) <= round + 1) std::this_thread::yield();
  }
  done.store(true, std::memory_order_release);
  reader.join();
  int64_t kept_reads = 0;
  read_all(&kept_reads);
  EXPECT_EQ(kept_reads, static_cast<int64_t>(kFixed));
  EXPECT_EQ(wrong.load(), 0) << "of " << passes.load() << " passes";
}

}  // namespace
}  // namespace tandem::gateway
