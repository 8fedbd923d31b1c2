// What the block index's lock-free readers stand on: memory a writer
// retires outlives every reader that began before it was retired, and no
// longer than readers hold the epoch back; a seqlock's reader sees only
// what a writer left whole. The threaded tests do fixed work on each side
// (no sleeps) and run under the sanitizers too, where a read of freed
// memory fails them.
#include "gateway/routing/reclaimer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gateway/routing/seq_lock.h"

namespace tandem::gateway {
namespace {

void* Allocation() { return ::operator new(64); }

// Collects until nothing more goes (an advance needs enough waiting, so
// each round retires a few more).
void CollectRounds(Reclaimer::Limbo& limbo, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    for (int k = 0; k < 16; ++k) limbo.Retire(Allocation(), 64);
    limbo.Collect();
  }
}

TEST(ReclaimerTest, RetiredMemoryWaitsForTheReadersThatBeganBefore) {
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  const uint64_t start = reclaimer.epoch();
  auto reader = std::make_unique<Reclaimer::ReadSection>(reclaimer);
  limbo.Retire(Allocation(), 64);
  CollectRounds(limbo, 8);
  // The epoch moved once (to where the reader's readers are the old
  // ones), then waited for the reader: nothing retired since it began
  // went.
  EXPECT_EQ(reclaimer.epoch(), start + 1);
  EXPECT_EQ(limbo.pending(), 1u + 8 * 16);
  reader.reset();
  CollectRounds(limbo, 3);
  EXPECT_GE(reclaimer.epoch(), start + 3);
  // What is left was retired in the last two epochs.
  EXPECT_LE(limbo.pending(), 3u * 16);
  EXPECT_EQ(limbo.pending_bytes(), limbo.pending() * 64);
}

TEST(ReclaimerTest, HasPendingSaysWhetherAnythingWaits) {
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  EXPECT_FALSE(limbo.has_pending());
  limbo.Retire(Allocation(), 64);
  EXPECT_TRUE(limbo.has_pending());
  // With no reader in, an advance lets it go at the next Collect.
  reclaimer.Advance();
  limbo.Collect();
  EXPECT_FALSE(limbo.has_pending());
  EXPECT_EQ(limbo.pending(), 0u);
}

TEST(ReclaimerTest, AReaderThatBeganAfterTheEpochMovedDoesNotHoldBackWhatWasRetiredBefore) {
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  for (int k = 0; k < 16; ++k) limbo.Retire(Allocation(), 64);
  limbo.Collect();  // advances once: what was retired needs one more
  const uint64_t retired_in = reclaimer.epoch() - 1;
  const Reclaimer::ReadSection reader(reclaimer);  // in the new epoch
  CollectRounds(limbo, 1);
  EXPECT_EQ(reclaimer.epoch(), retired_in + 2);
  EXPECT_EQ(limbo.pending(), 16u);  // the first 16 went; the reader holds the next
}

TEST(ReclaimerTest, MemoryRetiredToItsOwnerGoesBackThereWhenFreedOrWhenTheOwnerGoes) {
  // An owner (a table's spill arena) takes back what it retired, with the
  // same wait for readers; going, it takes back the rest at once.
  struct Owner {
    std::vector<void*> back;
    static void Take(void* owner, void* p, size_t bytes) {
      EXPECT_EQ(bytes, 64u);
      static_cast<Owner*>(owner)->back.push_back(p);
    }
  };
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  Owner owner;
  Owner other;
  std::vector<std::unique_ptr<char[]>> memory;
  auto retire_to = [&](Owner& to) {
    memory.push_back(std::make_unique<char[]>(64));
    limbo.Retire(memory.back().get(), 64, &Owner::Take, &to);
  };
  {
    const Reclaimer::ReadSection reader(reclaimer);
    retire_to(owner);
    CollectRounds(limbo, 4);
    EXPECT_TRUE(owner.back.empty());  // the reader may still read it
  }
  CollectRounds(limbo, 3);
  ASSERT_EQ(owner.back.size(), 1u);
  EXPECT_EQ(owner.back[0], memory[0].get());
  // Retired now, with a reader in: the owner going takes its own back at
  // once, and leaves the rest waiting.
  const Reclaimer::ReadSection reader(reclaimer);
  retire_to(owner);
  retire_to(other);
  const size_t pending = limbo.pending();
  limbo.FreeAllOf(&owner);
  EXPECT_EQ(owner.back.size(), 2u);
  EXPECT_EQ(limbo.pending(), pending - 1);
  EXPECT_TRUE(other.back.empty());
  limbo.FreeAllOf(&other);
  EXPECT_EQ(other.back.size(), 1u);
}

// Readers follow a pointer a writer keeps replacing, retiring the old
// object: each must read the object whole (its two fields agree), which a
// freed and reused object would not be (and the sanitizers would say).
TEST(ReclaimerTest, ReadersNeverReachFreedMemory) {
  struct Object {
    uint64_t a;
    uint64_t b;
  };
  Reclaimer reclaimer;
  Reclaimer::Limbo limbo;
  limbo.Attach(&reclaimer);
  std::atomic<Object*> current{new (::operator new(sizeof(Object))) Object{1, 1}};
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!done.load(std::memory_order_acquire)) {
        const Reclaimer::ReadSection reading(reclaimer);
        const Object* o = current.load(std::memory_order_acquire);
        if (o->a != o->b) torn.fetch_add(1);
      }
    });
  }
  for (uint64_t i = 2; i < 50000; ++i) {
    Object* fresh = new (::operator new(sizeof(Object))) Object{i, i};
    Object* old = current.exchange(fresh, std::memory_order_acq_rel);
    limbo.Retire(old, sizeof(Object));
    limbo.Collect();
  }
  done.store(true, std::memory_order_release);
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(torn.load(), 0);
  limbo.Retire(current.load(), sizeof(Object));
  // Without readers, everything goes within a few rounds.
  CollectRounds(limbo, 3);
  EXPECT_LE(limbo.pending(), 3u * 16);
}

