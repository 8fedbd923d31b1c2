// The engine's speculation flags: --speculative draft needs --draft-model,
// --spec-min-gain is range-checked, and a --draft-model that does not load
// is refused by that flag's name; a good pair makes an engine that
// speculates with the draft. --itl-target-ms is range-checked by name;
// --cuda-pdl and --cuda-graph-max-batch reach the CUDA backend's options.
#include "engine/engine_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/model/model_quantizer.h"
#include "tests/engine/test_models.h"

namespace tandem::engine {
namespace {

absl::StatusOr<EngineSetup> Parse(std::vector<std::string> argv) {
  absl::StatusOr<common::Args> args = common::Args::Parse(argv, EngineFlagSpecs());
  if (!args.ok()) return args.status();
  return EngineSetupFromArgs(*args);
}

TEST(EngineFlagsTest, SpeculationFlagsAreChecked) {
  auto no_draft = Parse({"--speculative=draft"});
  ASSERT_FALSE(no_draft.ok());
  EXPECT_EQ(no_draft.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_draft.status().message().find("--draft-model"), std::string::npos);

  auto gain = Parse({"--spec-min-gain=-1"});
  ASSERT_FALSE(gain.ok());
  EXPECT_NE(gain.status().message().find("--spec-min-gain"), std::string::npos);

  auto bad_method = Parse({"--speculative=medusa"});
  ASSERT_FALSE(bad_method.ok());
  EXPECT_NE(bad_method.status().message().find("--speculative"), std::string::npos);

  auto ok = Parse({"--speculative=draft", "--draft-model=/x.gguf", "--spec-min-gain=1.5"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->engine.speculation.draft);
  EXPECT_FALSE(ok->engine.speculation.prompt_lookup);
  EXPECT_EQ(ok->draft_model, "/x.gguf");
  EXPECT_DOUBLE_EQ(ok->engine.speculation.min_gain, 1.5);
}

TEST(EngineFlagsTest, ADraftModelThatDoesNotLoadIsRefusedByName) {
  auto setup = Parse({"--draft-model=/nonexistent/draft.gguf"});
  ASSERT_TRUE(setup.ok()) << setup.status();
  auto draft = LoadDraftModel(*setup);
  ASSERT_FALSE(draft.ok());
  EXPECT_NE(draft.status().message().find("--draft-model"), std::string::npos);
}

TEST(EngineFlagsTest, APairMakesAnEngineThatSpeculatesWithTheDraft) {
  const std::string path = ::testing::TempDir() + "/tandem_flags_stories_q8_0.gguf";
  ASSERT_TRUE(QuantizeModel(testing::StoriesPath(), path, QuantMix::kQ8_0).ok());
  auto setup = Parse(
      {"--speculative=draft", "--draft-model=" + path, "--spec-min-gain=0", "--kv-budget-mb=16"});
  ASSERT_TRUE(setup.ok()) << setup.status();
  auto model = Model::Load(testing::StoriesPath());
  ASSERT_TRUE(model.ok());
  auto draft = LoadDraftModel(*setup);
  ASSERT_TRUE(draft.ok()) << draft.status();
  ASSERT_NE(*draft, nullptr);
  auto engine = CreateEngine(**model, draft->get(), *setup);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->kv_layout().n_layer, 2 * (*model)->config().n_layer);
  GenerationRequest r;
  r.prompt = (*model)->tokenizer().Encode("Once upon a time", {.add_special = true});
  r.max_tokens = 24;
  r.ignore_eos = true;
  ASSERT_TRUE((*engine)->Add(r).ok());
  while ((*engine)->HasWork()) ASSERT_TRUE((*engine)->Step().ok());
  EXPECT_GT((*engine)->stats().spec_draft_accepted, 0);
}

TEST(EngineFlagsTest, TheItlTargetIsCheckedAndReachesTheEngine) {
  for (const char* bad : {"--itl-target-ms=-1", "--itl-target-ms=nan", "--itl-target-ms=1e9",
                          "--itl-target-ms=fast"}) {
    auto setup = Parse({bad});
    ASSERT_FALSE(setup.ok()) << bad;
    EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(setup.status().message().find("--itl-target-ms"), std::string::npos)
        << setup.status();
  }
  auto none = Parse({});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->engine.itl_target_s, 0);
  auto set = Parse({"--itl-target-ms=7.5"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_DOUBLE_EQ(set->engine.itl_target_s, 0.0075);
}

// --cuda-pdl and --cuda-attention reach the CUDA backend's options, off
// unless given; the CUDA backend tests run them on a GPU
// (tests/engine/cuda/cuda_backend_test.cc).
TEST(EngineFlagsTest, TheCudaLaunchFlagsReachTheBackendOptions) {
  auto none = Parse({});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->cuda.programmatic_launch);
  EXPECT_EQ(none->cuda.graph_max_batch, 256);
  auto set = Parse({"--cuda-pdl", "--cuda-graph-max-batch=8"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(set->cuda.programmatic_launch);
  EXPECT_EQ(set->cuda.graph_max_batch, 8);
  auto bad = Parse({"--cuda-pdl=maybe"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cuda-pdl"), std::string::npos) << bad.status();

  EXPECT_EQ(none->cuda.attention, CudaAttention::kF32);
  auto f16 = Parse({"--cuda-attention=f16"});
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(f16->cuda.attention, CudaAttention::kF16);
  auto split = Parse({"--cuda-attention", "split-f16"});
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->cuda.attention, CudaAttention::kSplitF16);
  auto f32 = Parse({"--cuda-attention", "f32"});
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(f32->cuda.attention, CudaAttention::kF32);
  auto bf16 = Parse({"--cuda-attention=bf16"});
  ASSERT_FALSE(bf16.ok());
  EXPECT_EQ(bf16.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bf16.status().message().find("--cuda-attention"), std::string::npos) << bf16.status();
}

}  // namespace
}  // namespace tandem::engine
