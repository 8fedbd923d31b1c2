// tandem-engine-bench: prefill tokens/s, single-sequence decode tokens/s,
// batched decode tokens/s and peak RSS of the in-process engine on one
// model. Prints a table, then one JSON line (also written to --out). It
// reports figures; it never fails on speed. With --make-synthetic it first
// writes the model itself, so an engine-only build (no `tandem` CLI, as
// scripts/gpu_check.sh makes on a GPU machine) can benchmark. On a CUDA
// device it also measures the device's limits (engine::MeasureRoofline) and
// prints the fractions reached: decode's bytes of weights and KV read per
// second against the memory bandwidth, prefill's FLOP/s against the F16
// tensor-core peak.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "engine/backend_factory.h"
#include "engine/engine_flags.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/model/model_quantizer.h"
#include "engine/model/synthetic_model.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::string model;
  int32_t prompt_tokens = 512;
  int32_t gen_tokens = 128;
  int32_t batch = 8;
  int32_t repeats = 3;
  std::string out;
  // Set: write a synthetic model with weights of this type (or, for a mix
  // such as Q4_K_M, an F32 one quantized with it) to `model` first.
  std::optional<engine::GgmlType> make_synthetic;
  std::optional<engine::QuantMix> make_mix;
  std::string shape = "25m";  // --synthetic-shape
  engine::EngineSetup setup;
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int32_t> RandomPrompt(const engine::Model& model, int32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto& tok = model.tokenizer();
  std::vector<int32_t> ids;
  if (tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  while (static_cast<int32_t>(ids.size()) < n) {
    const int32_t id = static_cast<int32_t>(rng() % tok.n_vocab());
    if (!tok.IsEog(id)) ids.push_back(id);
  }
  return ids;
}

// Runs the engine until idle; returns the seconds of steps after the first
// token of every sequence was out (pure decode), and the decoded tokens.
struct RunTimes {
  double first_step_s = 0;
  double decode_s = 0;
  int64_t decode_tokens = 0;
};

absl::StatusOr<RunTimes> RunToCompletion(engine::Engine& eng, int32_t n_seqs) {
  RunTimes t;
  int32_t started = 0;
  const Clock::time_point begin = Clock::now();
  while (eng.HasWork()) {
    const Clock::time_point before = Clock::now();
    ASSIGN_OR_RETURN(engine::StepOutput step, eng.Step());
    const std::vector<engine::TokenEvent>& events = step.tokens;
    const Clock::time_point after = Clock::now();
    if (started == n_seqs) {
      t.decode_s += Seconds(before, after);
      t.decode_tokens += static_cast<int64_t>(events.size());
    } else {
      started += static_cast<int32_t>(events.size());
      if (started == n_seqs) t.first_step_s = Seconds(begin, after);
    }
  }
  return t;
}

// The synthetic shapes: engine/model/synthetic_model.h's 25.7M-parameter
// Llama, and a 1B-class one (TinyLlama's shape: 1.1B parameters).
absl::StatusOr<engine::SyntheticModelOptions> Shape(const std::string& name) {
  engine::SyntheticModelOptions o;
  if (name == "25m") return o;
  if (name == "1b") {
    o.n_vocab = 32000;
    o.n_embd = 2048;
    o.n_layer = 16;
    o.n_head = 32;
    o.n_head_kv = 8;
    o.n_ff = 5632;
    o.context_length = 4096;
    return o;
  }
  return absl::InvalidArgumentError("--synthetic-shape: \"" + name + "\" is not 25m or 1b");
}

// The matrices a decode step reads whole: every one but the embedding table,
// of which it gathers one row (unless the output is tied to it, when all of
// it is read as the output).
template <typename F>
void ForEachDecodeMatrix(const engine::Model& model, F&& f) {
  const engine::ModelWeights& w = model.weights();
  if (w.output.data != nullptr) f(w.output);
  for (const engine::LayerWeights& l : w.layers) {
    for (const engine::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up,
                                          &l.w_down}) {
      f(*m);
    }
  }
}

