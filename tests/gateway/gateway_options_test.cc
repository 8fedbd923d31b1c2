#include "gateway/gateway_options.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/synthetic_model.h"
#include "tests/engine/test_models.h"

namespace tandem::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The three required flags, and `extra` after them.
absl::StatusOr<GatewaySetup> FromFlags(std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {"--model", "/models/tiny-chat.gguf", "--prefill",
                                   "127.0.0.1:7001", "--decode", "127.0.0.1:7002"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  absl::StatusOr<common::Args> args = common::Args::Parse(argv, GatewayFlagSpecs());
  if (!args.ok()) return args.status();
  return GatewaySetupFromArgs(*args);
}

TEST(GatewayFlagsTest, DefaultsParse) {
  absl::StatusOr<GatewaySetup> setup = FromFlags();
  ASSERT_TRUE(setup.ok()) << setup.status();
  const GatewayOptions& o = setup->service;
  EXPECT_EQ(setup->model_path, "/models/tiny-chat.gguf");
  EXPECT_EQ(o.model_name, "tiny-chat");  // the file's stem
  EXPECT_EQ(setup->http.model_name, "tiny-chat");
  EXPECT_THAT(o.prefill_workers, ElementsAre("127.0.0.1:7001"));
  EXPECT_THAT(o.decode_workers, ElementsAre("127.0.0.1:7002"));
  EXPECT_EQ(setup->listen, "127.0.0.1:0");
  EXPECT_EQ(setup->metrics_listen, "127.0.0.1:0");
  EXPECT_EQ(setup->health_listen, "");
  EXPECT_EQ(setup->http.listen, "");
  EXPECT_EQ(setup->http.threads, 64);
  EXPECT_EQ(setup->http.max_body_bytes, 8u << 20);
  EXPECT_EQ(setup->http.https, nullptr);
  EXPECT_EQ(setup->public_tls.cert, "");
  EXPECT_EQ(setup->chat_template, "");
  EXPECT_EQ(setup->drain_timeout, absl::Seconds(30));
  EXPECT_EQ(setup->log_level, common::LogLevel::kInfo);
  EXPECT_EQ(o.limits.max_context, 0);  // the model's, once ApplyModelMetadata ran
  EXPECT_EQ(o.limits.max_stop_strings, 16);
  EXPECT_EQ(o.limits.default_max_tokens, 4096);
  EXPECT_EQ(o.limits.max_logit_bias, 1024);
  EXPECT_EQ(o.limits.max_stop_token_ids, 64);
  EXPECT_EQ(o.limits.max_n, 16);
  EXPECT_EQ(o.request_timeout, absl::Milliseconds(600000));
  EXPECT_EQ(o.api_keys, nullptr);
  EXPECT_EQ(o.admission.max_in_flight, 4096);
  EXPECT_EQ(o.admission.max_queued_tokens, 1 << 20);
  EXPECT_TRUE(o.kv_routing);
  EXPECT_EQ(o.router.overlap_weight, 1.0);
  EXPECT_EQ(o.router.load_weight, 1.0);
  EXPECT_THAT(o.router.tier_weights, ElementsAre(1.0, 0.8, 0.5));
  EXPECT_EQ(o.router.prediction_ttl, absl::Seconds(10));
  EXPECT_EQ(o.router.pull_min_blocks, 4);
  EXPECT_EQ(o.index.max_entries, 50331648);
  EXPECT_EQ(o.index.shards, 32);
  EXPECT_EQ(o.resolve_interval, absl::Seconds(5));
  EXPECT_EQ(o.max_migrations, 3);
  EXPECT_EQ(o.streams_per_decode_worker, 64);  // the decode workers' --max-running
  EXPECT_EQ(o.admission_queue.max_waiting, 1024);
  EXPECT_EQ(o.local_prefill_tokens, 32);
  EXPECT_EQ(o.local_prefill_queue, 0);
  EXPECT_EQ(o.unavailable_wait, absl::Seconds(10));
  EXPECT_EQ(o.progress_timeout, absl::Seconds(20));
  EXPECT_EQ(o.lease_heartbeat, absl::Seconds(5));
  EXPECT_EQ(o.kv_overcommit, 1.0);
  EXPECT_EQ(o.sessions.default_window, 4096);
  EXPECT_EQ(o.sessions.default_ttl_seconds, 1800);
  EXPECT_EQ(o.sessions.max_ttl_seconds, 86400);
  EXPECT_EQ(o.sessions.replicas, 2);
  EXPECT_EQ(o.sessions.local_prefill_tokens, 512);
  EXPECT_EQ(o.sessions.evict_to, 0.75);
  EXPECT_EQ(o.sessions.store_timeout, absl::Seconds(5));
  EXPECT_EQ(o.sessions.rereplicate_tracked, 65536);
  EXPECT_EQ(o.sessions.rereplicate_parallel, 8);
}

// No --prefill: aggregated, every request prefilled by its decode worker.
TEST(GatewayFlagsTest, WithoutPrefillWorkersIsAggregated) {
  absl::StatusOr<common::Args> args = common::Args::Parse(
      {"--model", "/models/tiny-chat.gguf", "--decode", "127.0.0.1:7002"}, GatewayFlagSpecs());
  ASSERT_TRUE(args.ok()) << args.status();
  absl::StatusOr<GatewaySetup> setup = GatewaySetupFromArgs(*args);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_TRUE(setup->service.prefill_workers.empty());
  EXPECT_THAT(setup->service.decode_workers, ElementsAre("127.0.0.1:7002"));
}

TEST(GatewayFlagsTest, ValuesReachTheirFields) {
  absl::StatusOr<GatewaySetup> setup =
      FromFlags({"--model-name", "chat", "--prefill", "dns:///prefill:9000,10.0.0.1:9000",
             "--router", "least-loaded", "--router-host-tier-weight", "0.25",
             "--session-evict-percent", "40", "--session-rereplicate-tracked", "0",
             "--session-rereplicate-parallel", "2", "--http-listen", "127.0.0.1:8080",
             "--max-context", "1024", "--log-level", "debug", "--chat-template", "chatml",
             "--chat-template-max-steps", "5000", "--chat-template-max-output-bytes", "4096",
             "--max-response-format-bytes", "1000", "--response-format-max-depth", "8"});
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->service.model_name, "chat");
  EXPECT_EQ(setup->http.model_name, "chat");
  EXPECT_THAT(setup->service.prefill_workers, ElementsAre("dns:///prefill:9000", "10.0.0.1:9000"));
  EXPECT_FALSE(setup->service.kv_routing);
  EXPECT_THAT(setup->service.router.tier_weights, ElementsAre(1.0, 0.25, 0.5));
  EXPECT_EQ(setup->service.sessions.evict_to, 0.4);
  EXPECT_EQ(setup->service.sessions.rereplicate_tracked, 0);
  EXPECT_EQ(setup->service.sessions.rereplicate_parallel, 2);
  EXPECT_EQ(setup->http.listen, "127.0.0.1:8080");
  EXPECT_EQ(setup->service.limits.max_context, 1024);
  EXPECT_EQ(setup->log_level, common::LogLevel::kDebug);
  EXPECT_EQ(setup->chat_template, "chatml");
  EXPECT_EQ(setup->chat_template_limits.max_steps, 5000);
  EXPECT_EQ(setup->chat_template_limits.max_output_bytes, 4096);
  EXPECT_EQ(setup->service.limits.max_response_format_bytes, 1000);
  EXPECT_EQ(setup->service.limits.response_format.max_depth, 8);
}

