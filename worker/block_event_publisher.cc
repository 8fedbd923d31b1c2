#include "worker/block_event_publisher.h"

#include <algorithm>
#include <deque>
#include <random>

#include "absl/time/clock.h"
#include "common/check.h"
#include "rpc/convert.h"
#include "rpc/metrics.h"

namespace tandem::worker {
namespace {

// The bytes of `batch` on the wire, which a ByteBuffer's copies share.
grpc::ByteBuffer Serialize(const tandem::v1::BlockEventBatch& batch) {
  grpc::ByteBuffer bytes;
  bool own = false;
  const grpc::Status s =
      grpc::SerializationTraits<tandem::v1::BlockEventBatch>::Serialize(batch, &bytes, &own);
  TANDEM_CHECK(s.ok(), "serializing a block event batch") << s.error_message();
  return bytes;
}

// A Watch that arrives after Close() or while suspended.
class Refused final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit Refused(const std::string& why) {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
  }
  void OnDone() override { delete this; }
};

}  // namespace

// One subscriber's stream: serialized batches queue here (each a reference
// to bytes every subscriber shares) and go out one write at a time. Its
// mutex is taken after the publisher's, never before.
class BlockEventPublisher::Subscription final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Subscription(BlockEventPublisher* publisher, int32_t max_pending)
      : publisher_(publisher), max_pending_(max_pending) {}

  // Queues `batch` (publisher's mu_ held). `snapshot` makes a resnapshot
  // when the queue is full.
  template <typename MakeSnapshot>
  void Offer(const grpc::ByteBuffer& batch, const MakeSnapshot& snapshot) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (static_cast<int32_t>(pending_.size()) >= max_pending_) {
      pending_.clear();  // too far behind: one snapshot replaces them all
      pending_.push_back(snapshot());
    } else {
      pending_.push_back(batch);
    }
    MaybeWriteLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "block event stream broke"));
      return;
    }
    MaybeWriteLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  // Ends the stream from this side (publisher's mu_ held).
  void End(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }

  void OnDone() override {
    publisher_->Unsubscribe(this);
    delete this;
  }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || pending_.empty()) return;
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    StartWrite(&current_);
  }
  // gRPC orders the status after a write still in flight.
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    pending_.clear();
    Finish(status);
  }

  BlockEventPublisher* const publisher_;
  const int32_t max_pending_;
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> pending_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer current_ ABSL_GUARDED_BY(mu_);  // the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

BlockEventPublisher::BlockEventPublisher(const BlockEventPublisherOptions& options,
                                         prometheus::Registry& registry)
    : options_(options),
      epoch_([] {
        std::random_device rd;
        return (uint64_t{rd()} << 32) | rd();
      }()),
      subscribers_gauge_(rpc::GaugeMetric(registry, "tandem_block_event_subscribers",
                                          "Gateways subscribed to this worker's block events")) {
  if (options_.coalesce > absl::ZeroDuration()) flusher_ = std::thread([this] { FlushWhenDue(); });
}

BlockEventPublisher::~BlockEventPublisher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (flusher_.joinable()) flusher_.join();
}

void BlockEventPublisher::FlushWhenDue() {
  absl::MutexLock lock(&mu_);
  const auto waiting = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_ || !touched_.empty();
  };
  while (true) {
    mu_.Await(absl::Condition(&waiting));
    if (stopping_) return;
    // Another batch (a Publish() that was due, a load change) may have
    // gone out in the meantime, and moved the time this one is due.
    const absl::Time due = last_batch_ + options_.coalesce;
    if (mu_.AwaitWithDeadline(absl::Condition(&stopping_), due)) return;
    if (!touched_.empty() && absl::Now() >= last_batch_ + options_.coalesce) FlushLocked();
  }
}

