// LeaseKeeper against a real KvLeaseServer behind a gRPC server in process:
// a kept lease outlives its TTL for as long as it is kept and lapses after;
// leases the holder no longer knows are reported; the server refuses an
// oversized renewal naming the field.
#include "kvtransfer/rpc/lease_keeper.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvtransfer/rpc/lease_server.h"
#include "prometheus/registry.h"
#include "rpc/bootstrap.h"
#include "rpc/status.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::kvtransfer {
namespace {

// Serves RenewKv from a lease server, as the Prefill service does.
class RenewingPrefill final : public tandem::v1::Prefill::CallbackService {
 public:
  explicit RenewingPrefill(KvLeaseServer& leases) : leases_(leases) {}
  grpc::ServerUnaryReactor* RenewKv(grpc::CallbackServerContext* ctx,
                                    const tandem::v1::RenewKvRequest* request,
                                    tandem::v1::RenewKvResponse* response) override {
    auto* r = ctx->DefaultReactor();
    r->Finish(rpc::ToGrpcStatus(leases_.Renew(*request, response)));
    return r;
  }

 private:
  KvLeaseServer& leases_;
};

class LeaseKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = rpc::StartGrpcServer({}, {&service_});
    ASSERT_TRUE(server.ok());
    server_ = std::move(*server);
  }
  void TearDown() override { server_.server->Shutdown(); }

  std::string HoldOne() {
    auto kv = std::make_shared<engine::KvSnapshot>();
    kv->model_fingerprint = 1;
    kv->n_tokens = 4;
    kv->block_size = 4;
    kv->n_layer = 1;
    kv->kv_dim = 2;
    kv->dtype = engine::GgmlType::kF32;
    kv->blocks.push_back(std::vector<uint8_t>(2 * 4 * 2 * sizeof(float), 7));
    absl::StatusOr<KvLeaseServer::Held> held = leases_.Hold(kv, {1, 2, 3, 4}, 0);
    EXPECT_TRUE(held.ok()) << held.status();
    return held.ok() ? held->lease_id : "";
  }

  // A short TTL, so that keeping a lease alive past it takes many beats.
  prometheus::Registry registry_;
  KvLeaseServer leases_{{.ttl = absl::Milliseconds(300)}, registry_};
  RenewingPrefill service_{leases_};
  rpc::StartedServer server_;
  rpc::ChannelCache channels_{{}};
};

TEST_F(LeaseKeeperTest, AKeptLeaseOutlivesItsTtlAndLapsesOnceLetGo) {
  const std::string id = HoldOne();
  LeaseKeeper keeper(channels_, absl::Milliseconds(30));
  LeaseKeeper::Handle handle = keeper.Keep(server_.address, id);
  EXPECT_EQ(keeper.kept(), 1);
  // 20 beats of 30 ms: twice the TTL.
  ASSERT_TRUE(keeper.AwaitRenewed(20, absl::Seconds(30)));
  EXPECT_EQ(leases_.stats().leases, 1);
  EXPECT_EQ(keeper.unknown(), 0);
  handle.Reset();
  EXPECT_EQ(keeper.kept(), 0);
  EXPECT_TRUE(leases_.table().AwaitAtMost(0, absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(leases_.stats().expired_total, 1);
}

TEST_F(LeaseKeeperTest, LeasesTheHolderNoLongerKnowsAreReported) {
  LeaseKeeper keeper(channels_, absl::Milliseconds(10));
  LeaseKeeper::Handle gone = keeper.Keep(server_.address, "00000000-404");
  ASSERT_TRUE(keeper.AwaitRenewed(1, absl::Seconds(30)));
  EXPECT_GE(keeper.unknown(), 1);
}

TEST_F(LeaseKeeperTest, AZeroPeriodKeepsNothing) {
  LeaseKeeper keeper(channels_, absl::ZeroDuration());
  LeaseKeeper::Handle handle = keeper.Keep(server_.address, HoldOne());
  EXPECT_EQ(keeper.kept(), 0);
}

TEST_F(LeaseKeeperTest, AnOversizedRenewalIsRefusedNamingTheField) {
  tandem::v1::RenewKvRequest request;
  for (int i = 0; i <= KvLeaseServer::kMaxRenewIds; ++i) request.add_lease_ids("x");
  tandem::v1::RenewKvResponse response;
  const absl::Status s = leases_.Renew(request, &response);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lease_ids"), std::string::npos) << s;
}

}  // namespace
}  // namespace tandem::kvtransfer
