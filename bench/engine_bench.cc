// tandem-engine-bench: prefill tokens/s, single-sequence decode tokens/s,
// batched decode tokens/s and peak RSS of the in-process engine on one
// model. Prints a table, then one JSON line (also written to --out). It
// reports figures; it never fails on speed. With --make-synthetic it first
// writes the model itself, so an engine-only build (no `tandem` CLI, as
// scripts/gpu_check.sh makes on a GPU machine) can benchmark.
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
  // Set: write a synthetic model with weights of this type to `model` first.
  std::optional<engine::GgmlType> make_synthetic;
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

absl::Status Run(const Config& c) {
  RETURN_IF_ERROR(engine::ProbeDevice(c.setup.device));  // before the model loads
  if (c.make_synthetic.has_value()) {
    engine::SyntheticModelOptions synthetic;  // the benchmark shape (25.7M parameters)
    synthetic.type = *c.make_synthetic;
    RETURN_IF_ERROR(engine::WriteSyntheticModel(synthetic, c.model));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model, engine::Model::Load(c.model));
  engine::EngineSetup setup = c.setup;
  setup.engine.max_batch_tokens = std::max(setup.engine.max_batch_tokens, c.prompt_tokens);
  setup.engine.max_context =
      std::max(setup.engine.max_context, c.prompt_tokens + c.gen_tokens + 1);
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Backend> backend,
                   engine::MakeBackendForModel(*model, setup.device, setup.backend));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::Engine::Create(*model, std::move(backend), setup.engine));
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
  const std::string json = absl::StrFormat(
      "{\"model\": %s, \"type\": %s, \"threads\": %d, \"prompt_tokens\": %d, "
      "\"gen_tokens\": %d, \"batch\": %d, \"prefill_tokens_per_s\": %s, "
      "\"decode_tokens_per_s\": %s, \"batched_decode_tokens_per_s\": %s, "
      "\"peak_rss_mib\": %s}",
      JsonQuote(c.model), JsonQuote(engine::GgmlTypeName(model->weight_type())),
      setup.backend.threads, c.prompt_tokens, c.gen_tokens, c.batch, JsonNumber(pp),
      JsonNumber(tg), JsonNumber(btg), JsonNumber(rss_mib));
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
    if (!t.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--make-synthetic: ", t.status().message()));
    }
    c.make_synthetic = *t;
  }
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
       .help = "first write a synthetic Llama (engine/model/synthetic_model.h's 25.7M-parameter "
               "shape) with weights of this type (f32, f16, bf16, q8_0, q4_k, ...) to --model, "
               "overwriting it"},
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
