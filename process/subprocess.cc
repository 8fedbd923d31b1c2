#include "process/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace tandem::process {
namespace {

constexpr size_t kTailLines = 8;

// The child's environment: ours, with `extra` ("KEY=VALUE") added or
// replacing entries of the same key.
std::vector<std::string> BuildEnv(const std::vector<std::string>& extra) {
  std::map<std::string, std::string> by_key;
  std::vector<std::string> order;
  auto put = [&](const std::string& entry) {
    const std::string key = entry.substr(0, entry.find('='));
    if (by_key.emplace(key, entry).second) {
      order.push_back(key);
    } else {
      by_key[key] = entry;
    }
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) put(*e);
  for (const std::string& entry : extra) put(entry);
  std::vector<std::string> env;
  env.reserve(order.size());
  for (const std::string& key : order) env.push_back(by_key[key]);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Owns the posix_spawn attribute objects for the duration of one spawn.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv, const SubprocessOptions& options) {
  if (argv.empty() || argv[0].empty()) {
    return absl::InvalidArgumentError("subprocess: argv[0] is empty");
  }
  // O_CLOEXEC: a child spawned concurrently by another thread must not
  // inherit our pipe, or we would never see EOF.
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("subprocess: pipe2: ", std::strerror(errno)));
  }
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) {
    const int err = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return absl::InternalError(
        absl::StrCat("subprocess: eventfd: ", std::strerror(err)));
  }

  SpawnSetup setup;
  posix_spawn_file_actions_adddup2(&setup.actions, pipe_fds[1], STDOUT_FILENO);
  if (!options.stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&setup.actions, STDERR_FILENO,
                                     options.stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  // Own process group (Terminate signals the whole group); no blocked
  // signals (our parent may have run BlockShutdownSignals, and a blocked
  // SIGTERM survives exec); default dispositions for signals a shell or
  // test runner commonly ignores.
  posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETPGROUP |
                                            POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&setup.attr, 0);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&setup.attr, &empty);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGCHLD}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigdefault(&setup.attr, &defaults);

  std::vector<std::string> args = argv;
  std::vector<std::string> env = BuildEnv(options.extra_env);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(env);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0].c_str(), &setup.actions,
                                &setup.attr, c_args.data(), c_env.data());
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    ::close(stop_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "subprocess: cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return std::unique_ptr<Subprocess>(
      new Subprocess(argv[0], pid, pipe_fds[0], stop_fd, options));
}

Subprocess::Subprocess(std::string name, pid_t pid, int stdout_fd, int stop_fd,
                       const SubprocessOptions& options)
    : name_(std::move(name)),
      pid_(pid),
      stdout_fd_(stdout_fd),
      stop_fd_(stop_fd),
      options_(options) {
  reader_ = std::thread([this] { ReadStdout(); });
  reaper_ = std::thread([this] { Reap(); });
}

Subprocess::~Subprocess() {
  Terminate();
  reaper_.join();
  // The child is gone, but a grandchild that left the group may still hold
  // the pipe open; the eventfd stops the reader regardless.
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof(one));
  reader_.join();
  ::close(stop_fd_);
}

void Subprocess::ReadStdout() {
  std::string pending;
  char buf[4096];
  bool open = true;
  // Once stopped, output the child wrote before it died is still in the
  // pipe; read what is there (bounded, in case a stray grandchild keeps
  // writing) so no line is lost, then quit.
  bool stopping = false;
  int reads_after_stop = 0;
  constexpr int kMaxReadsAfterStop = 1024;  // 4 MiB
  while (open) {
    pollfd fds[2] = {{stdout_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) stopping = true;
    if (fds[0].revents == 0) {
      if (stopping) break;
      continue;
    }
    if (stopping && ++reads_after_stop > kMaxReadsAfterStop) break;
    const ssize_t got = ::read(stdout_fd_, buf, sizeof(buf));
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    if (got == 0) {
      open = false;
    } else {
      pending.append(buf, static_cast<size_t>(got));
    }
    size_t start = 0;
    for (size_t nl = pending.find('\n'); nl != std::string::npos;
         nl = pending.find('\n', start)) {
      HandleLine(pending.substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) HandleLine(pending);  // last line without '\n'
  ::close(stdout_fd_);
  absl::MutexLock lock(&mu_);
  stdout_closed_ = true;
}

void Subprocess::HandleLine(const std::string& line) {
  {
    absl::MutexLock lock(&mu_);
    if (!ready_ && absl::StartsWith(line, "READY")) {
      absl::StatusOr<common::ReadyInfo> info = common::ParseReadyLine(line);
      if (info.ok()) {
        ready_ = true;
        ready_info_ = *std::move(info);
        return;
      }
    }
    tail_.push_back(line);
    if (tail_.size() > kTailLines) tail_.pop_front();
  }
  if (options_.on_stdout_line) options_.on_stdout_line(line);
}

void Subprocess::Reap() {
  // Wait without reaping first: while the child is a zombie its pid (and
  // process group id) cannot be reused, so Signal, which checks exited_
  // under mu_, can never hit an unrelated process.
  siginfo_t info;
  while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) !=
             0 &&
         errno == EINTR) {
  }
  absl::MutexLock lock(&mu_);
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &status, 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    exit_code_ = -1;  // someone else reaped it (waitpid(-1) elsewhere)
  } else if (WIFEXITED(status)) {
    exit_code_ = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit_code_ = 128 + WTERMSIG(status);
  }
  exited_ = true;
}

