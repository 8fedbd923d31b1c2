// tandem quantize's model writer: llama-quantize's per-tensor choices for
// the named mixes (which matrices get more bits, the output matrix, the
// fallbacks for rows a type cannot hold), metadata kept, and quantized
// models that load and run: stories260K keeps its greedy story at Q8_0,
// and a K-quant model computes what its own weights dequantized to F32
// compute, within what 8-bit activations move.
#include "engine/model/model_quantizer.h"

#include <unistd.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/gguf/gguf.h"
#include "tests/common/temp_paths.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

using testing::LoadSynthetic;
using testing::StoriesPath;

std::string TempPath(const std::string& name) {
  return tandem::testing::TempPathRemovedAtExit(absl::StrCat("quantizer_", name), ".gguf");
}

// The synthetic model's shape with llama-sized rows (multiples of 256).
SyntheticModelOptions KShapedOptions() {
  SyntheticModelOptions o = testing::TinyOptions();
  o.n_embd = 256;
  o.n_ff = 512;
  o.n_layer = 8;
  o.n_head = 4;
  o.n_head_kv = 2;  // KV width 128: attn_k / attn_v rows are still 256 long
  return o;
}

std::string WriteModel(const SyntheticModelOptions& o, const std::string& name) {
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteSyntheticModel(o, path).ok());
  return path;
}

std::map<std::string, GgmlType> PlanOf(const std::string& path, QuantMix mix) {
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  auto plan = PlanQuantization(**file, mix);
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::map<std::string, GgmlType> out;
  for (const TensorPlan& p : *plan) out[p.name] = p.to;
  return out;
}

