// KvFetcher against a real KvLeaseServer in process: a fetch striped over
// any number of streams yields the held bytes and ends the lease; a stream
// that breaks fails the whole fetch with its own status and tells the
// holder; a fetch by another worker takes over a lease whose fetcher was
// lost; an ordinary (protobuf) client reads the raw stream as
// KvBlockMessages; bad stripes are refused naming the field.
#include "kvtransfer/rpc/kv_fetcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "kvtransfer/rpc/lease_server.h"
#include "kvtransfer/rpc/release_client.h"
#include "rpc/bootstrap.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/kvtransfer/rpc/release_recorder.h"

namespace tandem::kvtransfer {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kLayers = 2;
constexpr int32_t kKvDim = 8;
constexpr size_t kBlockBytes = size_t{2} * kLayers * kBlockSize * kKvDim * sizeof(float);

// Serves FetchKv from a lease server, as the Prefill service does; records
// releases. When `break_stripe` is set, that stripe's stream fails at once;
// when `silent_stripe` is, that stripe's stream sends nothing and ends only
// when cancelled (a holder cut off by the network).
class LeasePrefill final : public tandem::v1::Prefill::WithRawCallbackMethod_FetchKv<
                               tandem::v1::Prefill::CallbackService> {
 public:
  explicit LeasePrefill(KvLeaseServer& leases) : leases_(leases) {}
  grpc::ServerWriteReactor<grpc::ByteBuffer>* FetchKv(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* request) override {
    grpc::ByteBuffer copy = *request;
    tandem::v1::FetchKvRequest parsed;
    if (break_stripe_ >= 0 &&
        grpc::SerializationTraits<tandem::v1::FetchKvRequest>::Deserialize(&copy, &parsed).ok() &&
        parsed.stripe() == break_stripe_) {
      class Broken final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
       public:
        Broken() { Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "stripe went away")); }
        void OnDone() override { delete this; }
      };
      return new Broken();
    }
    if (silent_stripe_ >= 0 &&
        grpc::SerializationTraits<tandem::v1::FetchKvRequest>::Deserialize(&copy, &parsed).ok() &&
        parsed.stripe() == silent_stripe_) {
      class Silent final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
       public:
        void OnCancel() override { Finish(grpc::Status::CANCELLED); }
        void OnDone() override { delete this; }
      };
      return new Silent();
    }
    return leases_.Fetch(ctx, request);
  }
  grpc::ServerUnaryReactor* ReleaseKv(grpc::CallbackServerContext* ctx,
                                      const tandem::v1::ReleaseKvRequest* request,
                                      tandem::v1::ReleaseKvResponse*) override {
    releases_.Record(*request);
    leases_.Release(*request);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  void set_break_stripe(int32_t stripe) { break_stripe_ = stripe; }
  void set_silent_stripe(int32_t stripe) { silent_stripe_ = stripe; }
  testing::ReleaseRecorder& releases() { return releases_; }

 private:
  KvLeaseServer& leases_;
  int32_t break_stripe_ = -1;
  int32_t silent_stripe_ = -1;
  testing::ReleaseRecorder releases_;
};

// The value of counter `name` (its one series) in `registry`.
double CounterValue(prometheus::Registry& registry, const std::string& name) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == name && family.metric.size() == 1) return family.metric[0].counter.value;
  }
  return -1;
}

class KvFetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = rpc::StartGrpcServer({}, {&service_});
    ASSERT_TRUE(server.ok());
    server_ = std::move(*server);
  }
  void TearDown() override {
    releases_.AwaitIdle();
    server_.server->Shutdown();
  }

  // `n_tokens` positions of seeded random KV.
  std::shared_ptr<const engine::KvSnapshot> Snapshot(int32_t n_tokens) {
    auto s = std::make_shared<engine::KvSnapshot>();
    s->model_fingerprint = 0xfeed;
    s->n_tokens = n_tokens;
    s->block_size = kBlockSize;
    s->n_layer = kLayers;
    s->kv_dim = kKvDim;
    s->dtype = engine::GgmlType::kF32;
    std::mt19937 rng(static_cast<uint32_t>(n_tokens));
    for (int32_t b = 0; b < (n_tokens + kBlockSize - 1) / kBlockSize; ++b) {
      std::vector<uint8_t> bytes(kBlockBytes);
      for (uint8_t& x : bytes) x = static_cast<uint8_t>(rng());
      // The unused slots of a last, partial block go out as zeros.
      const int32_t used = std::min(kBlockSize, n_tokens - b * kBlockSize);
      for (int32_t half = 0; half < 2 * kLayers; ++half) {
        std::memset(bytes.data() + (half * kBlockSize + used) * kKvDim * sizeof(float), 0,
                    (kBlockSize - used) * kKvDim * sizeof(float));
      }
      s->blocks.push_back(bytes);
    }
    return s;
  }
  // Expects `got` to hold `kv`'s blocks from `first` on, byte for byte.
  static void ExpectBlocksFrom(const engine::KvSnapshot& got, const engine::KvSnapshot& kv,
                               int32_t first, const std::string& what) {
    ASSERT_EQ(got.first_block, first) << what;
    ASSERT_EQ(got.blocks.size(), kv.blocks.size() - first) << what;
    for (size_t b = 0; b < got.blocks.size(); ++b) {
      std::vector<uint8_t> want(kBlockBytes), have(kBlockBytes);
      kv.blocks[first + b].CopyTo(want.data());
      got.blocks[b].CopyTo(have.data());
      EXPECT_EQ(have, want) << what << " block " << first + b;
    }
  }
  // A FetchKv request as an ordinary client writes it.
  static tandem::v1::FetchKvRequest RawRequest(const std::string& lease_id, int32_t stripe = 0,
                                               int32_t stripes = 0, uint64_t fetch_id = 0) {
    tandem::v1::FetchKvRequest req;
    req.set_lease_id(lease_id);
    req.set_stripe(stripe);
    req.set_stripes(stripes);
    req.set_fetch_id(fetch_id);
    return req;
  }
  static std::vector<int32_t> Ids(int32_t n) {
    std::vector<int32_t> ids(n);
    for (int32_t i = 0; i < n; ++i) ids[i] = 10 + i;
    return ids;
  }
  FetchResult Fetch(KvFetcher& fetcher, const KvLeaseServer::Held& held,
                    std::vector<int32_t> ids, int32_t first_block = 0,
                    absl::Duration stall_timeout = absl::InfiniteDuration()) {
    absl::Notification done;
    FetchResult out;
    fetcher.Start({.address = server_.address, .lease_id = held.lease_id,
                   .num_blocks = held.num_blocks, .first_block = first_block,
                   .token_ids = std::move(ids), .stall_timeout = stall_timeout},
                  [&](FetchResult r) {
                    out = std::move(r);
                    done.Notify();
                  });
    done.WaitForNotification();
    return out;
  }

  const BlockExpectation expect_{.model_fingerprint = 0xfeed,
                                 .block_size = kBlockSize,
                                 .layer_count = kLayers,
                                 .kv_dim = kKvDim,
                                 .dtype = engine::GgmlType::kF32,
                                 .payload_bytes = static_cast<int64_t>(kBlockBytes)};
  prometheus::Registry registry_;
  KvLeaseServer leases_{{}, registry_};
  LeasePrefill service_{leases_};
  rpc::StartedServer server_;
  rpc::ChannelCache channels_;
  ReleaseClient releases_{channels_, "test"};
};