struct BadFlag {
  std::string name;  // the test's
  std::vector<std::string> argv;
  std::string message;  // the whole message main() prints after "tandem-gateway: "
};

class GatewayBadFlagTest : public ::testing::TestWithParam<BadFlag> {};

TEST_P(GatewayBadFlagTest, IsInvalidArgumentNamingTheFlag) {
  absl::StatusOr<GatewaySetup> setup = FromFlags(GetParam().argv);
  ASSERT_FALSE(setup.ok());
  EXPECT_EQ(setup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(setup.status().message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Flags, GatewayBadFlagTest,
    ::testing::Values(
        BadFlag{"MaxN", {"--max-n", "0"}, "--max-n: 0 is out of range [1, 1024]"},
        BadFlag{"MaxContextNotAnInteger", {"--max-context", "abc"},
                "--max-context: \"abc\" is not an integer"},
        BadFlag{"Router", {"--router", "random"}, "--router: \"random\" is not kv or least-loaded"},
        BadFlag{"DiskTierWeight", {"--router-disk-tier-weight", "1.5"},
                "--router-disk-tier-weight: 1.5 is outside [0, 1]"},
        BadFlag{"OverlapWeight", {"--router-overlap-weight", "x"},
                "--router-overlap-weight: \"x\" is not a number"},
        BadFlag{"KvOvercommit", {"--kv-overcommit", "2000"},
                "--kv-overcommit: 2000 is outside [0, 1000]"},
        BadFlag{"IndexShardsNotAPowerOfTwo", {"--index-shards", "48"},
                "--index-shards: must be a power of two, got 48"},
        BadFlag{"IndexShardsOutOfRange", {"--index-shards", "8192"},
                "--index-shards: 8192 is out of range [1, 4096]"},
        BadFlag{"IndexRetiredPerSweepZero", {"--index-retired-per-sweep", "0"},
                "--index-retired-per-sweep: 0 is out of range [1, 1024]"},
        BadFlag{"LogLevel", {"--log-level", "loud"},
                "--log-level: \"loud\" is not one of error, warning, info, debug"},
        BadFlag{"DecodeTarget", {"--decode", "grpc://x:1"},
                "--decode: \"grpc://x:1\": only host:port and dns:///host:port targets are "
                "supported"},
        // --session-ttl-s may not exceed --max-session-ttl-s.
        BadFlag{"SessionTtlAboveMax", {"--session-ttl-s", "100", "--max-session-ttl-s", "50"},
                "--session-ttl-s: 100 is out of range [1, 50]"},
        BadFlag{"RereplicateParallel", {"--session-rereplicate-parallel", "0"},
                "--session-rereplicate-parallel: 0 is out of range [1, 1024]"},
        BadFlag{"ToolCallParser", {"--tool-call-parser", "qwen"},
                "--tool-call-parser: unknown tool-call parser \"qwen\"; one of auto, none, "
                "json, hermes, llama3_json, mistral, granite, qwen3_coder"},
        BadFlag{"ChatTemplateSteps", {"--chat-template-max-steps", "10"},
                "--chat-template-max-steps: 10 is out of range [1000, 1073741824]"},
        BadFlag{"ResponseFormatElements", {"--response-format-max-elements", "0"},
                "--response-format-max-elements: 0 is out of range [1024, 268435456]"},
        BadFlag{"NoDecodeAddress", {"--decode", " , "}, "--decode needs at least one address"},
        BadFlag{"LocalPrefillTokens", {"--local-prefill-tokens", "-1"},
                "--local-prefill-tokens: -1 is out of range [0, 16777216]"},
        BadFlag{"AdmissionQueue", {"--admission-queue", "-1"},
                "--admission-queue: -1 is out of range [0, 1048576]"},
        // Several bad flags: the first in main()'s fixed order is named.
        BadFlag{"FirstInOrder", {"--max-n", "0", "--max-context", "-1"},
                "--max-context: -1 is out of range [0, 16777216]"}),
    [](const ::testing::TestParamInfo<BadFlag>& info) { return info.param.name; });

TEST(GatewayFlagsTest, UnreadableApiKeysFileNamesTheFlag) {
  absl::StatusOr<GatewaySetup> setup =
      FromFlags({"--api-keys-file", absl::StrCat(::testing::TempDir(), "/no-such-keys-file")});
  ASSERT_FALSE(setup.ok());
  EXPECT_THAT(std::string(setup.status().message()), StartsWith("--api-keys-file "));
}

// A metadata-only GGUF (the gateway never reads weights) with the given
// string and integer keys.
class ModelMetadataTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& p : paths_) std::filesystem::remove(p);
  }
  std::unique_ptr<engine::GgufFile> Model(
      const std::vector<std::pair<std::string, std::string>>& strings,
      const std::vector<std::pair<std::string, uint32_t>>& ints = {}) {
    engine::GgufWriter w;
    for (const auto& [k, v] : strings) w.SetString(k, v);
    for (const auto& [k, v] : ints) w.SetUint32(k, v);
    const std::string path = absl::StrCat(::testing::TempDir(), "/gateway-options-", ::getpid(),
                                          "-", paths_.size(), ".gguf");
    paths_.push_back(path);
    EXPECT_TRUE(w.WriteFile(path).ok());
    absl::StatusOr<std::unique_ptr<engine::GgufFile>> file =
        engine::GgufFile::Open(path, {.require_tensor_data = false});
    EXPECT_TRUE(file.ok()) << file.status();
    return file.ok() ? std::move(*file) : nullptr;
  }
  // GatewaySetupFromArgs with the required flags and `extra`.
  static GatewaySetup Flags(std::vector<std::string> extra = {}) {
    absl::StatusOr<GatewaySetup> setup = FromFlags(std::move(extra));
    EXPECT_TRUE(setup.ok()) << setup.status();
    return setup.ok() ? std::move(*setup) : GatewaySetup{};
  }

  std::vector<std::string> paths_;
};

