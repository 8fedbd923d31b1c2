// A decode worker's idle sessions expire on the Decode service's clock: a
// session record put with its own idle TTL is listed until that TTL passes
// (listing does not keep it alive), then is gone, and the sweeper that
// drops it lets go of the KV the session's turn left pinned. The service
// runs a real engine (tiny synthetic model) over in-process gRPC; its
// session clock is a fake the test moves, so no TTL is waited out.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "decode_worker/decode_service.h"
#include "rpc/bootstrap.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem::decode {
namespace {

// Moved by hand; read from the service's RPC threads and its sweeper.
class FakeClock {
 public:
  absl::Time Now() const { return absl::FromUnixNanos(nanos_.load()); }
  void Advance(absl::Duration d) { nanos_ += absl::ToInt64Nanoseconds(d); }

 private:
  std::atomic<int64_t> nanos_{absl::ToUnixNanos(absl::FromUnixSeconds(1000))};
};

class SessionExpiryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = engine::testing::LoadSynthetic(engine::testing::TinyOptions());
    auto eng = engine::Engine::Create(*model_, engine::testing::MakeTestBackend(1), {});
    ASSERT_TRUE(eng.ok()) << eng.status();
    loop_ = std::make_unique<worker::EngineLoop>(std::move(*eng));
    // The sweeper looks often in real time; what it finds expired is up to
    // the fake clock.
    DecodeServiceOptions options;
    options.sessions = {.max_sessions = 8,
                        .sweep_interval = absl::Milliseconds(1),
                        .clock = [this] { return clock_.Now(); }};
    service_ = std::make_unique<DecodeService>(*loop_, registry_, options);
    auto server = rpc::StartGrpcServer({}, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = tandem::v1::Decode::NewStub(
        grpc::CreateChannel(server_.address, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_.server != nullptr) server_.server->Shutdown();
  }

  // One turn of `session`, prefilled here (no prefill worker): its full
  // blocks stay pinned when it ends.
  grpc::Status Turn(const std::string& session) {
    tandem::v1::DecodeRequest req;
    for (int i = 0; i < 40; ++i) req.add_prompt_token_ids(3 + i * 5);
    req.set_max_tokens(4);
    req.set_ignore_eos(true);
    req.set_session_id(session);
    grpc::ClientContext ctx;
    auto reader = stub_->Decode(&ctx, req);
    tandem::v1::DecodeResponse resp;
    while (reader->Read(&resp)) {
    }
    return reader->Finish();
  }

  grpc::Status Put(const std::string& session, int32_t idle_ttl_seconds) {
    tandem::v1::PutSessionRequest req;
    req.mutable_record()->set_session_id(session);
    req.mutable_record()->set_version(1);
    req.mutable_record()->set_idle_ttl_seconds(idle_ttl_seconds);
    tandem::v1::PutSessionResponse resp;
    grpc::ClientContext ctx;
    return stub_->PutSession(&ctx, req, &resp);
  }

  std::vector<std::string> Listed() {
    grpc::ClientContext ctx;
    tandem::v1::ListSessionRecordsResponse resp;
    EXPECT_TRUE(stub_->ListSessions(&ctx, {}, &resp).ok());
    std::vector<std::string> ids;
    for (const tandem::v1::SessionRecord& r : resp.records()) ids.push_back(r.session_id());
    return ids;
  }

  // The engine lets go of a session's blocks between two steps, after the
  // sweeper has dropped its record: polls the engine's stats until nothing
  // is pinned (or 30 s pass) and returns the last count.
  int32_t AwaitUnpinned() {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    int32_t pinned = loop_->stats().blocks_pinned;
    while (pinned > 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
      pinned = loop_->stats().blocks_pinned;
    }
    return pinned;
  }

  FakeClock clock_;
  std::unique_ptr<engine::Model> model_;
  prometheus::Registry registry_;
  std::unique_ptr<worker::EngineLoop> loop_;
  std::unique_ptr<DecodeService> service_;
  rpc::StartedServer server_;
  std::unique_ptr<tandem::v1::Decode::Stub> stub_;
};

TEST_F(SessionExpiryTest, AnIdleSessionExpiresOnTheClockAndLetsGoOfItsKv) {
  ASSERT_TRUE(Turn("idle").ok());
  // Stats are taken before a stream hears of its end.
  const int32_t pinned = loop_->stats().blocks_pinned;
  EXPECT_GT(pinned, 0);
  ASSERT_TRUE(Put("idle", /*idle_ttl_seconds=*/1).ok());
  EXPECT_THAT(Listed(), ::testing::ElementsAre("idle"));

  // Listing does not keep a session alive: half the TTL, listed, and the
  // other half, and it is gone.
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_THAT(Listed(), ::testing::ElementsAre("idle"));
  EXPECT_EQ(loop_->stats().blocks_pinned, pinned);
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_THAT(Listed(), ::testing::IsEmpty());
  EXPECT_EQ(AwaitUnpinned(), 0);
}

}  // namespace
}  // namespace tandem::decode
