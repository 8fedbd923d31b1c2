// The BlockEventPublisher as a gateway sees it, over real gRPC: a batch
// carries the net change per (hash, tier) since the last one (a block
// stored and removed again in between is in neither list); with a
// coalescing interval, steps within it of the last batch go out together,
// from the publisher's own thread once the interval has passed, or at once
// when another gateway subscribes (its snapshot includes them), carrying
// the time the first of them was published. A worker's interval out of
// range is refused at start-up.
#include "worker/block_event_publisher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "rpc/bootstrap.h"
#include "rpc/convert.h"
#include "worker/worker_main.h"

namespace tandem::worker {
namespace {

constexpr absl::Duration kWait = absl::Seconds(10);

engine::BlockHash H(uint64_t v) { return engine::BlockHash{.low = v, .high = ~v}; }

engine::BlockEvent Event(engine::BlockEvent::Kind kind, uint64_t v,
                         engine::KvTier tier = engine::KvTier::kDevice) {
  return {.kind = kind, .hash = H(v), .parent_hash = {}, .tier = tier};
}
engine::BlockEvent Store(uint64_t v, engine::KvTier tier = engine::KvTier::kDevice) {
  return Event(engine::BlockEvent::Kind::kStored, v, tier);
}
engine::BlockEvent Remove(uint64_t v, engine::KvTier tier = engine::KvTier::kDevice) {
  return Event(engine::BlockEvent::Kind::kRemoved, v, tier);
}

std::vector<uint64_t> Lows(
    const google::protobuf::RepeatedPtrField<tandem::v1::BlockHashProto>& hs) {
  std::vector<uint64_t> out;
  for (const tandem::v1::BlockHashProto& h : hs) {
    EXPECT_EQ(h.high(), ~h.low());
    out.push_back(h.low());
  }
  return out;
}

// A publisher behind a gRPC server.
struct Served {
  Served(prometheus::Registry& registry, absl::Duration coalesce)
      : publisher({.model_fingerprint = 5, .block_size = 16, .coalesce = coalesce}, registry) {
    auto s = rpc::StartGrpcServer(rpc::ServerOptions{}, {&publisher});
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) server = std::move(*s);
  }
  ~Served() {
    if (server.server != nullptr) rpc::ShutdownServer(*server.server, absl::ZeroDuration());
  }
  BlockEventPublisher publisher;
  rpc::StartedServer server;
};

// One gateway's stream, read on a thread of its own into a list.
class Watcher {
 public:
  explicit Watcher(const std::string& address)
      : stub_(tandem::v1::BlockEvents::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        reader_(stub_->Watch(&ctx_, tandem::v1::WatchBlockEventsRequest())),
        thread_([this] {
          tandem::v1::BlockEventBatch batch;
          while (reader_->Read(&batch)) {
            absl::MutexLock lock(&mu_);
            batches_.push_back(batch);
          }
        }) {}
  ~Watcher() {
    ctx_.TryCancel();
    thread_.join();
    reader_->Finish();
  }
  // The stream's next batch, waiting up to kWait.
  std::optional<tandem::v1::BlockEventBatch> Next() {
    absl::MutexLock lock(&mu_);
    const auto arrived = [this]()
                             ABSL_NO_THREAD_SAFETY_ANALYSIS { return batches_.size() > read_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), kWait)) return std::nullopt;
    return batches_[read_++];
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<tandem::v1::BlockEvents::Stub> stub_;
  std::unique_ptr<grpc::ClientReader<tandem::v1::BlockEventBatch>> reader_;
  absl::Mutex mu_;
  std::vector<tandem::v1::BlockEventBatch> batches_ ABSL_GUARDED_BY(mu_);
  size_t read_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

TEST(BlockEventPublisherTest, ABatchCarriesTheNetChangeOfItsStep) {
  prometheus::Registry registry;
  Served w(registry, absl::ZeroDuration());
  Watcher gateway(w.server.address);
  std::optional<tandem::v1::BlockEventBatch> b = gateway.Next();
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(b->snapshot());

  w.publisher.Publish(std::vector<engine::BlockEvent>{Store(1), Store(2), Store(3)});
  b = gateway.Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->sequence(), 1u);
  EXPECT_EQ(Lows(b->stored()), (std::vector<uint64_t>{1, 2, 3}));