TEST_F(ModelMetadataTest, TrainedContextLengthIsTheArchitecturesKey) {
  std::unique_ptr<engine::GgufFile> m =
      Model({{"general.architecture", "qwen2"}},
            {{"qwen2.context_length", 32768}, {"llama.context_length", 2048}});
  ASSERT_NE(m, nullptr);
  absl::StatusOr<int32_t> n = TrainedContextLength(*m, "qwen2");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 32768);
}

TEST_F(ModelMetadataTest, TrainedContextLengthOutsideTwoTo2Pow24AsksForTheFlag) {
  for (uint32_t bad : {1u, (1u << 24) + 1}) {
    std::unique_ptr<engine::GgufFile> m =
        Model({{"general.architecture", "llama"}}, {{"llama.context_length", bad}});
    ASSERT_NE(m, nullptr);
    absl::StatusOr<int32_t> n = TrainedContextLength(*m, "llama");
    ASSERT_FALSE(n.ok()) << bad;
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(n.status().message(),
              "the model states no usable llama.context_length; pass --max-context");
  }
  std::unique_ptr<engine::GgufFile> edges =
      Model({}, {{"a.context_length", 2}, {"b.context_length", 1u << 24}});
  ASSERT_NE(edges, nullptr);
  EXPECT_EQ(TrainedContextLength(*edges, "a").value_or(-1), 2);
  EXPECT_EQ(TrainedContextLength(*edges, "b").value_or(-1), 1 << 24);
}

