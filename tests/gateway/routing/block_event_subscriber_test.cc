// A worker's BlockEventPublisher and a gateway's BlockEventSubscriber over
// real gRPC in one process: the index follows the worker's stored and
// removed blocks; a gap in the numbering makes the subscriber resync and
// end consistent; a worker that goes away loses its entries at once; a
// restarted worker (new epoch) replaces what was known, and one restarted
// on its address is subscribed again after its stream broke; a suspected
// worker is down at once and back when a fresh snapshot arrives; two
// gateways subscribed to one worker both follow it.
#include "gateway/routing/block_event_subscriber.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "rpc/bootstrap.h"
#include "worker/block_event_publisher.h"

namespace tandem::gateway {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);

engine::BlockHash H(uint64_t v) { return engine::BlockHash{.low = v, .high = ~v}; }

std::vector<engine::BlockEvent> Stored(std::vector<uint64_t> v) {
  std::vector<engine::BlockEvent> out;
  for (uint64_t x : v)
    out.push_back({.kind = engine::BlockEvent::Kind::kStored, .hash = H(x), .parent_hash = {},
                   .tier = engine::KvTier::kDevice});
  return out;
}

std::vector<int32_t> OverlapOf(const BlockIndex& index, std::vector<uint64_t> chain) {
  std::vector<engine::BlockHash> c;
  for (uint64_t x : chain) c.push_back(H(x));
  const std::vector<int> workers = {0};
  return index.Overlap(workers, c);
}

struct Worker {
  explicit Worker(prometheus::Registry& registry, const std::string& listen = "127.0.0.1:0")
      : publisher({.model_fingerprint = 5, .block_size = 16}, registry) {
    rpc::ServerOptions options;
    options.listen = listen;
    auto s = rpc::StartGrpcServer(options, {&publisher});
    EXPECT_TRUE(s.ok());
    server = std::move(*s);
  }
  ~Worker() { Stop(); }
  void Stop() {
    // Watch streams never end by themselves: cancel them at once.
    if (server.server != nullptr) rpc::ShutdownServer(*server.server, absl::ZeroDuration());
    server.server.reset();
  }
  worker::BlockEventPublisher publisher;
  rpc::StartedServer server;
};

TEST(BlockEventSubscriberTest, TheIndexFollowsTheWorkersBlocks) {
  prometheus::Registry registry;
  Worker w(registry);
  w.publisher.Publish(Stored({1, 2}));  // before anyone subscribed: in the snapshot
  BlockIndex index;
  rpc::ChannelCache channels;
  BlockEventSubscriber sub(index, channels, {w.server.address}, registry);
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), 1, kWait));
  EXPECT_EQ(OverlapOf(index, {1, 2, 3}), std::vector<int32_t>{2});
  ASSERT_EQ(index.params()->block_size, 16);

  w.publisher.Publish(Stored({3}));
  std::vector<engine::BlockEvent> removed = {
      {.kind = engine::BlockEvent::Kind::kRemoved, .hash = H(1), .parent_hash = {},
       .tier = engine::KvTier::kDevice}};
  w.publisher.Publish(removed);
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), 3, kWait));
  EXPECT_EQ(OverlapOf(index, {1, 2, 3}), std::vector<int32_t>{0});
  EXPECT_EQ(OverlapOf(index, {2, 3}), std::vector<int32_t>{2});
  EXPECT_EQ(index.entries_of(0), 2);
  EXPECT_EQ(sub.resyncs(), 0);

  // The worker goes away: its entries go with it.
  w.Stop();
  ASSERT_TRUE(sub.AwaitDisconnected(0, kWait));
  EXPECT_EQ(index.entries_of(0), 0);
  EXPECT_EQ(OverlapOf(index, {2, 3}), std::vector<int32_t>{0});
}

