#include "tests/e2e/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace tandem::testing {
namespace {

// 10.213.0.0/16 as /30 subnets: one per network.
constexpr int kSlots = 16384;

// Runs `command` through the shell, its output discarded.
absl::Status Run(const std::string& command) {
  const int rc = std::system((command + " >/dev/null 2>&1").c_str());
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat("`", command, "` failed (", rc, ")"));
  }
  return absl::OkStatus();
}

// One attempt: a fresh non-blocking connect, waited on until `deadline`.
// Returns whether it completed; a refusal or an unreachable route ends it
// early.
bool ConnectOnce(const sockaddr_in& addr, absl::Time deadline) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  bool ok = false;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
    ok = true;
  } else if (errno == EINPROGRESS) {
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    if (poll(&p, 1, static_cast<int>(ms)) == 1) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      ok = err == 0;
    }
  }
  close(fd);
  return ok;
}

}  // namespace

const char* FaultName(WorkerNetwork::Fault fault) {
  switch (fault) {
    case WorkerNetwork::Fault::kBlackhole: return "Blackhole";
    case WorkerNetwork::Fault::kLinkDown: return "LinkDown";
    case WorkerNetwork::Fault::kDropToWorker: return "DropToWorker";
    case WorkerNetwork::Fault::kDropFromWorker: return "DropFromWorker";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<WorkerNetwork>> WorkerNetwork::Create() {
  if (geteuid() != 0) return absl::FailedPreconditionError("not root: no network namespaces");
  if (Run("command -v nft").ok() == false) {
    return absl::FailedPreconditionError("nft (nftables) is not installed");
  }
  // Test processes run side by side (ctest -j) and each may hold several
  // networks, so a network takes a slot no other holds: chosen and made
  // under one lock shared by every process on the host, a slot whose
  // interface already exists (held, or left by a killed run) skipped. Two
  // networks on one subnet would route one test's packets into the other's
  // namespace.
  const int lock = open("/tmp/tandem-netns.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    if (lock >= 0) close(lock);
    return absl::FailedPreconditionError("cannot lock /tmp/tandem-netns.lock");
  }
  absl::Cleanup unlock = [lock] { close(lock); };  // closing releases the lock
  int slot = -1;
  for (int i = 0; i < kSlots && slot < 0; ++i) {
    const int candidate = static_cast<int>((getpid() + i) % kSlots);
    if (!std::filesystem::exists(absl::StrCat("/sys/class/net/tdh", candidate)) &&
        !std::filesystem::exists(absl::StrCat("/run/netns/tandem-", candidate))) {
      slot = candidate;
    }
  }
  if (slot < 0) return absl::ResourceExhaustedError("every test network slot is taken");
  std::unique_ptr<WorkerNetwork> n(new WorkerNetwork());
  // Names short enough for interfaces (15 characters); 10.213.<a>.<b>/30.
  n->ns_ = absl::StrCat("tandem-", slot);
  n->host_if_ = absl::StrCat("tdh", slot);
  n->worker_if_ = absl::StrCat("tdw", slot);
  const std::string subnet = absl::StrCat("10.213.", slot / 64, ".");
  n->host_ip_ = absl::StrCat(subnet, (slot % 64) * 4 + 1);
  n->worker_ip_ = absl::StrCat(subnet, (slot % 64) * 4 + 2);
  for (const std::string& c : {
           absl::StrCat("ip netns add ", n->ns_),
           absl::StrCat("ip link add ", n->host_if_, " type veth peer name ", n->worker_if_),
           absl::StrCat("ip link set ", n->worker_if_, " netns ", n->ns_),
           absl::StrCat("ip addr add ", n->host_ip_, "/30 dev ", n->host_if_),
           absl::StrCat("ip link set ", n->host_if_, " up"),
           absl::StrCat("ip -n ", n->ns_, " addr add ", n->worker_ip_, "/30 dev ", n->worker_if_),
           absl::StrCat("ip -n ", n->ns_, " link set ", n->worker_if_, " up"),
           absl::StrCat("ip -n ", n->ns_, " link set lo up"),
           absl::StrCat("ip netns exec ", n->ns_, " nft list tables")}) {
    if (absl::Status s = Run(c); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("network namespaces or nftables are not usable here: ", s.message()));
    }
  }
  return n;
}

WorkerNetwork::~WorkerNetwork() {
  (void)Run(absl::StrCat("ip netns del ", ns_));
  (void)Run(absl::StrCat("ip link del ", host_if_));  // gone with the namespace, usually
}

std::vector<std::string> WorkerNetwork::Wrap(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"ip", "netns", "exec", ns_};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::Status WorkerNetwork::Inject(Fault fault) {
  auto nft = [this](const std::string& chains) {
    return Run(absl::StrCat("ip netns exec ", ns_, " nft 'add table inet tandem_fault; ", chains,
                            "'"));
  };
  const std::string in = absl::StrCat(
      "add chain inet tandem_fault in { type filter hook input priority 0; policy accept; }; "
      "add rule inet tandem_fault in iifname ",
      worker_if_, " drop");
  const std::string out = absl::StrCat(
      "add chain inet tandem_fault out { type filter hook output priority 0; policy accept; }; "
      "add rule inet tandem_fault out oifname ",
      worker_if_, " drop");
  switch (fault) {
    case Fault::kBlackhole: return nft(absl::StrCat(in, "; ", out));
    case Fault::kDropToWorker: return nft(in);
    case Fault::kDropFromWorker: return nft(out);
    case Fault::kLinkDown: return Run(absl::StrCat("ip link set ", host_if_, " down"));
  }
  return absl::InvalidArgumentError("fault");
}

absl::Status WorkerNetwork::CutFromHostPort(int port) {
  return Run(absl::StrCat(
      "ip netns exec ", ns_, " nft 'add table inet tandem_fault; ",
      "add chain inet tandem_fault cut_in { type filter hook input priority 0; policy accept; }; ",
      "add rule inet tandem_fault cut_in iifname ", worker_if_, " ip saddr ", host_ip_,
      " tcp sport ", port, " drop; ",
      "add chain inet tandem_fault cut_out { type filter hook output priority 0; policy accept; "
      "}; ",
      "add rule inet tandem_fault cut_out oifname ", worker_if_, " ip daddr ", host_ip_,
      " tcp dport ", port, " drop'"));
}

absl::Status WorkerNetwork::Heal() {
  (void)Run(absl::StrCat("ip netns exec ", ns_, " nft delete table inet tandem_fault"));
  return Run(absl::StrCat("ip link set ", host_if_, " up"));
}

// Fresh connections are tried until one completes or `timeout` passes, each
// given at most a second: on a link just brought back up the first attempt
// can fail at once (no route or carrier yet) or lose its SYN and wait out
// the kernel's retransmission backoff, though the next gets through. A
// fault holds only if none does.
bool WorkerNetwork::Connects(int port, absl::Duration timeout) const {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, worker_ip_.c_str(), &addr.sin_addr);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (ConnectOnce(addr, std::min(deadline, absl::Now() + absl::Seconds(1)))) return true;
    if (absl::Now() >= deadline) return false;
    // An attempt that failed at once backs off briefly before the next.
    absl::SleepFor(std::min(absl::Milliseconds(50), deadline - absl::Now()));
  }
}

bool WorkerNetwork::ConnectsFromWorker(int port, absl::Duration timeout) const {
  return Run(absl::StrCat("ip netns exec ", ns_, " timeout ",
                          absl::ToDoubleSeconds(timeout), " bash -c 'exec 3<>/dev/tcp/", host_ip_,
                          "/", port, "'"))
      .ok();
}

}  // namespace tandem::testing
