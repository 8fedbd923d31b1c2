// A decode worker that receives a corrupted or mismatched KV block fails that
// request cleanly (DATA_LOSS / FAILED_PRECONDITION, no tokens), tells the
// prefill side at once (ReleaseKv with ok=false), and keeps serving. The
// prefill side is a fake in-process Prefill service serving blocks that a
// real engine computed, with chosen damage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "absl/synchronization/mutex.h"
#include "decode_worker/decode_service.h"
#include "engine/engine.h"
#include "kvtransfer/kv_snapshot_codec.h"
#include "rpc/bootstrap.h"
#include "rpc/convert.h"
#include "tests/engine/test_models.h"
#include "tests/kvtransfer/rpc/stripe_writer.h"
#include "tests/kvtransfer/rpc/release_recorder.h"

namespace tandem::decode {
namespace {

using ::testing::HasSubstr;

class FakePrefill final : public tandem::v1::Prefill::Service {
 public:
  explicit FakePrefill(std::vector<std::string> blocks) : blocks_(std::move(blocks)) {}

  // Serves the request's stripe of the blocks, as the lease server does.
  grpc::Status FetchKv(grpc::ServerContext*, const tandem::v1::FetchKvRequest* request,
                       grpc::ServerWriter<tandem::v1::KvBlockMessage>* writer) override {
    absl::MutexLock lock(&mu_);
    kvtransfer::testing::WriteStripe(blocks_, *request, writer);
    return grpc::Status::OK;
  }
  grpc::Status ReleaseKv(grpc::ServerContext*, const tandem::v1::ReleaseKvRequest* r,
                         tandem::v1::ReleaseKvResponse*) override {
    releases_.Record(*r);
    return grpc::Status::OK;
  }
  void set_blocks(std::vector<std::string> b) {
    absl::MutexLock lock(&mu_);
    blocks_ = std::move(b);
  }
  std::vector<tandem::v1::ReleaseKvRequest> WaitForReleases(size_t n) {
    return releases_.WaitFor(n);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> blocks_ ABSL_GUARDED_BY(mu_);
  kvtransfer::testing::ReleaseRecorder releases_;
};

class CorruptKvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = engine::testing::LoadSynthetic(engine::testing::TinyOptions());
    // Real KV for a 40-token prompt, from a prefill-side engine.
    auto prefill = *engine::Engine::Create(*model_, engine::MakeCpuBackend({.threads = 1}), {});
    for (int i = 0; i < 40; ++i) prompt_.push_back(3 + i * 5);
    engine::GenerationRequest r;
    r.prompt = prompt_;
    r.max_tokens = 1;
    r.export_kv = true;
    ASSERT_TRUE(prefill->Add(r).ok());
    auto events = engine::testing::Tokens(prefill->Step());
    ASSERT_TRUE(events.ok());
    first_ = events->front().token;
    good_blocks_ = kvtransfer::EncodeSnapshot(*events->front().kv, prompt_);
    ASSERT_EQ(good_blocks_.size(), 3u);

    fake_ = std::make_unique<FakePrefill>(good_blocks_);
    auto fake_server = rpc::StartGrpcServer({}, {fake_.get()});
    ASSERT_TRUE(fake_server.ok());
    fake_server_ = std::move(*fake_server);

    auto eng = *engine::Engine::Create(*model_, engine::MakeCpuBackend({.threads = 1}), {});
    loop_ = std::make_unique<worker::EngineLoop>(std::move(eng));
    service_ = std::make_unique<DecodeService>(*loop_, registry_, DecodeServiceOptions{});
    auto decode_server = rpc::StartGrpcServer({}, {service_.get()});
    ASSERT_TRUE(decode_server.ok());
    decode_server_ = std::move(*decode_server);
    stub_ = tandem::v1::Decode::NewStub(
        grpc::CreateChannel(decode_server_.address, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    decode_server_.server->Shutdown();
    fake_server_.server->Shutdown();
  }

  // Runs one Decode call; returns its status and the number of tokens seen.
  std::pair<grpc::Status, int> Decode() {
    tandem::v1::DecodeRequest req;
    req.mutable_prompt_token_ids()->Assign(prompt_.begin(), prompt_.end());
    rpc::SampledTokenToProto(first_, req.mutable_first_token());
    req.set_max_tokens(8);
    req.set_ignore_eos(true);
    req.set_prefill_address(fake_server_.address);
    req.set_lease_id("lease-1");
    req.set_num_blocks(3);
    grpc::ClientContext ctx;
    auto reader = stub_->Decode(&ctx, req);
    tandem::v1::DecodeResponse resp;
    int tokens = 0;
    while (reader->Read(&resp)) tokens += resp.tokens_size();
    return {reader->Finish(), tokens};
  }

  // After a call has ended: the worker holds nothing for it. Its admission
  // slot is back, the engine runs and queues nothing, and every KV block is
  // free again (a sequence that was admitted gave its blocks back).
  void ExpectNothingHeld() {
    EXPECT_EQ(service_->admission().in_flight(), 0);
    const engine::EngineStats s = loop_->stats();
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.waiting, 0);
    EXPECT_EQ(s.blocks_used, 0);
    EXPECT_EQ(s.blocks_free, s.blocks_total);
  }

  std::unique_ptr<engine::Model> model_;
  std::vector<int32_t> prompt_;
  engine::SampledToken first_;
  std::vector<std::string> good_blocks_;
  std::unique_ptr<FakePrefill> fake_;
  rpc::StartedServer fake_server_;
  prometheus::Registry registry_;
  std::unique_ptr<worker::EngineLoop> loop_;
  std::unique_ptr<DecodeService> service_;
  rpc::StartedServer decode_server_;
  std::unique_ptr<tandem::v1::Decode::Stub> stub_;
};

TEST_F(CorruptKvTest, FlippedPayloadByteFailsWithDataLoss) {
  std::vector<std::string> blocks = good_blocks_;
  blocks[1][blocks[1].size() / 2] ^= 0x10;
  fake_->set_blocks(blocks);
  auto [status, tokens] = Decode();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("block 1"));
  EXPECT_EQ(tokens, 0);
  ASSERT_EQ(fake_->WaitForReleases(1).size(), 1u);
  EXPECT_FALSE(fake_->WaitForReleases(1)[0].ok());
  ExpectNothingHeld();

  // The worker keeps serving: intact blocks decode fine.
  fake_->set_blocks(good_blocks_);
  auto [ok, n] = Decode();
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(n, 7);  // max_tokens 8, the first came from prefill
  ASSERT_EQ(fake_->WaitForReleases(2).size(), 2u);
  EXPECT_TRUE(fake_->WaitForReleases(2)[1].ok());
  ExpectNothingHeld();
}

TEST_F(CorruptKvTest, BlocksOfAnotherPromptAreRefused) {
  std::vector<std::string> blocks = good_blocks_;
  std::swap(blocks[0], blocks[1]);
  fake_->set_blocks(blocks);
  auto [status, tokens] = Decode();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_EQ(tokens, 0);
  EXPECT_FALSE(fake_->WaitForReleases(1).back().ok());
  ExpectNothingHeld();
}

TEST_F(CorruptKvTest, MissingBlockIsDataLoss) {
  fake_->set_blocks({good_blocks_[0], good_blocks_[1]});
  auto [status, tokens] = Decode();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS) << status.error_message();
  EXPECT_EQ(tokens, 0);
  EXPECT_FALSE(fake_->WaitForReleases(1).back().ok());
  ExpectNothingHeld();
}

}  // namespace
}  // namespace tandem::decode
