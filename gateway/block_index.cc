#include "gateway/block_index.h"

#include <algorithm>

#include "rpc/convert.h"

namespace tandem::gateway {

BlockIndex::BlockIndex(const BlockIndexOptions& options) : options_(options) {}

void BlockIndex::AddLocked(int worker, WorkerState& w, const engine::BlockHash& h) {
  if (w.held.contains(h)) return;
  if (entries_ >= options_.max_entries) {
    ++dropped_;
    return;
  }
  w.held.insert(h);
  holders_[h].push_back(worker);
  ++entries_;
}

void BlockIndex::RemoveLocked(int worker, WorkerState& w, const engine::BlockHash& h) {
  if (w.held.erase(h) == 0) return;
  auto it = holders_.find(h);
  if (it == holders_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), worker), v.end());
  if (v.empty()) holders_.erase(it);
  --entries_;
}

void BlockIndex::ClearLocked(int worker, WorkerState& w) {
  for (const engine::BlockHash& h : w.held) {
    auto it = holders_.find(h);
    if (it == holders_.end()) continue;
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), worker), v.end());
    if (v.empty()) holders_.erase(it);
    --entries_;
  }
  w.held.clear();
}

BlockIndex::Applied BlockIndex::Apply(int worker, const tandem::v1::BlockEventBatch& batch) {
  absl::MutexLock lock(&mu_);
  WorkerState& w = workers_[worker];
  if (batch.snapshot()) {
    ClearLocked(worker, w);
    w.epoch = batch.epoch();
    w.sequence = batch.sequence();
    w.synced = true;
    for (const auto& h : batch.stored()) AddLocked(worker, w, rpc::BlockHashFromProto(h));
  } else {
    if (!w.synced || batch.epoch() != w.epoch || batch.sequence() != w.sequence + 1) {
      return Applied::kNeedsResync;
    }
    w.sequence = batch.sequence();
    for (const auto& h : batch.stored()) AddLocked(worker, w, rpc::BlockHashFromProto(h));
    for (const auto& h : batch.removed()) RemoveLocked(worker, w, rpc::BlockHashFromProto(h));
  }
  if (!params_.has_value() && batch.block_size() > 0) {
    params_ = BlockHashParams{.model_fingerprint = batch.model_fingerprint(),
                              .block_size = batch.block_size()};
  }
  return Applied::kApplied;
}

void BlockIndex::Drop(int worker) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  ClearLocked(worker, it->second);
  workers_.erase(it);
}

std::vector<int32_t> BlockIndex::Overlap(std::span<const int> workers,
                                         std::span<const engine::BlockHash> chain) const {
  std::vector<int32_t> overlap(workers.size(), 0);
  std::vector<bool> matching(workers.size(), true);
  size_t still = workers.size();
  absl::ReaderMutexLock lock(&mu_);
  for (size_t i = 0; i < chain.size() && still > 0; ++i) {
    auto it = holders_.find(chain[i]);
    for (size_t k = 0; k < workers.size(); ++k) {
      if (!matching[k]) continue;
      const bool holds = it != holders_.end() &&
                         std::find(it->second.begin(), it->second.end(), workers[k]) !=
                             it->second.end();
      if (holds) {
        ++overlap[k];
      } else {
        matching[k] = false;
        --still;
      }
    }
  }
  return overlap;
}

std::optional<BlockHashParams> BlockIndex::params() const {
  absl::ReaderMutexLock lock(&mu_);
  return params_;
}

int64_t BlockIndex::entries() const {
  absl::ReaderMutexLock lock(&mu_);
  return entries_;
}

int64_t BlockIndex::hashes() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(holders_.size());
}

int64_t BlockIndex::entries_of(int worker) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = workers_.find(worker);
  return it == workers_.end() ? 0 : static_cast<int64_t>(it->second.held.size());
}

int64_t BlockIndex::dropped_entries() const {
  absl::ReaderMutexLock lock(&mu_);
  return dropped_;
}

}  // namespace tandem::gateway