TEST_F(ModelMetadataTest, MaxContextZeroFallsBackToTheTrainedLength) {
  std::unique_ptr<engine::GgufFile> m =
      Model({{"general.architecture", "llama"}}, {{"llama.context_length", 2048}});
  ASSERT_NE(m, nullptr);
  GatewaySetup fallback = Flags();
  ASSERT_TRUE(ApplyModelMetadata(*m, fallback).ok());
  EXPECT_EQ(fallback.service.architecture, "llama");
  EXPECT_EQ(fallback.service.limits.max_context, 2048);

  GatewaySetup explicit_flag = Flags({"--max-context", "300"});
  ASSERT_TRUE(ApplyModelMetadata(*m, explicit_flag).ok());
  EXPECT_EQ(explicit_flag.service.limits.max_context, 300);
}

TEST_F(ModelMetadataTest, MaxContextZeroWithoutATrainedLengthFails) {
  // No general.architecture either: the key looked up is ".context_length".
  std::unique_ptr<engine::GgufFile> m = Model({}, {{"llama.context_length", 2048}});
  ASSERT_NE(m, nullptr);
  GatewaySetup setup = Flags();
  absl::Status s = ApplyModelMetadata(*m, setup);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "the model states no usable .context_length; pass --max-context");
  EXPECT_EQ(setup.service.architecture, "");

  GatewaySetup with_flag = Flags({"--max-context", "128"});
  EXPECT_TRUE(ApplyModelMetadata(*m, with_flag).ok());
  EXPECT_EQ(with_flag.service.limits.max_context, 128);
}

