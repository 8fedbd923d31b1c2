// A prefill worker and a decode worker on different backends: the real
// Prefill and Decode services, each over its own engine, served over
// in-process gRPC. The prefill worker computes the prompt and leases its
// KV; the decode worker fetches the blocks over the wire and continues. With
// one worker on the fake device (memory the host cannot touch) and the other
// on the CPU, in either order, the client gets what one all-CPU engine
// gives, token for token and logprob for logprob: the KV bytes a device
// backend exports and imports are the CPU's.
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "decode_worker/decode_service.h"
#include "engine/engine.h"
#include "prefill_worker/prefill_service.h"
#include "rpc/bootstrap.h"
#include "rpc/convert.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem {
namespace {

using engine::testing::TestBackend;

struct Emitted {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;

  bool operator==(const Emitted&) const = default;
};

Emitted FromProto(const tandem::v1::SampledTokenProto& t) {
  Emitted e;
  e.id = t.id();
  e.logprob = t.logprob();
  for (const auto& p : t.top_logprobs()) {
    e.top_ids.push_back(p.id());
    e.top_logprobs.push_back(p.logprob());
  }
  return e;
}

Emitted FromEngine(const engine::SampledToken& t) {
  Emitted e;
  e.id = t.id;
  e.logprob = t.logprob;
  for (const engine::TokenLogprob& p : t.top) {
    e.top_ids.push_back(p.id);
    e.top_logprobs.push_back(p.logprob);
  }
  return e;
}

// 45 tokens: two full blocks and a partial one.
std::vector<int32_t> Prompt(int32_t salt) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < 45; ++i) p.push_back(3 + (i * 11 + salt * 17) % 280);
  return p;
}

constexpr int32_t kMaxTokens = 12;
constexpr int32_t kTop = 3;

