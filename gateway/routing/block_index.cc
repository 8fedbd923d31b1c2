#include "gateway/routing/block_index.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

#include "rpc/convert.h"

namespace tandem::gateway {

BlockIndex::BlockIndex(const BlockIndexOptions& options) : options_(options) {}

namespace {

uint8_t TierBit(int tier) { return static_cast<uint8_t>(1u << tier); }

// The fastest tier in `bits` (bit t: tier t).
int FastestTier(uint8_t bits) {
  int t = 0;
  while (t < kNumTiers - 1 && (bits & TierBit(t)) == 0) ++t;
  return t;
}

}  // namespace

void BlockIndex::AddLocked(int worker, WorkerState& w, const engine::BlockHash& h, int tier) {
  if (w.predicted.erase(h) > 0) --predicted_;  // confirmed
  if (auto it = w.held.find(h); it != w.held.end()) {
    it->second |= TierBit(tier);
    return;
  }
  if (entries_ >= options_.max_entries) {
    ++dropped_;
    return;
  }
  w.held.emplace(h, TierBit(tier));
  holders_[h].push_back(worker);
  ++entries_;
}

void BlockIndex::ApplyTiersLocked(int worker, WorkerState& w,
                                  const tandem::v1::BlockEventBatch& batch) {
  for (const tandem::v1::TierBlockEvents& t : batch.tiers()) {
    const int tier = static_cast<int>(t.tier());
    if (tier <= 0 || tier >= kNumTiers) continue;  // a tier this gateway predates
    for (const auto& h : t.stored()) AddLocked(worker, w, rpc::BlockHashFromProto(h), tier);
    for (const auto& h : t.removed()) {
      RemoveLocked(worker, w, rpc::BlockHashFromProto(h), tier);
    }
  }
}

void BlockIndex::UnholdLocked(int worker, const engine::BlockHash& h) {
  auto it = holders_.find(h);
  if (it == holders_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), worker), v.end());
  if (v.empty()) holders_.erase(it);
  --entries_;
}

void BlockIndex::RemoveLocked(int worker, WorkerState& w, const engine::BlockHash& h,
                              int tier) {
  auto it = w.held.find(h);
  if (it == w.held.end()) return;
  it->second &= static_cast<uint8_t>(~TierBit(tier));
  if (it->second != 0) return;
  w.held.erase(it);
  UnholdLocked(worker, h);
}

void BlockIndex::ClearLocked(int worker, WorkerState& w) {
  for (const auto& [h, tiers] : w.held) UnholdLocked(worker, h);
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
    for (const auto& h : batch.stored()) AddLocked(worker, w, rpc::BlockHashFromProto(h), 0);
    ApplyTiersLocked(worker, w, batch);
  } else {
    if (!w.synced || batch.epoch() != w.epoch || batch.sequence() != w.sequence + 1) {
      return Applied::kNeedsResync;
    }
    w.sequence = batch.sequence();
    for (const auto& h : batch.stored()) AddLocked(worker, w, rpc::BlockHashFromProto(h), 0);
    for (const auto& h : batch.removed()) {
      RemoveLocked(worker, w, rpc::BlockHashFromProto(h), 0);
    }
    ApplyTiersLocked(worker, w, batch);
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
  const std::vector<TieredOverlap> tiered = OverlapByTier(workers, chain, now, with_predictions);
  std::vector<int32_t> overlap(tiered.size());
  for (size_t k = 0; k < tiered.size(); ++k) overlap[k] = tiered[k].blocks;
  return overlap;
}

std::vector<TieredOverlap> BlockIndex::OverlapByTier(std::span<const int> workers,
                                                     std::span<const engine::BlockHash> chain,
                                                     absl::Time now,
                                                     bool with_predictions) const {
  std::vector<TieredOverlap> overlap(workers.size());
  absl::ReaderMutexLock lock(&mu_);
  for (size_t k = 0; k < workers.size(); ++k) {
    auto it = workers_.find(workers[k]);
    if (it == workers_.end()) continue;
    const WorkerState& w = it->second;
    const bool predicting = with_predictions && !w.predicted.empty();
    TieredOverlap& o = overlap[k];
    for (const engine::BlockHash& h : chain) {
      int tier = -1;
      if (auto held = w.held.find(h); held != w.held.end()) {
        tier = FastestTier(held->second);
      } else if (predicting) {
        // Being computed into the worker's pool.
        auto p = w.predicted.find(h);
        if (p != w.predicted.end() && p->second > now) tier = 0;
      }
      if (tier < 0) break;
      ++o.blocks;
      ++o.by_tier[static_cast<size_t>(tier)];
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
