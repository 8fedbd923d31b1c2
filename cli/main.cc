// `tandem`: the command-line entry point. Dispatches to a subcommand in
// cli/commands.h; all logic lives in the tandem_cli library.
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: tandem <command> [flags]\n"
    "commands:\n"
    "  generate    run a prompt through the engine in this process\n"
    "  tokenize    print a text's token ids as JSON\n"
    "  make-model  write a synthetic Llama GGUF model\n"
    "  quantize    write a GGUF model quantized by a llama-quantize mix (Q4_K_M, ...)\n"
    "  up          run prefill, decode and gateway processes on this machine\n"
    "  chat        talk to a gateway interactively\n"
    "Run 'tandem <command> --help' for its flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "generate") return tandem::cli::RunGenerate(args, std::cout, std::cerr);
  if (command == "tokenize") return tandem::cli::RunTokenize(args, std::cout, std::cerr);
  if (command == "make-model") return tandem::cli::RunMakeModel(args, std::cout, std::cerr);
  if (command == "quantize") return tandem::cli::RunQuantize(args, std::cout, std::cerr);
  if (command == "up") return tandem::cli::RunUp(args, std::cout, std::cerr);
  if (command == "chat") return tandem::cli::RunChat(args, std::cout, std::cerr);
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "tandem: unknown command \"" << command << "\"\n" << kUsage;
  return 2;
}
