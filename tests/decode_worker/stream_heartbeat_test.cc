// A Decode stream with nothing to send says it is alive: while its KV fetch
// is held up, the decode worker sends heartbeat messages (no tokens, no
// other field) every --stream-heartbeat-ms, and the tokens follow once the
// blocks arrive. The prefill side is a fake in-process Prefill service
// whose FetchKv waits until the test lets it go, serving blocks a real
// engine computed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "absl/synchronization/notification.h"
#include "decode_worker/decode_service.h"
#include "engine/engine.h"
#include "kvtransfer/kv_snapshot_codec.h"
#include "rpc/bootstrap.h"
#include "rpc/convert.h"
#include "tests/engine/test_models.h"
#include "tests/kvtransfer/rpc/stripe_writer.h"

namespace tandem::decode {
namespace {

class HeldPrefill final : public tandem::v1::Prefill::Service {
 public:
  explicit HeldPrefill(std::vector<std::string> blocks) : blocks_(std::move(blocks)) {}

  grpc::Status FetchKv(grpc::ServerContext* ctx, const tandem::v1::FetchKvRequest* request,
                       grpc::ServerWriter<tandem::v1::KvBlockMessage>* writer) override {
    // Held until the test has seen heartbeats (or the call is cancelled).
    while (!release_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
    }
    kvtransfer::testing::WriteStripe(blocks_, *request, writer);
    return grpc::Status::OK;
  }
  grpc::Status ReleaseKv(grpc::ServerContext*, const tandem::v1::ReleaseKvRequest*,
                         tandem::v1::ReleaseKvResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status RenewKv(grpc::ServerContext*, const tandem::v1::RenewKvRequest*,
                       tandem::v1::RenewKvResponse*) override {
    return grpc::Status::OK;
  }
  void Release() { release_.Notify(); }

 private:
  const std::vector<std::string> blocks_;
  absl::Notification release_;
};

TEST(StreamHeartbeatTest, AStreamWaitingOnItsKvSaysItIsAlive) {
  auto model = engine::testing::LoadSynthetic(engine::testing::TinyOptions());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(3 + i * 5);
  auto prefill_engine =
      *engine::Engine::Create(*model, engine::MakeCpuBackend({.threads = 1}), {});
  engine::GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 1;
  r.export_kv = true;
  ASSERT_TRUE(prefill_engine->Add(r).ok());
  auto events = engine::testing::Tokens(prefill_engine->Step());
  ASSERT_TRUE(events.ok());
  HeldPrefill prefill(kvtransfer::EncodeSnapshot(*events->front().kv, prompt));
  auto prefill_server = rpc::StartGrpcServer({}, {&prefill});
  ASSERT_TRUE(prefill_server.ok());

  auto eng = *engine::Engine::Create(*model, engine::MakeCpuBackend({.threads = 1}), {});
  worker::EngineLoop loop(std::move(eng));
  prometheus::Registry registry;
  DecodeServiceOptions options;
  options.stream_heartbeat = absl::Milliseconds(20);
  DecodeService service(loop, registry, options);
  auto decode_server = rpc::StartGrpcServer({}, {&service});
  ASSERT_TRUE(decode_server.ok());
  auto stub = tandem::v1::Decode::NewStub(
      grpc::CreateChannel(decode_server->address, grpc::InsecureChannelCredentials()));

  tandem::v1::DecodeRequest req;
  req.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
  rpc::SampledTokenToProto(events->front().token, req.mutable_first_token());
  req.set_max_tokens(6);
  req.set_ignore_eos(true);
  req.set_prefill_address(prefill_server->address);
  req.set_lease_id("lease-1");
  req.set_num_blocks(3);
  grpc::ClientContext ctx;
  auto reader = stub->Decode(&ctx, req);
  tandem::v1::DecodeResponse resp;
  int heartbeats = 0;
  int tokens = 0;
  while (reader->Read(&resp)) {
    if (resp.heartbeat()) {
      EXPECT_EQ(resp.tokens_size(), 0);
      EXPECT_EQ(resp.finish_reason(), tandem::v1::FINISH_REASON_UNSPECIFIED);
      // Two in a row while the fetch is held: then let the blocks go.
      if (++heartbeats == 2) prefill.Release();
      continue;
    }
    tokens += resp.tokens_size();
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_GE(heartbeats, 2);
  EXPECT_EQ(tokens, 5);  // max_tokens less the first, which came with the KV
  decode_server->server->Shutdown();
  prefill_server->server->Shutdown();
}

}  // namespace
}  // namespace tandem::decode
