// `tandem up`: runs the whole service on one machine. Starts one prefill and
// one decode worker on loopback ephemeral ports (or, with --mode aggregated,
// one worker that prefills and decodes, on every thread of both), then the
// gateway pointed at them, prints the gateway's READY line on stdout (so
// scripts and tests can run `tandem up` as a child like any other server),
// and supervises the processes until SIGINT/SIGTERM or until one of them
// exits.
//
// Signals: SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked first thing
// (before any thread exists) and the main thread takes them with
// sigwaitinfo, so a child's death is noticed the moment it happens, without
// polling. The children get an empty signal mask from Subprocess::Start and
// live in their own process groups, so a terminal's Ctrl-C reaches only us
// and we stop them in order.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "common/flags.h"
#include "common/ready_line.h"
#include "common/status_macros.h"
#include "engine/device_spec.h"
#include "engine/engine_flags.h"
#include "process/subprocess.h"
#include "rpc/bootstrap.h"

namespace tandem::cli {
namespace {

constexpr char kLoopback[] = "127.0.0.1";
// The aggregated worker's step budget: prompt chunks small enough that a step
// with one stays near a decode step (on the 25.7M model at 2 cores, 128
// against the workers' 512 took ITL p99 from 181 to 74 ms at the same
// throughput; docs/benchmarks.md#one-machine).
constexpr int kAggregatedChunk = 128;

// Busy-wait iterations of a waiting OpenMP thread before it sleeps (libgomp's
// GOMP_SPINCOUNT; its default is 300000): long enough to span the gap between
// one step's parallel regions, a fraction of a millisecond in all.
constexpr int kOmpSpinCount = 10000;

struct UpConfig {
  std::string model;  // empty: the synthetic default model
  std::string host;
  int port = 0;
  int http_port = -1;  // the OpenAI-compatible HTTP front; -1: off, 0: ephemeral
  int metrics_port_base = 0;  // 0: every metrics port ephemeral
  engine::DeviceSpec device;  // both workers' --device
  int prefill_threads = 1;
  int decode_threads = 1;
  // No prefill worker: one worker prefills and decodes (the gateway with no
  // --prefill), on prefill_threads + decode_threads threads.
  bool aggregated = false;
  // Each worker's --max-batch-tokens; 0: its default, or kAggregatedChunk
  // when aggregated.
  int max_batch_tokens = 0;
  // The decode worker's --max-running and the gateway's
  // --decode-worker-streams; 0: their default.
  int max_running = 0;
  // The decoding worker's --itl-target-ms; 0: none.
  double itl_target_ms = 0;
  // The decoding worker's --speculative ("off", "prompt-lookup" or
  // "draft"), and every worker's --draft-model (empty: none).
  std::string speculative = "off";
  std::string draft_model;
  int max_context = 0;
  int kv_budget_mb = 512;
  // Cache tiers, passed on to both workers; each worker gets its own
  // subdirectory of disk_cache_dir (a directory serves one process).
  int host_cache_mb = 1024;
  std::string disk_cache_dir;
  int disk_cache_mb = 10240;
  bool hot_cache_only = false;
  absl::Duration ready_timeout;
  absl::Duration drain_timeout;  // passed to every process
  absl::Duration stop_grace;     // after the drain, before SIGKILL
  // The gateway's public ports (gRPC and HTTP): TLS and API keys, passed on.
  std::string tls_cert;
  std::string tls_key;
  std::string api_keys_file;
};

std::vector<common::FlagSpec> UpFlagSpecs() {
  return {
      {.name = "model",
       .help = "GGUF model file; unset: a synthetic Llama generated once into "
               "($XDG_CACHE_HOME or ~/.cache)/tandem/synthetic-llama-f32.gguf"},
      {.name = "host",
       .default_value = kLoopback,
       .help = "gateway listen host (bracket IPv6: [::1]); workers always use 127.0.0.1"},
      {.name = "port", .default_value = "50051", .help = "gateway gRPC port; 0 = ephemeral"},
      {.name = "http-port",
       .default_value = "-1",
       .help = "gateway OpenAI-compatible HTTP port (READY line gains http=HOST:PORT); "
               "0 = ephemeral, -1 = off"},
      {.name = "metrics-port-base",
       .default_value = "0",
       .help = "metrics HTTP ports: gateway BASE, prefill BASE+1, decode BASE+2; "
               "0 = ephemeral"},
      {.name = "device",
       .default_value = "cpu",
       .help = "both workers' compute device: cpu or cuda[:N] (their --device; a build "
               "without CUDA, or a machine without the GPU, refuses cuda with the reason)"},
      {.name = "mode",
       .default_value = "disaggregated",
       .help = "disaggregated: a prefill and a decode worker; aggregated: one worker that "
               "prefills and decodes, with the threads of both (decode steps first, prompts "
               "computed in chunks between them), for a single machine"},
      {.name = "prefill-threads", .default_value = "1", .help = "prefill worker compute threads"},
      {.name = "max-batch-tokens",
       .default_value = "0",
       .help = "tokens per engine step of each worker (its prompt chunk size); 0 = the "
               "workers' default (512), or 128 with --mode aggregated"},
      {.name = "decode-threads", .default_value = "1", .help = "decode worker compute threads"},
      {.name = "max-running",
       .default_value = "0",
       .help = "sequences the decode worker decodes together (its --max-running; the "
               "gateway's --decode-worker-streams), the rest waiting in the gateway's "
               "admission queue; fewer make each step, and so the time between a "
               "stream's tokens, shorter; 0 = the workers' default (64)"},
      {.name = "itl-target-ms",
       .default_value = "0",
       .help = "inter-token latency target of the worker that decodes (its --itl-target-ms): "
               "its steps hold what its measured step cost fits in the target, the rest "
               "waiting for room; 0 = none"},
      {.name = "speculative",
       .default_value = "off",
       .help = "speculative decoding on the worker that decodes, for requests that do not "
               "choose (its --speculative): off, prompt-lookup, or draft (needs "
               "--draft-model)"},
      {.name = "draft-model",
       .default_value = "",
       .help = "GGUF draft model beside --model on every worker (their --draft-model): the "
               "prefill worker computes its KV with the model's and ships both; empty = none"},
      {.name = "max-context",
       .default_value = "0",
       .help = "cap on each sequence's tokens (workers and gateway); 0 = the model's "
               "trained context length"},
      {.name = "kv-budget-mb", .default_value = "512", .help = "KV cache memory per worker, MiB"},
      {.name = "host-cache-mb",
       .default_value = "1024",
       .help = "host RAM KV tier per worker, MiB; 0 = off"},
      {.name = "disk-cache-dir",
       .default_value = "",
       .help = "disk KV tier: each worker uses DIR/prefill or DIR/decode; empty = off"},
      {.name = "disk-cache-mb", .default_value = "10240", .help = "disk KV tier per worker, MiB"},
      {.name = "hot-cache-only",
       .default_value = "false",
       .help = "no disk tier (no directory, no writer thread, no file I/O)",
       .is_bool = true},
      {.name = "ready-timeout-s",
       .default_value = "300",
       .help = "seconds each process may take to print READY"},
      {.name = "drain-timeout-s",
       .default_value = "30",
       .help = "on Ctrl-C/SIGTERM each process refuses new calls and gives those in flight "
               "this long to finish (its --drain-timeout-s)"},
      {.name = "stop-grace-s",
       .default_value = "10",
       .help = "seconds each process may take to exit after its drain before SIGKILL"},
      {.name = "tls-cert",
       .default_value = "",
       .help = "PEM certificate of the gateway's gRPC and HTTP ports (with --tls-key: TLS)"},
      {.name = "tls-key", .default_value = "", .help = "PEM private key of --tls-cert"},
      {.name = "api-keys-file",
       .default_value = "",
       .help = "require API keys at the gateway: one \"TENANT KEY\" per line"},
  };
}

absl::StatusOr<UpConfig> ConfigFromArgs(const common::Args& args) {
  UpConfig c;
  c.model = args.String("model");
  if (args.IsSet("model") && c.model.empty()) {
    return absl::InvalidArgumentError("--model: empty path");
  }
  c.host = args.String("host");
  if (c.host.empty()) return absl::InvalidArgumentError("--host: empty");
  ASSIGN_OR_RETURN(c.port, args.IntInRange("port", 0, 65535));
  ASSIGN_OR_RETURN(c.http_port, args.IntInRange("http-port", -1, 65535));
  ASSIGN_OR_RETURN(c.metrics_port_base, args.IntInRange("metrics-port-base", 0, 65533));
  ASSIGN_OR_RETURN(c.device, engine::ParseDeviceSpec(args.String("device")));
  const std::string mode = args.String("mode");
  if (mode != "disaggregated" && mode != "aggregated") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode: \"", mode, "\" is neither disaggregated nor aggregated"));
  }
  c.aggregated = mode == "aggregated";
  ASSIGN_OR_RETURN(c.prefill_threads, args.IntInRange("prefill-threads", 1, 256));
  ASSIGN_OR_RETURN(c.max_batch_tokens, args.IntInRange("max-batch-tokens", 0, 1 << 20));
  ASSIGN_OR_RETURN(c.decode_threads, args.IntInRange("decode-threads", 1, 256));
  ASSIGN_OR_RETURN(c.max_running, args.IntInRange("max-running", 0, 1 << 16));
  ASSIGN_OR_RETURN(c.itl_target_ms, args.Double("itl-target-ms"));
  if (!(c.itl_target_ms >= 0 && c.itl_target_ms <= 60000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--itl-target-ms: ", c.itl_target_ms, " is outside [0, 60000]"));
  }
  c.speculative = args.String("speculative");
  c.draft_model = args.String("draft-model");
  RETURN_IF_ERROR(engine::CheckSpeculativeFlags(c.speculative, c.draft_model));
  ASSIGN_OR_RETURN(c.max_context, args.IntInRange("max-context", 0, 1 << 24));
  ASSIGN_OR_RETURN(c.kv_budget_mb, args.IntInRange("kv-budget-mb", 1, 1 << 20));
  ASSIGN_OR_RETURN(c.host_cache_mb, args.IntInRange("host-cache-mb", 0, 1 << 30));
  ASSIGN_OR_RETURN(c.disk_cache_mb, args.IntInRange("disk-cache-mb", 1, 1 << 30));
  c.disk_cache_dir = args.String("disk-cache-dir");
  c.hot_cache_only = args.Bool("hot-cache-only");
  ASSIGN_OR_RETURN(int ready_s, args.IntInRange("ready-timeout-s", 1, 86400));
  ASSIGN_OR_RETURN(int grace_s, args.IntInRange("stop-grace-s", 0, 3600));
  ASSIGN_OR_RETURN(int drain_s, args.IntInRange("drain-timeout-s", 0, 24 * 3600));
  c.drain_timeout = absl::Seconds(drain_s);
  c.ready_timeout = absl::Seconds(ready_s);
  c.stop_grace = absl::Seconds(grace_s);
  c.tls_cert = args.String("tls-cert");
  c.tls_key = args.String("tls-key");
  c.api_keys_file = args.String("api-keys-file");
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key: give both or neither");
  }
  return c;
}

