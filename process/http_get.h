// A tiny blocking HTTP/1.0 GET over plain POSIX sockets, for tests and tools
// that scrape a real process's /metrics (no TLS, no redirects, no chunking).
// Stateless; any thread.
#ifndef TANDEM_PROCESS_HTTP_GET_H_
#define TANDEM_PROCESS_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::process {

// GETs `path` from `host_port` ("127.0.0.1:9100", "localhost:80",
// "[::1]:9100") and returns the body of a 200 response. Connect, send and
// receive all share one `timeout`: DeadlineExceeded past it, Unavailable when
// the connection fails, Unknown with the status line for a non-200 answer.
absl::StatusOr<std::string> HttpGet(const std::string& host_port,
                                    const std::string& path,
                                    absl::Duration timeout = absl::Seconds(5));

}  // namespace tandem::process

#endif  // TANDEM_PROCESS_HTTP_GET_H_
