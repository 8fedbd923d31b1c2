// Test fixture: a real prefill worker, decode worker and gateway started as
// separate processes on loopback (ports chosen by the kernel, learned from
// their READY lines), plus clients for each.
#ifndef TANDEM_TESTS_E2E_STACK_H_
#define TANDEM_TESTS_E2E_STACK_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "process/subprocess.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::testing {

class Stack {
 public:
  // Starts the three processes on `model`; extra flags go to both workers.
  static std::unique_ptr<Stack> Start(const std::string& model,
                                      const std::vector<std::string>& worker_flags = {});

  tandem::v1::Generation::Stub& gateway() { return *gateway_; }
  tandem::v1::Prefill::Stub& prefill() { return *prefill_; }
  tandem::v1::Decode::Stub& decode() { return *decode_; }
  const common::ReadyInfo& gateway_info() const { return gateway_info_; }
  const common::ReadyInfo& prefill_info() const { return prefill_info_; }
  const common::ReadyInfo& decode_info() const { return decode_info_; }

  // Stops the processes (gateway first) and returns true if each exited 0.
  bool Stop();

 private:
  std::unique_ptr<process::Subprocess> prefill_proc_, decode_proc_, gateway_proc_;
  common::ReadyInfo prefill_info_, decode_info_, gateway_info_;
  std::unique_ptr<tandem::v1::Generation::Stub> gateway_;
  std::unique_ptr<tandem::v1::Prefill::Stub> prefill_;
  std::unique_ptr<tandem::v1::Decode::Stub> decode_;
};

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_E2E_STACK_H_
