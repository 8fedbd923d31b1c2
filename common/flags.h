// Command-line flags for one program or subcommand: `--name value`, `--name=value` and
// boolean `--name`. Every flag is declared with a default and a help line;
// unknown flags and malformed values are errors that name the flag.
// Thread-compatible.
#ifndef TANDEM_COMMON_FLAGS_H_
#define TANDEM_COMMON_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace tandem::common {

struct FlagSpec {
  std::string name = "";      // without leading dashes
  std::string default_value = "";  // ignored when required
  std::string help = "";
  bool is_bool = false;
  bool required = false;
};

class Args {
 public:
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::vector<FlagSpec>& specs);

  // Usage text listing every flag with its default.
  static std::string Usage(const std::string& command, const std::vector<FlagSpec>& specs);

  const std::string& String(const std::string& name) const;
  absl::StatusOr<int64_t> Int(const std::string& name) const;
  // Int, and InvalidArgument naming the flag unless lo <= value <= hi.
  absl::StatusOr<int32_t> IntInRange(const std::string& name, int32_t lo, int32_t hi) const;
  absl::StatusOr<double> Double(const std::string& name) const;
  absl::StatusOr<uint64_t> Uint64(const std::string& name) const;
  bool Bool(const std::string& name) const;
  bool IsSet(const std::string& name) const { return set_.contains(name); }
  bool help() const { return help_; }

 private:
  absl::flat_hash_map<std::string, std::string> values_;
  absl::flat_hash_map<std::string, bool> set_;
  bool help_ = false;
};

// Parses argv for the program `name`; on --help or a bad flag prints the
// usage (and the error) to stderr, sets `exit_code` (0 or 2) and returns
// nullopt. For main() functions.
std::optional<Args> ParseFlagsOrExit(const std::string& name, int argc, char** argv,
                                     const std::vector<FlagSpec>& specs, int* exit_code);

}  // namespace tandem::common

#endif  // TANDEM_COMMON_FLAGS_H_
