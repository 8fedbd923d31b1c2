#include "process/http_get.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/host_port.h"

namespace tandem::process {
namespace {

// Closes the socket on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string ErrnoText(int err) { return std::strerror(err); }

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status PollUntil(int fd, short events, absl::Time deadline,
                       const std::string& what) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("HTTP GET: ", what,
                                                      " timed out"));
    }
    pollfd pfd{fd, events, 0};
    // Round up so a sub-millisecond remainder still waits rather than spins.
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
    const int n = ::poll(&pfd, 1, ms);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("HTTP GET: poll: ", ErrnoText(errno)));
    }
  }
}

absl::StatusOr<int> ConnectOne(const addrinfo& ai, absl::Time deadline) {
  const int fd =
      ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai.ai_protocol);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("socket: ", ErrnoText(errno)));
  }
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect: ", ErrnoText(err)));
  }
  absl::Status ready = PollUntil(fd, POLLOUT, deadline, "connect");
  if (!ready.ok()) {
    ::close(fd);
    return ready;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect: ", ErrnoText(err)));
  }
  return fd;
}

absl::StatusOr<int> Connect(const common::HostPort& hp, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string host = common::StripBrackets(hp.host);
  const std::string port = std::to_string(hp.port);
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &list);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "HTTP GET: resolving \"", hp.host, "\": ", ::gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no addresses");
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    absl::StatusOr<int> fd = ConnectOne(*ai, deadline);
    if (fd.ok()) {
      ::freeaddrinfo(list);
      return fd;
    }
    last = fd.status();
    if (absl::IsDeadlineExceeded(last)) break;
  }
  ::freeaddrinfo(list);
  return absl::Status(last.code(),
                      absl::StrCat("HTTP GET ", common::JoinHostPort(hp.host, hp.port),
                                   ": ", last.message()));
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& host_port,
                                    const std::string& path,
                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  ASSIGN_OR_RETURN(const common::HostPort hp, common::SplitHostPort(host_port));
  ASSIGN_OR_RETURN(const int raw_fd, Connect(hp, deadline));
  Fd fd(raw_fd);

  // HTTP/1.0 with Connection: close: the server ends the body by closing, so
  // there is no chunked encoding or Content-Length bookkeeping to do.
  const std::string request =
      absl::StrCat("GET ", path.empty() ? "/" : path, " HTTP/1.0\r\nHost: ",
                   host_port, "\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    RETURN_IF_ERROR(PollUntil(fd.get(), POLLOUT, deadline, "send"));
    const ssize_t n = ::send(fd.get(), request.data() + sent,
                             request.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(
          absl::StrCat("HTTP GET: send: ", ErrnoText(errno)));
    }
    sent += static_cast<size_t>(n);
  }

  std::string response;
  char buf[16384];
  while (true) {
    RETURN_IF_ERROR(PollUntil(fd.get(), POLLIN, deadline, "receive"));
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(
          absl::StrCat("HTTP GET: recv: ", ErrnoText(errno)));
    }
    response.append(buf, static_cast<size_t>(n));
  }

  const size_t line_end = response.find("\r\n");
  const size_t header_end = response.find("\r\n\r\n");
  if (line_end == std::string::npos || header_end == std::string::npos ||
      !absl::StartsWith(response, "HTTP/")) {
    return absl::UnknownError(
        absl::StrCat("HTTP GET ", host_port, path, ": malformed response"));
  }
  const std::string status_line = response.substr(0, line_end);
  const size_t space = status_line.find(' ');
  if (space == std::string::npos ||
      status_line.compare(space + 1, 3, "200") != 0) {
    return absl::UnknownError(
        absl::StrCat("HTTP GET ", host_port, path, ": ", status_line));
  }
  return response.substr(header_end + 4);
}

}  // namespace tandem::process
