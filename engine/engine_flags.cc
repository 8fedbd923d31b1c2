#include "engine/engine_flags.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/backend_factory.h"
#include "engine/cpu/kernels.h"

namespace tandem::engine {

std::vector<common::FlagSpec> EngineFlagSpecs() {
  std::vector<common::FlagSpec> specs = {
      {.name = "device",
       .default_value = "cpu",
       .help = "compute device: cpu, or cuda[:N] (CUDA device N, default 0: weights, KV "
               "pool and activations on the GPU; a build without CUDA or a machine without a "
               "usable device says why and exits)"},
      {.name = "cuda-graph-max-batch",
       .default_value = "256",
       .help = "with --device cuda: decode steps of up to this many sequences replay CUDA "
               "graphs (one per power-of-two batch size, captured on first use); 0 = none"},
      {.name = "cuda-pdl",
       .default_value = "false",
       .help = "with --device cuda: programmatic dependent launch (compute capability 9.0 "
               "and newer): each kernel of a step starts while the one before it ends and "
               "loads its weights into L2 before it waits for it",
       .is_bool = true},
      {.name = "cuda-attention",
       .default_value = "f32",
       .help = "with --device cuda: prefill attention's tiles: f32 (CUDA cores), split-f16 "
               "(tensor cores, each f32 operand split into two f16 halves: about f32's "
               "accuracy) or f16 (tensor cores, operands rounded to f16: about 1e-3 "
               "relative). Decode rows are f32 in every case"},
      {.name = "threads", .default_value = "2", .help = "compute threads"},
      {.name = "isa",
       .default_value = "",
       .help = "CPU kernel table: portable, avx2 or avx512 (this CPU must have it); empty = "
               "the best it has, or the environment variable TANDEM_ISA"},
      {.name = "max-context",
       .default_value = "0",
       .help = "cap on each sequence's tokens (KV and RoPE tables); 0 = the model's "
               "trained context length"},
      {.name = "kv-budget-mb", .default_value = "512", .help = "KV cache memory, MiB"},
      {.name = "block-size", .default_value = "16", .help = "tokens per KV block"},
      {.name = "kv-type", .default_value = "f32", .help = "KV cache element type: f32 or f16"},
      {.name = "max-batch-tokens",
       .default_value = "512",
       .help = "tokens per engine step (prefill chunk size)"},
      {.name = "max-running", .default_value = "64", .help = "sequences decoded together"},
      {.name = "max-waiting",
       .default_value = "1024",
       .help = "sequences queued for the running batch before new ones are refused"},
      {.name = "itl-target-ms",
       .default_value = "0",
       .help = "inter-token latency target: each step holds at most the tokens the measured "
               "step cost fits in it (three quarters at most for running sequences, the rest "
               "for prompt chunks), and admission waits past that; trades throughput and "
               "time to first token for steady streams; 0 = none (steps as large as "
               "--max-batch-tokens and --max-running allow)"},
      {.name = "session-kv-percent",
       .default_value = "50",
       .help = "most of the KV pool that sessions' kept blocks (pinned between turns) may "
               "hold, 0..100; past it the least recently used sessions' are let go"},
      {.name = "speculative",
       .default_value = "off",
       .help = "speculative decoding for requests that do not choose: off, prompt-lookup "
               "(tokens proposed from the sequence's own earlier n-grams) or draft (the "
               "--draft-model's greedy picks), verified in one step; the output is unchanged"},
      {.name = "draft-model",
       .default_value = "",
       .help = "GGUF draft model for --speculative draft (or requests that ask for it): the "
               "model's vocabulary and KV width; every worker of a deployment names the same "
               "one, since its KV rides in the model's blocks; empty = none"},
      {.name = "spec-k",
       .default_value = "4",
       .help = "most tokens proposed per sequence per step (adapts down when rejected)"},
      {.name = "spec-ngram-max",
       .default_value = "3",
       .help = "longest n-gram prompt lookup matches"},
      {.name = "spec-ngram-min",
       .default_value = "2",
       .help = "shortest n-gram prompt lookup matches"},
      {.name = "spec-max-batch",
       .default_value = "8",
       .help = "proposals only while at most this many sequences run (a larger step is "
               "bound by arithmetic, not by reading the weights, and a proposal costs about "
               "a token); 0 = at any batch size"},
      {.name = "spec-min-gain",
       .default_value = "1",
       .help = "draft speculation proposes only where its expected speedup (the sequence's "
               "acceptance rate against the draft passes' and proposal rows' measured cost) "
               "is at least this, else rests and tries again later; 0 = always propose"},
      {.name = "grammar-max-stacks",
       .default_value = "4096",
       .help = "live parse stacks of one structured-output sequence; an ambiguous grammar "
               "that needs more ends the sequence at end-of-generation"},
      {.name = "grammar-mask-cache-mb",
       .default_value = "64",
       .help = "token masks cached per compiled response format, MiB (cleared when full)"},
      {.name = "grammar-cache-size",
       .default_value = "64",
       .help = "compiled response formats kept (the most recently used)"},
  };
  for (common::FlagSpec& spec : constrain::CompileLimitFlagSpecs()) specs.push_back(spec);
  return specs;
}

absl::StatusOr<EngineSetup> EngineSetupFromArgs(const common::Args& args) {
  EngineSetup s;
  ASSIGN_OR_RETURN(s.device, ParseDeviceSpec(args.String("device")));
  ASSIGN_OR_RETURN(s.backend.threads, args.IntInRange("threads", 1, 256));
  ASSIGN_OR_RETURN(s.cuda.graph_max_batch, args.IntInRange("cuda-graph-max-batch", 0, 4096));
  s.cuda.programmatic_launch = args.Bool("cuda-pdl");
  const std::string& attention = args.String("cuda-attention");
  if (attention == "f32") {
    s.cuda.attention = engine::CudaAttention::kF32;
  } else if (attention == "split-f16") {
    s.cuda.attention = engine::CudaAttention::kSplitF16;
  } else if (attention == "f16") {
    s.cuda.attention = engine::CudaAttention::kF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda-attention: \"", attention, "\" is not f32, split-f16 or f16"));
  }
  s.backend.isa = args.String("isa");
  if (!s.backend.isa.empty()) {
    const std::optional<cpu::Isa> isa = cpu::IsaFromName(s.backend.isa);
    if (!isa.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--isa: \"", s.backend.isa, "\" is not portable, avx2 or avx512"));
    }
    if (!cpu::IsaSupported(*isa)) {
      return absl::InvalidArgumentError(absl::StrCat("--isa: this CPU lacks ", s.backend.isa,
                                                     "; its best is ",
                                                     std::string(cpu::IsaName(cpu::DetectIsa()))));
    }
  }
  ASSIGN_OR_RETURN(s.engine.max_context, args.IntInRange("max-context", 0, 1 << 24));
  ASSIGN_OR_RETURN(int32_t mb, args.IntInRange("kv-budget-mb", 1, 1 << 20));
  s.engine.kv.budget_bytes = int64_t{mb} << 20;
  ASSIGN_OR_RETURN(s.engine.kv.block_size, args.IntInRange("block-size", 1, 1024));
  const std::string& kv_type = args.String("kv-type");
  if (kv_type == "f32") {
    s.engine.kv.dtype = engine::GgmlType::kF32;
  } else if (kv_type == "f16") {
    s.engine.kv.dtype = engine::GgmlType::kF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-type: \"", kv_type, "\" is not f32 or f16"));
  }
  ASSIGN_OR_RETURN(s.engine.max_batch_tokens, args.IntInRange("max-batch-tokens", 1, 1 << 20));
  ASSIGN_OR_RETURN(s.engine.max_running, args.IntInRange("max-running", 1, 1 << 16));
  ASSIGN_OR_RETURN(s.engine.max_waiting, args.IntInRange("max-waiting", 0, 1 << 24));
  ASSIGN_OR_RETURN(const double itl_target_ms, args.Double("itl-target-ms"));
  if (!(itl_target_ms >= 0 && itl_target_ms <= 60000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--itl-target-ms: ", itl_target_ms, " is outside [0, 60000]"));
  }
  s.engine.itl_target_s = itl_target_ms / 1000;
  ASSIGN_OR_RETURN(int32_t session_percent, args.IntInRange("session-kv-percent", 0, 100));
  s.engine.max_pinned_fraction = session_percent / 100.0;
  ASSIGN_OR_RETURN(s.engine.constrain_matcher.max_stacks,
                   args.IntInRange("grammar-max-stacks", 16, 1 << 24));
  ASSIGN_OR_RETURN(const int32_t mask_mb, args.IntInRange("grammar-mask-cache-mb", 1, 1 << 20));
  s.engine.constrain_matcher.mask_cache_bytes = int64_t{mask_mb} << 20;
  ASSIGN_OR_RETURN(s.engine.grammar_cache_size, args.IntInRange("grammar-cache-size", 1, 1 << 16));
  ASSIGN_OR_RETURN(s.engine.constrain_compile, constrain::CompileLimitsFromArgs(args));
  const std::string& speculative = args.String("speculative");
  s.draft_model = args.String("draft-model");
  RETURN_IF_ERROR(CheckSpeculativeFlags(speculative, s.draft_model));
  s.engine.speculation.prompt_lookup = speculative == "prompt-lookup";
  s.engine.speculation.draft = speculative == "draft";
  ASSIGN_OR_RETURN(s.engine.speculation.k, args.IntInRange("spec-k", 1, 64));
  ASSIGN_OR_RETURN(s.engine.speculation.ngram_max, args.IntInRange("spec-ngram-max", 1, 64));
  ASSIGN_OR_RETURN(s.engine.speculation.ngram_min,
                   args.IntInRange("spec-ngram-min", 1, s.engine.speculation.ngram_max));
  ASSIGN_OR_RETURN(s.engine.speculation.max_batch,
                   args.IntInRange("spec-max-batch", 0, 1 << 16));
  ASSIGN_OR_RETURN(s.engine.speculation.min_gain, args.Double("spec-min-gain"));
  if (!(s.engine.speculation.min_gain >= 0 && s.engine.speculation.min_gain <= 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spec-min-gain: ", s.engine.speculation.min_gain, " is outside [0, 16]"));
  }
  return s;
}

absl::Status CheckSpeculativeFlags(const std::string& speculative, const std::string& draft_model) {
  if (speculative != "off" && speculative != "prompt-lookup" && speculative != "draft") {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative: \"", speculative, "\" is not off, prompt-lookup or draft"));
  }
  if (speculative == "draft" && draft_model.empty()) {
    return absl::InvalidArgumentError("--speculative: draft needs --draft-model");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> LoadDraftModel(const EngineSetup& setup) {
  if (setup.draft_model.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::Load(setup.draft_model);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("--draft-model: ", loaded.status().message()));
  }
  return loaded;
}

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const Model& model, const Model* draft,
                                                     const EngineSetup& setup) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                   MakeBackendForModel(model, setup.device, setup.backend, setup.cuda));
  DraftModel d;
  if (draft != nullptr) {
    ASSIGN_OR_RETURN(d.backend,
                     MakeBackendForModel(*draft, setup.device, setup.backend, setup.cuda));
    d.model = draft;
  }
  return Engine::Create(model, std::move(backend), setup.engine, std::move(d));
}

}  // namespace tandem::engine