class CrossBackendHandOffTest
    : public ::testing::TestWithParam<std::pair<TestBackend, TestBackend>> {
 protected:
  void SetUp() override {
    model_ = engine::testing::LoadSynthetic(engine::testing::TinyOptions());
    const auto [prefill_kind, decode_kind] = GetParam();
    auto prefill_engine =
        engine::Engine::Create(*model_, engine::testing::MakeTestBackend(prefill_kind, 1), {});
    ASSERT_TRUE(prefill_engine.ok()) << prefill_engine.status();
    prefill_loop_ = std::make_unique<worker::EngineLoop>(std::move(*prefill_engine));
    prefill_ = std::make_unique<prefill::PrefillService>(*prefill_loop_, prefill_registry_,
                                                         prefill::PrefillServiceOptions{});
    auto ps = rpc::StartGrpcServer({}, {prefill_.get()});
    ASSERT_TRUE(ps.ok()) << ps.status();
    prefill_server_ = std::move(*ps);

    auto decode_engine =
        engine::Engine::Create(*model_, engine::testing::MakeTestBackend(decode_kind, 1), {});
    ASSERT_TRUE(decode_engine.ok()) << decode_engine.status();
    decode_loop_ = std::make_unique<worker::EngineLoop>(std::move(*decode_engine));
    decode_ = std::make_unique<decode::DecodeService>(*decode_loop_, decode_registry_,
                                                      decode::DecodeServiceOptions{});
    auto ds = rpc::StartGrpcServer({}, {decode_.get()});
    ASSERT_TRUE(ds.ok()) << ds.status();
    decode_server_ = std::move(*ds);
  }
  void TearDown() override {
    if (decode_server_.server != nullptr) decode_server_.server->Shutdown();
    if (prefill_server_.server != nullptr) prefill_server_.server->Shutdown();
  }

  // The request through the two workers, as the gateway drives them.
  std::vector<Emitted> ThroughWorkers(const std::vector<int32_t>& prompt,
                                      const tandem::v1::SamplingParams& sampling) {
    std::vector<Emitted> out;
    auto prefill_stub = tandem::v1::Prefill::NewStub(
        grpc::CreateChannel(prefill_server_.address, grpc::InsecureChannelCredentials()));
    tandem::v1::PrefillRequest preq;
    preq.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
    *preq.mutable_sampling() = sampling;
    preq.set_top_logprobs(kTop);
    tandem::v1::PrefillResponse presp;
    grpc::ClientContext pctx;
    const grpc::Status ps = prefill_stub->Prefill(&pctx, preq, &presp);
    EXPECT_TRUE(ps.ok()) << ps.error_message();
    if (!ps.ok()) return out;
    out.push_back(FromProto(presp.first_token()));

    auto decode_stub = tandem::v1::Decode::NewStub(
        grpc::CreateChannel(decode_server_.address, grpc::InsecureChannelCredentials()));
    tandem::v1::DecodeRequest dreq;
    dreq.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
    *dreq.mutable_first_token() = presp.first_token();
    *dreq.mutable_sampling() = sampling;
    dreq.set_max_tokens(kMaxTokens);
    dreq.set_top_logprobs(kTop);
    dreq.set_ignore_eos(true);
    dreq.set_prefill_address(prefill_server_.address);
    dreq.set_lease_id(presp.lease_id());
    dreq.set_num_blocks(presp.num_blocks());
    grpc::ClientContext dctx;
    auto reader = decode_stub->Decode(&dctx, dreq);
    tandem::v1::DecodeResponse dresp;
    while (reader->Read(&dresp)) {
      for (const auto& t : dresp.tokens()) out.push_back(FromProto(t));
    }
    const grpc::Status ds = reader->Finish();
    EXPECT_TRUE(ds.ok()) << ds.error_message();
    return out;
  }

  // The same request on one engine on the CPU.
  std::vector<Emitted> OnOneCpuEngine(const std::vector<int32_t>& prompt,
                                      const tandem::v1::SamplingParams& sampling) {
    std::vector<Emitted> out;
    auto solo =
        engine::Engine::Create(*model_, engine::testing::MakeTestBackend(TestBackend::kCpu, 1), {});
    EXPECT_TRUE(solo.ok()) << solo.status();
    engine::GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = kMaxTokens;
    r.top_logprobs = kTop;
    r.ignore_eos = true;
    r.sampling = rpc::SamplingFromProto(sampling);
    EXPECT_TRUE((*solo)->Add(r).ok());
    while ((*solo)->HasWork()) {
      absl::StatusOr<engine::StepOutput> step = (*solo)->Step();
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) break;
      for (const engine::TokenEvent& ev : step->tokens) out.push_back(FromEngine(ev.token));
    }
    return out;
  }

  std::unique_ptr<engine::Model> model_;
  prometheus::Registry prefill_registry_;
  prometheus::Registry decode_registry_;
  std::unique_ptr<worker::EngineLoop> prefill_loop_;
  std::unique_ptr<worker::EngineLoop> decode_loop_;
  std::unique_ptr<prefill::PrefillService> prefill_;
  std::unique_ptr<decode::DecodeService> decode_;
  rpc::StartedServer prefill_server_;
  rpc::StartedServer decode_server_;
};

TEST_P(CrossBackendHandOffTest, TheClientGetsTheAllCpuTokens) {
  tandem::v1::SamplingParams greedy;
  tandem::v1::SamplingParams seeded;
  seeded.set_temperature(0.9f);
  seeded.set_seed(77);
  // A prompt of its own for each: a prefix the workers have cached would
  // be computed in other chunks than the one engine computes it in, which
  // moves the last bits.
  int32_t salt = 0;
  for (const tandem::v1::SamplingParams& sampling : {greedy, seeded}) {
    const std::vector<int32_t> prompt = Prompt(++salt);
    const std::vector<Emitted> want = OnOneCpuEngine(prompt, sampling);
    ASSERT_EQ(want.size(), static_cast<size_t>(kMaxTokens));
    const std::vector<Emitted> got = ThroughWorkers(prompt, sampling);
    ASSERT_EQ(got.size(), want.size()) << "temperature " << sampling.temperature();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i], want[i]) << "token " << i << ", temperature " << sampling.temperature();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, CrossBackendHandOffTest,
    ::testing::Values(std::make_pair(TestBackend::kCpu, TestBackend::kCpu),
                      std::make_pair(TestBackend::kFakeDevice, TestBackend::kCpu),
                      std::make_pair(TestBackend::kCpu, TestBackend::kFakeDevice),
                      std::make_pair(TestBackend::kFakeDevice, TestBackend::kFakeDevice)),
    [](const auto& info) {
      auto name = [](TestBackend b) { return b == TestBackend::kCpu ? "Cpu" : "FakeDevice"; };
      return std::string(name(info.param.first)) + "Prefill" + name(info.param.second) +
             "Decode";
    });

}  // namespace
}  // namespace tandem
