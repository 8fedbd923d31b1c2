#include "gateway/block_event_subscriber.h"

#include <algorithm>

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

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    if (!owner_->OnBatch(worker_, batch_)) {
      resync_ = true;
      ctx_.TryCancel();
      return;
    }
    StartRead(&batch_);
  }
  void OnDone(const grpc::Status&) override {
    // Detached first, so nobody cancels a deleted stream; then deleted (its
    // context and channel reference); only then released, since the owner
    // may be destroyed as soon as its last stream is.
    BlockEventSubscriber* const owner = owner_;
    owner->OnStreamEnded(worker_, resync_);
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
};

BlockEventSubscriber::BlockEventSubscriber(BlockIndex& index, rpc::ChannelCache& channels,
                                           std::vector<std::string> addresses,
                                           prometheus::Registry& registry,
                                           const SubscriberOptions& options)
    : index_(index),
      channels_(channels),
      addresses_(std::move(addresses)),
      options_(options),
      lag_(rpc::LatencyHistogram(registry, "tandem_block_event_lag_seconds",
                                 "From a worker producing a block event batch to this gateway "
                                 "applying it")),
      resyncs_(rpc::CounterMetric(registry, "tandem_block_index_resyncs_total",
                                  "Block event streams restarted for a fresh snapshot (a gap "
                                  "or a new worker epoch)")),
      hashes_(rpc::GaugeMetric(registry, "tandem_block_index_hashes",
                               "Distinct block hashes in the block index")),
      entries_total_(rpc::GaugeMetric(registry, "tandem_block_index_entries_total",
                                      "(hash, worker) entries in the block index")),
      dropped_(rpc::CounterMetric(registry, "tandem_block_index_dropped_entries_total",
                                  "Entries not recorded because the index was full")) {
  slots_.resize(addresses_.size());
  for (size_t i = 0; i < addresses_.size(); ++i) {
    slots_[i].backoff = options_.retry_min;
    slots_[i].entries = &rpc::GaugeMetric(registry, "tandem_block_index_entries",
                                          "Block index entries per worker",
                                          {{"worker", addresses_[i]}});
  }
  thread_ = std::thread([this] { Run(); });
}

BlockEventSubscriber::~BlockEventSubscriber() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (Slot& s : slots_) {
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
    std::vector<std::pair<Stream*, int>> start;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.stream != nullptr) continue;
      if (s.next_attempt <= now) {
        // A fresh stream starts with a snapshot; the retry time is set
        // when it ends.
        s.stream = new Stream(this, static_cast<int>(i));
        ++live_streams_;
        start.emplace_back(s.stream, static_cast<int>(i));
      } else {
        wake = std::min(wake, s.next_attempt);
      }
    }
    if (!start.empty()) {
      // Outside the lock: a stream's reactions take it.
      mu_.Unlock();
      for (auto& [stream, i] : start) stream->Begin(channels_.Get(addresses_[i]));
      mu_.Lock();
      continue;
    }
    // Woken early when a stream ends (OnStreamEnded) or on stop.
    auto due = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      if (stop_) return true;
      const absl::Time t = absl::Now();
      for (const Slot& s : slots_) {
        if (s.stream == nullptr && s.next_attempt <= t) return true;
      }
      return false;
    };
    mu_.AwaitWithDeadline(absl::Condition(&due), wake);
  }
}

bool BlockEventSubscriber::OnBatch(int worker, const tandem::v1::BlockEventBatch& batch) {
  const double produced = batch.produced_unix_seconds();
  const BlockIndex::Applied applied = index_.Apply(worker, batch);
  if (produced > 0) {
    lag_.Observe(std::max(0.0, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - produced));
  }
  absl::MutexLock lock(&mu_);
  Slot& s = slots_[worker];
  if (applied == BlockIndex::Applied::kNeedsResync) {
    ++resync_count_;
    resyncs_.Increment();
    return false;
  }
  if (batch.snapshot()) {
    s.synced = true;
    s.backoff = options_.retry_min;  // a working stream resets the backoff
  }
  s.epoch = batch.epoch();
  s.sequence = batch.sequence();
  s.entries->Set(static_cast<double>(index_.entries_of(worker)));
  hashes_.Set(static_cast<double>(index_.hashes()));
  entries_total_.Set(static_cast<double>(index_.entries()));
  const int64_t dropped = index_.dropped_entries();
  if (dropped > dropped_seen_) {
    dropped_.Increment(static_cast<double>(dropped - dropped_seen_));
    dropped_seen_ = dropped;
  }
  return true;
}

void BlockEventSubscriber::OnStreamEnded(int worker, bool resync) {
  index_.Drop(worker);  // nothing it said is known to hold any more
  absl::MutexLock lock(&mu_);
  Slot& s = slots_[worker];
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
}

void BlockEventSubscriber::OnStreamReleased() {
  absl::MutexLock lock(&mu_);
  --live_streams_;
}

bool BlockEventSubscriber::AwaitApplied(int worker, uint64_t epoch, uint64_t sequence,
                                        absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto applied = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const Slot& s = slots_[worker];
    return s.synced && s.epoch == epoch && s.sequence >= sequence;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&applied), timeout);
}

bool BlockEventSubscriber::AwaitDisconnected(int worker, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto gone = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !slots_[worker].synced; };
  return mu_.AwaitWithTimeout(absl::Condition(&gone), timeout);
}

int64_t BlockEventSubscriber::resyncs() const {
  absl::MutexLock lock(&mu_);
  return resync_count_;
}

bool BlockEventSubscriber::AwaitSynced(int worker, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto synced = [this, worker]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return slots_[worker].synced;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&synced), timeout);
}

}  // namespace tandem::gateway