std::string HostPort(const std::string& host, int port) {
  const bool bare_ipv6 = absl::StrContains(host, ":") && !absl::StartsWith(host, "[");
  return bare_ipv6 ? absl::StrCat("[", host, "]:", port) : absl::StrCat(host, ":", port);
}

// Lines to `err` from the main thread and from the children's stdout reader
// threads; one lock keeps lines whole among them, and each goes out in one
// write, newline included, so that a child writing to the stderr it shares
// cannot land inside one. Thread-safe.
class LineSink {
 public:
  explicit LineSink(std::ostream& err) : err_(err) {}
  void Line(const std::string& text) {
    absl::MutexLock lock(&mu_);
    err_ << absl::StrCat(text, "\n");
    err_.flush();
  }

 private:
  absl::Mutex mu_;
  std::ostream& err_ ABSL_GUARDED_BY(mu_);
};

struct Child {
  std::string name;  // binary name, e.g. "tandem-decode"
  std::unique_ptr<process::Subprocess> process;
  common::ReadyInfo ready;
};

// SIGHUP (the terminal went away) stops the service like SIGTERM; the
// children would not get it themselves, being in other process groups.
sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

sigset_t SupervisedSignals() {
  sigset_t set = ShutdownSignals();
  sigaddset(&set, SIGCHLD);
  return set;
}

