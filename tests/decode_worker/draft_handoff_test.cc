// A hand-off between workers that run a draft model beside the model: the
// real Prefill and Decode services over in-process gRPC, as the gateway
// drives them. Asked to skip the draft's KV (PrefillRequest.skip_draft_kv),
// the prefill worker computes none of it and says how far it reaches
// (PrefillResponse.draft_kv_tokens); the decode worker, told so
// (DecodeRequest.draft_kv_tokens), computes it before its first proposal,
// so the proposals are the draft's real picks. Not asked, the prefill worker
// ships it and the decode worker computes none of the prompt's.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decode_worker/decode_service.h"
#include "engine/engine.h"
#include "prefill_worker/prefill_service.h"
#include "rpc/bootstrap.h"
#include "tests/e2e/reference.h"
#include "tests/engine/test_backends.h"
#include "tests/engine/test_models.h"

namespace tandem {
namespace {

constexpr int32_t kMaxTokens = 32;

// A worker's engine loop: stories260K with itself as the draft, so its
// proposals are kept nearly always when the draft's KV is right (and sent
// astray when it is not); speculating with the draft on every step.
std::unique_ptr<worker::EngineLoop> SelfDraftingLoop(const engine::Model& model) {
  engine::EngineOptions options;
  options.speculation.draft = true;
  options.speculation.max_batch = 0;
  options.speculation.min_gain = 0;
  auto eng = engine::Engine::Create(
      model, engine::testing::MakeTestBackend(1), options,
      engine::DraftModel{.model = &model, .backend = engine::testing::MakeTestBackend(1)});
  EXPECT_TRUE(eng.ok()) << eng.status();
  return eng.ok() ? std::make_unique<worker::EngineLoop>(std::move(*eng)) : nullptr;
}

class DraftHandOffTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = engine::Model::Load(engine::testing::StoriesPath());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    prefill_loop_ = SelfDraftingLoop(*model_);
    decode_loop_ = SelfDraftingLoop(*model_);
    ASSERT_NE(prefill_loop_, nullptr);
    ASSERT_NE(decode_loop_, nullptr);
    prefill_ = std::make_unique<prefill::PrefillService>(*prefill_loop_, prefill_registry_,
                                                         prefill::PrefillServiceOptions{});
    decode_ = std::make_unique<decode::DecodeService>(*decode_loop_, decode_registry_,
                                                      decode::DecodeServiceOptions{});
    auto ps = rpc::StartGrpcServer({}, {prefill_.get()});
    ASSERT_TRUE(ps.ok()) << ps.status();
    prefill_server_ = std::move(*ps);
    auto ds = rpc::StartGrpcServer({}, {decode_.get()});
    ASSERT_TRUE(ds.ok()) << ds.status();
    decode_server_ = std::move(*ds);
  }
  void TearDown() override {
    if (decode_server_.server != nullptr) decode_server_.server->Shutdown();
    if (prefill_server_.server != nullptr) prefill_server_.server->Shutdown();
  }

  std::vector<int32_t> Prompt(const char* text) const {
    return model_->tokenizer().Encode(text, {.add_special = true, .parse_special = true});
  }

