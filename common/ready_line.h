// The READY line: the one stdout line by which a Tandem process tells its
// parent (`tandem up`, Subprocess::WaitReady, tests) where it listens:
//   READY grpc=HOST:PORT metrics=HOST:PORT [http=HOST:PORT] [health=HOST:PORT]
// (metrics= empty when metrics are off; http= only from a gateway serving
// the OpenAI-compatible HTTP front; health= only with --health-listen; unknown keys are ignored by the parser
// so the line can grow). Functions are stateless; any thread.
#ifndef TANDEM_COMMON_READY_LINE_H_
#define TANDEM_COMMON_READY_LINE_H_

#include <string>

#include "absl/status/statusor.h"

namespace tandem::common {

struct ReadyInfo {
  std::string grpc_address;     // "host:port", never empty
  std::string metrics_address;  // "host:port", or "" when metrics are off
  std::string http_address = {};  // "host:port", or "" without an HTTP front
  std::string health_address = {};  // "host:port", or "" without a health port
};

// "READY grpc=... metrics=..." without the newline.
std::string FormatReadyLine(const ReadyInfo& info);

// Parses one line (a trailing '\r' or '\n' is ignored). InvalidArgument when
// it is not a READY line or grpc= is missing or empty.
absl::StatusOr<ReadyInfo> ParseReadyLine(const std::string& line);

// Writes FormatReadyLine plus '\n' to stdout and flushes. Call exactly once,
// after every listener is bound.
void PrintReady(const ReadyInfo& info);

}  // namespace tandem::common

#endif  // TANDEM_COMMON_READY_LINE_H_
