// Keeps the gateway's BlockIndex current: one BlockEvents.Watch stream per
// worker, each batch applied as it arrives. A batch the index refuses (a
// gap or a new epoch) ends the stream and a new one starts at once with a
// fresh snapshot; a stream that breaks drops the worker's entries at once
// and is retried with exponential backoff. The workers may change
// (SetWorkers, as a DNS name's addresses do): a new one is subscribed, a
// vanished one's stream cancelled and its entries dropped at once. Streams
// run on gRPC threads; one thread of its own starts them. Thread-safe.
#ifndef TANDEM_GATEWAY_ROUTING_BLOCK_EVENT_SUBSCRIBER_H_
#define TANDEM_GATEWAY_ROUTING_BLOCK_EVENT_SUBSCRIBER_H_

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/routing/block_index.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "rpc/channel_cache.h"

namespace tandem::gateway {

struct SubscriberOptions {
  absl::Duration retry_min = absl::Milliseconds(100);
  absl::Duration retry_max = absl::Seconds(5);
  // Called (on a gRPC thread, no lock held) whenever a worker's stream
  // becomes synced or stops being, or a worker is first found down. It runs
  // after the change is visible (AwaitSynced may return before it).
  std::function<void()> on_sync_change;
};

class BlockEventSubscriber {
 public:
  // A worker: its slot in the index and its address.
  struct Worker {
    int slot = 0;
    std::string address;
  };
  // Worker `i` of `addresses` is slot `i` in the index. `index`, `channels`
  // and `registry` must outlive the subscriber.
  BlockEventSubscriber(BlockIndex& index, rpc::ChannelCache& channels,
                       std::vector<std::string> addresses, prometheus::Registry& registry,
                       const SubscriberOptions& options = {});
  BlockEventSubscriber(BlockIndex& index, rpc::ChannelCache& channels,
                       const std::vector<Worker>& workers, prometheus::Registry& registry,
                       const SubscriberOptions& options = {});
  // Cancels every stream and waits for them to end.
  ~BlockEventSubscriber();

  // Replaces the set of workers: slots not named any more are unsubscribed
  // and dropped from the index; new ones are subscribed. A slot keeps its
  // address (a new address takes a new slot).
  void SetWorkers(const std::vector<Worker>& workers);

  // Resyncs so far (a gap or a new epoch), for tests and metrics.
  int64_t resyncs() const;
  // The slots whose streams are synced now.
  std::vector<int> synced_slots() const;
  // The slots known down: their last stream was lost with the worker
  // (could not connect, reset, keepalive lapsed, or refused UNAVAILABLE) and
  // no snapshot has come since (a slot not yet heard from is not).
  std::vector<int> down_slots() const;
  // A call to the worker in `slot` failed the way a lost worker's calls do
  // (no progress within its deadline, or UNAVAILABLE): the slot is down at
  // once and its stream starts again with a fresh snapshot, whose arrival
  // brings it back. A worker that is alive answers in a round trip; one cut
  // off stays down until the network heals (or its keepalive ends the new
  // stream, which retries with backoff). Nothing unless the slot is synced
  // (not down already, and not a worker whose stream never worked).
  void Suspect(int slot);
  // The KV pools the synced workers in slots >= `min_slot` report: their
  // sum in tokens, and the largest block size among them; and the smallest
  // max_context any synced worker (of any slot) reports (0: none reported).
  struct KvCapacity {
    int64_t tokens = 0;
    int32_t block_size = 1;
    int32_t max_context = 0;
  };
  KvCapacity SyncedKvCapacity(int min_slot) const;
  // The streams the worker in `slot` takes now, as it last reported
  // (BlockEventBatch.stream_capacity); 0 when it sets no bound of its own or
  // its stream is not synced.
  int32_t StreamCapacity(int slot) const;
  // The hand-offs the worker in `slot` has room to propose for with its
  // draft model now, as it last reported (BlockEventBatch.draft_kv_room; -1:
  // any number); nullopt while its stream is not synced.
  std::optional<int32_t> DraftKvRoom(int slot) const;
  // Waits until `worker`'s stream has applied a snapshot (or `timeout`).
  bool AwaitSynced(int worker, absl::Duration timeout) const;
  // Waits until `worker`'s stream has applied batch `sequence` of `epoch`
  // (a snapshot counts as every batch up to its number).
  bool AwaitApplied(int worker, uint64_t epoch, uint64_t sequence, absl::Duration timeout) const;
  // Waits until `worker` has no stream and none of its entries.
  bool AwaitDisconnected(int worker, absl::Duration timeout) const;

 private:
  class Stream;
  struct Slot {
    std::string address;
    bool active = true;        // false: unsubscribed (SetWorkers)
    Stream* stream = nullptr;  // the live stream, if any
    absl::Time next_attempt = absl::InfinitePast();
    absl::Duration backoff;
    bool synced = false;
    bool down = false;  // down_slots()
    uint64_t epoch = 0;
    uint64_t sequence = 0;  // the last batch applied
    int64_t kv_capacity_blocks = 0;  // as the worker last reported
    int32_t block_size = 1;
    int32_t max_context = 0;
    int32_t stream_capacity = 0;
    int32_t draft_kv_room = 0;
    prometheus::Gauge* entries = nullptr;
  };

  void Run();
  // From a stream: a batch arrived (false: resubscribe).
  bool OnBatch(int worker, const tandem::v1::BlockEventBatch& batch);
  // From a stream's OnDone: it ended (the slot is free, its entries go;
  // `lost`: with its worker, which is down)...
  void OnStreamEnded(int worker, bool resync, bool lost);
  // ...and, after it deleted itself, it no longer touches the subscriber.
  void OnStreamReleased();
  // OnStreamEnded's bookkeeping; whether the slot was synced.
  bool EndStreamLocked(int worker, bool resync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void AddSlotLocked(int slot, const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  BlockIndex& index_;
  rpc::ChannelCache& channels_;
  prometheus::Registry& registry_;
  const SubscriberOptions options_;
  prometheus::Histogram& lag_;
  prometheus::Counter& resyncs_;
  prometheus::Gauge& hashes_;
  prometheus::Gauge& entries_total_;
  prometheus::Counter& dropped_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Slot> slots_ ABSL_GUARDED_BY(mu_);
  int live_streams_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t resync_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_seen_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_ROUTING_BLOCK_EVENT_SUBSCRIBER_H_