TEST(ModelQuantizerTest, Q4KMGivesHalfOfAttnVAndFfnDownAndTheOutputSixBits) {
  const std::string path = WriteModel(KShapedOptions(), "k_shaped");
  std::map<std::string, GgmlType> plan = PlanOf(path, QuantMix::kQ4_K_M);
  EXPECT_EQ(plan["token_embd.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(plan["output.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(plan["output_norm.weight"], GgmlType::kF32);
  // 8 layers: the first and last eighth, and every third between (3, 6).
  for (int i = 0; i < 8; ++i) {
    const bool more = i == 0 || i == 3 || i == 6 || i == 7;
    const GgmlType want = more ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    EXPECT_EQ(plan[absl::StrCat("blk.", i, ".attn_v.weight")], want) << i;
    EXPECT_EQ(plan[absl::StrCat("blk.", i, ".ffn_down.weight")], want) << i;
    EXPECT_EQ(plan[absl::StrCat("blk.", i, ".attn_q.weight")], GgmlType::kQ4_K) << i;
    EXPECT_EQ(plan[absl::StrCat("blk.", i, ".ffn_gate.weight")], GgmlType::kQ4_K) << i;
    EXPECT_EQ(plan[absl::StrCat("blk.", i, ".attn_norm.weight")], GgmlType::kF32) << i;
  }
  // Other mixes' rules.
  plan = PlanOf(path, QuantMix::kQ3_K_M);
  EXPECT_EQ(plan["blk.0.attn_v.weight"], GgmlType::kQ5_K);
  EXPECT_EQ(plan["blk.2.attn_v.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(plan["blk.5.attn_output.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(plan["blk.5.ffn_up.weight"], GgmlType::kQ3_K);
  plan = PlanOf(path, QuantMix::kQ4_K_S);
  EXPECT_EQ(plan["blk.3.attn_v.weight"], GgmlType::kQ5_K);
  EXPECT_EQ(plan["blk.4.attn_v.weight"], GgmlType::kQ4_K);
  EXPECT_EQ(plan["blk.0.ffn_down.weight"], GgmlType::kQ5_K);
  plan = PlanOf(path, QuantMix::kQ2_K);
  EXPECT_EQ(plan["blk.1.attn_v.weight"], GgmlType::kQ3_K);  // GQA 2 (< 4)
  EXPECT_EQ(plan["blk.1.ffn_down.weight"], GgmlType::kQ3_K);
  EXPECT_EQ(plan["blk.1.ffn_up.weight"], GgmlType::kQ2_K);
  plan = PlanOf(path, QuantMix::kQ4_0);
  EXPECT_EQ(plan["output.weight"], GgmlType::kQ6_K);
  EXPECT_EQ(plan["blk.1.ffn_up.weight"], GgmlType::kQ4_0);
  plan = PlanOf(path, QuantMix::kQ8_0);
  EXPECT_EQ(plan["output.weight"], GgmlType::kQ8_0);
  plan = PlanOf(path, QuantMix::kF16);
  EXPECT_EQ(plan["output.weight"], GgmlType::kF16);
  EXPECT_EQ(plan["output_norm.weight"], GgmlType::kF32);
}

TEST(ModelQuantizerTest, RowsAKQuantCannotHoldFallBackAsLlamaQuantizeDoes) {
  // stories260K: 64-wide rows, no room for 256-element super-blocks.
  const std::map<std::string, GgmlType> plan = PlanOf(StoriesPath(), QuantMix::kQ4_K_M);
  EXPECT_EQ(plan.at("blk.0.attn_q.weight"), GgmlType::kQ5_0);  // Q4_K -> Q5_0
  // 5 layers: more bits for layers 2 and 4 (Q6_K -> Q8_0).
  EXPECT_EQ(plan.at("blk.0.attn_v.weight"), GgmlType::kQ5_0);
  EXPECT_EQ(plan.at("blk.2.attn_v.weight"), GgmlType::kQ8_0);
  EXPECT_EQ(plan.at("blk.4.attn_v.weight"), GgmlType::kQ8_0);
  EXPECT_EQ(PlanOf(StoriesPath(), QuantMix::kQ5_K_S).at("blk.1.ffn_up.weight"),
            GgmlType::kQ5_1);  // Q5_K -> Q5_1
  EXPECT_EQ(PlanOf(StoriesPath(), QuantMix::kQ3_K_M).at("blk.1.ffn_up.weight"),
            GgmlType::kIQ4_NL);  // Q3_K -> IQ4_NL
  EXPECT_EQ(PlanOf(StoriesPath(), QuantMix::kQ2_K).at("token_embd.weight"),
            GgmlType::kIQ4_NL);  // Q2_K -> IQ4_NL
}

TEST(ModelQuantizerTest, KeepsEveryKeyAndRecordsTheMix) {
  const std::string out = TempPath("stories_q8");
  ASSERT_TRUE(QuantizeModel(StoriesPath(), out, QuantMix::kQ8_0).ok());
  auto in_file = GgufFile::Open(StoriesPath());
  auto out_file = GgufFile::Open(out);
  ASSERT_TRUE(in_file.ok() && out_file.ok());
  for (const std::string& key : (*in_file)->Keys()) {
    if (key == "general.file_type" || key == "general.quantization_version") continue;
    auto a = (*in_file)->GetEncoded(key);
    auto b = (*out_file)->GetEncoded(key);
    ASSERT_TRUE(a.ok() && b.ok()) << key;
    EXPECT_EQ(a->type, b->type) << key;
    EXPECT_TRUE(std::equal(a->bytes.begin(), a->bytes.end(), b->bytes.begin(), b->bytes.end()))
        << key;
  }
  EXPECT_EQ(*(*out_file)->GetInt("general.file_type"), 7);
  EXPECT_EQ(*(*out_file)->GetInt("general.quantization_version"), 2);
  EXPECT_EQ((*out_file)->tensors().size(), (*in_file)->tensors().size());
}

std::vector<TokenEvent> Greedy(const std::string& path, const std::vector<int32_t>& prompt,
                               int32_t n) {
  auto model = Model::Load(path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto e = Engine::Create(**model, MakeCpuBackend({.threads = 1}), {});
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.ignore_eos = true;
  r.top_logprobs = 5;
  EXPECT_TRUE((*e)->Add(r).ok());
  std::vector<TokenEvent> out;
  while ((*e)->HasWork()) {
    auto step = (*e)->Step();
    EXPECT_TRUE(step.ok());
    for (TokenEvent& t : step->tokens) out.push_back(std::move(t));
  }
  return out;
}

// The quantized stories260K at `path` continues "Once upon a time" with the
// F32 model's first `n` greedy tokens.
void ExpectStoriesGreedyIds(const std::string& path, int32_t n) {
  auto model = Model::Load(StoriesPath());
  ASSERT_TRUE(model.ok());
  const std::vector<int32_t> prompt = (*model)->tokenizer().Encode("Once upon a time", {});
  const std::vector<TokenEvent> f32 = Greedy(StoriesPath(), prompt, n);
  const std::vector<TokenEvent> q = Greedy(path, prompt, n);
  ASSERT_EQ(f32.size(), q.size());
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(q[i].token.id, f32[i].token.id) << i;
}

TEST(ModelQuantizerTest, StoriesAtQ8_0KeepsItsGreedyStory) {
  const std::string out = TempPath("stories_q8_run");
  ASSERT_TRUE(QuantizeModel(StoriesPath(), out, QuantMix::kQ8_0).ok());
  ExpectStoriesGreedyIds(out, 24);
}

// stories260K's 64-wide rows take Q3_K_M to IQ4_NL nearly everywhere, as
// llama-quantize does: the 4-bit model still tells the F32 model's story.
TEST(ModelQuantizerTest, StoriesAtQ3_K_MRunsOnIq4Nl) {
  const std::string out = TempPath("stories_q3km_run");
  ASSERT_TRUE(QuantizeModel(StoriesPath(), out, QuantMix::kQ3_K_M).ok());
  auto file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok());
  int iq4nl = 0;
  for (const auto& t : (*file)->tensors()) iq4nl += t.type == GgmlType::kIQ4_NL;
  EXPECT_GT(iq4nl, 20);
  ExpectStoriesGreedyIds(out, 8);
}

// Every mix: the quantized model against its own weights dequantized to F32
// (quantize --type F32 of the quantized file): the same first tokens and
// top-5 logprobs within what 8-bit activations move.
TEST(ModelQuantizerTest, EveryMixComputesItsOwnWeights) {
  const std::string f32 = WriteModel(KShapedOptions(), "k_shaped_run");
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 7, 250, 3, 64};
  for (QuantMix mix : {QuantMix::kQ4_0, QuantMix::kQ4_1, QuantMix::kQ5_0, QuantMix::kQ5_1,
                       QuantMix::kQ2_K, QuantMix::kQ3_K_M, QuantMix::kQ4_K_M, QuantMix::kQ5_K_M,
                       QuantMix::kQ6_K}) {
    SCOPED_TRACE(static_cast<int>(mix));
    const std::string quantized = TempPath(absl::StrCat("mix_", static_cast<int>(mix)));
    const std::string back = TempPath(absl::StrCat("mix_f32_", static_cast<int>(mix)));
    ASSERT_TRUE(QuantizeModel(f32, quantized, mix).ok());
    ASSERT_TRUE(QuantizeModel(quantized, back, QuantMix::kF32).ok());
    const std::vector<TokenEvent> q = Greedy(quantized, prompt, 4);
    const std::vector<TokenEvent> ref = Greedy(back, prompt, 4);
    ASSERT_EQ(q.size(), ref.size());
    // The first token's distribution (later ones may fork on a near tie).
    EXPECT_EQ(q[0].token.id, ref[0].token.id);
    ASSERT_EQ(q[0].token.top.size(), ref[0].token.top.size());
    for (size_t k = 0; k < ref[0].token.top.size(); ++k) {
      // Measured: at most 0.067 (Q4_K_M) over 8 layers of this random model.
      EXPECT_NEAR(q[0].token.top[k].logprob, ref[0].token.top[k].logprob, 0.1) << k;
    }
  }
}

}  // namespace
}  // namespace tandem::engine