  // Stored and evicted in one step: in neither list. A removal of a block
  // never reported is not sent; a block leaving one tier for another is.
  w.publisher.Publish(std::vector<engine::BlockEvent>{Store(4), Remove(4), Remove(9),
                                                      Store(1, engine::KvTier::kHost), Remove(1),
                                                      Store(5), Remove(2), Store(2)});
  b = gateway.Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->sequence(), 2u);
  EXPECT_EQ(Lows(b->stored()), (std::vector<uint64_t>{5}));
  EXPECT_EQ(Lows(b->removed()), (std::vector<uint64_t>{1}));
  ASSERT_EQ(b->tiers_size(), 1);
  EXPECT_EQ(b->tiers(0).tier(), tandem::v1::KV_TIER_HOST);
  EXPECT_EQ(Lows(b->tiers(0).stored()), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(b->tiers(0).removed().empty());
  EXPECT_EQ(w.publisher.blocks_held(), 4);  // 1 (host), 2, 3, 5
  EXPECT_EQ(w.publisher.sequence(), 2u);
}

TEST(BlockEventPublisherTest, StepsWithinTheIntervalWaitForOneBatch) {
  prometheus::Registry registry;
  // Longer than any test runs: only a new subscriber sends what waits.
  Served w(registry, absl::Hours(1));
  Watcher first(w.server.address);
  ASSERT_TRUE(first.Next().has_value());  // the snapshot

  w.publisher.Publish(std::vector<engine::BlockEvent>{Store(1), Store(2)});  // due: sent
  std::optional<tandem::v1::BlockEventBatch> b = first.Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Lows(b->stored()), (std::vector<uint64_t>{1, 2}));

  w.publisher.Publish(std::vector<engine::BlockEvent>{Store(3), Store(4)});
  const double first_waiting = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  w.publisher.Publish(std::vector<engine::BlockEvent>{Remove(3), Remove(1)});
  w.publisher.Publish(std::vector<engine::BlockEvent>{Store(5)});
  EXPECT_EQ(w.publisher.sequence(), 1u);  // all three wait
  // The worker's own view is current meanwhile.
  EXPECT_EQ(w.publisher.blocks_held(), 3);  // 2, 4, 5
  const std::vector<engine::BlockHash> chain = {H(2), H(4), H(5), H(1)};
  EXPECT_EQ(w.publisher.LeadingHeld(chain), 3);

  // A second gateway: what waited goes to the first, then its snapshot.
  Watcher second(w.server.address);
  b = first.Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->sequence(), 2u);
  EXPECT_EQ(Lows(b->stored()), (std::vector<uint64_t>{4, 5}));  // 3 came and went
  EXPECT_EQ(Lows(b->removed()), (std::vector<uint64_t>{1}));
  // Produced when its first event came (the event lag counts the wait),
  // not when it went out.
  EXPECT_LE(b->produced_unix_seconds(), first_waiting);
  std::optional<tandem::v1::BlockEventBatch> snapshot = second.Next();
  ASSERT_TRUE(snapshot.has_value());
  EXPECT_TRUE(snapshot->snapshot());
  EXPECT_EQ(snapshot->sequence(), 2u);
  std::vector<uint64_t> held = Lows(snapshot->stored());
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<uint64_t>{2, 4, 5}));
}

TEST(BlockEventPublisherTest, WhatWaitsGoesOutOnceTheIntervalHasPassed) {
  prometheus::Registry registry;
  Served w(registry, absl::Milliseconds(20));
  Watcher gateway(w.server.address);
  ASSERT_TRUE(gateway.Next().has_value());  // the snapshot
  // However the steps fall against the interval, every event arrives with
  // no further call, in batches numbered one after another.
  for (uint64_t v = 1; v <= 5; ++v) {
    w.publisher.Publish(std::vector<engine::BlockEvent>{Store(v)});
  }
  std::vector<uint64_t> stored;
  uint64_t sequence = 0;
  while (stored.size() < 5) {
    std::optional<tandem::v1::BlockEventBatch> b = gateway.Next();
    ASSERT_TRUE(b.has_value()) << "waiting for block " << stored.size() + 1;
    EXPECT_EQ(b->sequence(), ++sequence);
    for (uint64_t v : Lows(b->stored())) stored.push_back(v);
  }
  EXPECT_EQ(stored, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(w.publisher.sequence(), sequence);
  // Steps waiting when the publisher goes away do not hold it up.
  w.publisher.Publish(std::vector<engine::BlockEvent>{Store(6)});
  w.publisher.Publish(std::vector<engine::BlockEvent>{Store(7)});
}

// A worker's --block-events-coalesce-ms out of range fails start-up, named.
TEST(BlockEventPublisherTest, AnIntervalOutOfRangeIsRefusedByName) {
  for (const char* bad : {"-1", "1001", "soon"}) {
    absl::StatusOr<common::Args> args = common::Args::Parse(
        {"--model", "/nonexistent.gguf", "--block-events-coalesce-ms", bad}, WorkerFlagSpecs());
    ASSERT_TRUE(args.ok()) << args.status();
    absl::StatusOr<Worker> w =
        StartWorker(*args, [](prometheus::Registry&) { return EngineLoop::StepObserver(); });
    ASSERT_FALSE(w.ok()) << bad;
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(w.status().message().find("--block-events-coalesce-ms"), std::string::npos)
        << w.status();
  }
}

}  // namespace
}  // namespace tandem::worker