  tandem::v1::PrefillResponse Prefill(const std::vector<int32_t>& prompt, bool skip_draft_kv) {
    auto stub = tandem::v1::Prefill::NewStub(
        grpc::CreateChannel(prefill_server_.address, grpc::InsecureChannelCredentials()));
    tandem::v1::PrefillRequest req;
    req.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
    req.set_top_logprobs(2);
    req.set_skip_draft_kv(skip_draft_kv);
    tandem::v1::PrefillResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = stub->Prefill(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  struct Decoded {
    grpc::Status status;
    std::vector<int32_t> ids;  // the first token's included
    int32_t proposed = 0;
    int32_t accepted = 0;
  };
  // The lease's blocks through the decode worker; `draft_kv_tokens` passed
  // on as the gateway passes PrefillResponse.draft_kv_tokens.
  Decoded Decode(const std::vector<int32_t>& prompt, const tandem::v1::PrefillResponse& prefill,
                 std::optional<int32_t> draft_kv_tokens) {
    auto stub = tandem::v1::Decode::NewStub(
        grpc::CreateChannel(decode_server_.address, grpc::InsecureChannelCredentials()));
    tandem::v1::DecodeRequest req;
    req.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
    *req.mutable_first_token() = prefill.first_token();
    req.set_max_tokens(kMaxTokens);
    req.set_top_logprobs(2);
    req.set_ignore_eos(true);
    req.set_prefill_address(prefill_server_.address);
    req.set_lease_id(prefill.lease_id());
    req.set_num_blocks(prefill.num_blocks());
    if (draft_kv_tokens.has_value()) req.set_draft_kv_tokens(*draft_kv_tokens);
    Decoded out;
    out.ids.push_back(prefill.first_token().id());
    grpc::ClientContext ctx;
    auto reader = stub->Decode(&ctx, req);
    tandem::v1::DecodeResponse resp;
    while (reader->Read(&resp)) {
      for (const auto& t : resp.tokens()) out.ids.push_back(t.id());
      out.proposed += resp.speculative_proposed_tokens();
      out.accepted += resp.speculative_accepted_tokens();
    }
    out.status = reader->Finish();
    return out;
  }

  // The request on one engine without a draft (the text tokenized as
  // Prompt does).
  std::vector<int32_t> Reference(const char* text) const {
    engine::GenerationRequest r;
    r.max_tokens = kMaxTokens;  // the first token counts
    r.ignore_eos = true;
    std::vector<int32_t> ids;
    for (const engine::TokenEvent& ev : testing::EngineReference(*model_, text, r)) {
      ids.push_back(ev.token.id);
    }
    return ids;
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

TEST_F(DraftHandOffTest, ASkippedDraftKvIsComputedByTheDecodeWorker) {
  constexpr char kText[] =
      "Tom had a red ball. He liked to play with it in the park every day after school.";
  const std::vector<int32_t> prompt = Prompt(kText);
  const auto n = static_cast<int32_t>(prompt.size());
  const tandem::v1::PrefillResponse prefill = Prefill(prompt, /*skip_draft_kv=*/true);
  ASSERT_TRUE(prefill.has_draft_kv_tokens());
  EXPECT_EQ(prefill.draft_kv_tokens(), 0);
  EXPECT_EQ(prefill_loop_->stats().draft_computed_tokens, 0);

  const Decoded got = Decode(prompt, prefill, prefill.draft_kv_tokens());
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.ids, Reference(kText));
  EXPECT_GT(got.proposed, 8);
  EXPECT_GE(got.accepted * 10, got.proposed * 9) << got.accepted << " of " << got.proposed;
  EXPECT_GE(decode_loop_->stats().draft_computed_tokens, n);
}

TEST_F(DraftHandOffTest, TheDraftsKvShipsUnlessSkipped) {
  constexpr char kText[] =
      "The sun was hot and the dog was thirsty, so he ran to the lake to drink.";
  const std::vector<int32_t> prompt = Prompt(kText);
  const auto n = static_cast<int32_t>(prompt.size());
  const tandem::v1::PrefillResponse prefill = Prefill(prompt, /*skip_draft_kv=*/false);
  EXPECT_FALSE(prefill.has_draft_kv_tokens());
  EXPECT_EQ(prefill_loop_->stats().draft_computed_tokens, n);

  const Decoded got = Decode(prompt, prefill, std::nullopt);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.ids, Reference(kText));
  EXPECT_GE(got.accepted * 10, got.proposed * 9) << got.accepted << " of " << got.proposed;
  // Only the tokens generated and proposed here.
  EXPECT_LE(decode_loop_->stats().draft_computed_tokens, kMaxTokens + got.proposed);
}

TEST_F(DraftHandOffTest, ADraftKvTokensPastThePromptIsRefusedByName) {
  const std::vector<int32_t> prompt = Prompt("One day, a big bird flew over the house.");
  const tandem::v1::PrefillResponse prefill = Prefill(prompt, /*skip_draft_kv=*/true);
  const Decoded got = Decode(prompt, prefill, static_cast<int32_t>(prompt.size()) + 1);
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(got.status.error_message().find("draft_kv_tokens"), std::string::npos)
      << got.status.error_message();
}

}  // namespace
}  // namespace tandem
