// `tandem tokenize`: prints a text's token ids as a JSON array. Reads only
// the tokenizer part of the file, so vocab-only GGUF files work.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flags.h"
#include "cli/commands.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::cli {

int RunTokenize(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<common::FlagSpec> specs = {
      {.name = "model", .help = "GGUF file (a vocab-only file is enough)", .required = true},
      {.name = "text", .help = "text to tokenize", .required = true},
      {.name = "no-special", .default_value = "false",
       .help = "add no BOS/EOS and read special-token text as plain text", .is_bool = true},
  };
  absl::StatusOr<common::Args> args = common::Args::Parse(argv, specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) err << "tandem tokenize: " << args.status().message() << "\n";
    err << common::Args::Usage("tokenize", specs);
    return args.ok() ? 0 : 2;
  }
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tok =
      engine::LoadTokenizer(args->String("model"));
  if (!tok.ok()) {
    err << "tandem tokenize: " << tok.status().message() << "\n";
    return 1;
  }
  const bool special = !args->Bool("no-special");
  const std::vector<int32_t> ids = (*tok)->Encode(
      args->String("text"), {.add_special = special, .parse_special = special});
  out << "[" << absl::StrJoin(ids, ", ") << "]\n";
  return 0;
}

}  // namespace tandem::cli
