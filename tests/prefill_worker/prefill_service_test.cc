// The Prefill service with a real engine (tiny synthetic model) served over
// in-process gRPC: a prefill leaves its blocks under a lease that a complete
// fetch ends, an abandoned fetch ends too, a release ends it, and the lease
// byte budget refuses with RESOURCE_EXHAUSTED and a retry hint.
#include "prefill_worker/prefill_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvtransfer/kv_snapshot_codec.h"
#include "rpc/bootstrap.h"
#include "tests/engine/test_models.h"

namespace tandem::prefill {
namespace {

using ::testing::HasSubstr;

class PrefillServiceTest : public ::testing::Test {
 protected:
  void Start(const PrefillServiceOptions& options) {
    model_ = engine::testing::LoadSynthetic(engine::testing::TinyOptions());
    auto eng = engine::Engine::Create(*model_, engine::MakeCpuBackend({.threads = 1}), {});
    ASSERT_TRUE(eng.ok()) << eng.status();
    loop_ = std::make_unique<worker::EngineLoop>(std::move(*eng));
    service_ = std::make_unique<PrefillService>(*loop_, registry_, options);
    auto s = rpc::StartGrpcServer({}, {service_.get()});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = tandem::v1::Prefill::NewStub(
        grpc::CreateChannel(server_.address, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_.server != nullptr) server_.server->Shutdown();
  }

  // A 40-token prompt: 3 blocks of 16.
  tandem::v1::PrefillRequest Request() {
    tandem::v1::PrefillRequest r;
    for (int i = 0; i < 40; ++i) r.add_prompt_token_ids(3 + i * 5);
    return r;
  }

  std::unique_ptr<engine::Model> model_;
  prometheus::Registry registry_;
  std::unique_ptr<worker::EngineLoop> loop_;
  std::unique_ptr<PrefillService> service_;
  rpc::StartedServer server_;
  std::unique_ptr<tandem::v1::Prefill::Stub> stub_;
};

TEST_F(PrefillServiceTest, ACompleteFetchEndsTheLease) {
  Start({});
  grpc::ClientContext ctx;
  tandem::v1::PrefillResponse resp;
  ASSERT_TRUE(stub_->Prefill(&ctx, Request(), &resp).ok());
  EXPECT_EQ(resp.num_blocks(), 3);
  EXPECT_EQ(resp.num_tokens(), 40);
  EXPECT_EQ(service_->leases().stats().leases, 1);
  EXPECT_GT(service_->leases().stats().bytes, 0);

  grpc::ClientContext fctx;
  tandem::v1::FetchKvRequest fetch;
  fetch.set_lease_id(resp.lease_id());
  auto reader = stub_->FetchKv(&fctx, fetch);
  std::vector<std::string> blocks;
  tandem::v1::KvBlockMessage msg;
  while (reader->Read(&msg)) blocks.push_back(msg.block());
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(blocks.size(), 3u);
  // The blocks are the prompt's, verified by the receiving codec.
  const tandem::v1::PrefillRequest request = Request();
  const std::vector<int32_t> prompt(request.prompt_token_ids().begin(),
                                    request.prompt_token_ids().end());
  auto kv = kvtransfer::DecodeSnapshot(
      blocks,
      kvtransfer::ExpectationFor(model_->config(), model_->fingerprint(), loop_->kv_block_size(),
                                 loop_->kv_dtype()),
      prompt);
  EXPECT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(service_->leases().stats().leases, 0);

  // Gone for good: a second fetch is NOT_FOUND naming the lease.
  grpc::ClientContext again;
  auto second = stub_->FetchKv(&again, fetch);
  while (second->Read(&msg)) {
  }
  const grpc::Status s = second->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("lease_id"));
}

TEST_F(PrefillServiceTest, AnAbandonedFetchEndsTheLease) {
  Start({});
  grpc::ClientContext ctx;
  tandem::v1::PrefillResponse resp;
  ASSERT_TRUE(stub_->Prefill(&ctx, Request(), &resp).ok());
  grpc::ClientContext fctx;
  tandem::v1::FetchKvRequest fetch;
  fetch.set_lease_id(resp.lease_id());
  auto reader = stub_->FetchKv(&fctx, fetch);
  tandem::v1::KvBlockMessage msg;
  ASSERT_TRUE(reader->Read(&msg));  // one block, then the fetching side is gone
  fctx.TryCancel();
  reader->Finish();
  EXPECT_TRUE(service_->leases().table().AwaitAtMost(0, absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(service_->leases().stats().bytes, 0);
}

TEST_F(PrefillServiceTest, AReleaseEndsTheLease) {
  Start({});
  grpc::ClientContext ctx;
  tandem::v1::PrefillResponse resp;
  ASSERT_TRUE(stub_->Prefill(&ctx, Request(), &resp).ok());
  grpc::ClientContext rctx;
  tandem::v1::ReleaseKvRequest release;
  release.set_lease_id(resp.lease_id());
  release.set_cancelled(true);
  tandem::v1::ReleaseKvResponse ignored;
  ASSERT_TRUE(stub_->ReleaseKv(&rctx, release, &ignored).ok());
  EXPECT_EQ(service_->leases().stats().leases, 0);
}

TEST_F(PrefillServiceTest, TheLeaseByteBudgetRefusesWithARetryHint) {
  // One 40-token prompt's blocks are ~3 x 16 KiB here; 20 KiB holds one block.
  PrefillServiceOptions o;
  o.leases.max_bytes = 20 << 10;
  o.admission.retry_after = absl::Milliseconds(75);
  Start(o);
  grpc::ClientContext ctx;
  tandem::v1::PrefillResponse resp;
  const grpc::Status s = stub_->Prefill(&ctx, Request(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("max_lease_bytes"));
  const auto& trailers = ctx.GetServerTrailingMetadata();
  auto hint = trailers.find(rpc::kRetryAfterMsKey);
  ASSERT_NE(hint, trailers.end());
  EXPECT_EQ(std::string(hint->second.data(), hint->second.size()), "75");
  EXPECT_EQ(service_->admission().in_flight(), 0);
  // The engine freed the sequence's blocks whatever became of the lease.
  EXPECT_EQ(loop_->stats().blocks_used, 0);
}

TEST_F(PrefillServiceTest, OverTheInFlightBoundIsRefusedBeforeAnyWork) {
  PrefillServiceOptions o;
  o.admission.max_in_flight = 1;
  o.admission.max_queued_tokens = 16;
  Start(o);
  // A 40-token prompt alone passes the 16-token bound (nothing else queued),
  // so one request always gets through.
  grpc::ClientContext ctx;
  tandem::v1::PrefillResponse resp;
  EXPECT_TRUE(stub_->Prefill(&ctx, Request(), &resp).ok());
  EXPECT_EQ(service_->admission().queued_tokens(), 0);
}

}  // namespace
}  // namespace tandem::prefill
