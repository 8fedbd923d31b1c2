// `tandem make-model`: writes a synthetic Llama GGUF (see
// engine/model/synthetic_model.h) with a chosen shape and weight type.
#include <fstream>
#include <sstream>
#include <string>

#include "common/flags.h"
#include "cli/commands.h"
#include "common/status_macros.h"
#include "engine/model/synthetic_model.h"

namespace tandem::cli {
namespace {

absl::StatusOr<engine::SyntheticModelOptions> OptionsFromArgs(const common::Args& args) {
  engine::SyntheticModelOptions o;
  o.arch = args.String("arch");
  constexpr int32_t kMax = 1 << 24;
  ASSIGN_OR_RETURN(o.n_vocab, args.IntInRange("n-vocab", 1, kMax));
  ASSIGN_OR_RETURN(o.n_embd, args.IntInRange("n-embd", 1, kMax));
  ASSIGN_OR_RETURN(o.n_layer, args.IntInRange("n-layer", 1, kMax));
  ASSIGN_OR_RETURN(o.n_head, args.IntInRange("n-head", 1, kMax));
  ASSIGN_OR_RETURN(o.n_head_kv, args.IntInRange("n-head-kv", 1, kMax));
  ASSIGN_OR_RETURN(o.n_ff, args.IntInRange("n-ff", 1, kMax));
  ASSIGN_OR_RETURN(o.context_length, args.IntInRange("context-length", 1, kMax));
  ASSIGN_OR_RETURN(o.type, engine::GgmlTypeFromName(args.String("type")));
  o.tied_output = args.Bool("tied-output");
  o.copying = args.Bool("copying");
  ASSIGN_OR_RETURN(o.seed, args.Uint64("seed"));
  if (const std::string path = args.String("chat-template-file"); !path.empty()) {
    std::ifstream in(path);
    if (!in) return absl::InvalidArgumentError("--chat-template-file: cannot read " + path);
    std::stringstream text;
    text << in.rdbuf();
    o.chat_template = text.str();
  }
  RETURN_IF_ERROR(engine::ValidateSyntheticModelOptions(o));
  return o;
}

}  // namespace

int RunMakeModel(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const engine::SyntheticModelOptions d;
  const std::vector<common::FlagSpec> specs = {
      {.name = "out", .help = "path of the GGUF file to write", .required = true},
      {.name = "arch", .default_value = d.arch, .help = "llama or qwen2"},
      {.name = "n-vocab", .default_value = std::to_string(d.n_vocab), .help = "vocabulary size"},
      {.name = "n-embd", .default_value = std::to_string(d.n_embd), .help = "embedding width"},
      {.name = "n-layer", .default_value = std::to_string(d.n_layer), .help = "layers"},
      {.name = "n-head", .default_value = std::to_string(d.n_head), .help = "query heads"},
      {.name = "n-head-kv", .default_value = std::to_string(d.n_head_kv), .help = "KV heads"},
      {.name = "n-ff", .default_value = std::to_string(d.n_ff), .help = "feed-forward width"},
      {.name = "context-length", .default_value = std::to_string(d.context_length),
       .help = "trained context length"},
      {.name = "type", .default_value = "f32",
       .help = "weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k .. q6_k"},
      {.name = "tied-output", .default_value = "false",
       .help = "share token_embd as the output matrix", .is_bool = true},
      {.name = "copying", .default_value = "false",
       .help = "weights that continue text the context holds (previous-token and induction "
               "heads; the rest small noise): a model for speculation benchmarks; needs "
               "n_layer >= 2, n_head >= 4, n_embd / n_head >= 64, n_embd >= 385",
       .is_bool = true},
      {.name = "seed", .default_value = "1", .help = "weight RNG seed"},
      {.name = "chat-template-file", .default_value = "",
       .help = "a Jinja chat template to store as tokenizer.chat_template; empty = none"},
  };
  absl::StatusOr<common::Args> args = common::Args::Parse(argv, specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) err << "tandem make-model: " << args.status().message() << "\n";
    err << common::Args::Usage("make-model", specs);
    return args.ok() ? 0 : 2;
  }
  absl::StatusOr<engine::SyntheticModelOptions> options = OptionsFromArgs(*args);
  if (!options.ok()) {
    err << "tandem make-model: " << options.status().message() << "\n";
    return 2;
  }
  if (absl::Status s = engine::WriteSyntheticModel(*options, args->String("out")); !s.ok()) {
    err << "tandem make-model: " << s.message() << "\n";
    return 1;
  }
  out << args->String("out") << "\n";
  return 0;
}

}  // namespace tandem::cli
