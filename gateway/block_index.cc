#include "gateway/block_index.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

#include "rpc/convert.h"

namespace tandem::gateway {

BlockIndex::BlockIndex(const BlockIndexOptions& options) : options_(options) {}

void BlockIndex::AddLocked(int worker, WorkerState& w, const engine::BlockHash& h) {
  if (w.predicted.erase(h) > 0) --predicted_;  // confirmed
  if (w.held.contains(h)) return;
  if (entries_ >= options_.max_entries) {
    ++dropped_;
    return;
  }
  w.held.insert(h);
  holders_[h].push_back(worker);
  ++entries_;
}

void BlockIndex::UnholdLocked(int worker, const engine::BlockHash& h) {
  auto it = holders_.find(h);
  if (it == holders_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), worker), v.end());
  if (v.empty()) holders_.erase(it);
  --entries_;
}

void BlockIndex::RemoveLocked(int worker, WorkerState& w, const engine::BlockHash& h) {
  if (w.held.erase(h) > 0) UnholdLocked(worker, h);
}

void BlockIndex::ClearLocked(int worker, WorkerState& w) {
  for (const engine::BlockHash& h : w.held) UnholdLocked(worker, h);
  w.held.clear();
  predicted_ -= static_cast<int64_t>(w.predicted.size());
  w.predicted.clear();
}

void BlockIndex::PruneLocked(WorkerState& w, absl::Time now) {
  const size_t before = w.predicted.size();
  absl::erase_if(w.predicted, [now](const auto& p) { return p.second <= now; });
  predicted_ -= static_cast<int64_t>(before - w.predicted.size());
}

void BlockIndex::Predict(int worker, std::span<const engine::BlockHash> chain, absl::Time until) {
  absl::MutexLock lock(&mu_);
  WorkerState& w = workers_[worker];
  PruneLocked(w, absl::Now());
  for (const engine::BlockHash& h : chain) {
    if (w.held.contains(h)) continue;
    auto [it, inserted] = w.predicted.try_emplace(h, until);
    if (!inserted) {
      it->second = std::max(it->second, until);
      continue;
    }
    if (predicted_ >= options_.max_entries) {
      w.predicted.erase(it);
      ++dropped_;
      return;
    }
    ++predicted_;
  }
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
                                         std::span<const engine::BlockHash> chain,
                                         absl::Time now, bool with_predictions) const {
  std::vector<int32_t> overlap(workers.size(), 0);
  std::vector<bool> matching(workers.size(), true);
  size_t still = workers.size();
  absl::ReaderMutexLock lock(&mu_);
  std::vector<const WorkerState*> states(workers.size(), nullptr);
  for (size_t k = 0; k < workers.size(); ++k) {
    auto it = workers_.find(workers[k]);
    if (with_predictions && it != workers_.end() && !it->second.predicted.empty()) {
      states[k] = &it->second;
    }
  }
  auto predicted = [&](size_t k, const engine::BlockHash& h) {
    if (states[k] == nullptr) return false;
    auto it = states[k]->predicted.find(h);
    return it != states[k]->predicted.end() && it->second > now;
  };
  for (size_t i = 0; i < chain.size() && still > 0; ++i) {
    auto it = holders_.find(chain[i]);
    for (size_t k = 0; k < workers.size(); ++k) {
      if (!matching[k]) continue;
      const bool holds = (it != holders_.end() &&
                          std::find(it->second.begin(), it->second.end(), workers[k]) !=
                              it->second.end()) ||
                         predicted(k, chain[i]);
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

int64_t BlockIndex::predicted_entries() const {
  absl::ReaderMutexLock lock(&mu_);
  return predicted_;
}

}  // namespace tandem::gateway
