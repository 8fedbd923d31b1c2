#include "bench/sim_worker.h"

namespace tandem::bench {
namespace {

tandem::v1::BlockHashProto ToProto(const engine::BlockHash& h) {
  tandem::v1::BlockHashProto p;
  p.set_low(h.low);
  p.set_high(h.high);
  return p;
}

}  // namespace

tandem::v1::BlockEventBatch SimWorker::Start(uint64_t epoch) {
  epoch_ = epoch;
  sequence_ = 0;
  nodes_.clear();
  nodes_.shrink_to_fit();
  free_.clear();
  where_ = {};
  head_ = tail_ = kNil;
  tandem::v1::BlockEventBatch b = Header();
  b.set_snapshot(true);
  return b;
}

tandem::v1::BlockEventBatch SimWorker::Compute(const std::vector<engine::BlockHash>& chain) {
  tandem::v1::BlockEventBatch b = Header();
  b.set_sequence(++sequence_);
  for (const engine::BlockHash& h : chain) {
    if (auto it = where_.find(h.low); it != where_.end()) {
      Unlink(it->second);
      PushFront(it->second);
      continue;
    }
    uint32_t n;
    if (!free_.empty()) {
      n = free_.back();
      free_.pop_back();
    } else {
      nodes_.push_back({});
      n = static_cast<uint32_t>(nodes_.size() - 1);
    }
    nodes_[n].hash = h;
    PushFront(n);
    where_[h.low] = n;
    *b.add_stored() = ToProto(h);
  }
  // Only after the whole chain: a block of it is never the least recent.
  while (static_cast<int64_t>(where_.size()) > budget_) {
    const uint32_t n = tail_;
    Unlink(n);
    where_.erase(nodes_[n].hash.low);
    *b.add_removed() = ToProto(nodes_[n].hash);
    free_.push_back(n);
  }
  if (b.stored().empty() && b.removed().empty()) --sequence_;
  return b;
}

tandem::v1::BlockEventBatch SimWorker::Snapshot() const {
  tandem::v1::BlockEventBatch b = Header();
  b.set_snapshot(true);
  b.set_sequence(sequence_);
  for (uint32_t n = head_; n != kNil; n = nodes_[n].next) *b.add_stored() = ToProto(nodes_[n].hash);
  return b;
}

tandem::v1::BlockEventBatch SimWorker::Header() const {
  tandem::v1::BlockEventBatch b;
  b.set_epoch(epoch_);
  b.set_model_fingerprint(model_fingerprint_);
  b.set_block_size(block_size_);
  b.set_kv_capacity_blocks(budget_);
  return b;
}

}  // namespace tandem::bench
