#include "gateway/routing/block_event_subscriber.h"

#include <algorithm>
#include <atomic>

#include "rpc/metrics.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::gateway {

// One worker's Watch stream. Reactions run on gRPC threads one at a time
// (one read outstanding). Deletes itself in OnDone.
class BlockEventSubscriber::Stream final
    : public grpc::ClientReadReactor<tandem::v1::BlockEventBatch> {
 public:
  Stream(BlockEventSubscriber* owner, int worker) : owner_(owner), worker_(worker) {}

  void Begin(std::shared_ptr<grpc::Channel> channel) {
    stub_ = tandem::v1::BlockEvents::NewStub(std::move(channel));
    stub_->async()->Watch(&ctx_, &request_, this);
    StartRead(&batch_);
    StartCall();
  }
  void Cancel() { ctx_.TryCancel(); }
  // Ends this stream for a fresh one at once (Suspect); any thread.
  void Restart() {
    restart_.store(true);
    ctx_.TryCancel();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    if (!owner_->OnBatch(worker_, batch_)) {
      resync_ = true;
      ctx_.TryCancel();
      return;
    }
    StartRead(&batch_);
  }
  void OnDone(const grpc::Status& status) override {
    // Detached first, so nobody cancels a deleted stream; then deleted (its
    // context and channel reference); only then released, since the owner
    // may be destroyed as soon as its last stream is.
    BlockEventSubscriber* const owner = owner_;
    // The connection failed (refused, reset, keepalive lapsed) or the
    // worker refused to serve (draining, stalled): it is down. An answer
    // of any other kind came from a live worker.
    const bool lost = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    owner->OnStreamEnded(worker_, resync_ || restart_.load(), lost);
    delete this;
    owner->OnStreamReleased();
  }

 private:
  BlockEventSubscriber* const owner_;
  const int worker_;
  std::unique_ptr<tandem::v1::BlockEvents::Stub> stub_;
  grpc::ClientContext ctx_;
  tandem::v1::WatchBlockEventsRequest request_;
  tandem::v1::BlockEventBatch batch_;
  bool resync_ = false;
  std::atomic<bool> restart_{false};
};

namespace {

std::vector<BlockEventSubscriber::Worker> Numbered(const std::vector<std::string>& addresses) {
  std::vector<BlockEventSubscriber::Worker> out;
  for (size_t i = 0; i < addresses.size(); ++i) {
    out.push_back({.slot = static_cast<int>(i), .address = addresses[i]});
  }
  return out;
}

}  // namespace

BlockEventSubscriber::BlockEventSubscriber(BlockIndex& index, rpc::ChannelCache& channels,
                                           std::vector<std::string> addresses,
                                           prometheus::Registry& registry,
                                           const SubscriberOptions& options)
    : BlockEventSubscriber(index, channels, Numbered(addresses), registry, options) {}

BlockEventSubscriber::BlockEventSubscriber(BlockIndex& index, rpc::ChannelCache& channels,
                                           const std::vector<Worker>& workers,
                                           prometheus::Registry& registry,
                                           const SubscriberOptions& options)
    : index_(index),
      channels_(channels),
      registry_(registry),
      options_(options),
      lag_(rpc::LatencyHistogram(registry, "tandem_block_event_lag_seconds",
                                 "From a worker producing a block event batch to this gateway "
                                 "applying it")),
      resyncs_(rpc::CounterMetric(registry, "tandem_block_index_resyncs_total",
                                  "Block event streams restarted for a fresh snapshot (a gap "
                                  "or a new worker epoch)")),
      hashes_(rpc::GaugeMetric(registry, "tandem_block_index_hashes",
                               "Distinct block hashes in the block index")),
      entries_total_(rpc::GaugeMetric(registry, "tandem_block_index_size",
                                      "(hash, worker) entries in the block index")),
      dropped_(rpc::CounterMetric(registry, "tandem_block_index_dropped_entries_total",
                                  "Entries evicted (or not recorded) because the index was full")) {
  {
    absl::MutexLock lock(&mu_);
    for (const Worker& w : workers) AddSlotLocked(w.slot, w.address);
  }
  thread_ = std::thread([this] { Run(); });
}

void BlockEventSubscriber::AddSlotLocked(int slot, const std::string& address) {
  Slot& s = slots_[slot];
  s.address = address;
  s.active = true;
  s.backoff = options_.retry_min;
  s.next_attempt = absl::InfinitePast();
  s.entries = &rpc::GaugeMetric(registry_, "tandem_block_index_entries",
                                "Block index entries per worker", {{"worker", address}});
}