TEST_F(KvFetcherTest, StripedFetchYieldsTheHeldBytesAndEndsTheLease) {
  const int32_t n_tokens = 27;  // 7 blocks, the last partial
  const auto kv = Snapshot(n_tokens);
  for (const int32_t streams : {1, 2, 3, 7, 16}) {
    KvFetcher fetcher(channels_, releases_, expect_, registry_, streams);
    absl::StatusOr<KvLeaseServer::Held> held = leases_.Hold(kv, Ids(n_tokens), 0);
    ASSERT_TRUE(held.ok());
    FetchResult r = Fetch(fetcher, *held, Ids(n_tokens));
    ASSERT_TRUE(r.kv.ok()) << "streams " << streams << ": " << r.kv.status();
    ExpectBlocksFrom(**r.kv, *kv, 0, absl::StrCat("streams ", streams));
    // Every stripe completed, so the holder dropped the lease itself.
    EXPECT_EQ(leases_.stats().leases, 0) << "streams " << streams;
  }
}

TEST_F(KvFetcherTest, ADeltaFetchMovesOnlyTheBlocksAfterTheHeldOnes) {
  const int32_t n_tokens = 27;  // 7 blocks, the last partial
  const auto kv = Snapshot(n_tokens);
  prometheus::Registry registry;
  for (const int32_t streams : {1, 2, 3, 5}) {
    KvFetcher fetcher(channels_, releases_, expect_, registry, streams);
    absl::StatusOr<KvLeaseServer::Held> held = leases_.Hold(kv, Ids(n_tokens), 0);
    ASSERT_TRUE(held.ok());
    // The hand-off names the full blocks' hashes: the 6 full ones.
    EXPECT_EQ(held->full_block_hashes.size(), 6u);
    FetchResult r = Fetch(fetcher, *held, Ids(n_tokens), /*first_block=*/4);
    ASSERT_TRUE(r.kv.ok()) << "streams " << streams << ": " << r.kv.status();
    ExpectBlocksFrom(**r.kv, *kv, 4, absl::StrCat("streams ", streams));
    EXPECT_EQ(leases_.stats().leases, 0) << "streams " << streams;
  }
  // 4 fetches, each skipping 4 blocks and receiving 3.
  EXPECT_EQ(CounterValue(registry, "tandem_kv_transfer_blocks_skipped_total"), 16);
  EXPECT_EQ(CounterValue(registry, "tandem_kv_transfer_blocks_total"), 12);
}

TEST_F(KvFetcherTest, ABrokenStreamFailsTheFetchWithItsStatusAndReleasesTheLease) {
  service_.set_break_stripe(1);
  KvFetcher fetcher(channels_, releases_, expect_, registry_, 3);
  const auto kv = Snapshot(40);
  absl::StatusOr<KvLeaseServer::Held> held = leases_.Hold(kv, Ids(40), 0);
  ASSERT_TRUE(held.ok());
  FetchResult r = Fetch(fetcher, *held, Ids(40));
  EXPECT_EQ(r.kv.status().code(), absl::StatusCode::kUnavailable) << r.kv.status();
  EXPECT_THAT(std::string(r.kv.status().message()), HasSubstr("stripe went away"));
  const std::vector<tandem::v1::ReleaseKvRequest> released = service_.releases().WaitFor(1);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_FALSE(released[0].ok());
  EXPECT_EQ(released[0].lease_id(), held->lease_id);
  EXPECT_TRUE(leases_.table().AwaitAtMost(0, absl::Now() + absl::Seconds(10)));
}

// A holder cut off by the network sends nothing and resets nothing: the
// stall timeout fails the fetch Unavailable, naming the holder, and the
// holder is told; a fetch whose blocks flow is untouched by the same timeout.
TEST_F(KvFetcherTest, AFetchThatReceivesNothingFailsAfterTheStallTimeout) {
  KvFetcher fetcher(channels_, releases_, expect_, registry_, 2);
  const auto kv = Snapshot(40);
  {
    absl::StatusOr<KvLeaseServer::Held> held = leases_.Hold(kv, Ids(40), 0);
    ASSERT_TRUE(held.ok());
    FetchResult r = Fetch(fetcher, *held, Ids(40), 0, absl::Milliseconds(200));
    ASSERT_TRUE(r.kv.ok()) << r.kv.status();
  }
  service_.set_silent_stripe(1);
  absl::StatusOr<KvLeaseServer::Held> held = leases_.Hold(kv, Ids(40), 0);
  ASSERT_TRUE(held.ok());
  const absl::Time start = absl::Now();
  FetchResult r = Fetch(fetcher, *held, Ids(40), 0, absl::Milliseconds(200));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(r.kv.status().code(), absl::StatusCode::kUnavailable) << r.kv.status();
  EXPECT_THAT(std::string(r.kv.status().message()), HasSubstr("no block arrived"));
  EXPECT_THAT(std::string(r.kv.status().message()), HasSubstr(server_.address));
  const std::vector<tandem::v1::ReleaseKvRequest> released = service_.releases().WaitFor(2);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_TRUE(released[0].ok());
  EXPECT_FALSE(released[1].ok());
  EXPECT_EQ(released[1].lease_id(), held->lease_id);
}

