#include "common/log.h"

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace tandem::common {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

absl::StatusOr<LogLevel> ParseLogLevel(const std::string& name) {
  if (name == "error") return LogLevel::kError;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  return absl::InvalidArgumentError(
      absl::StrCat("--log-level: \"", name, "\" is not one of error, warning, info, debug"));
}

LogLine::~LogLine() {
  stream_ << '\n';
  const std::string line = stream_.str();
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace tandem::common
