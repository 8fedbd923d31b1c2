// The `tandem` subcommands. Each takes the arguments after the subcommand
// name, writes results to `out` and diagnostics to `err`, and returns the
// process exit code. main.cc only dispatches on the name.
#ifndef TANDEM_CLI_COMMANDS_H_
#define TANDEM_CLI_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

namespace tandem::cli {

int RunGenerate(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int RunTokenize(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int RunMakeModel(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
int RunQuantize(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
// Starts prefill, decode and gateway processes and supervises them; blocks
// SIGINT/SIGTERM/SIGHUP/SIGCHLD first, so call it before any thread exists.
int RunUp(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);
// Interactive client of a gateway; reads turns from std::cin.
int RunChat(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_COMMANDS_H_
