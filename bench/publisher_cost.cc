#include "bench/publisher_cost.h"

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "prometheus/registry.h"
#include "rpc/bootstrap.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "worker/block_event_publisher.h"

extern char** environ;

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ProcessCpuSeconds() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

engine::BlockHash Block(int64_t i) {
  const uint64_t x = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  return engine::BlockHash{.low = x, .high = ~x};
}

engine::BlockEvent Event(engine::BlockEvent::Kind kind, int64_t i) {
  return {.kind = kind, .hash = Block(i), .parent_hash = {}, .tier = engine::KvTier::kDevice};
}

// One run with `g` subscribers.
absl::StatusOr<PublisherCostRun> RunOnce(const PublisherCostConfig& c, int32_t g) {
  prometheus::Registry registry;
  worker::BlockEventPublisher publisher({.model_fingerprint = 7,
                                         .block_size = 16,
                                         .kv_capacity_blocks = c.blocks_held,
                                         .coalesce = absl::Milliseconds(c.coalesce_ms)},
                                        registry);
  // The pool starts full, as a warm worker's is (every snapshot carries it).
  int64_t next = 0;
  {
    std::vector<engine::BlockEvent> fill;
    for (; next < c.blocks_held; ++next) {
      fill.push_back(Event(engine::BlockEvent::Kind::kStored, next));
    }
    publisher.Publish(fill);
  }
  rpc::ServerOptions options;
  auto server = rpc::StartGrpcServer(options, {&publisher});
  if (!server.ok()) return server.status();
  // The last block stored: every run stores half of each step's events.
  const int64_t last = c.blocks_held + int64_t{c.batches} * (c.events_per_batch / 2) - 1;
  pid_t child = -1;
  if (g > 0) {
    std::vector<std::string> args = {
        c.self,          "--connect",    server->address,   "--subscribers",
        absl::StrCat(g), "--last-block", absl::StrCat(last)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&child, c.self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      return absl::InternalError(absl::StrCat("cannot run ", c.self));
    }
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
    while (publisher.subscribers() < g) {
      if (Clock::now() > deadline) return absl::DeadlineExceededError("subscribers never came");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Their snapshots (the whole pool) go out before the clock starts.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  PublisherCostRun run{.subscribers = g};
  const double cpu0 = ProcessCpuSeconds();
  const Clock::time_point t0 = Clock::now();
  const auto period = std::chrono::nanoseconds(1'000'000'000 / c.batches_per_second);
  int64_t oldest = 0;
  for (int32_t b = 0; b < c.batches; ++b) {
    std::this_thread::sleep_until(t0 + b * period);  // the engine's steps
    std::vector<engine::BlockEvent> step;
    for (int32_t e = 0; e < c.events_per_batch / 2; ++e) {
      step.push_back(Event(engine::BlockEvent::Kind::kStored, next++));
      step.push_back(Event(engine::BlockEvent::Kind::kRemoved, oldest++));
    }
    publisher.Publish(step);
  }
  if (child > 0) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return absl::InternalError("the subscribers' process failed");
    }
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  run.cpu_seconds = ProcessCpuSeconds() - cpu0;
  rpc::ShutdownServer(*server->server, absl::ZeroDuration());
  return run;
}

}  // namespace

int RunSubscribers(const std::string& address, int32_t subscribers, int64_t last_block) {
  const engine::BlockHash last = Block(last_block);
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int32_t i = 0; i < subscribers; ++i) {
    threads.emplace_back([&, i] {
      // A connection each, as separate gateways have.
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("tandem.bench.subscriber", i);
      args.SetMaxReceiveMessageSize(-1);
      auto stub = tandem::v1::BlockEvents::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      tandem::v1::WatchBlockEventsRequest request;
      auto reader = stub->Watch(&ctx, request);
      tandem::v1::BlockEventBatch batch;
      bool done = false;
      while (!done && reader->Read(&batch)) {
        for (const tandem::v1::BlockHashProto& h : batch.stored()) {
          done = done || (h.low() == last.low && h.high() == last.high);
        }
      }
      if (!done) failed.fetch_add(1);
      ctx.TryCancel();
      reader->Finish();
    });
  }
  for (std::thread& t : threads) t.join();
  return failed.load() == 0 ? 0 : 1;
}

absl::StatusOr<PublisherCostResult> RunPublisherCost(const PublisherCostConfig& c) {
  PublisherCostResult r;
  for (int32_t g : c.subscribers) {
    absl::StatusOr<PublisherCostRun> run = RunOnce(c, g);
    if (!run.ok()) return run.status();
    r.runs.push_back(*run);
  }
  // CPU per second of run, fitted against G.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const PublisherCostRun& run : r.runs) {
    if (run.subscribers < 1) continue;
    const double x = run.subscribers;
    const double y = run.cpu_seconds / run.seconds;
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  if (n >= 2 && n * sxx - sx * sx > 0) {
    r.core_fraction_per_subscriber = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  }
  r.events_per_second = static_cast<double>(c.events_per_batch) * c.batches_per_second;
  r.ns_per_event_per_subscriber = r.core_fraction_per_subscriber / r.events_per_second * 1e9;
  return r;
}

std::string PublisherCostJson(const PublisherCostConfig& c, const PublisherCostResult& r) {
  std::vector<std::string> runs;
  for (const PublisherCostRun& run : r.runs) {
    runs.push_back(absl::StrFormat("{\"subscribers\":%d,\"seconds\":%.3f,\"cpu_seconds\":%.4f}",
                                   run.subscribers, run.seconds, run.cpu_seconds));
  }
  return absl::StrFormat(
      "{\"bench\":\"publisher_cost\",\"batches\":%d,\"events_per_batch\":%d,"
      "\"batches_per_second\":%d,\"blocks_held\":%d,\"coalesce_ms\":%d,\"events_per_second\":%.0f,"
      "\"core_fraction_per_subscriber\":%.5f,\"ns_per_event_per_subscriber\":%.1f,\"runs\":[%s]}",
      c.batches, c.events_per_batch, c.batches_per_second, c.blocks_held, c.coalesce_ms,
      r.events_per_second, r.core_fraction_per_subscriber, r.ns_per_event_per_subscriber,
      absl::StrJoin(runs, ","));
}

}  // namespace tandem::bench