namespace {

uint8_t TierBit(engine::KvTier tier) { return static_cast<uint8_t>(1u << static_cast<int>(tier)); }

// The batch's entry for a lower tier, added on first use.
tandem::v1::TierBlockEvents* TierEntry(tandem::v1::BlockEventBatch& b, engine::KvTier tier) {
  const auto proto_tier = static_cast<tandem::v1::KvTier>(static_cast<int>(tier));
  for (tandem::v1::TierBlockEvents& t : *b.mutable_tiers()) {
    if (t.tier() == proto_tier) return &t;
  }
  tandem::v1::TierBlockEvents* t = b.add_tiers();
  t->set_tier(proto_tier);
  return t;
}

// Adds `h` to `b`'s stored or removed hashes in `tier`.
void AddEvent(tandem::v1::BlockEventBatch& b, engine::KvTier tier, bool stored,
              const engine::BlockHash& h) {
  tandem::v1::BlockHashProto* proto;
  if (tier == engine::KvTier::kDevice) {
    proto = stored ? b.add_stored() : b.add_removed();
  } else {
    tandem::v1::TierBlockEvents* entry = TierEntry(b, tier);
    proto = stored ? entry->add_stored() : entry->add_removed();
  }
  rpc::BlockHashToProto(h, proto);
}

}  // namespace

tandem::v1::BlockEventBatch BlockEventPublisher::NewBatchLocked(absl::Time produced) const {
  tandem::v1::BlockEventBatch b;
  b.set_epoch(epoch_);
  b.set_sequence(sequence_);
  b.set_model_fingerprint(options_.model_fingerprint);
  b.set_block_size(options_.block_size);
  b.set_kv_capacity_blocks(options_.kv_capacity_blocks);
  b.set_max_context(options_.max_context);
  b.set_stream_capacity(stream_capacity_);
  b.set_draft_kv_room(draft_kv_room_);
  b.set_produced_unix_seconds(absl::ToDoubleSeconds(produced - absl::UnixEpoch()));
  return b;
}

tandem::v1::BlockEventBatch BlockEventPublisher::SnapshotLocked() const {
  tandem::v1::BlockEventBatch b = NewBatchLocked(absl::Now());
  b.set_snapshot(true);
  b.mutable_stored()->Reserve(static_cast<int>(blocks_held_));
  for (const auto& [h, tiers] : held_) {
    for (int t = 0; t < engine::kNumKvTiers; ++t) {
      const auto tier = static_cast<engine::KvTier>(t);
      if ((tiers.held & TierBit(tier)) != 0) AddEvent(b, tier, /*stored=*/true, h);
    }
  }
  return b;
}

void BlockEventPublisher::SetStreamCapacity(int32_t streams) {
  absl::MutexLock lock(&mu_);
  stream_capacity_ = streams;
  SendLoadChangeLocked();
}

void BlockEventPublisher::SetDraftKvRoom(int32_t room) {
  absl::MutexLock lock(&mu_);
  draft_kv_room_ = room;
  SendLoadChangeLocked();
}

void BlockEventPublisher::SendLoadChangeLocked() {
  const bool changed = stream_capacity_ != sent_capacity_ || draft_kv_room_ != sent_draft_kv_room_;
  if (!changed || absl::Now() - last_batch_ < kCapacityInterval) return;
  FlushLocked();
}

grpc::ByteBuffer BlockEventPublisher::SerializedSnapshotLocked() const {
  return Serialize(SnapshotLocked());
}

void BlockEventPublisher::SendLocked(const tandem::v1::BlockEventBatch& batch) {
  if (subscriptions_.empty()) return;
  const grpc::ByteBuffer bytes = Serialize(batch);
  for (Subscription* s : subscriptions_) {
    s->Offer(bytes, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return SerializedSnapshotLocked(); });
  }
}

