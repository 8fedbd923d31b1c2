#include "common/ready_line.h"

#include <cstdio>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tandem::common {

std::string FormatReadyLine(const ReadyInfo& info) {
  std::string line = absl::StrCat("READY grpc=", info.grpc_address,
                                  " metrics=", info.metrics_address);
  if (!info.http_address.empty()) absl::StrAppend(&line, " http=", info.http_address);
  if (!info.health_address.empty()) absl::StrAppend(&line, " health=", info.health_address);
  return line;
}

absl::StatusOr<ReadyInfo> ParseReadyLine(const std::string& line) {
  absl::string_view rest(line);
  while (absl::ConsumeSuffix(&rest, "\n") || absl::ConsumeSuffix(&rest, "\r")) {
  }
  std::vector<absl::string_view> words =
      absl::StrSplit(rest, ' ', absl::SkipEmpty());
  if (words.empty() || words[0] != "READY") {
    return absl::InvalidArgumentError(
        absl::StrCat("not a READY line: \"", rest, "\""));
  }
  ReadyInfo info;
  for (size_t i = 1; i < words.size(); ++i) {
    absl::string_view word = words[i];
    if (absl::ConsumePrefix(&word, "grpc=")) {
      info.grpc_address = std::string(word);
    } else if (absl::ConsumePrefix(&word, "metrics=")) {
      info.metrics_address = std::string(word);
    } else if (absl::ConsumePrefix(&word, "http=")) {
      info.http_address = std::string(word);
    } else if (absl::ConsumePrefix(&word, "health=")) {
      info.health_address = std::string(word);
    }  // Other keys are for newer parents; ignore them.
  }
  if (info.grpc_address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("READY line has no grpc= address: \"", rest, "\""));
  }
  return info;
}

void PrintReady(const ReadyInfo& info) {
  const std::string line = absl::StrCat(FormatReadyLine(info), "\n");
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace tandem::common
