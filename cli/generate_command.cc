// `tandem generate`: runs one prompt through the engine in this process and
// prints the completion as it is produced (plain text, or one JSON object per
// token with --jsonl).
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "cli/commands.h"
#include "engine/backend_factory.h"
#include "engine/engine_flags.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "engine/model/model.h"

namespace tandem::cli {
namespace {

std::vector<common::FlagSpec> GenerateFlagSpecs() {
  std::vector<common::FlagSpec> specs = {
      {.name = "model", .help = "GGUF model file", .required = true},
      {.name = "prompt", .help = "prompt text", .required = true},
      {.name = "max-tokens", .default_value = "64", .help = "tokens to generate"},
      {.name = "temperature", .default_value = "0", .help = "0 = greedy"},
      {.name = "top-p", .default_value = "1", .help = "nucleus sampling mass"},
      {.name = "top-k", .default_value = "0", .help = "0 = off"},
      {.name = "min-p", .default_value = "0", .help = "0 = off"},
      {.name = "seed", .default_value = "0", .help = "sampling RNG seed"},
      {.name = "top-logprobs", .default_value = "0", .help = "alternatives per token, 0..20"},
      {.name = "ignore-eos", .default_value = "false", .help = "keep going past EOS",
       .is_bool = true},
      {.name = "jsonl", .default_value = "false", .help = "one JSON object per token",
       .is_bool = true},
  };
  for (common::FlagSpec& s : engine::EngineFlagSpecs()) specs.push_back(std::move(s));
  return specs;
}

absl::StatusOr<engine::GenerationRequest> RequestFromArgs(const common::Args& args,
                                                          const engine::Tokenizer& tok) {
  engine::GenerationRequest r;
  r.prompt = tok.Encode(args.String("prompt"), {.add_special = true, .parse_special = true});
  ASSIGN_OR_RETURN(int64_t max_tokens, args.Int("max-tokens"));
  ASSIGN_OR_RETURN(int64_t top_logprobs, args.Int("top-logprobs"));
  ASSIGN_OR_RETURN(int64_t top_k, args.Int("top-k"));
  ASSIGN_OR_RETURN(double temperature, args.Double("temperature"));
  ASSIGN_OR_RETURN(double top_p, args.Double("top-p"));
  ASSIGN_OR_RETURN(double min_p, args.Double("min-p"));
  ASSIGN_OR_RETURN(r.sampling.seed, args.Uint64("seed"));
  // Range checks happen once, in Engine::Add; clamp only what would not fit
  // the field's type so the engine's message still names the right field.
  r.max_tokens = static_cast<int32_t>(std::clamp<int64_t>(max_tokens, -1, INT32_MAX));
  r.top_logprobs = static_cast<int32_t>(std::clamp<int64_t>(top_logprobs, -1, INT32_MAX));
  r.sampling.top_k = static_cast<int32_t>(std::clamp<int64_t>(top_k, -1, INT32_MAX));
  r.sampling.temperature = static_cast<float>(temperature);
  r.sampling.top_p = static_cast<float>(top_p);
  r.sampling.min_p = static_cast<float>(min_p);
  r.ignore_eos = args.Bool("ignore-eos");
  return r;
}

std::string TokenJson(const engine::Tokenizer& tok, const engine::SampledToken& t,
                      const std::string& text) {
  std::string s = absl::StrCat("{\"id\": ", t.id, ", \"text\": ", JsonQuote(text),
                               ", \"logprob\": ", JsonNumber(t.logprob), ", \"top_logprobs\": [");
  for (size_t i = 0; i < t.top.size(); ++i) {
    absl::StrAppend(&s, i ? ", " : "", "{\"id\": ", t.top[i].id,
                    ", \"text\": ", JsonQuote(tok.TokenBytes(t.top[i].id)),
                    ", \"logprob\": ", JsonNumber(t.top[i].logprob), "}");
  }
  return s + "]}";
}

absl::Status Generate(const common::Args& args, std::ostream& out, std::ostream& err) {
  ASSIGN_OR_RETURN(engine::EngineSetup setup, engine::EngineSetupFromArgs(args));
  RETURN_IF_ERROR(engine::ProbeDevice(setup.device));  // before the model loads
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model,
                   engine::Model::Load(args.String("model")));
  const engine::Tokenizer& tok = model->tokenizer();
  ASSIGN_OR_RETURN(engine::GenerationRequest request, RequestFromArgs(args, tok));
  const size_t n_prompt = request.prompt.size();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> draft, engine::LoadDraftModel(setup));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> eng,
                   engine::CreateEngine(*model, draft.get(), setup));
  const std::string backend_name(eng->backend_name());
  RETURN_IF_ERROR(eng->Add(std::move(request)).status());

  const bool jsonl = args.Bool("jsonl");
  engine::Utf8StreamDecoder decoder;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_token;
  int64_t n_generated = 0;
  while (eng->HasWork()) {
    ASSIGN_OR_RETURN(engine::StepOutput step, eng->Step());
    const std::vector<engine::TokenEvent>& events = step.tokens;
    for (const engine::TokenEvent& ev : events) {
      if (n_generated++ == 0) first_token = std::chrono::steady_clock::now();
      const std::string text = decoder.Push(tok.TokenBytes(ev.token.id));
      if (jsonl) {
        out << TokenJson(tok, ev.token, text) << "\n";
      } else {
        out << text;
      }
      out.flush();
    }
  }
  if (!jsonl) out << decoder.Flush() << "\n";
  const auto end = std::chrono::steady_clock::now();
  const double prefill_s = std::chrono::duration<double>(first_token - start).count();
  const double decode_s = std::chrono::duration<double>(end - first_token).count();
  err << absl::StrFormat(
      "prompt: %d tokens in %.3f s (%.1f t/s); generated: %d tokens (%.1f t/s decode); "
      "backend %s\n",
      n_prompt, prefill_s, n_prompt / std::max(prefill_s, 1e-9), n_generated,
      n_generated > 1 ? (n_generated - 1) / std::max(decode_s, 1e-9) : 0.0, backend_name);
  return absl::OkStatus();
}

}  // namespace

int RunGenerate(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<common::FlagSpec> specs = GenerateFlagSpecs();
  absl::StatusOr<common::Args> args = common::Args::Parse(argv, specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) err << "tandem generate: " << args.status().message() << "\n";
    err << common::Args::Usage("generate", specs);
    return args.ok() ? 0 : 2;
  }
  if (absl::Status s = Generate(*args, out, err); !s.ok()) {
    err << "tandem generate: " << s.message() << "\n";
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

}  // namespace tandem::cli
