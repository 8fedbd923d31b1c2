// Test fixture: real prefill workers, decode workers and a gateway started as
// separate processes on loopback (ports chosen by the kernel, learned from
// their READY lines), plus clients for each.
#ifndef TANDEM_TESTS_E2E_STACK_H_
#define TANDEM_TESTS_E2E_STACK_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "process/subprocess.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::testing {

struct StackOptions {
  std::string model;
  std::vector<std::string> worker_flags;   // to every worker
  std::vector<std::string> prefill_flags;  // to prefill workers only
  std::vector<std::string> decode_flags;   // to decode workers only
  std::vector<std::string> gateway_flags;
  int prefill_workers = 1;
  int decode_workers = 1;
  // Gateway processes, each over every worker.
  int gateways = 1;
  // Name each worker to the gateway as dns:///127.0.0.1:PORT (the resolver's
  // path) instead of 127.0.0.1:PORT.
  bool dns_targets = false;
  // Where the prefill workers listen (host; every peer must reach it).
  std::string prefill_host = "127.0.0.1";
  // Decode worker i runs as decode_wrap[i](argv) (e.g. inside a network
  // namespace) and listens, metrics included, on decode_hosts[i]; workers
  // past either list run as they are, on 127.0.0.1.
  std::vector<std::function<std::vector<std::string>(const std::vector<std::string>&)>>
      decode_wrap;
  std::vector<std::string> decode_hosts;
};

class Stack {
 public:
  // Starts the processes on `model`; extra flags go to both workers.
  static std::unique_ptr<Stack> Start(const std::string& model,
                                      const std::vector<std::string>& worker_flags = {});
  static std::unique_ptr<Stack> Start(const StackOptions& options);

  tandem::v1::Generation::Stub& gateway(int i = 0) { return *gateways_[i].stub; }
  tandem::v1::Prefill::Stub& prefill(int i = 0) { return *prefills_[i].stub; }
  tandem::v1::Decode::Stub& decode(int i = 0) { return *decodes_[i].stub; }
  const common::ReadyInfo& gateway_info(int i = 0) const { return gateways_[i].info; }
  const common::ReadyInfo& prefill_info(int i = 0) const { return prefills_[i].info; }
  const common::ReadyInfo& decode_info(int i = 0) const { return decodes_[i].info; }
  process::Subprocess& prefill_process(int i = 0) { return *prefills_[i].proc; }
  process::Subprocess& decode_process(int i = 0) { return *decodes_[i].proc; }
  process::Subprocess& gateway_process(int i = 0) { return *gateways_[i].proc; }

  // Kills worker `i` (SIGKILL) and starts it again on the same address (a
  // new process: a new epoch, empty caches). False if it did not come back.
  bool RestartPrefill(int i);
  bool RestartDecode(int i);

  // Waits until each gateway has applied every worker's block event
  // snapshot (tandem_synced_workers counts them all): it knows them all
  // reachable, counts their decode capacity and is connected to each.
  // False if that did not happen within 30 s.
  bool AwaitGatewaySynced();

  // Stops the processes (gateway first) and returns true if each exited 0.
  bool Stop();

 private:
  template <typename Stub>
  struct Worker {
    std::unique_ptr<process::Subprocess> proc;
    common::ReadyInfo info;
    std::unique_ptr<Stub> stub;
    std::vector<std::string> argv;  // as started
  };
  template <typename Stub>
  static bool Restart(Worker<Stub>& w);
  std::vector<Worker<tandem::v1::Prefill::Stub>> prefills_;
  std::vector<Worker<tandem::v1::Decode::Stub>> decodes_;
  std::vector<Worker<tandem::v1::Generation::Stub>> gateways_;
};

// A streamed Generate call, gathered.
struct Completion {
  std::vector<tandem::v1::Token> tokens;
  tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;
  tandem::v1::Usage usage;
  grpc::Status status;
  std::string text;
  // From the first message, and the x-request-id initial metadata.
  uint64_t seed = 0;
  std::string request_id;
  std::string request_id_header;
};
// Request metadata (e.g. {"authorization", "Bearer KEY"}).
using Metadata = std::vector<std::pair<std::string, std::string>>;
Completion Generate(tandem::v1::Generation::Stub& stub, const tandem::v1::GenerateRequest& req,
                    const Metadata& metadata = {});
// The same for a request with `n` choices: each one's tokens, text, finish
// and usage, by index (the call's status in each).
std::vector<Completion> GenerateChoices(tandem::v1::Generation::Stub& stub,
                                        const tandem::v1::GenerateRequest& req,
                                        const Metadata& metadata = {});
// A session's turn (Generation.Chat), gathered the same way.
Completion Chat(tandem::v1::Generation::Stub& stub, const tandem::v1::ChatRequest& req,
                const Metadata& metadata = {});

// `got` completed and equals `want` token for token: ids, logprobs (within
// 1e-4) and the top alternatives' ids; `what` names the pair in failures.
void ExpectSameTokens(const Completion& got, const Completion& want, const std::string& what);

// The value of one series (`name` or `name{labels}` exactly as exposed) on
// the /metrics page at `metrics_address`; -1 when absent or unreadable.
double MetricValue(const std::string& metrics_address, const std::string& series);
// The lines of the /metrics page at `metrics_address` that start with
// `prefix`, for a failure's message.
std::string MetricLines(const std::string& metrics_address, const std::string& prefix);
// Polls MetricValue until `ok` holds for it or `timeout` passes; the last
// value read.
// Polls the first prefill and decode workers' GetWorkerStats until neither
// holds KV or leases for any request; false if that did not happen within
// `timeout`.
bool WorkersIdle(Stack& s, absl::Duration timeout);

// The first of the stack's first `workers` decode workers that is running a
// sequence (-1 if none).
int BusyDecodeWorker(Stack& stack, int workers);

double AwaitMetric(const std::string& metrics_address, const std::string& series,
                   const std::function<bool(double)>& ok, absl::Duration timeout);

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_E2E_STACK_H_