void BlockEventSubscriber::SetWorkers(const std::vector<Worker>& workers) {
  std::vector<int> gone;
  bool lost_synced = false;
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_map<int, const Worker*> wanted;
    for (const Worker& w : workers) wanted[w.slot] = &w;
    for (auto& [slot, s] : slots_) {
      if (!s.active || wanted.contains(slot)) continue;
      s.active = false;
      lost_synced |= s.synced;
      s.synced = false;
      if (s.stream != nullptr) s.stream->Cancel();
      s.entries->Set(0);
      gone.push_back(slot);
    }
    for (const Worker& w : workers) {
      auto it = slots_.find(w.slot);
      if (it == slots_.end() || !it->second.active) AddSlotLocked(w.slot, w.address);
    }
  }
  // Its entries go now, not when its stream has ended.
  for (int slot : gone) index_.Drop(slot);
  {
    absl::MutexLock lock(&mu_);
    hashes_.Set(static_cast<double>(index_.hashes()));
    entries_total_.Set(static_cast<double>(index_.entries()));
  }
  if (lost_synced && options_.on_sync_change) options_.on_sync_change();
}

BlockEventSubscriber::~BlockEventSubscriber() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (auto& [slot, s] : slots_) {
      if (s.stream != nullptr) s.stream->Cancel();
    }
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return live_streams_ == 0; };
    mu_.Await(absl::Condition(&idle));
  }
  thread_.join();
}

void BlockEventSubscriber::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    absl::Time wake = absl::InfiniteFuture();
    const absl::Time now = absl::Now();
    std::vector<std::pair<Stream*, std::string>> start;
    for (auto& [slot, s] : slots_) {
      if (!s.active || s.stream != nullptr) continue;
      if (s.next_attempt <= now) {
        // A fresh stream starts with a snapshot; the retry time is set
        // when it ends.
        s.stream = new Stream(this, slot);
        ++live_streams_;
        start.emplace_back(s.stream, s.address);
      } else {
        wake = std::min(wake, s.next_attempt);
      }
    }
    if (!start.empty()) {
      // Outside the lock: a stream's reactions take it (a Cancel() before
      // Begin() cancels the call as it starts).
      mu_.Unlock();
      for (auto& [stream, address] : start) stream->Begin(channels_.Get(address));
      mu_.Lock();
      continue;
    }
    // Woken early when a stream ends (OnStreamEnded) or on stop. A stream
    // that ends with a retry time before `wake` wakes the loop too, to wait
    // for that time instead: the condition is only evaluated when the
    // mutex changes hands, so nothing else would notice the time pass.
    auto due = [this, wake]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      if (stop_) return true;
      const absl::Time t = absl::Now();
      for (const auto& [slot, s] : slots_) {
        if (s.active && s.stream == nullptr && (s.next_attempt <= t || s.next_attempt < wake)) {
          return true;
        }
      }
      return false;
    };
    mu_.AwaitWithDeadline(absl::Condition(&due), wake);
  }
}

bool BlockEventSubscriber::OnBatch(int worker, const tandem::v1::BlockEventBatch& batch) {
  const double produced = batch.produced_unix_seconds();
  {
    // A batch that raced the worker's removal must not bring it back.
    absl::MutexLock lock(&mu_);
    if (!slots_[worker].active) return false;
  }
  const BlockIndex::Applied applied = index_.Apply(worker, batch);
  // Observed once the batch is applied and its health change made: a
  // reader who sees it counted sees what it changed (the tests' sync
  // signal).
  auto observe_lag = [this, produced] {
    if (produced <= 0) return;
    lag_.Observe(std::max(0.0, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - produced));
  };
  bool became_synced = false;
  {
    absl::MutexLock lock(&mu_);
    Slot& s = slots_[worker];
    if (applied == BlockIndex::Applied::kNeedsResync) {
      ++resync_count_;
      resyncs_.Increment();
      observe_lag();
      return false;
    }
    if (batch.snapshot()) {
      became_synced = !s.synced;
      s.synced = true;
      s.down = false;
      s.backoff = options_.retry_min;  // a working stream resets the backoff
    }
    s.epoch = batch.epoch();
    s.sequence = batch.sequence();
    s.kv_capacity_blocks = batch.kv_capacity_blocks();
    s.max_context = batch.max_context();
    s.stream_capacity = std::max(batch.stream_capacity(), 0);
    s.draft_kv_room = std::max(batch.draft_kv_room(), -1);
    s.block_size = std::max(batch.block_size(), 1);
    s.entries->Set(static_cast<double>(index_.entries_of(worker)));
    hashes_.Set(static_cast<double>(index_.hashes()));
    entries_total_.Set(static_cast<double>(index_.entries()));
    const int64_t dropped = index_.dropped_entries();
    if (dropped > dropped_seen_) {
      dropped_.Increment(static_cast<double>(dropped - dropped_seen_));
      dropped_seen_ = dropped;
    }
  }
  if (became_synced && options_.on_sync_change) options_.on_sync_change();
  observe_lag();
  return true;
}

