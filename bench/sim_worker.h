// One simulated worker of tandem-fleet-sim (bench/fleet_sim.h): its pool
// of KV blocks and the block event stream it sends the gateways, as the
// worker's publisher would (worker/block_event_publisher.h).
#ifndef TANDEM_BENCH_SIM_WORKER_H_
#define TANDEM_BENCH_SIM_WORKER_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/kv/block_hash.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::bench {

// The pool: an LRU of block hashes within its budget, and its event
// stream's numbering. The LRU is a list threaded through an array of the
// budget's size and a map of the hashes' low halves to its slots (about
// 50 bytes a block), so that a fleet of 100M blocks fits beside the index.
class SimWorker {
 public:
  SimWorker(int64_t budget, int32_t block_size, uint64_t model_fingerprint, uint64_t epoch)
      : budget_(budget),
        block_size_(block_size),
        model_fingerprint_(model_fingerprint),
        epoch_(epoch) {}

  // The empty snapshot a (re)started worker's stream begins with.
  tandem::v1::BlockEventBatch Start(uint64_t epoch);
  // Computes `chain` here: every block becomes the most recent, new ones
  // are stored, and the least recent go past the budget. A computation
  // that changed nothing (the worker held the whole chain) is no batch,
  // and takes no number: the worker's publisher sends a batch only for
  // changes (worker/block_event_publisher.cc). The returned batch is then
  // empty, and the caller sends nothing.
  tandem::v1::BlockEventBatch Compute(const std::vector<engine::BlockHash>& chain);
  // The leading blocks of `chain` this worker holds.
  int32_t Holds(const std::vector<engine::BlockHash>& chain) const {
    int32_t n = 0;
    while (n < static_cast<int32_t>(chain.size()) && where_.contains(chain[n].low)) ++n;
    return n;
  }
  int64_t size() const { return static_cast<int64_t>(where_.size()); }
  // Every block held, as a snapshot.
  tandem::v1::BlockEventBatch Snapshot() const;

 private:
  static constexpr uint32_t kNil = ~uint32_t{0};
  struct Node {
    engine::BlockHash hash;
    uint32_t prev = kNil;
    uint32_t next = kNil;
  };
  void Unlink(uint32_t n) {
    Node& x = nodes_[n];
    (x.prev == kNil ? head_ : nodes_[x.prev].next) = x.next;
    (x.next == kNil ? tail_ : nodes_[x.next].prev) = x.prev;
  }
  void PushFront(uint32_t n) {
    nodes_[n].prev = kNil;
    nodes_[n].next = head_;
    (head_ == kNil ? tail_ : nodes_[head_].prev) = n;
    head_ = n;
  }
  tandem::v1::BlockEventBatch Header() const;

  const int64_t budget_;
  const int32_t block_size_;
  const uint64_t model_fingerprint_;
  uint64_t epoch_;
  uint64_t sequence_ = 0;
  std::vector<Node> nodes_;     // the LRU, most recent at head_
  std::vector<uint32_t> free_;  // slots of nodes_ in no list
  uint32_t head_ = kNil;
  uint32_t tail_ = kNil;
  // Keyed by the low half, as the index is (a collision of two of one
  // worker's blocks there would show as a miss in the oracle).
  absl::flat_hash_map<uint64_t, uint32_t> where_;
};

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_SIM_WORKER_H_
