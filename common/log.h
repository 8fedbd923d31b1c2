// Process-wide log level for diagnostics written to stderr (`--log-level`
// on the binaries that take it). Messages at or above the level are
// written; debug lines cost one relaxed load when off. Thread-safe.
//
//   if (common::LogEnabled(common::LogLevel::kDebug)) {
//     common::LogLine("router") << "picked " << address;
//   }
#ifndef TANDEM_COMMON_LOG_H_
#define TANDEM_COMMON_LOG_H_

#include <sstream>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::common {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
// "error", "warning", "info" or "debug"; InvalidArgument naming the flag
// otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(const std::string& name);

// Collects one line and writes it to stderr, prefixed with `tag`, in one
// write when destroyed.
class LogLine {
 public:
  explicit LogLine(const char* tag) { stream_ << tag << ": "; }
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  template <typename T>
  LogLine& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

}  // namespace tandem::common

#endif  // TANDEM_COMMON_LOG_H_
