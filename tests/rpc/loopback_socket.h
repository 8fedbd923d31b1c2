// Test helper: a plain TCP socket bound to a kernel-chosen loopback port
// (optionally listening, never accepting), closed on destruction. Used to
// stand for a busy port, a silent server, or a port nobody listens on.
#ifndef TANDEM_TESTS_RPC_LOOPBACK_SOCKET_H_
#define TANDEM_TESTS_RPC_LOOPBACK_SOCKET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace tandem::rpc::testing {

class LoopbackSocket {
 public:
  // No SO_REUSEPORT, so nobody else can bind the port while this lives.
  explicit LoopbackSocket(bool listen) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          (!listen || ::listen(fd_, 4) == 0) &&
          ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    port_ = ntohs(addr.sin_port);
  }
  ~LoopbackSocket() { Close(); }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;

  bool ok() const { return ok_; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool ok_ = false;
  int port_ = 0;
};

}  // namespace tandem::rpc::testing

#endif  // TANDEM_TESTS_RPC_LOOPBACK_SOCKET_H_