// A decode worker lost mid-fetch leaves its streams open until the holder
// notices; the gateway meanwhile hands the lease to another worker, which
// holds other blocks and so fetches in another layout. Its fetch takes the
// lease over and yields the blocks; the lost fetch's stream breaking off
// afterwards leaves nothing behind.
TEST_F(KvFetcherTest, AnotherWorkersFetchTakesOverALeaseWhoseFetcherWasLost) {
  const int32_t n_tokens = 27;  // 7 blocks, the last partial
  const auto kv = Snapshot(n_tokens);
  absl::StatusOr<KvLeaseServer::Held> held = leases_.Hold(kv, Ids(n_tokens), 0);
  ASSERT_TRUE(held.ok());
  auto stub = tandem::v1::Prefill::NewStub(channels_.Get(server_.address));
  grpc::ClientContext lost_ctx;
  auto lost_reader = stub->FetchKv(&lost_ctx, RawRequest(held->lease_id, 0, 2, /*fetch_id=*/1));
  tandem::v1::KvBlockMessage m;
  ASSERT_TRUE(lost_reader->Read(&m));  // the lost fetch holds the lease
  EXPECT_EQ(m.index(), 0);

  KvFetcher fetcher(channels_, releases_, expect_, registry_, 3);
  FetchResult r = Fetch(fetcher, *held, Ids(n_tokens), /*first_block=*/2);
  ASSERT_TRUE(r.kv.ok()) << r.kv.status();
  ExpectBlocksFrom(**r.kv, *kv, 2, "after the lost fetch");
  EXPECT_EQ(leases_.stats().leases, 0);
  // The lost stream may have sent its stripe by now or may still be
  // writing; either way it ends without reviving the lease.
  lost_ctx.TryCancel();
  while (lost_reader->Read(&m)) {
  }
  lost_reader->Finish();
  EXPECT_EQ(leases_.stats().leases, 0);
}

TEST_F(KvFetcherTest, TheRawStreamReadsAsKvBlockMessagesAndRefusesBadStripes) {
  const auto kv = Snapshot(9);  // 3 blocks
  absl::StatusOr<KvLeaseServer::Held> held = leases_.Hold(kv, Ids(9), 0);
  ASSERT_TRUE(held.ok());
  auto stub = tandem::v1::Prefill::NewStub(channels_.Get(server_.address));
  {
    grpc::ClientContext ctx;
    auto reader = stub->FetchKv(&ctx, RawRequest(held->lease_id, 3, 2));
    tandem::v1::KvBlockMessage m;
    EXPECT_FALSE(reader->Read(&m));
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("stripe:"));
  }
  // No stripes named (an older client): every block on one stream.
  grpc::ClientContext ctx;
  auto reader = stub->FetchKv(&ctx, RawRequest(held->lease_id));
  tandem::v1::KvBlockMessage m;
  std::vector<int32_t> indices;
  while (reader->Read(&m)) {
    indices.push_back(m.index());
    EXPECT_EQ(m.block().size(), kBlockHeaderBytes + kBlockBytes + kBlockChecksumBytes);
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(indices, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(leases_.stats().leases, 0);
}

}  // namespace
}  // namespace tandem::kvtransfer