bool Subprocess::ReadyOrGone() const {
  return ready_ || stdout_closed_ || exited_;
}
bool Subprocess::FullyGone() const {
  return ready_ || (stdout_closed_ && exited_);
}
bool Subprocess::Exited() const { return exited_; }

std::string Subprocess::DescribeEndLocked() const {
  std::string what;
  if (!exited_) {
    what = "closed its stdout";
  } else if (exit_code_ > 128) {
    what = absl::StrCat("was killed by signal ", exit_code_ - 128, " (",
                        ::strsignal(exit_code_ - 128), ")");
  } else {
    what = absl::StrCat("exited with code ", exit_code_);
  }
  std::string message =
      absl::StrCat(name_, " (pid ", pid_, ") ", what, " before READY");
  if (!tail_.empty()) {
    absl::StrAppend(&message, "; last stdout: ", absl::StrJoin(tail_, " | "));
  }
  return message;
}

absl::StatusOr<common::ReadyInfo> Subprocess::WaitReady(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(this, &Subprocess::ReadyOrGone),
                        deadline);
  if (!ready_ && (exited_ || stdout_closed_)) {
    // One side of the end came first; give the other a moment so the error
    // has the exit code and the last output, without passing the deadline.
    // A process that closed its stdout is usually gone within milliseconds,
    // but its exit (libraries' teardown, e.g. the CUDA runtime's) can take
    // over a second on a loaded machine.
    mu_.AwaitWithDeadline(absl::Condition(this, &Subprocess::FullyGone),
                          std::min(deadline, absl::Now() + absl::Seconds(5)));
  }
  if (ready_) return ready_info_;
  if (exited_ || stdout_closed_) {
    return absl::FailedPreconditionError(DescribeEndLocked());
  }
  return absl::DeadlineExceededError(
      absl::StrCat(name_, " (pid ", pid_, ") printed no READY line within ",
                   absl::FormatDuration(timeout)));
}

void Subprocess::Signal(int signal) {
  absl::MutexLock lock(&mu_);
  if (!exited_) ::kill(-pid_, signal);
}

bool Subprocess::AwaitExit(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &Subprocess::Exited),
                              timeout);
}

void Subprocess::Terminate() {
  if (AwaitExit(absl::ZeroDuration())) return;
  Signal(SIGTERM);
  if (AwaitExit(options_.terminate_grace)) return;
  Signal(SIGKILL);
  AwaitExit(absl::InfiniteDuration());
}

int Subprocess::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &Subprocess::Exited));
  return exit_code_;
}

absl::StatusOr<int> Subprocess::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &Subprocess::Exited),
                            timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat(name_, " (pid ", pid_, ") still running after ",
                     absl::FormatDuration(timeout)));
  }
  return exit_code_;
}

bool Subprocess::Running() const {
  absl::MutexLock lock(&mu_);
  return !exited_;
}

std::string SiblingBinary(const std::string& name) {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return name;
  std::string self(path, static_cast<size_t>(n));
  const size_t slash = self.rfind('/');
  if (slash == std::string::npos) return name;
  return absl::StrCat(self.substr(0, slash + 1), name);
}

}  // namespace tandem::process
