// A writers' lock with a version for lock-free readers (a seqlock): writers
// take the lock one at a time and make the version odd while they change
// what it guards (BeginChange .. EndChange); readers take nothing, read,
// and check that the version did not move meanwhile (reading again when it
// did). A reader then writes no shared line, so routing costs the block
// index's writers nothing (gateway/routing/block_index.h). A writer that
// holds the lock long but changes little (a sweep for one worker's entries,
// a table's growth into a new array) marks only its changes, so readers
// read between them rather than wait for the whole.
//
// Writers spin (then yield) rather than sleep: what they hold it for is a
// table change of a few hundred nanoseconds, a sweep of one shard at most.
#ifndef TANDEM_GATEWAY_ROUTING_SEQ_LOCK_H_
#define TANDEM_GATEWAY_ROUTING_SEQ_LOCK_H_

#include <atomic>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "absl/base/thread_annotations.h"

namespace tandem::gateway {

class ABSL_LOCKABLE SeqLock {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    for (int tries = 0; writer_.exchange(true, std::memory_order_acquire);) {
      while (writer_.load(std::memory_order_relaxed)) Backoff(tries++);
    }
  }
  // Lock, unless another writer holds it past `tries` pauses (64 at most:
  // it never yields): for a reader that would rather go without than wait
  // for a long hold, such as a sweep of a whole shard.
  bool TryLock(int tries) ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    for (int t = 0;; ++t) {
      if (!writer_.load(std::memory_order_relaxed) &&
          !writer_.exchange(true, std::memory_order_acquire)) {
        return true;
      }
      if (t >= tries || t >= kPauses) return false;
      Backoff(t);
    }
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { writer_.store(false, std::memory_order_release); }

  // Around a change readers must not see half done; under the lock.
  void BeginChange() {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // The version is odd before anything the change writes.
    std::atomic_thread_fence(std::memory_order_release);
  }
  void EndChange() {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // Calls read() until it ran while no change was under way. `read` must
  // start afresh each time: what it read before may be torn.
  template <typename F>
  void Read(F&& read) const {
    for (int tries = 0;; ++tries) {
      const uint64_t v = version_.load(std::memory_order_acquire);
      if ((v & 1) == 0) {
        read();
        std::atomic_thread_fence(std::memory_order_acquire);
        if (version_.load(std::memory_order_relaxed) == v) return;
      }
      Backoff(tries);
    }
  }

  // Starts loading the lock's cache line (a reader's, a few reads ahead).
  void Prefetch() const { __builtin_prefetch(&version_); }

  // For a reader that keeps what it found for a later Read: the version
  // before its reads (odd: a change under way, nothing worth keeping), and
  // whether it is still the version after them. Within a later Read, the
  // version being `v` again means nothing changed since (versions only
  // grow), so what was read at `v` still holds.
  uint64_t BeginRead() const { return version_.load(std::memory_order_acquire); }
  bool Unchanged(uint64_t v) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    return (v & 1) == 0 && version_.load(std::memory_order_relaxed) == v;
  }

 private:
  // Pauses for the first tries, then gives the core away (the writer may
  // be waiting for it).
  static constexpr int kPauses = 64;
  static void Backoff(int tries) {
    if (tries < kPauses) {
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }

  std::atomic<uint64_t> version_{0};  // odd while a change is under way
  std::atomic<bool> writer_{false};
};

// Holds a SeqLock for a scope.
class ABSL_SCOPED_LOCKABLE SeqLockWriter {
 public:
  explicit SeqLockWriter(SeqLock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
    lock_->Lock();
  }
  ~SeqLockWriter() ABSL_UNLOCK_FUNCTION() { lock_->Unlock(); }
  SeqLockWriter(const SeqLockWriter&) = delete;
  SeqLockWriter& operator=(const SeqLockWriter&) = delete;

 private:
  SeqLock* lock_;
};

// Marks a change for a scope, under a SeqLock held.
class SeqLockChange {
 public:
  explicit SeqLockChange(SeqLock& lock) : lock_(lock) { lock_.BeginChange(); }
  ~SeqLockChange() { lock_.EndChange(); }
  SeqLockChange(const SeqLockChange&) = delete;
  SeqLockChange& operator=(const SeqLockChange&) = delete;

 private:
  SeqLock& lock_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_SEQ_LOCK_H_
