#include "rpc/channel_cache.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "rpc/bootstrap.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::rpc {
namespace {

TEST(ChannelCacheTest, ReusesTheChannelOfAnAddress) {
  ChannelCache cache;
  auto a = cache.Get("127.0.0.1:1");
  EXPECT_EQ(cache.Get("127.0.0.1:1"), a);
  EXPECT_NE(cache.Get("127.0.0.1:2"), a);
  EXPECT_EQ(cache.size(), 2);
}

TEST(ChannelCacheTest, DropsTheLeastRecentlyUsedAddressPastTheBound) {
  ChannelCache cache({.max_channels = 2});
  auto a = cache.Get("127.0.0.1:1");
  auto b = cache.Get("127.0.0.1:2");
  EXPECT_EQ(cache.Get("127.0.0.1:1"), a);  // :1 is now the most recent
  cache.Get("127.0.0.1:3");                // evicts :2
  EXPECT_EQ(cache.size(), 2);
  EXPECT_EQ(cache.Get("127.0.0.1:1"), a);
  EXPECT_NE(cache.Get("127.0.0.1:2"), b);  // created again
  EXPECT_EQ(cache.size(), 2);
  // 1000 distinct addresses never grow it past the bound.
  for (int i = 0; i < 1000; ++i) cache.Get("127.0.0.1:" + std::to_string(10000 + i));
  EXPECT_EQ(cache.size(), 2);
}

// Records the peer (client address and port) of every call.
class PeerRecorder final : public tandem::v1::Prefill::CallbackService {
 public:
  grpc::ServerUnaryReactor* GetWorkerStats(grpc::CallbackServerContext* ctx,
                                           const tandem::v1::WorkerStatsRequest*,
                                           tandem::v1::WorkerStats*) override {
    {
      absl::MutexLock lock(&mu_);
      peers_.insert(ctx->peer());
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  std::set<std::string> peers() {
    absl::MutexLock lock(&mu_);
    return peers_;
  }

 private:
  absl::Mutex mu_;
  std::set<std::string> peers_ ABSL_GUARDED_BY(mu_);
};

TEST(ChannelCacheTest, NumberedConnectionsAreSeparateTcpConnections) {
  PeerRecorder service;
  absl::StatusOr<StartedServer> server = StartGrpcServer({}, {&service});
  ASSERT_TRUE(server.ok());
  ChannelCache cache;
  auto first = cache.Get(server->address, 1);
  EXPECT_EQ(cache.Get(server->address, 1), first);
  EXPECT_NE(cache.Get(server->address, 0), first);
  for (int connection : {0, 1, 2, 1, 0}) {
    grpc::ClientContext ctx;
    tandem::v1::WorkerStats stats;
    ASSERT_TRUE(tandem::v1::Prefill::NewStub(cache.Get(server->address, connection))
                    ->GetWorkerStats(&ctx, {}, &stats)
                    .ok());
  }
  // Three connections, each its own client port.
  EXPECT_EQ(service.peers().size(), 3u);
  server->server->Shutdown();
}

}  // namespace
}  // namespace tandem::rpc
