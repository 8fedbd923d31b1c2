// rpc::SamplingRequestFromProto / SamplingRequestToProto, the one conversion
// of a request's sampling fields in each direction: a round trip through the
// engine's type keeps every field, whichever request message carries them,
// with the proto message filled by walking its descriptor (a field added
// without a conversion fails here) and the engine's struct filled through a
// structured binding (a field added to it does not compile here until set).
#include "rpc/convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "google/protobuf/util/message_differencer.h"
#include "tests/rpc/proto_fill.h"

namespace tandem::rpc {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::tandem::rpc::testing::ExpectEveryFieldSet;
using ::tandem::rpc::testing::FillEveryField;

// Every field of the engine's SamplingRequest away from its default.
engine::SamplingRequest EveryFieldSet() {
  engine::SamplingRequest r;
  // Names every field: one added to either struct breaks these bindings
  // until it is given a value here, and so a round trip below.
  auto& [sampling, top_logprobs, prompt_logprobs] = r;
  auto& [temperature, top_p, top_k, min_p, seed, presence_penalty, frequency_penalty,
         repetition_penalty, logit_bias, min_tokens, stop_token_ids, constraint,
         speculation] = sampling;
  temperature = 0.75f;
  top_p = 0.5f;
  top_k = 7;
  min_p = 0.125f;
  seed = (uint64_t{1} << 40) + 3;
  presence_penalty = 0.25f;
  frequency_penalty = -1.5f;
  repetition_penalty = 1.25f;
  logit_bias = {{.id = 3, .bias = -2.5f}, {.id = 9, .bias = 4.0f}};  // ids ascending
  min_tokens = 2;
  stop_token_ids = {11, 13};
  constraint = {.kind = engine::OutputConstraint::Kind::kJsonSchema, .source = "{\"type\": \"object\"}"};
  speculation = engine::Speculation::kPromptLookup;
  top_logprobs = 5;
  prompt_logprobs = 4;
  return r;
}

// A request message whose sampling fields are all set: `sampling` filled
// from its descriptor, top_logprobs, and prompt_logprobs where it has one.
template <typename Request>
Request FilledRequest() {
  Request r;
  FillEveryField(r.mutable_sampling(), 0);
  r.set_top_logprobs(6);
  if constexpr (requires { r.set_prompt_logprobs(0); }) r.set_prompt_logprobs(3);
  return r;
}

template <typename Request>
class RequestConvertTest : public ::testing::Test {};

using RequestTypes = ::testing::Types<tandem::v1::GenerateRequest, tandem::v1::PrefillRequest,
                                      tandem::v1::DecodeRequest>;
TYPED_TEST_SUITE(RequestConvertTest, RequestTypes);

TYPED_TEST(RequestConvertTest, ProtoRoundTripKeepsEverySamplingField) {
  const TypeParam sent = FilledRequest<TypeParam>();
  ExpectEveryFieldSet(sent.sampling());
  TypeParam back;
  SamplingRequestToProto(SamplingRequestFromProto(sent), &back);
  std::string diff;
  MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(sent, back)) << diff;
}

TYPED_TEST(RequestConvertTest, EngineRoundTripKeepsEveryField) {
  const engine::SamplingRequest sent = EveryFieldSet();
  TypeParam proto;
  SamplingRequestToProto(sent, &proto);
  // Every message carries them all (DecodeRequest's prompt_logprobs for a
  // local prefill).
  EXPECT_EQ(SamplingRequestFromProto(proto), sent);
}

TYPED_TEST(RequestConvertTest, UnsetFieldsAreTheEnginesDefaults) {
  // top_p and repetition_penalty 0 mean unset (1, off); prompt_logprobs
  // absent means off (-1).
  EXPECT_EQ(SamplingRequestFromProto(TypeParam()), engine::SamplingRequest());
  TypeParam proto;
  SamplingRequestToProto(engine::SamplingRequest(), &proto);
  if constexpr (requires { proto.has_prompt_logprobs(); }) {
    EXPECT_FALSE(proto.has_prompt_logprobs());
  }
}

TEST(ConvertTest, EngineSamplingRoundTripKeepsEveryField) {
  const engine::SamplingParams sent = EveryFieldSet().sampling;
  tandem::v1::SamplingParams proto;
  SamplingToProto(sent, &proto);
  ExpectEveryFieldSet(proto);
  EXPECT_EQ(SamplingFromProto(proto), sent);
}

TEST(ConvertTest, EveryResponseFormatRoundTrips) {
  using Kind = engine::OutputConstraint::Kind;
  for (const engine::OutputConstraint& c : std::vector<engine::OutputConstraint>{
           {Kind::kNone, ""},
           {Kind::kJsonObject, ""},
           {Kind::kJsonSchema, R"({"type":"string"})"},
           {Kind::kRegex, "[0-9]+"},
           {Kind::kGrammar, "root ::= \"a\""}}) {
    engine::SamplingParams p;
    p.constraint = c;
    tandem::v1::SamplingParams proto;
    SamplingToProto(p, &proto);
    EXPECT_EQ(proto.has_response_format(), c.active());
    EXPECT_EQ(SamplingFromProto(proto).constraint, c) << c.source;
  }
}

TEST(ConvertTest, LogitBiasComesInIdOrder) {
  tandem::v1::SamplingParams proto;
  for (int32_t id : {40, 2, 17, 5}) (*proto.mutable_logit_bias())[id] = static_cast<float>(id);
  const engine::SamplingParams s = SamplingFromProto(proto);
  ASSERT_EQ(s.logit_bias.size(), 4u);
  for (size_t i = 1; i < s.logit_bias.size(); ++i) {
    EXPECT_LT(s.logit_bias[i - 1].id, s.logit_bias[i].id);
  }
}

TEST(ConvertTest, ChatTurnBecomesAGenerateRequestWithTheSameSampling) {
  tandem::v1::ChatRequest chat = FilledRequest<tandem::v1::ChatRequest>();
  tandem::v1::GenerateRequest want;
  *want.mutable_sampling() = chat.sampling();
  want.set_top_logprobs(chat.top_logprobs());
  tandem::v1::GenerateRequest got;
  ChatSamplingToGenerate(chat, &got);
  std::string diff;
  MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(want, got)) << diff;
  EXPECT_EQ(SamplingRequestFromProto(got), SamplingRequestFromProto(chat));
}

TEST(ConvertTest, ChatTurnWithoutASeedLeavesItUnset) {
  tandem::v1::ChatRequest chat = FilledRequest<tandem::v1::ChatRequest>();
  chat.mutable_sampling()->clear_seed();
  tandem::v1::GenerateRequest got;
  ChatSamplingToGenerate(chat, &got);
  EXPECT_FALSE(got.sampling().has_seed());  // the gateway draws one
  EXPECT_EQ(got.sampling().temperature(), chat.sampling().temperature());
}

}  // namespace
}  // namespace tandem::rpc
