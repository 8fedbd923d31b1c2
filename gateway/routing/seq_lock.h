// A writers' lock that is also its readers' version (a seqlock): writers
// take it one at a time, and readers take nothing, read, and check that
// the version did not move meanwhile (reading again when it did). A
// reader then writes no shared line, so routing costs the block index's
// writers nothing (gateway/routing/block_index.h).
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
    for (int tries = 0;; ++tries) {
      uint64_t v = version_.load(std::memory_order_relaxed);
      if ((v & 1) == 0 && version_.compare_exchange_weak(v, v + 1, std::memory_order_acquire,
                                                         std::memory_order_relaxed)) {
        break;
      }
      Backoff(tries);
    }
    // The version is odd before anything the lock guards is written.
    std::atomic_thread_fence(std::memory_order_release);
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // Starts loading the lock's cache line (a reader's, a few reads ahead).
  void Prefetch() const { __builtin_prefetch(&version_); }

  // Calls read() until it ran while no writer held the lock. `read` must
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


 private:
  // Pauses for the first tries, then gives the core away (the holder may
  // be waiting for it).
  static void Backoff(int tries) {
    if (tries < 64) {
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }

  std::atomic<uint64_t> version_{0};  // odd while a writer holds it
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

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_SEQ_LOCK_H_
