// The BlockEvents service of a worker: tells every subscribed gateway which
// full KV blocks it holds, and in which tiers (its engine's pool, host RAM,
// disk). A subscriber first gets a snapshot of
// every hash held, then batches of what changed since, numbered
// consecutively within this process's epoch: one per engine step that
// stored or removed blocks, or, for steps that come within `coalesce` of
// the last batch, one for all of them once `coalesce` has passed. A batch
// carries the net change per (hash, tier) since the one before: a block
// stored and removed again in between is in neither list, and no pair is
// in both, so a subscriber may apply a batch's events in any order. A subscriber
// that falls more than `max_pending_batches` behind gets a fresh snapshot
// instead of the batches it missed, so a slow gateway costs bounded memory.
// A batch is serialized once for every subscriber (the method is served
// raw: each stream writes the same bytes), so a gateway more costs a
// socket write a batch, not a copy and a serialization too.
// Publish() is called on the engine thread (and the tiers'); subscriptions
// run on gRPC threads, and coalesced batches go out from a thread of the
// publisher's own. Thread-safe.
#ifndef TANDEM_WORKER_BLOCK_EVENT_PUBLISHER_H_
#define TANDEM_WORKER_BLOCK_EVENT_PUBLISHER_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/kv/block_hash.h"
#include "engine/sched/request.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::worker {

struct BlockEventPublisherOptions {
  uint64_t model_fingerprint = 0;
  int32_t block_size = 16;
  int64_t kv_capacity_blocks = 0;  // the engine's pool, reported in every batch
  int32_t max_context = 0;  // the engine's, reported in every batch
  int32_t max_pending_batches = 1024;  // per subscriber, before a resnapshot
  // Events published within this of the last batch wait, merged, until it
  // has passed (the worker's --block-events-coalesce-ms), so steps faster
  // than this cost each subscriber one message per interval rather than one
  // per step. Zero: every Publish() goes out at once.
  absl::Duration coalesce = absl::ZeroDuration();
};

class BlockEventPublisher final : public tandem::v1::BlockEvents::WithRawCallbackMethod_Watch<
                                      tandem::v1::BlockEvents::Service> {
 public:
  // `registry` must outlive the publisher.
  BlockEventPublisher(const BlockEventPublisherOptions& options, prometheus::Registry& registry);
  // Every subscription must have ended (the gRPC server is shut down first).
  ~BlockEventPublisher() override;

  // One engine step's block events, or a lower tier's, in order. They go
  // out now, or with the next batch once `coalesce` has passed.
  void Publish(std::span<const engine::BlockEvent> events);
  // The streams the worker takes now (BlockEventBatch.stream_capacity; 0:
  // no bound of its own), called after every engine step. Every batch
  // carries the latest; a change goes out in a batch of its own once no
  // batch went out for kCapacityInterval (so a bound that moves every step
  // costs a few batches a second, not one a step).
  void SetStreamCapacity(int32_t streams);
  // The hand-offs the worker has room to propose for with its draft now
  // (BlockEventBatch.draft_kv_room), after every engine step; sent as
  // SetStreamCapacity's value is.
  void SetDraftKvRoom(int32_t room);
  static constexpr absl::Duration kCapacityInterval = absl::Milliseconds(100);
  // Ends every subscription (OK: the worker is going away) and refuses new
  // ones (UNAVAILABLE), so a server shutdown need not wait for them.
  void Close();
  // Ends every subscription with UNAVAILABLE `why` and refuses new ones
  // until Resume(): the worker cannot serve for now (its engine stalled),
  // and gateways stop routing to it while they are not subscribed.
  void Suspend(const std::string& why);
  void Resume();

  // A WatchBlockEventsRequest, which carries nothing the stream depends on.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* request) override;

  uint64_t epoch() const { return epoch_; }
  int32_t subscribers() const;
  // The number of the last batch sent (0: none yet).
  uint64_t sequence() const;
  // Distinct hashes held in any tier.
  int64_t blocks_held() const;
  // How many leading hashes of `chain` the worker holds in any tier, as of
  // its last Publish() (the first one missing ends the run).
  int32_t LeadingHeld(std::span<const engine::BlockHash> chain) const;

 private:
  class Subscription;

  // A batch numbered sequence_ with the worker's fields, no events,
  // produced at `produced`.
  tandem::v1::BlockEventBatch NewBatchLocked(absl::Time produced) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A batch for a changed stream capacity or draft_kv_room, once no batch
  // went out for kCapacityInterval.
  void SendLoadChangeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the next delta batch: the net change of every hash touched since
  // the last one (none: a batch of the worker's fields alone).
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The thread that sends what Publish() left waiting, once `coalesce` has
  // passed since the last batch.
  void FlushWhenDue();
  // Offers `batch`, serialized once, to every subscription.
  void SendLocked(const tandem::v1::BlockEventBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  tandem::v1::BlockEventBatch SnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SnapshotLocked, serialized.
  grpc::ByteBuffer SerializedSnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unsubscribe(Subscription* s);

  const BlockEventPublisherOptions options_;
  const uint64_t epoch_;
  prometheus::Gauge& subscribers_gauge_;
  mutable absl::Mutex mu_;
  // A hash's tiers, a bit each (1 << KvTier).
  struct Tiers {
    uint8_t held = 0;      // as of the last Publish()
    uint8_t sent = 0;      // as of the last batch sent
    bool touched = false;  // in touched_
  };
  // Each hash held, and each one removed since the last batch (held 0,
  // erased when that batch goes out).
  absl::flat_hash_map<engine::BlockHash, Tiers> held_ ABSL_GUARDED_BY(mu_);
  int64_t blocks_held_ ABSL_GUARDED_BY(mu_) = 0;  // entries with held != 0
  // The hashes Publish() changed since the last batch, in the order first
  // touched.
  std::vector<engine::BlockHash> touched_ ABSL_GUARDED_BY(mu_);
  // When the first of them was published: the next batch's produced time,
  // so a gateway's event lag counts the wait.
  absl::Time first_touched_ ABSL_GUARDED_BY(mu_);
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;  // the last batch published
  int32_t stream_capacity_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t sent_capacity_ ABSL_GUARDED_BY(mu_) = 0;  // what the last batch carried
  int32_t draft_kv_room_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t sent_draft_kv_room_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_batch_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<Subscription*> subscriptions_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string suspended_ ABSL_GUARDED_BY(mu_);  // why, while suspended
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the flusher ends
  std::thread flusher_;                         // with a nonzero `coalesce` only
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_BLOCK_EVENT_PUBLISHER_H_
