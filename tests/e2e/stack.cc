#include "tests/e2e/stack.h"

#include <signal.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "process/http_get.h"
#include "tests/test_paths.h"

namespace tandem::testing {
namespace {

std::string Bin(const std::string& name) { return tandem::test_paths::BinDir() + "/" + name; }

// Starts `argv` and waits for its READY line.
absl::StatusOr<std::unique_ptr<process::Subprocess>> TryStartReady(
    const std::vector<std::string>& argv, common::ReadyInfo* info) {
  auto proc = process::Subprocess::Start(argv, {});
  if (!proc.ok()) return proc.status();
  auto ready = (*proc)->WaitReady(absl::Seconds(60));
  if (!ready.ok()) {
    return absl::Status(ready.status().code(),
                        absl::StrCat(argv[0], ": ", ready.status().message()));
  }
  *info = *ready;
  return std::move(*proc);
}

std::unique_ptr<process::Subprocess> StartReady(const std::vector<std::string>& argv,
                                                common::ReadyInfo* info) {
  auto proc = TryStartReady(argv, info);
  EXPECT_TRUE(proc.ok()) << proc.status();
  return proc.ok() ? std::move(*proc) : nullptr;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

}  // namespace

std::unique_ptr<Stack> Stack::Start(const std::string& model,
                                    const std::vector<std::string>& worker_flags) {
  StackOptions o;
  o.model = model;
  o.worker_flags = worker_flags;
  return Start(o);
}

std::unique_ptr<Stack> Stack::Start(const StackOptions& o) {
  auto s = std::make_unique<Stack>();
  auto worker_argv = [&](const std::string& bin) {
    std::vector<std::string> argv = {Bin(bin), "--model", o.model};
    argv.insert(argv.end(), o.worker_flags.begin(), o.worker_flags.end());
    return argv;
  };
  std::vector<std::string> prefill_addresses, decode_addresses;
  for (int i = 0; i < o.prefill_workers; ++i) {
    auto& w = s->prefills_.emplace_back();
    w.argv = worker_argv("tandem-prefill");
    w.argv.insert(w.argv.end(), o.prefill_flags.begin(), o.prefill_flags.end());
    if (o.prefill_host != "127.0.0.1") {
      w.argv.insert(w.argv.end(), {"--listen", o.prefill_host + ":0"});
    }
    w.proc = StartReady(w.argv, &w.info);
    if (w.proc == nullptr) return nullptr;
    w.stub = tandem::v1::Prefill::NewStub(Channel(w.info.grpc_address));
    prefill_addresses.push_back((o.dns_targets ? "dns:///" : "") + w.info.grpc_address);
  }
  for (int i = 0; i < o.decode_workers; ++i) {
    auto& w = s->decodes_.emplace_back();
    w.argv = worker_argv("tandem-decode");
    w.argv.insert(w.argv.end(), o.decode_flags.begin(), o.decode_flags.end());
    if (static_cast<size_t>(i) < o.decode_hosts.size()) {
      w.argv.insert(w.argv.end(), {"--listen", o.decode_hosts[i] + ":0", "--metrics-listen",
                                   o.decode_hosts[i] + ":0"});
    }
    if (static_cast<size_t>(i) < o.decode_wrap.size()) w.argv = o.decode_wrap[i](w.argv);
    w.proc = StartReady(w.argv, &w.info);
    if (w.proc == nullptr) return nullptr;
    w.stub = tandem::v1::Decode::NewStub(Channel(w.info.grpc_address));
    decode_addresses.push_back((o.dns_targets ? "dns:///" : "") + w.info.grpc_address);
  }
  for (int i = 0; i < o.gateways; ++i) {
    auto& g = s->gateways_.emplace_back();
    g.argv = {Bin("tandem-gateway"), "--model", o.model,
              "--prefill", absl::StrJoin(prefill_addresses, ","),
              "--decode", absl::StrJoin(decode_addresses, ",")};
    g.argv.insert(g.argv.end(), o.gateway_flags.begin(), o.gateway_flags.end());
    g.proc = StartReady(g.argv, &g.info);
    if (g.proc == nullptr) return nullptr;
    g.stub = tandem::v1::Generation::NewStub(Channel(g.info.grpc_address));
  }
  return s;
}

template <typename Stub>
bool Stack::Restart(Worker<Stub>& w) {
  w.proc->Signal(SIGKILL);
  w.proc->Wait();
  std::vector<std::string> argv = w.argv;
  argv.insert(argv.end(), {"--listen", w.info.grpc_address});
  common::ReadyInfo info;
  // The old port is free, but until the new worker binds it, any socket on
  // this machine may take it as its ephemeral local port (a connection the
  // gateway retries towards a dead worker, say) for as long as that lives:
  // a start that fails is tried again, a few times.
  absl::StatusOr<std::unique_ptr<process::Subprocess>> proc;
  for (int attempt = 0; attempt < 10; ++attempt) {
    proc = TryStartReady(argv, &info);
    if (proc.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(proc.ok()) << proc.status();
  if (!proc.ok()) return false;
  w.proc = std::move(*proc);
  if (info.grpc_address != w.info.grpc_address) return false;
  w.info = info;
  return true;
}

bool Stack::RestartPrefill(int i) { return Restart(prefills_[i]); }
bool Stack::RestartDecode(int i) { return Restart(decodes_[i]); }

bool Stack::AwaitGatewaySynced() {
  // Each role's count, not the batches applied: a worker that sent two
  // (a resubscription) must not stand in for one that sent none yet.
  const std::pair<const char*, size_t> roles[] = {{"prefill", prefills_.size()},
                                                  {"decode", decodes_.size()}};
  for (const auto& g : gateways_) {
    for (const auto& [role, count] : roles) {
      if (count == 0) continue;
      const double want = static_cast<double>(count);
      if (AwaitMetric(
              g.info.metrics_address, absl::StrCat("tandem_synced_workers{role=\"", role, "\"}"),
              [want](double v) { return v >= want; }, absl::Seconds(30)) < want) {
        return false;
      }
    }
  }
  return true;
}

bool Stack::Stop() {
  // A server's shutdown waits for its clients' connections to close (up to
  // its grace period), so the test's own connections close first.
  for (auto& g : gateways_) g.stub.reset();
  for (auto& w : prefills_) w.stub.reset();
  for (auto& w : decodes_) w.stub.reset();
  bool ok = true;
  auto stop = [&ok](std::unique_ptr<process::Subprocess>& p) {
    if (p == nullptr) return;
    p->Terminate();
    ok &= p->Wait() == 0;
    p.reset();
  };
  for (auto& g : gateways_) stop(g.proc);
  for (auto& w : decodes_) stop(w.proc);
  for (auto& w : prefills_) stop(w.proc);
  return ok;
}

namespace {

// Reads a Generate or Chat stream to its end (120 s deadline), each
// choice's messages (by their `index`) into its own Completion.
template <typename Request, typename Start>
std::vector<Completion> Gather(const Request& req, Start start, const Metadata& metadata = {}) {
  std::vector<Completion> choices(1);
  std::vector<bool> started(1, false);
  grpc::ClientContext ctx;
  for (const auto& [key, value] : metadata) ctx.AddMetadata(key, value);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  std::unique_ptr<grpc::ClientReader<tandem::v1::GenerateResponse>> reader = start(&ctx, req);
  tandem::v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    const size_t i = static_cast<size_t>(std::max(0, resp.index()));
    if (i >= choices.size()) {
      choices.resize(i + 1);
      started.resize(i + 1, false);
    }
    Completion& c = choices[i];
    if (!started[i]) {
      started[i] = true;
      c.seed = resp.seed();
      c.request_id = resp.request_id();
      const auto& md = ctx.GetServerInitialMetadata();
      if (auto it = md.find("x-request-id"); it != md.end()) {
        c.request_id_header.assign(it->second.data(), it->second.size());
      }
    }
    for (const auto& t : resp.tokens()) {
      c.tokens.push_back(t);
      c.text += t.text();
    }
    if (resp.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      c.finish = resp.finish_reason();
      c.usage = resp.usage();
    }
  }
  const grpc::Status status = reader->Finish();
  for (Completion& c : choices) c.status = status;
  return choices;
}

}  // namespace

std::vector<Completion> GenerateChoices(tandem::v1::Generation::Stub& stub,
                                        const tandem::v1::GenerateRequest& req,
                                        const Metadata& metadata) {
  return Gather(
      req,
      [&stub](grpc::ClientContext* ctx, const tandem::v1::GenerateRequest& r) {
        return stub.Generate(ctx, r);
      },
      metadata);
}

Completion Generate(tandem::v1::Generation::Stub& stub, const tandem::v1::GenerateRequest& req,
                    const Metadata& metadata) {
  return std::move(GenerateChoices(stub, req, metadata)[0]);
}

Completion Chat(tandem::v1::Generation::Stub& stub, const tandem::v1::ChatRequest& req,
                const Metadata& metadata) {
  return std::move(Gather(
      req,
      [&stub](grpc::ClientContext* ctx, const tandem::v1::ChatRequest& r) {
        return stub.Chat(ctx, r);
      },
      metadata)[0]);
}

void ExpectSameTokens(const Completion& got, const Completion& want, const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.error_message();
  ASSERT_EQ(got.tokens.size(), want.tokens.size()) << what;
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    EXPECT_EQ(got.tokens[i].id(), want.tokens[i].id()) << what << " token " << i;
    EXPECT_NEAR(got.tokens[i].logprob(), want.tokens[i].logprob(), 1e-4) << what;
    ASSERT_EQ(got.tokens[i].top_logprobs_size(), want.tokens[i].top_logprobs_size()) << what;
    for (int k = 0; k < got.tokens[i].top_logprobs_size(); ++k) {
      EXPECT_EQ(got.tokens[i].top_logprobs(k).id(), want.tokens[i].top_logprobs(k).id()) << what;
    }
  }
}

double MetricValue(const std::string& metrics_address, const std::string& series) {
  absl::StatusOr<std::string> text = process::HttpGet(metrics_address, "/metrics");
  if (!text.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (line.size() > series.size() && line.substr(0, series.size()) == series &&
        line[series.size()] == ' ') {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return -1;
}

std::string MetricLines(const std::string& metrics_address, const std::string& prefix) {
  absl::StatusOr<std::string> text = process::HttpGet(metrics_address, "/metrics");
  if (!text.ok()) return absl::StrCat(metrics_address, ": ", text.status().ToString(), "\n");
  std::string out;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::StartsWith(line, prefix)) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

double AwaitMetric(const std::string& metrics_address, const std::string& series,
                   const std::function<bool(double)>& ok, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  double v = MetricValue(metrics_address, series);
  while (!ok(v) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    v = MetricValue(metrics_address, series);
  }
  return v;
}

// Waits, by polling the workers' introspection RPC, until both hold no KV
// for any request; returns the last stats seen.
bool WorkersIdle(Stack& s, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    tandem::v1::WorkerStats p, d;
    grpc::ClientContext c1, c2;
    tandem::v1::WorkerStatsRequest req;
    if (s.prefill().GetWorkerStats(&c1, req, &p).ok() &&
        s.decode().GetWorkerStats(&c2, req, &d).ok() && p.kv_blocks_used() == 0 &&
        p.leases() == 0 && d.kv_blocks_used() == 0 && d.running() == 0 && d.waiting() == 0) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

int BusyDecodeWorker(Stack& stack, int workers) {
  for (int i = 0; i < workers; ++i) {
    grpc::ClientContext ctx;
    tandem::v1::WorkerStats stats;
    if (stack.decode(i).GetWorkerStats(&ctx, {}, &stats).ok() && stats.running() > 0) return i;
  }
  return -1;
}

}  // namespace tandem::testing
