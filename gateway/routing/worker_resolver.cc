#include "gateway/routing/worker_resolver.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_port.h"
#include "common/log.h"

namespace tandem::gateway {
namespace {

constexpr char kDnsScheme[] = "dns:///";

bool IsDns(const std::string& target) { return absl::StartsWith(target, kDnsScheme); }

}  // namespace

absl::StatusOr<std::vector<std::string>> LookupHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("looking up \"", host, "\": ", ::gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    char buf[NI_MAXHOST];
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) ==
        0) {
      out.emplace_back(buf);
    }
  }
  ::freeaddrinfo(result);
  if (out.empty()) return absl::NotFoundError(absl::StrCat("\"", host, "\" has no address"));
  return out;
}

absl::Status ValidateTargets(const std::vector<std::string>& targets, const std::string& flag) {
  for (const std::string& t : targets) {
    const std::string address = IsDns(t) ? t.substr(sizeof(kDnsScheme) - 1) : t;
    if (absl::StrContains(t, "://") && !IsDns(t)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": \"", t, "\": only host:port and dns:///host:port targets are supported"));
    }
    if (absl::StatusOr<common::HostPort> hp = common::SplitHostPort(address); !hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", hp.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ExpandTargets(const std::vector<std::string>& targets,
                                                       const HostLookup& lookup) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  for (const std::string& t : targets) {
    if (!IsDns(t)) {
      add(t);
      continue;
    }
    absl::StatusOr<common::HostPort> hp = common::SplitHostPort(t.substr(sizeof(kDnsScheme) - 1));
    if (!hp.ok()) return hp.status();
    absl::StatusOr<std::vector<std::string>> ips = lookup(common::StripBrackets(hp->host));
    if (!ips.ok()) return ips.status();
    std::set<std::string> sorted(ips->begin(), ips->end());
    for (const std::string& ip : sorted) {
      add(common::JoinHostPort(absl::StrContains(ip, ':') ? absl::StrCat("[", ip, "]") : ip,
                               hp->port));
    }
  }
  return out;
}

WorkerResolver::WorkerResolver(std::vector<std::string> targets, absl::Duration interval,
                               OnChange on_change, HostLookup lookup)
    : targets_(std::move(targets)),
      interval_(interval),
      on_change_(std::move(on_change)),
      lookup_(std::move(lookup)),
      has_dns_(std::any_of(targets_.begin(), targets_.end(), IsDns)) {
  Refresh();
  if (has_dns_) {
    thread_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(interval_)) Refresh();
    });
  }
}

WorkerResolver::~WorkerResolver() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> WorkerResolver::addresses() const {
  absl::MutexLock lock(&mu_);
  return addresses_;
}

void WorkerResolver::Refresh() {
  absl::StatusOr<std::vector<std::string>> expanded = ExpandTargets(targets_, lookup_);
  if (!expanded.ok()) {
    if (common::LogEnabled(common::LogLevel::kWarning)) {
      common::LogLine("resolver") << expanded.status().message() << "; keeping the last workers";
    }
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (*expanded == addresses_) return;
    addresses_ = *expanded;
  }
  if (has_dns_ && common::LogEnabled(common::LogLevel::kInfo)) {
    // A DNS name changed (static lists are not worth a line).
    common::LogLine("resolver") << "workers now: " << absl::StrJoin(*expanded, ",");
  }
  on_change_(*expanded);
}

}  // namespace tandem::gateway