// Two gateways subscribed to one worker each get every batch (the
// publisher serializes a batch once and writes the same bytes to both).
TEST(BlockEventSubscriberTest, TwoGatewaysFollowOneWorker) {
  prometheus::Registry registry;
  Worker w(registry);
  BlockIndex first, second;
  rpc::ChannelCache channels;
  BlockEventSubscriber a(first, channels, {w.server.address}, registry);
  BlockEventSubscriber b(second, channels, {w.server.address}, registry);
  ASSERT_TRUE(a.AwaitSynced(0, kWait));
  ASSERT_TRUE(b.AwaitSynced(0, kWait));
  for (uint64_t i = 1; i <= 50; ++i) w.publisher.Publish(Stored({i}));
  std::vector<engine::BlockEvent> removed = {{.kind = engine::BlockEvent::Kind::kRemoved,
                                              .hash = H(7),
                                              .parent_hash = {},
                                              .tier = engine::KvTier::kDevice}};
  w.publisher.Publish(removed);
  for (BlockEventSubscriber* sub : {&a, &b}) {
    ASSERT_TRUE(sub->AwaitApplied(0, w.publisher.epoch(), 51, kWait));
    EXPECT_EQ(sub->resyncs(), 0);
  }
  for (const BlockIndex* index : {&first, &second}) {
    EXPECT_EQ(index->entries_of(0), 49);
    EXPECT_EQ(OverlapOf(*index, {1, 2, 3, 4, 5, 6, 7, 8}), std::vector<int32_t>{6});
    EXPECT_EQ(index->params()->block_size, 16);
  }
}

// A worker's stream capacity (BlockEventPublisher::SetStreamCapacity, a
// latency target's bound) reaches the gateway: in the snapshot a new
// subscriber gets, with the next block events, and in a batch of its own
// once no batch went out for kCapacityInterval.
TEST(BlockEventSubscriberTest, AWorkersStreamCapacityReachesTheGateway) {
  prometheus::Registry registry;
  Worker w(registry);
  w.publisher.SetStreamCapacity(10);  // batch 1, to no one yet
  BlockIndex index;
  rpc::ChannelCache channels;
  BlockEventSubscriber sub(index, channels, {w.server.address}, registry);
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), 1, kWait));
  EXPECT_EQ(sub.StreamCapacity(0), 10);
  EXPECT_EQ(sub.StreamCapacity(1), 0);  // no such worker

  w.publisher.SetStreamCapacity(12);  // may wait for the next batch...
  w.publisher.Publish(Stored({7}));   // ...which carries it
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), w.publisher.sequence(), kWait));
  EXPECT_EQ(sub.StreamCapacity(0), 12);
  EXPECT_EQ(OverlapOf(index, {7}), std::vector<int32_t>{1});

  // No events: the change goes out on its own once the interval passed
  // (each call checks; the engine calls after every step).
  const uint64_t before = w.publisher.sequence();
  const absl::Time deadline = absl::Now() + kWait;
  while (w.publisher.sequence() == before && absl::Now() < deadline) {
    w.publisher.SetStreamCapacity(3);
    absl::SleepFor(worker::BlockEventPublisher::kCapacityInterval / 10);
  }
  ASSERT_EQ(w.publisher.sequence(), before + 1);
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), before + 1, kWait));
  EXPECT_EQ(sub.StreamCapacity(0), 3);
  EXPECT_EQ(OverlapOf(index, {7}), std::vector<int32_t>{1});  // nothing else moved
  w.publisher.SetStreamCapacity(3);                           // unchanged: no batch
  EXPECT_EQ(w.publisher.sequence(), before + 1);

  // Back to no bound of its own, with the next events.
  w.publisher.SetStreamCapacity(0);
  w.publisher.Publish(Stored({8}));
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), w.publisher.sequence(), kWait));
  EXPECT_EQ(sub.StreamCapacity(0), 0);
  EXPECT_EQ(sub.resyncs(), 0);
}