// Writers keep two words equal under the lock, changing them one at a
// time inside a change; readers through Read() always see them equal.
TEST(SeqLockTest, ReadersSeeOnlyWhatAWriterLeftWhole) {
  SeqLock lock;
  std::atomic<uint64_t> a{0}, b{0};
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::atomic<int64_t> reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      while (!done.load(std::memory_order_acquire)) {
        uint64_t x = 0, y = 0;
        lock.Read([&] {
          x = a.load(std::memory_order_relaxed);
          y = b.load(std::memory_order_relaxed);
        });
        if (x != y) torn.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  }
  // A second writer contends for the lock with the first.
  std::thread second([&] {
    for (int i = 0; i < 100000; ++i) {
      SeqLockWriter hold(&lock);
      SeqLockChange change(lock);
      a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      b.store(b.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  });
  for (int i = 0; i < 100000; ++i) {
    SeqLockWriter hold(&lock);
    SeqLockChange change(lock);
    a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    b.store(b.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  second.join();
  done.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(a.load(), 200000u);  // the writers excluded each other
  EXPECT_EQ(b.load(), 200000u);
  EXPECT_GT(reads.load(), 0);
}

// A writer that holds the lock but changes nothing yet (a sweep looking,
// a table growing into a new array) does not hold readers up.
TEST(SeqLockTest, ReadersReadWhileAWriterHoldsTheLockBetweenChanges) {
  SeqLock lock;
  SeqLockWriter hold(&lock);
  { SeqLockChange change(lock); }
  absl::Notification read;
  std::thread reader([&] {
    lock.Read([] {});
    read.Notify();
  });
  EXPECT_TRUE(read.WaitForNotificationWithTimeout(absl::Seconds(30)));
  reader.join();
}

}  // namespace
}  // namespace tandem::gateway