void BlockEventPublisher::FlushLocked() {
  ++sequence_;
  last_batch_ = absl::Now();
  sent_capacity_ = stream_capacity_;
  sent_draft_kv_room_ = draft_kv_room_;
  // With no subscriber the batch is numbered and its changes settled, but
  // not built.
  const bool send = !subscriptions_.empty();
  tandem::v1::BlockEventBatch batch;
  if (send) batch = NewBatchLocked(touched_.empty() ? last_batch_ : first_touched_);
  for (const engine::BlockHash& h : touched_) {
    const auto it = held_.find(h);
    Tiers& tiers = it->second;
    // Each tier whose bit changed, stored or removed (none: nothing, or
    // cancelled out).
    for (int t = 0; send && t < engine::kNumKvTiers; ++t) {
      const auto tier = static_cast<engine::KvTier>(t);
      const uint8_t bit = TierBit(tier);
      if (((tiers.held ^ tiers.sent) & bit) != 0) AddEvent(batch, tier, (tiers.held & bit) != 0, h);
    }
    tiers.sent = tiers.held;
    tiers.touched = false;
    if (tiers.held == 0) held_.erase(it);
  }
  touched_.clear();
  if (send) SendLocked(batch);
}

void BlockEventPublisher::Publish(std::span<const engine::BlockEvent> events) {
  absl::MutexLock lock(&mu_);
  for (const engine::BlockEvent& e : events) {
    const uint8_t bit = TierBit(e.tier);
    Tiers* tiers;
    if (e.kind == engine::BlockEvent::Kind::kStored) {
      tiers = &held_[e.hash];
      blocks_held_ += tiers->held == 0 ? 1 : 0;
      tiers->held |= bit;
    } else {
      const auto it = held_.find(e.hash);
      if (it == held_.end()) continue;  // never told
      tiers = &it->second;
      const uint8_t was = tiers->held;
      tiers->held &= static_cast<uint8_t>(~bit);
      blocks_held_ -= was != 0 && tiers->held == 0 ? 1 : 0;
    }
    if (!tiers->touched) {
      tiers->touched = true;
      if (touched_.empty()) first_touched_ = absl::Now();
      touched_.push_back(e.hash);
    }
  }
  if (touched_.empty()) return;
  // Within `coalesce` of the last batch the flusher sends it once due.
  if (absl::Now() - last_batch_ >= options_.coalesce) FlushLocked();
}

void BlockEventPublisher::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  for (Subscription* s : subscriptions_) s->End(grpc::Status::OK);
}

void BlockEventPublisher::Suspend(const std::string& why) {
  absl::MutexLock lock(&mu_);
  suspended_ = why;
  for (Subscription* s : subscriptions_) {
    s->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
  }
}

void BlockEventPublisher::Resume() {
  absl::MutexLock lock(&mu_);
  suspended_.clear();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* BlockEventPublisher::Watch(grpc::CallbackServerContext*,
                                                                       const grpc::ByteBuffer*) {
  absl::MutexLock lock(&mu_);
  if (closed_) return new Refused("worker shutting down");
  if (!suspended_.empty()) return new Refused(suspended_);
  // What waits goes to the others first: the snapshot includes it.
  if (!touched_.empty()) FlushLocked();
  auto* s = new Subscription(this, std::max(options_.max_pending_batches, 1));
  subscriptions_.push_back(s);
  subscribers_gauge_.Set(static_cast<double>(subscriptions_.size()));
  s->Offer(SerializedSnapshotLocked(),
           [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return SerializedSnapshotLocked(); });
  return s;
}

void BlockEventPublisher::Unsubscribe(Subscription* s) {
  absl::MutexLock lock(&mu_);
  subscriptions_.erase(std::remove(subscriptions_.begin(), subscriptions_.end(), s),
                       subscriptions_.end());
  subscribers_gauge_.Set(static_cast<double>(subscriptions_.size()));
}

uint64_t BlockEventPublisher::sequence() const {
  absl::MutexLock lock(&mu_);
  return sequence_;
}

int32_t BlockEventPublisher::subscribers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(subscriptions_.size());
}

int64_t BlockEventPublisher::blocks_held() const {
  absl::MutexLock lock(&mu_);
  return blocks_held_;
}

int32_t BlockEventPublisher::LeadingHeld(std::span<const engine::BlockHash> chain) const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  while (n < static_cast<int32_t>(chain.size())) {
    const auto it = held_.find(chain[n]);
    if (it == held_.end() || it->second.held == 0) break;
    ++n;
  }
  return n;
}

}  // namespace tandem::worker