// A worker's room for hand-offs it would propose for with its draft
// (BlockEventPublisher::SetDraftKvRoom) reaches the gateway as its stream
// capacity does: in the snapshot, with the next events, and alone once no
// batch went out for kCapacityInterval. Unknown until the stream is synced.
TEST(BlockEventSubscriberTest, AWorkersRoomForTheDraftsKvReachesTheGateway) {
  prometheus::Registry registry;
  Worker w(registry);
  w.publisher.SetDraftKvRoom(8);
  BlockIndex index;
  rpc::ChannelCache channels;
  BlockEventSubscriber sub(index, channels, {w.server.address}, registry);
  EXPECT_EQ(sub.DraftKvRoom(1), std::nullopt);  // no such worker
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), w.publisher.sequence(), kWait));
  EXPECT_EQ(sub.DraftKvRoom(0), 8);

  w.publisher.SetDraftKvRoom(0);
  w.publisher.Publish(Stored({7}));
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), w.publisher.sequence(), kWait));
  EXPECT_EQ(sub.DraftKvRoom(0), 0);

  const uint64_t before = w.publisher.sequence();
  const absl::Time deadline = absl::Now() + kWait;
  while (w.publisher.sequence() == before && absl::Now() < deadline) {
    w.publisher.SetDraftKvRoom(-1);  // any number
    absl::SleepFor(worker::BlockEventPublisher::kCapacityInterval / 10);
  }
  ASSERT_EQ(w.publisher.sequence(), before + 1);
  ASSERT_TRUE(sub.AwaitApplied(0, w.publisher.epoch(), before + 1, kWait));
  EXPECT_EQ(sub.DraftKvRoom(0), -1);
  w.publisher.SetDraftKvRoom(-1);  // unchanged: no batch
  EXPECT_EQ(w.publisher.sequence(), before + 1);
  EXPECT_EQ(sub.resyncs(), 0);
}

// Sends what the test scripts: per subscription, a list of batches.
class ScriptedEvents final : public tandem::v1::BlockEvents::CallbackService {
 public:
  explicit ScriptedEvents(std::vector<std::vector<tandem::v1::BlockEventBatch>> script)
      : script_(std::move(script)) {}
  grpc::ServerWriteReactor<tandem::v1::BlockEventBatch>* Watch(
      grpc::CallbackServerContext*, const tandem::v1::WatchBlockEventsRequest*) override {
    absl::MutexLock lock(&mu_);
    const size_t n = std::min(next_++, script_.size() - 1);
    return new Writer(script_[n]);
  }

 private:
  class Writer final : public grpc::ServerWriteReactor<tandem::v1::BlockEventBatch> {
   public:
    explicit Writer(std::vector<tandem::v1::BlockEventBatch> batches)
        : batches_(std::move(batches)) {
      Next();
    }
    void OnWriteDone(bool ok) override {
      if (ok) Next();
    }
    void OnCancel() override {
      absl::MutexLock lock(&mu_);
      if (!finished_) Finish(grpc::Status::CANCELLED);
      finished_ = true;
    }
    void OnDone() override { delete this; }

   private:
    void Next() {
      if (i_ < batches_.size()) StartWrite(&batches_[i_++]);
      // then stays open, as a worker does, until cancelled
    }
    std::vector<tandem::v1::BlockEventBatch> batches_;
    size_t i_ = 0;
    absl::Mutex mu_;
    bool finished_ = false;
  };

  absl::Mutex mu_;
  std::vector<std::vector<tandem::v1::BlockEventBatch>> script_;
  size_t next_ = 0;
};

tandem::v1::BlockEventBatch Batch(uint64_t epoch, uint64_t seq, bool snapshot,
                                  std::vector<uint64_t> stored) {
  tandem::v1::BlockEventBatch b;
  b.set_epoch(epoch);
  b.set_sequence(seq);
  b.set_snapshot(snapshot);
  b.set_block_size(16);
  for (uint64_t v : stored) {
    b.add_stored()->set_low(H(v).low);
    b.mutable_stored()->rbegin()->set_high(H(v).high);
  }
  return b;
}

