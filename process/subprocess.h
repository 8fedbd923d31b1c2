// Runs a child Tandem process (a worker or gateway binary) and learns its
// addresses from its READY line. Used by `tandem up` and the end-to-end
// tests. Subprocess is thread-compatible: one owner calls its methods; its
// two internal threads (stdout reader, reaper) share state under a mutex.
#ifndef TANDEM_PROCESS_SUBPROCESS_H_
#define TANDEM_PROCESS_SUBPROCESS_H_

#include <sys/types.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/ready_line.h"

namespace tandem::process {

struct SubprocessOptions {
  // Where the child's stderr goes: "" inherits ours, otherwise the file is
  // created or truncated.
  std::string stderr_path;
  // "KEY=VALUE" entries added to (or overriding) our environment.
  std::vector<std::string> extra_env;
  // Called on the reader thread for every stdout line except READY (without
  // the newline). Unset: lines are dropped, the last few kept for errors.
  std::function<void(const std::string& line)> on_stdout_line;
  // How long Terminate waits after SIGTERM before SIGKILL.
  absl::Duration terminate_grace = absl::Seconds(10);
};

class Subprocess {
 public:
  // Spawns argv[0] (a path; searched in PATH when it has no '/') in its own
  // process group with stdout on a pipe and signals unblocked. Fails with
  // the errno text when the spawn fails (e.g. no such binary).
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv,
      const SubprocessOptions& options = {});

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Terminate()s the child if it still runs, then joins the threads.
  ~Subprocess();

  // Waits for the READY line. FailedPrecondition naming the exit status (and
  // the last stdout lines) when the child exits or closes stdout first,
  // DeadlineExceeded after `timeout`. Once READY, returns it at once.
  absl::StatusOr<common::ReadyInfo> WaitReady(absl::Duration timeout);

  // SIGTERM to the process group, SIGKILL after terminate_grace, then reaps.
  // No-op once the child has exited.
  void Terminate();
  // Sends `signal` to the process group without waiting.
  void Signal(int signal);

  // Blocks until the child exits. Returns its exit code, or 128 + signal
  // number when a signal killed it (the shell's convention).
  int Wait();
  // Like Wait, but DeadlineExceeded after `timeout`.
  absl::StatusOr<int> WaitFor(absl::Duration timeout);
  bool Running() const;

  pid_t pid() const { return pid_; }

 private:
  Subprocess(std::string name, pid_t pid, int stdout_fd, int stop_fd,
             const SubprocessOptions& options);
  void ReadStdout();
  void Reap();
  void HandleLine(const std::string& line);
  bool AwaitExit(absl::Duration timeout);
  bool ReadyOrGone() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool FullyGone() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool Exited() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string DescribeEndLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::string name_;  // argv[0], for messages
  const pid_t pid_;
  const int stdout_fd_;  // read end of the child's stdout; reader owns it
  const int stop_fd_;    // eventfd; written by the destructor to stop reader
  const SubprocessOptions options_;

  mutable absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  common::ReadyInfo ready_info_ ABSL_GUARDED_BY(mu_);
  bool stdout_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  int exit_code_ ABSL_GUARDED_BY(mu_) = -1;
  std::deque<std::string> tail_ ABSL_GUARDED_BY(mu_);  // last stdout lines

  std::thread reader_;
  std::thread reaper_;
};

// Path of the binary `name` in the directory of /proc/self/exe (how `tandem
// up` finds tandem-gateway etc. next to itself). `name` itself if
// /proc/self/exe cannot be read.
std::string SiblingBinary(const std::string& name);

}  // namespace tandem::process

#endif  // TANDEM_PROCESS_SUBPROCESS_H_