void BlockEventSubscriber::OnStreamEnded(int worker, bool resync, bool lost) {
  index_.Drop(worker);  // nothing it said is known to hold any more
  bool was_synced = false;
  bool became_down = false;
  {
    absl::MutexLock lock(&mu_);
    was_synced = EndStreamLocked(worker, resync);
    // A stream lost with its worker marks the worker down until a snapshot
    // comes again.
    if (lost && !resync) {
      became_down = !slots_[worker].down;
      slots_[worker].down = true;
    }
  }
  if ((was_synced || became_down) && options_.on_sync_change) options_.on_sync_change();
}

bool BlockEventSubscriber::EndStreamLocked(int worker, bool resync) {
  Slot& s = slots_[worker];
  const bool was_synced = s.synced;
  s.stream = nullptr;
  s.synced = false;
  s.entries->Set(0);
  hashes_.Set(static_cast<double>(index_.hashes()));
  entries_total_.Set(static_cast<double>(index_.entries()));
  if (resync) {
    s.next_attempt = absl::Now();
  } else {
    s.next_attempt = absl::Now() + s.backoff;
    s.backoff = std::min(s.backoff * 2, options_.retry_max);
  }
  return was_synced;
}

void BlockEventSubscriber::OnStreamReleased() {
  absl::MutexLock lock(&mu_);
  --live_streams_;
}

bool BlockEventSubscriber::AwaitApplied(int worker, uint64_t epoch, uint64_t sequence,
                                        absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto applied = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = slots_.find(worker);
    return it != slots_.end() && it->second.synced && it->second.epoch == epoch &&
           it->second.sequence >= sequence;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&applied), timeout);
}

bool BlockEventSubscriber::AwaitDisconnected(int worker, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto gone = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = slots_.find(worker);
    return it == slots_.end() || !it->second.synced;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&gone), timeout);
}

BlockEventSubscriber::KvCapacity BlockEventSubscriber::SyncedKvCapacity(int min_slot) const {
  absl::MutexLock lock(&mu_);
  KvCapacity c;
  for (const auto& [slot, s] : slots_) {
    if (!s.synced || !s.active) continue;
    if (s.max_context > 0 && (c.max_context == 0 || s.max_context < c.max_context)) {
      c.max_context = s.max_context;
    }
    if (slot < min_slot) continue;
    c.tokens += s.kv_capacity_blocks * s.block_size;
    c.block_size = std::max(c.block_size, s.block_size);
  }
  return c;
}

int32_t BlockEventSubscriber::StreamCapacity(int slot) const {
  absl::MutexLock lock(&mu_);
  const auto it = slots_.find(slot);
  if (it == slots_.end() || !it->second.synced || !it->second.active) return 0;
  return it->second.stream_capacity;
}

std::optional<int32_t> BlockEventSubscriber::DraftKvRoom(int slot) const {
  absl::MutexLock lock(&mu_);
  const auto it = slots_.find(slot);
  if (it == slots_.end() || !it->second.synced || !it->second.active) return std::nullopt;
  return it->second.draft_kv_room;
}

void BlockEventSubscriber::Suspect(int slot) {
  {
    absl::MutexLock lock(&mu_);
    auto it = slots_.find(slot);
    // Only a synced slot: its fresh snapshot is what brings it back (a slot
    // whose stream is not working is down already, or not yet heard from).
    if (it == slots_.end() || !it->second.active || !it->second.synced || it->second.down) {
      return;
    }
    it->second.down = true;
    if (it->second.stream != nullptr) it->second.stream->Restart();
  }
  if (options_.on_sync_change) options_.on_sync_change();
}

std::vector<int> BlockEventSubscriber::down_slots() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> out;
  for (const auto& [slot, s] : slots_) {
    if (s.active && s.down) out.push_back(slot);
  }
  return out;
}

std::vector<int> BlockEventSubscriber::synced_slots() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> out;
  for (const auto& [slot, s] : slots_) {
    if (s.active && s.synced) out.push_back(slot);
  }
  return out;
}

int64_t BlockEventSubscriber::resyncs() const {
  absl::MutexLock lock(&mu_);
  return resync_count_;
}

bool BlockEventSubscriber::AwaitSynced(int worker, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto synced = [this, worker]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = slots_.find(worker);
    return it != slots_.end() && it->second.synced;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&synced), timeout);
}

}  // namespace tandem::gateway