// Must run before any thread exists, so every later thread inherits the mask
// and only the main thread's sigwaitinfo sees these signals. SIGCHLD goes
// back to SIG_DFL: a parent that set it to SIG_IGN would make the kernel
// reap our children (and discard the signal) behind Subprocess's back.
void BlockSupervisedSignals() {
  rpc::BlockShutdownSignals();
  ::signal(SIGCHLD, SIG_DFL);
  const sigset_t set = SupervisedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// The pending shutdown signal, consumed, or 0 when there is none.
int TakePendingShutdownSignal() {
  const sigset_t set = ShutdownSignals();
  const timespec zero = {0, 0};
  const int sig = sigtimedwait(&set, nullptr, &zero);
  return sig > 0 ? sig : 0;
}

// True once `child` has exited, even if its Subprocess reaper thread has
// not reaped it yet: a zombie already counts (waitid with WNOWAIT leaves
// the reaping to Subprocess).
bool HasExited(const Child& child) {
  if (!child.process->Running()) return true;
  siginfo_t info = {};
  const int rc = ::waitid(P_PID, static_cast<id_t>(child.process->pid()), &info,
                          WEXITED | WNOHANG | WNOWAIT);
  return rc == 0 && info.si_pid == child.process->pid();
}

std::string DescribeExit(int code) {
  if (code > 128) {
    return absl::StrCat("was killed by signal ", code - 128, " (", ::strsignal(code - 128), ")");
  }
  return absl::StrCat("exited with code ", code);
}

// Starts and supervises the three processes. Main thread only.
class Up {
 public:
  Up(UpConfig config, std::ostream& out, std::ostream& err)
      : config_(std::move(config)), out_(out), sink_(err) {}

  // Returns the exit code of `tandem up`.
  int Run() {
    absl::Status s = StartAll();
    if (!s.ok()) {
      sink_.Line(absl::StrCat("tandem up: ", s.message()));
      StopAll();
      return 1;
    }
    AnnounceReady();
    const std::string exited = Supervise();
    const bool clean = StopAll();
    if (!exited.empty()) return 1;
    return clean ? 0 : 1;
  }

 private:
  absl::Status StartAll() {
    std::string model = config_.model;
    if (model.empty()) {
      ASSIGN_OR_RETURN(std::string path, DefaultSyntheticModelPath());
      sink_.Line(absl::StrCat("tandem up: default synthetic model ", path));
      ASSIGN_OR_RETURN(model, EnsureSyntheticModel(path));
    }
    const int base = config_.metrics_port_base;
    Child* prefill = nullptr;
    if (!config_.aggregated) {
      ASSIGN_OR_RETURN(prefill, Start("tandem-prefill",
                                      WorkerArgs(model, "prefill", config_.prefill_threads,
                                                 base == 0 ? 0 : base + 1)));
    }
    const int decode_threads =
        config_.decode_threads + (config_.aggregated ? config_.prefill_threads : 0);
    ASSIGN_OR_RETURN(Child * decode,
                     Start("tandem-decode", WorkerArgs(model, "decode", decode_threads,
                                                       base == 0 ? 0 : base + 2)));
    // The workers load the model concurrently; wait for each in turn.
    if (prefill != nullptr) RETURN_IF_ERROR(AwaitReady(*prefill));
    RETURN_IF_ERROR(AwaitReady(*decode));
    std::vector<std::string> gateway_args = {
        "--listen",         HostPort(config_.host, config_.port),
        "--metrics-listen", HostPort(config_.host, base),
        "--model",          model};
    // Aggregated: no --prefill, so the decode worker prefills every request.
    if (prefill != nullptr) {
      gateway_args.insert(gateway_args.end(), {"--prefill", prefill->ready.grpc_address});
    }
    gateway_args.insert(gateway_args.end(),
                        {"--decode", decode->ready.grpc_address, "--max-context",
                         absl::StrCat(config_.max_context), "--drain-timeout-s", DrainSeconds()});
    if (config_.max_running > 0) {
      gateway_args.insert(gateway_args.end(),
                          {"--decode-worker-streams", absl::StrCat(config_.max_running)});
    }
    if (config_.http_port >= 0) {
      gateway_args.push_back("--http-listen");
      gateway_args.push_back(HostPort(config_.host, config_.http_port));
    }
    for (const auto& [flag, value] :
         {std::pair<const char*, const std::string&>{"--tls-cert", config_.tls_cert},
          {"--tls-key", config_.tls_key},
          {"--api-keys-file", config_.api_keys_file}}) {
      if (value.empty()) continue;
      gateway_args.push_back(flag);
      gateway_args.push_back(value);
    }
    ASSIGN_OR_RETURN(Child * gateway, Start("tandem-gateway", gateway_args));
    return AwaitReady(*gateway);
  }

  std::vector<std::string> WorkerArgs(const std::string& model, const std::string& role,
                                      int threads, int metrics_port) {
    std::vector<std::string> args = {
        "--listen",        HostPort(kLoopback, 0),
        "--metrics-listen", HostPort(kLoopback, metrics_port),
        "--model",         model,
        "--device",        engine::DeviceName(config_.device),
        "--threads",       absl::StrCat(threads),
        "--max-context",   absl::StrCat(config_.max_context),
        "--kv-budget-mb",  absl::StrCat(config_.kv_budget_mb),
        "--host-cache-mb", absl::StrCat(config_.host_cache_mb),
        "--disk-cache-mb", absl::StrCat(config_.disk_cache_mb),
        "--drain-timeout-s", DrainSeconds()};
    if (!config_.disk_cache_dir.empty()) {
      args.insert(args.end(),
                  {"--disk-cache-dir", absl::StrCat(config_.disk_cache_dir, "/", role)});
    }
    if (config_.hot_cache_only) args.push_back("--hot-cache-only");
    const int batch_tokens = config_.max_batch_tokens > 0 ? config_.max_batch_tokens
                             : config_.aggregated       ? kAggregatedChunk
                                                        : 0;
    if (batch_tokens > 0) {
      args.insert(args.end(), {"--max-batch-tokens", absl::StrCat(batch_tokens)});
    }
    if (config_.max_running > 0 && role == "decode") {
      args.insert(args.end(), {"--max-running", absl::StrCat(config_.max_running)});
    }
    if (config_.itl_target_ms > 0 && role == "decode") {
      args.insert(args.end(), {"--itl-target-ms", absl::StrCat(config_.itl_target_ms)});
    }
    if (role == "decode" && config_.speculative != "off") {
      args.insert(args.end(), {"--speculative", config_.speculative});
    }
    // Every worker: the draft's KV rides in the blocks they ship and cache.
    if (!config_.draft_model.empty()) {
      args.insert(args.end(), {"--draft-model", config_.draft_model});
    }
    return args;
  }

  std::string DrainSeconds() const {
    return absl::StrCat(absl::ToInt64Seconds(config_.drain_timeout));
  }

  absl::StatusOr<Child*> Start(const std::string& name, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {process::SiblingBinary(name)};
    argv.insert(argv.end(), flags.begin(), flags.end());
    process::SubprocessOptions options;
    // The processes share this machine's cores: an OpenMP thread that waits
    // spins only briefly (kOmpSpinCount) before it sleeps, so it does not
    // hold a core another process needs between steps (libgomp's default
    // spin took 87% of an aggregated worker's CPU time in barrier waits and
    // halved its throughput), yet does not sleep and wake between the
    // parallel regions of one step (OMP_WAIT_POLICY=passive cost a decode
    // step of 8 rows ~25%). An explicit setting of either wins.
    if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
      options.extra_env = {absl::StrCat("GOMP_SPINCOUNT=", kOmpSpinCount)};
    }
    // A child drains its streams before it exits.
    options.terminate_grace = config_.drain_timeout + config_.stop_grace;
    // Our stdout carries only our own READY line; anything else a child
    // prints goes to stderr, tagged with its name.
    options.on_stdout_line = [this, name](const std::string& line) {
      sink_.Line(absl::StrCat("[", name, "] ", line));
    };
    absl::StatusOr<std::unique_ptr<process::Subprocess>> process =
        process::Subprocess::Start(argv, options);
    if (!process.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot start ", name, " (expected next to this binary, at ", argv[0],
          "): ", process.status().message()));
    }
    children_.push_back(Child{.name = name, .process = *std::move(process), .ready = {}});
    return &children_.back();
  }

  // WaitReady in short slices so a SIGINT/SIGTERM during a slow model load
  // stops the start-up instead of waiting for it.
  absl::Status AwaitReady(Child& child) {
    const absl::Time deadline = absl::Now() + config_.ready_timeout;
    while (true) {
      const absl::Duration slice =
          std::min(absl::Milliseconds(100), std::max(deadline - absl::Now(), absl::ZeroDuration()));
      absl::StatusOr<common::ReadyInfo> ready = child.process->WaitReady(slice);
      if (ready.ok()) {
        child.ready = *std::move(ready);
        return absl::OkStatus();
      }
      if (ready.status().code() != absl::StatusCode::kDeadlineExceeded) return ready.status();
      if (const int sig = TakePendingShutdownSignal(); sig != 0) {
        return absl::CancelledError(absl::StrCat("interrupted by ", ::strsignal(sig),
                                                 " while waiting for ", child.name));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(child.name, " printed no READY line within ",
                         absl::FormatDuration(config_.ready_timeout), " (--ready-timeout-s)"));
      }
    }
  }

  void AnnounceReady() {
    const Child& gateway = children_.back();
    out_ << common::FormatReadyLine(gateway.ready) << "\n";
    out_.flush();
    for (const Child& c : children_) {
      sink_.Line(absl::StrFormat("tandem up: %-15s pid %-7d grpc=%s metrics=%s", c.name,
                                 c.process->pid(), c.ready.grpc_address,
                                 c.ready.metrics_address));
    }
    sink_.Line(absl::StrCat("tandem up: serving on ", gateway.ready.grpc_address,
                            "; try `tandem chat --addr ", gateway.ready.grpc_address,
                            "`; Ctrl-C stops"));
    if (!gateway.ready.http_address.empty()) {
      sink_.Line(absl::StrCat("tandem up: OpenAI-compatible HTTP on http://",
                              gateway.ready.http_address, "/v1"));
    }
  }

  // Blocks until SIGINT/SIGTERM/SIGHUP (returns "") or until a child exits (reports
  // it and returns its name).
  std::string Supervise() {
    const sigset_t set = SupervisedSignals();
    while (true) {
      // SIGCHLD may have come before we started waiting; check first.
      for (const Child& c : children_) {
        if (HasExited(c)) {
          sink_.Line(absl::StrCat("tandem up: ", c.name, " (pid ", c.process->pid(), ") ",
                                  DescribeExit(c.process->Wait()),
                                  "; stopping the other processes"));
          return c.name;
        }
      }
      siginfo_t info;
      const int sig = sigwaitinfo(&set, &info);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
        sink_.Line(absl::StrCat("tandem up: ", ::strsignal(sig), ", stopping"));
        return "";
      }
      // SIGCHLD (or EINTR): loop and look at the children again.
    }
  }

  // Gateway first so no new request reaches a stopping worker, then the
  // workers together. True when every child that was running exited 0.
  bool StopAll() {
    bool clean = true;
    auto report = [&](const Child& c, bool was_running) {
      const int code = c.process->Wait();
      if (was_running && code != 0) {
        clean = false;
        sink_.Line(absl::StrCat("tandem up: ", c.name, " (pid ", c.process->pid(), ") ",
                                DescribeExit(code), " while stopping"));
      }
    };
    std::vector<bool> was_running;
    for (const Child& c : children_) was_running.push_back(c.process->Running());
    const size_t workers = config_.aggregated ? 1 : 2;
    if (children_.size() == workers + 1) {  // the gateway started
      children_[workers].process->Terminate();
      report(children_[workers], was_running[workers]);
    }
    const size_t n_workers = std::min(children_.size(), workers);
    for (size_t i = 0; i < n_workers; ++i) children_[i].process->Signal(SIGTERM);
    for (size_t i = 0; i < n_workers; ++i) {
      children_[i].process->Terminate();
      report(children_[i], was_running[i]);
    }
    return clean;
  }

  const UpConfig config_;
  std::ostream& out_;
  LineSink sink_;
  // prefill (unless aggregated), decode, gateway, in start order; a deque
  // keeps the Child*
  // handed out by Start valid.
  std::deque<Child> children_;
};

}  // namespace

int RunUp(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  BlockSupervisedSignals();
  const std::vector<common::FlagSpec> specs = UpFlagSpecs();
  absl::StatusOr<common::Args> args = common::Args::Parse(argv, specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) err << "tandem up: " << args.status().message() << "\n";
    err << common::Args::Usage("up", specs);
    return args.ok() ? 0 : 2;
  }
  absl::StatusOr<UpConfig> config = ConfigFromArgs(*args);
  if (!config.ok()) {
    err << "tandem up: " << config.status().message() << "\n";
    return 2;
  }
  Up up(*std::move(config), out, err);
  return up.Run();
}

}  // namespace tandem::cli
