// worker::EngineRequestFromProto: a PrefillRequest and a DecodeRequest that
// carry the same values in the fields they share (every such field, found by
// walking both descriptors) become engine requests with the same sampling,
// prompt, resumed tokens and cache salt, each what rpc/convert.h gives; and
// each message's own fields land where the engine expects them.
#include "worker/request_convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "google/protobuf/util/message_differencer.h"
#include "rpc/convert.h"
#include "tests/rpc/proto_fill.h"

namespace tandem::worker {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;

// Fills each field that `a` and `b` both have (same name, type and label)
// with the same non-default value in both.
void FillSharedFields(google::protobuf::Message* a, google::protobuf::Message* b) {
  const google::protobuf::Descriptor* da = a->GetDescriptor();
  const google::protobuf::Descriptor* db = b->GetDescriptor();
  int shared = 0;
  for (int k = 0; k < da->field_count(); ++k) {
    const FieldDescriptor* fa = da->field(k);
    const FieldDescriptor* fb = db->FindFieldByName(fa->name());
    if (fb == nullptr || fb->type() != fa->type() || fb->label() != fa->label() ||
        fb->message_type() != fa->message_type()) {
      continue;
    }
    ++shared;
    for (int i = 0; i < (fa->is_repeated() ? 2 : 1); ++i) {
      // One salt per field name, so both messages get equal values.
      rpc::testing::FillField(a, fa, k, i);
      rpc::testing::FillField(b, fb, k, i);
    }
  }
  EXPECT_GE(shared, 6) << "request_id, prompt, sampling, top_logprobs, generated, cache_salt";
}

const engine::SamplingRequest& Sampling(const engine::GenerationRequest& r) { return r; }

TEST(RequestConvertTest, PrefillAndDecodeShareTheirCommonFields) {
  tandem::v1::PrefillRequest prefill;
  tandem::v1::DecodeRequest decode;
  FillSharedFields(&prefill, &decode);
  ASSERT_TRUE(MessageDifferencer::Equals(prefill.sampling(), decode.sampling()));
  const engine::GenerationRequest p = EngineRequestFromProto(prefill);
  const engine::GenerationRequest d = EngineRequestFromProto(decode);

  EXPECT_EQ(Sampling(p), Sampling(d));
  EXPECT_EQ(Sampling(p), rpc::SamplingRequestFromProto(prefill));
  EXPECT_EQ(Sampling(d), rpc::SamplingRequestFromProto(decode));
  EXPECT_NE(p.sampling, engine::SamplingParams());
  EXPECT_NE(p.top_logprobs, 0);
  EXPECT_EQ(p.prompt, d.prompt);
  EXPECT_EQ(p.prompt.size(), 2u);
  EXPECT_EQ(p.generated, d.generated);
  EXPECT_EQ(p.generated.size(), 2u);
  EXPECT_EQ(p.cache_salt, d.cache_salt);
  EXPECT_NE(p.cache_salt, 0u);
}

TEST(RequestConvertTest, PrefillComputesOneTokenPastWhatItIsGiven) {
  tandem::v1::PrefillRequest prefill;
  prefill.add_prompt_token_ids(5);
  prefill.add_prompt_token_ids(6);
  prefill.add_generated_token_ids(7);
  prefill.set_prompt_logprobs(2);
  const engine::GenerationRequest r = EngineRequestFromProto(prefill);
  EXPECT_THAT(r.prompt, ElementsAre(5, 6));
  EXPECT_THAT(r.generated, ElementsAre(7));
  EXPECT_EQ(r.max_tokens, 2);  // the resumed token and the one after it
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_TRUE(r.export_kv);
  EXPECT_EQ(r.prompt_logprobs, 2);
  EXPECT_TRUE(r.pin_key.empty());
}

TEST(RequestConvertTest, DecodeCarriesItsSessionFields) {
  tandem::v1::DecodeRequest decode;
  decode.set_max_tokens(9);
  decode.set_ignore_eos(true);
  decode.set_session_id("s1");
  decode.set_private_kv(true);
  decode.set_shift_from(4);
  decode.set_shift_count(3);
  decode.set_roll_window(100);
  decode.set_roll_keep(10);
  const engine::GenerationRequest r = EngineRequestFromProto(decode);
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_FALSE(r.export_kv);
  EXPECT_EQ(r.pin_key, "s1");
  EXPECT_TRUE(r.private_kv);
  EXPECT_EQ(r.shift_from, 4);
  EXPECT_EQ(r.shift_count, 3);
  EXPECT_EQ(r.roll_window, 100);
  EXPECT_EQ(r.roll_keep, 10);
  EXPECT_EQ(r.prompt_logprobs, -1);
}

}  // namespace
}  // namespace tandem::worker
