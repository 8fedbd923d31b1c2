// `tandem quantize`: writes a GGUF model with its weight matrices quantized
// by one of llama-quantize's named mixes (engine/model/model_quantizer.h).
#include <string>

#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "common/flags.h"
#include "engine/model/model_quantizer.h"

namespace tandem::cli {

int RunQuantize(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<common::FlagSpec> specs = {
      {.name = "in", .help = "GGUF model to read (F32, F16, BF16 or any type it reads)",
       .required = true},
      {.name = "out", .help = "GGUF file to write", .required = true},
      {.name = "type", .help = "mix: " + engine::QuantMixNames(), .required = true},
  };
  absl::StatusOr<common::Args> args = common::Args::Parse(argv, specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) err << "tandem quantize: " << args.status().message() << "\n";
    err << common::Args::Usage("quantize", specs);
    return args.ok() ? 0 : 2;
  }
  absl::StatusOr<engine::QuantMix> mix = engine::QuantMixFromName(args->String("type"));
  if (!mix.ok()) {
    err << "tandem quantize: " << mix.status().message() << "\n";
    return 2;
  }
  if (args->String("in") == args->String("out")) {
    err << "tandem quantize: --out must differ from --in\n";
    return 2;
  }
  absl::StatusOr<engine::QuantizeStats> stats =
      engine::QuantizeModel(args->String("in"), args->String("out"), *mix);
  if (!stats.ok()) {
    err << "tandem quantize: " << stats.status().message() << "\n";
    return 1;
  }
  out << absl::StrFormat("%s: %d tensors, %.2f MB -> %.2f MB\n", args->String("out"),
                         stats->tensors, stats->bytes_in / 1e6, stats->bytes_out / 1e6);
  return 0;
}

}  // namespace tandem::cli