TEST(BlockEventSubscriberTest, AGapOrANewEpochResyncsToAConsistentIndex) {
  // First stream: a snapshot, then a batch that skips number 6 (a dropped
  // event). Second: the fresh snapshot, then a batch of a new epoch (the
  // worker restarted). Third: the new epoch's snapshot.
  ScriptedEvents events({
      {Batch(7, 5, true, {1, 2}), Batch(7, 7, false, {4})},
      {Batch(7, 7, true, {1, 2, 3, 4}), Batch(8, 1, false, {9})},
      {Batch(8, 1, true, {9})},
  });
  auto server = rpc::StartGrpcServer({}, {&events});
  ASSERT_TRUE(server.ok());
  prometheus::Registry registry;
  BlockIndex index;
  rpc::ChannelCache channels;
  BlockEventSubscriber sub(index, channels, {server->address}, registry);
  ASSERT_TRUE(sub.AwaitApplied(0, 8, 1, kWait));
  EXPECT_EQ(sub.resyncs(), 2);
  // Nothing of the old epoch survives: only the new snapshot's block.
  EXPECT_EQ(index.entries_of(0), 1);
  EXPECT_EQ(OverlapOf(index, {9}), std::vector<int32_t>{1});
  EXPECT_EQ(OverlapOf(index, {1}), std::vector<int32_t>{0});
  rpc::ShutdownServer(*server->server, absl::ZeroDuration());
}

TEST(BlockEventSubscriberTest, AWorkerRestartedOnItsAddressIsSubscribedAgain) {
  prometheus::Registry registry;
  auto before = std::make_unique<Worker>(registry);
  const std::string address = before->server.address;
  before->publisher.Publish(Stored({1, 2}));
  BlockIndex index;
  rpc::ChannelCache channels;
  BlockEventSubscriber sub(index, channels, {address}, registry);
  ASSERT_TRUE(sub.AwaitSynced(0, kWait));
  // The process dies (its stream breaks: a retry after a backoff, not a
  // resync) and a new one comes up on the same address.
  before.reset();
  ASSERT_TRUE(sub.AwaitDisconnected(0, kWait));
  Worker after(registry, address);
  ASSERT_EQ(after.server.address, address);
  after.publisher.Publish(Stored({3, 4, 5}));
  ASSERT_TRUE(sub.AwaitApplied(0, after.publisher.epoch(), 1, kWait));
  EXPECT_EQ(index.entries_of(0), 3);
}