TEST_F(ModelMetadataTest, DetectsTheModelsChatTemplateFamily) {
  std::unique_ptr<engine::GgufFile> chatml = Model(
      {{"tokenizer.chat_template",
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endfor %}"}});
  ASSERT_NE(chatml, nullptr);
  EXPECT_EQ(DetectChatTemplate(*chatml).family(), engine::ChatFamily::kChatMl);
  EXPECT_TRUE(DetectChatTemplate(*chatml).recognised());

  std::unique_ptr<engine::GgufFile> none = Model({{"general.architecture", "llama"}});
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(DetectChatTemplate(*none).family(), engine::ChatFamily::kPlain);
  EXPECT_TRUE(DetectChatTemplate(*none).recognised());

  std::unique_ptr<engine::GgufFile> unknown =
      Model({{"tokenizer.chat_template", "{{ messages | my_own_format }}"}});
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(DetectChatTemplate(*unknown).family(), engine::ChatFamily::kPlain);
  EXPECT_FALSE(DetectChatTemplate(*unknown).recognised());
}

// A model with a vocabulary: its own template is what renders (one no
// family's code would produce), with its tokens.
TEST_F(ModelMetadataTest, RendersTheModelsOwnTemplate) {
  engine::SyntheticModelOptions o = engine::testing::TinyOptions();
  o.chat_template =
      "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{{ eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}<<assistant>>{% endif %}";
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/gateway-options-own-template-", ::getpid(), ".gguf");
  paths_.push_back(path);
  ASSERT_TRUE(engine::WriteSyntheticModel(o, path).ok());
  absl::StatusOr<std::unique_ptr<engine::GgufFile>> file =
      engine::GgufFile::Open(path, {.require_tensor_data = false});
  ASSERT_TRUE(file.ok()) << file.status();
  const engine::ChatTemplate t = DetectChatTemplate(**file);
  const std::vector<engine::ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}};
  absl::StatusOr<std::string> text = t.Render(m, true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<<system>>Be brief.</s><<user>>Hi</s><<assistant>>");
}

// --chat-template-max-steps bounds every render of the model's template: a
// render that loops past it stops there (Render then falls back to the
// family's rendering, as for any template that fails, with the reason
// logged).
TEST_F(ModelMetadataTest, RenderLimitsComeFromTheFlags) {
  engine::SyntheticModelOptions o = engine::testing::TinyOptions();
  o.chat_template =
      "{% for m in messages %}{% for i in range(m.content | length * 100) %}.{% endfor %}"
      "{% endfor %}";
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/gateway-options-limits-", ::getpid(), ".gguf");
  paths_.push_back(path);
  ASSERT_TRUE(engine::WriteSyntheticModel(o, path).ok());
  absl::StatusOr<std::unique_ptr<engine::GgufFile>> file =
      engine::GgufFile::Open(path, {.require_tensor_data = false});
  ASSERT_TRUE(file.ok()) << file.status();
  GatewaySetup tight = Flags({"--chat-template-max-steps", "1000"});
  ASSERT_TRUE(ApplyModelMetadata(**file, tight).ok());
  EXPECT_EQ(tight.service.chat_template.render_limits().max_steps, 1000);
  const std::vector<engine::ChatMessage> m = {{"user", std::string(50, 'x')}};
  absl::StatusOr<std::string> text = tight.service.chat_template.RenderJinja(m, true, {
      .tools_json = {}, .now = {}, .limits = tight.service.chat_template.render_limits()});
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("1000 steps"));
  GatewaySetup roomy = Flags();
  ASSERT_TRUE(ApplyModelMetadata(**file, roomy).ok());
  text = roomy.service.chat_template.Render(m, true);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->size(), 5000u);
}

TEST_F(ModelMetadataTest, ChatTemplateFlagOverridesTheModels) {
  std::unique_ptr<engine::GgufFile> m =
      Model({{"general.architecture", "llama"},
             {"tokenizer.chat_template", "<|im_start|>{{ m.content }}<|im_end|>"}},
            {{"llama.context_length", 512}});
  ASSERT_NE(m, nullptr);
  GatewaySetup detected = Flags();
  ASSERT_TRUE(ApplyModelMetadata(*m, detected).ok());
  EXPECT_EQ(detected.service.chat_template.family(), engine::ChatFamily::kChatMl);

  GatewaySetup named = Flags({"--chat-template", "llama3"});
  ASSERT_TRUE(ApplyModelMetadata(*m, named).ok());
  EXPECT_EQ(named.service.chat_template.family(), engine::ChatFamily::kLlama3);

  GatewaySetup unknown = Flags({"--chat-template", "nope"});
  absl::Status s = ApplyModelMetadata(*m, unknown);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              StartsWith("--chat-template: chat template \"nope\" is not one of "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("chatml"));
}

// --tool-call-parser auto reads the model's template's markers; a name
// overrides them; a family named by --chat-template renders no tools, so
// its calls come back as the gateway's description asks (json).
TEST_F(ModelMetadataTest, ToolCallParserFollowsTheTemplateUnlessNamed) {
  std::unique_ptr<engine::GgufFile> m =
      Model({{"general.architecture", "llama"},
             {"tokenizer.chat_template", "<|im_start|>{{ m.content }}<tool_call>"}},
            {{"llama.context_length", 512}});
  ASSERT_NE(m, nullptr);
  GatewaySetup detected = Flags();
  ASSERT_TRUE(ApplyModelMetadata(*m, detected).ok());
  EXPECT_EQ(detected.http.tool_call_format, tools::ToolCallFormat::kHermes);
  GatewaySetup named = Flags({"--tool-call-parser", "mistral"});
  ASSERT_TRUE(ApplyModelMetadata(*m, named).ok());
  EXPECT_EQ(named.http.tool_call_format, tools::ToolCallFormat::kMistral);
  GatewaySetup family = Flags({"--chat-template", "chatml"});
  ASSERT_TRUE(ApplyModelMetadata(*m, family).ok());
  EXPECT_EQ(family.http.tool_call_format, tools::ToolCallFormat::kJson);
}

}  // namespace
}  // namespace tandem::gateway