// Bytes a decode step reads per sequence besides the KV.
int64_t DecodeWeightBytes(const engine::Model& model) {
  int64_t total = 0;
  ForEachDecodeMatrix(model, [&total](const engine::WeightMatrix& m) {
    total += m.rows * engine::GgmlRowBytes(m.type, m.cols);
  });
  return total;
}

// Their parameters (the multiply-adds per token).
int64_t DecodeWeightParams(const engine::Model& model) {
  int64_t total = 0;
  ForEachDecodeMatrix(model, [&total](const engine::WeightMatrix& m) { total += m.rows * m.cols; });
  return total;
}

// Multiply-adds count 2 FLOPs: the matrix products per token, and causal
// attention over a prompt of n tokens (q.k and p.v for each of n^2/2 pairs).
double PrefillFlops(const engine::Model& model, int64_t n) {
  const engine::ModelConfig& c = model.config();
  const double per_token_matrices = 2.0 * static_cast<double>(DecodeWeightParams(model));
  const double attention = 2.0 * 2.0 * c.n_layer * static_cast<double>(c.q_dim()) * n * n / 2;
  return per_token_matrices * static_cast<double>(n) + attention;
}

absl::Status Run(const Config& c) {
  RETURN_IF_ERROR(engine::ProbeDevice(c.setup.device));  // before the model loads
  if (c.make_synthetic.has_value() || c.make_mix.has_value()) {
    ASSIGN_OR_RETURN(engine::SyntheticModelOptions synthetic, Shape(c.shape));
    synthetic.type = c.make_synthetic.value_or(engine::GgmlType::kF32);
    if (!c.make_mix.has_value()) {
      RETURN_IF_ERROR(engine::WriteSyntheticModel(synthetic, c.model));
    } else {
      const std::string f32 = c.model + ".f32.tmp";
      RETURN_IF_ERROR(engine::WriteSyntheticModel(synthetic, f32));
      const absl::StatusOr<engine::QuantizeStats> q =
          engine::QuantizeModel(f32, c.model, *c.make_mix);
      std::remove(f32.c_str());
      RETURN_IF_ERROR(q.status());
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model, engine::Model::Load(c.model));
  engine::EngineSetup setup = c.setup;
  setup.engine.max_batch_tokens = std::max(setup.engine.max_batch_tokens, c.prompt_tokens);
  setup.engine.max_context =
      std::max(setup.engine.max_context, c.prompt_tokens + c.gen_tokens + 1);
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> draft, engine::LoadDraftModel(setup));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::CreateEngine(*model, draft.get(), setup));
  auto request = [&](std::vector<int32_t> prompt, int32_t max_tokens) {
    engine::GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  };

  std::vector<double> prefill, decode, batched;
  // One warm-up pass of each kind, then `repeats` measured ones.
  for (int32_t rep = 0; rep <= c.repeats; ++rep) {
    // Prefill: one prompt in a single step.
    RETURN_IF_ERROR(eng->Add(request(RandomPrompt(*model, c.prompt_tokens, rep), 1)).status());
    ASSIGN_OR_RETURN(RunTimes p, RunToCompletion(*eng, 1));
    // Single-sequence decode from a one-token prompt, as llama-bench's tg.
    RETURN_IF_ERROR(eng->Add(request(RandomPrompt(*model, 1, rep), c.gen_tokens + 1)).status());
    ASSIGN_OR_RETURN(RunTimes d, RunToCompletion(*eng, 1));
    // Batched decode: `batch` sequences stepping together.
    for (int32_t b = 0; b < c.batch; ++b) {
      RETURN_IF_ERROR(
          eng->Add(request(RandomPrompt(*model, 1, 1000 + b), c.gen_tokens + 1)).status());
    }
    ASSIGN_OR_RETURN(RunTimes bd, RunToCompletion(*eng, c.batch));
    if (rep == 0) continue;
    prefill.push_back(c.prompt_tokens / p.first_step_s);
    decode.push_back(d.decode_tokens / d.decode_s);
    batched.push_back(bd.decode_tokens / bd.decode_s);
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  const double rss_mib = usage.ru_maxrss / 1024.0;
  const double pp = Median(prefill), tg = Median(decode), btg = Median(batched);

  std::cout << absl::StrFormat("model: %s (%s, n_embd=%d n_layer=%d n_vocab=%d)\n",
                               c.model, engine::GgmlTypeName(model->weight_type()),
                               model->config().n_embd, model->config().n_layer,
                               model->config().n_vocab);
  std::cout << absl::StrFormat("device: %s, threads: %d, repeats: %d (median)\n",
                               engine::DeviceName(setup.device), setup.backend.threads,
                               c.repeats);
  std::cout << absl::StrFormat("| %-28s | %12s |\n", "measure", "value");
  std::cout << absl::StrFormat("| %-28s | %12.1f |\n",
                               absl::StrFormat("prefill pp%d (tok/s)", c.prompt_tokens), pp);
  std::cout << absl::StrFormat("| %-28s | %12.1f |\n",
                               absl::StrFormat("decode tg%d (tok/s)", c.gen_tokens), tg);
  std::cout << absl::StrFormat("| %-28s | %12.1f |\n",
                               absl::StrFormat("batched decode B=%d (tok/s)", c.batch), btg);
  std::cout << absl::StrFormat("| %-28s | %12.1f |\n", "peak RSS (MiB)", rss_mib);
  // What the figures mean against the device's limits (CUDA devices).
  const engine::ModelConfig& mc = model->config();
  const double kv_elem = setup.engine.kv.dtype == engine::GgmlType::kF16 ? 2.0 : 4.0;
  // Decode reads every weight once a step, and each sequence's KV: on
  // average half of the generated context (from a one-token prompt).
  const double kv_per_token = 2.0 * mc.n_layer * mc.kv_dim() * kv_elem * (c.gen_tokens / 2.0 + 1);
  const double decode_bytes_per_s =
      tg * (static_cast<double>(DecodeWeightBytes(*model)) + kv_per_token);
  const double prefill_flops_per_s = PrefillFlops(*model, c.prompt_tokens) * pp / c.prompt_tokens;
  std::cout << absl::StrFormat("| %-28s | %12.1f |\n", "decode B=1 read (GB/s)",
                               decode_bytes_per_s / 1e9);
  std::cout << absl::StrFormat("| %-28s | %12.2f |\n", "prefill (TFLOP/s)",
                               prefill_flops_per_s / 1e12);
  double memory_fraction = 0, flops_fraction = 0;
  if (setup.device.kind == engine::DeviceKind::kCuda) {
    ASSIGN_OR_RETURN(const engine::DeviceRoofline roof, engine::MeasureRoofline(setup.device));
    memory_fraction = decode_bytes_per_s / roof.memory_bytes_per_s;
    flops_fraction = prefill_flops_per_s / roof.f16_flops_per_s;
    std::cout << absl::StrFormat("| %-28s | %12.1f |\n", "device copy (GB/s)",
                                 roof.memory_bytes_per_s / 1e9);
    std::cout << absl::StrFormat("| %-28s | %12.1f |\n", "device F16 GEMM (TFLOP/s)",
                                 roof.f16_flops_per_s / 1e12);
    std::cout << absl::StrFormat("| %-28s | %11.1f%% |\n", "decode B=1 of bandwidth",
                                 100 * memory_fraction);
    std::cout << absl::StrFormat("| %-28s | %11.1f%% |\n", "prefill of F16 peak",
                                 100 * flops_fraction);
  }
  const std::string json = absl::StrFormat(
      "{\"model\": %s, \"type\": %s, \"threads\": %d, \"prompt_tokens\": %d, "
      "\"gen_tokens\": %d, \"batch\": %d, \"prefill_tokens_per_s\": %s, "
      "\"decode_tokens_per_s\": %s, \"batched_decode_tokens_per_s\": %s, "
      "\"peak_rss_mib\": %s, \"device\": %s, \"decode_bytes_per_s\": %s, "
      "\"prefill_flops_per_s\": %s, \"decode_bandwidth_fraction\": %s, "
      "\"prefill_peak_fraction\": %s, \"kv_type\": %s, \"cuda_graph_max_batch\": %d, "
      "\"cuda_pdl\": %s, \"cuda_attention\": %s}",
      JsonQuote(c.model), JsonQuote(engine::GgmlTypeName(model->weight_type())),
      setup.backend.threads, c.prompt_tokens, c.gen_tokens, c.batch, JsonNumber(pp), JsonNumber(tg),
      JsonNumber(btg), JsonNumber(rss_mib), JsonQuote(engine::DeviceName(setup.device)),
      JsonNumber(decode_bytes_per_s), JsonNumber(prefill_flops_per_s), JsonNumber(memory_fraction),
      JsonNumber(flops_fraction), JsonQuote(engine::GgmlTypeName(setup.engine.kv.dtype)),
      setup.cuda.graph_max_batch, setup.cuda.programmatic_launch ? "true" : "false",
      JsonQuote(setup.cuda.attention == engine::CudaAttention::kF32        ? "f32"
                : setup.cuda.attention == engine::CudaAttention::kSplitF16 ? "split-f16"
                                                                           : "f16"));
  std::cout << json << std::endl;
  if (!c.out.empty()) {
    std::ofstream f(c.out, std::ios::app);
    f << json << "\n";
    if (!f) return absl::InternalError("--out: cannot write " + c.out);
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ConfigFromArgs(const common::Args& args) {
  Config c;
  c.model = args.String("model");
  c.out = args.String("out");
  if (const std::string& type = args.String("make-synthetic"); !type.empty()) {
    absl::StatusOr<engine::GgmlType> t = engine::GgmlTypeFromName(type);
    if (t.ok()) {
      c.make_synthetic = *t;
    } else if (absl::StatusOr<engine::QuantMix> mix = engine::QuantMixFromName(type); mix.ok()) {
      c.make_mix = *mix;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--make-synthetic: \"", type, "\" is neither a tensor type (", t.status().message(),
          ") nor a quantization mix (", engine::QuantMixNames(), ")"));
    }
  }
  c.shape = args.String("synthetic-shape");
  RETURN_IF_ERROR(Shape(c.shape).status());
  ASSIGN_OR_RETURN(c.setup, engine::EngineSetupFromArgs(args));
  for (auto [name, field] : {std::pair{"prompt-tokens", &c.prompt_tokens},
                             {"gen-tokens", &c.gen_tokens},
                             {"batch", &c.batch},
                             {"repeats", &c.repeats}}) {
    ASSIGN_OR_RETURN(*field, args.IntInRange(name, 1, 1 << 20));
  }
  return c;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  using tandem::common::FlagSpec;
  std::vector<FlagSpec> specs = {
      {.name = "model", .help = "GGUF model file", .required = true},
      {.name = "prompt-tokens", .default_value = "512", .help = "prefill length"},
      {.name = "gen-tokens", .default_value = "128", .help = "decode length"},
      {.name = "batch", .default_value = "8", .help = "sequences in batched decode"},
      {.name = "repeats", .default_value = "3", .help = "measured runs (median reported)"},
      {.name = "out", .default_value = "", .help = "append the JSON line to this file"},
      {.name = "make-synthetic", .default_value = "",
       .help = "first write a synthetic Llama of --synthetic-shape with weights of this type "
               "(f32, f16, bf16, q8_0, q4_k, ...) or quantization mix (q4_k_m, q5_k_m, ...) to "
               "--model, overwriting it"},
      {.name = "synthetic-shape", .default_value = "25m",
       .help = "the --make-synthetic model's shape: 25m (engine/model/synthetic_model.h's "
               "25.7M-parameter Llama) or 1b (1.1B parameters: n_embd 2048, 16 layers, 32 "
               "heads, 8 KV heads, n_ff 5632, 32000 tokens)"},
  };
  for (FlagSpec& s : tandem::engine::EngineFlagSpecs()) specs.push_back(std::move(s));
  absl::StatusOr<tandem::common::Args> args =
      tandem::common::Args::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) std::cerr << "tandem-engine-bench: " << args.status().message() << "\n";
    std::cerr << tandem::common::Args::Usage("engine-bench", specs);
    return args.ok() ? 0 : 2;
  }
  absl::StatusOr<tandem::bench::Config> config = tandem::bench::ConfigFromArgs(*args);
  absl::Status s = config.ok() ? tandem::bench::Run(*config) : config.status();
  if (!s.ok()) {
    std::cerr << "tandem-engine-bench: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