TEST(BlockEventSubscriberTest, WorkersThatComeAndGoAreSubscribedAndDropped) {
  prometheus::Registry registry;
  Worker a(registry), b(registry);
  a.publisher.Publish(Stored({1, 2}));
  b.publisher.Publish(Stored({1}));
  BlockIndex index;
  rpc::ChannelCache channels;
  BlockEventSubscriber sub(index, channels, std::vector<BlockEventSubscriber::Worker>{}, registry);
  sub.SetWorkers({{.slot = 0, .address = a.server.address}});
  ASSERT_TRUE(sub.AwaitSynced(0, kWait));
  EXPECT_EQ(index.entries_of(0), 2);
  // b appears (a DNS name gained an address).
  sub.SetWorkers(
      {{.slot = 0, .address = a.server.address}, {.slot = 3, .address = b.server.address}});
  ASSERT_TRUE(sub.AwaitSynced(3, kWait));
  EXPECT_EQ(index.entries_of(3), 1);
  EXPECT_EQ(a.publisher.subscribers(), 1);  // a's stream was left alone
  // a vanishes: its entries go at once and its stream is cancelled.
  sub.SetWorkers({{.slot = 3, .address = b.server.address}});
  EXPECT_EQ(index.entries_of(0), 0);
  ASSERT_TRUE(sub.AwaitDisconnected(0, kWait));
  a.publisher.Publish(Stored({5}));  // no longer heard
  b.publisher.Publish(Stored({6}));
  ASSERT_TRUE(sub.AwaitApplied(3, b.publisher.epoch(), 2, kWait));
  EXPECT_EQ(index.entries_of(0), 0);
  EXPECT_EQ(index.entries_of(3), 2);
  absl::Time deadline = absl::Now() + kWait;
  while (a.publisher.subscribers() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(a.publisher.subscribers(), 0);
}

// The first subscription gets a snapshot at once; later ones get theirs
// only after Open() (a worker cut off by the network until it heals).
class GatedEvents final : public tandem::v1::BlockEvents::CallbackService {
 public:
  grpc::ServerWriteReactor<tandem::v1::BlockEventBatch>* Watch(
      grpc::CallbackServerContext*, const tandem::v1::WatchBlockEventsRequest*) override {
    absl::MutexLock lock(&mu_);
    tandem::v1::BlockEventBatch snapshot = Batch(7, 1 + subscriptions_, true, {1});
    snapshot.set_kv_capacity_blocks(10);
    auto* w = new Writer(this, std::move(snapshot));
    if (subscriptions_++ == 0 || open_) {
      w->Send();
    } else {
      pending_.push_back(w);
    }
    return w;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
    for (Writer* w : pending_) w->Send();
    pending_.clear();
  }
  int subscriptions() {
    absl::MutexLock lock(&mu_);
    return subscriptions_;
  }

 private:
  class Writer final : public grpc::ServerWriteReactor<tandem::v1::BlockEventBatch> {
   public:
    Writer(GatedEvents* owner, tandem::v1::BlockEventBatch batch)
        : owner_(owner), batch_(std::move(batch)) {}
    void Send() { StartWrite(&batch_); }  // then open until cancelled
    void OnCancel() override { Finish(grpc::Status::CANCELLED); }
    void OnDone() override {
      {
        absl::MutexLock lock(&owner_->mu_);
        std::erase(owner_->pending_, this);
      }
      delete this;
    }

   private:
    GatedEvents* const owner_;
    tandem::v1::BlockEventBatch batch_;
  };

  absl::Mutex mu_;
  int subscriptions_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Writer*> pending_ ABSL_GUARDED_BY(mu_);
};

TEST(BlockEventSubscriberTest, ASuspectedWorkerIsDownUntilAFreshSnapshotArrives) {
  GatedEvents events;
  auto server = rpc::StartGrpcServer({}, {&events});
  ASSERT_TRUE(server.ok());
  prometheus::Registry registry;
  BlockIndex index;
  rpc::ChannelCache channels;
  // Counted under a lock so the test can wait for a notification: they run
  // after the subscriber has let go of its own lock, so they may come later
  // than the state they tell of.
  absl::Mutex changes_mu;
  int changes = 0;
  auto count = [&] {
    absl::MutexLock lock(&changes_mu);
    return changes;
  };
  auto await_count = [&](int n) {
    absl::MutexLock lock(&changes_mu);
    auto reached = [&] { return changes >= n; };
    return changes_mu.AwaitWithTimeout(absl::Condition(&reached), kWait);
  };
  BlockEventSubscriber sub(index, channels, {server->address}, registry, {.on_sync_change = [&] {
                             absl::MutexLock lock(&changes_mu);
                             ++changes;
                           }});
  ASSERT_TRUE(sub.AwaitSynced(0, kWait));
  ASSERT_EQ(index.entries_of(0), 1);
  EXPECT_TRUE(sub.down_slots().empty());
  EXPECT_EQ(sub.SyncedKvCapacity(0).tokens, 160);
  ASSERT_TRUE(await_count(1));  // it became synced
  const int before = count();

  // A call to it stalled: down at once, told at once, its stream restarted
  // for a snapshot that does not come yet.
  sub.Suspect(0);
  EXPECT_EQ(sub.down_slots(), std::vector<int>{0});
  EXPECT_GE(count(), before + 1);  // the stream's end may have told too
  ASSERT_TRUE(sub.AwaitDisconnected(0, kWait));
  // Its ended stream tells once more, after the slot is seen unsynced.
  ASSERT_TRUE(await_count(before + 2));
  EXPECT_EQ(sub.SyncedKvCapacity(0).tokens, 0);
  EXPECT_EQ(index.entries_of(0), 0);
  // Already down (and not synced): a second suspicion changes nothing.
  sub.Suspect(0);
  EXPECT_EQ(sub.down_slots(), std::vector<int>{0});
  EXPECT_EQ(count(), before + 2);
  // Unknown slots are ignored.
  sub.Suspect(42);

  // It answers again: its fresh snapshot brings it back.
  events.Open();
  ASSERT_TRUE(sub.AwaitSynced(0, kWait));
  EXPECT_TRUE(sub.down_slots().empty());
  EXPECT_EQ(index.entries_of(0), 1);
  EXPECT_EQ(sub.SyncedKvCapacity(0).tokens, 160);
  EXPECT_EQ(events.subscriptions(), 2);
  rpc::ShutdownServer(*server->server, absl::ZeroDuration());
}

}  // namespace
}  // namespace tandem::gateway
