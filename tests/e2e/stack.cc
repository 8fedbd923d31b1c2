#include "tests/e2e/stack.h"

namespace tandem::testing {
namespace {

std::string Bin(const std::string& name) { return std::string(TANDEM_BIN_DIR) + "/" + name; }

std::unique_ptr<process::Subprocess> StartReady(std::vector<std::string> argv,
                                               common::ReadyInfo* info) {
  auto proc = process::Subprocess::Start(argv, {});
  EXPECT_TRUE(proc.ok()) << proc.status();
  if (!proc.ok()) return nullptr;
  auto ready = (*proc)->WaitReady(absl::Seconds(60));
  EXPECT_TRUE(ready.ok()) << argv[0] << ": " << ready.status();
  if (ready.ok()) *info = *ready;
  return std::move(*proc);
}

}  // namespace

std::unique_ptr<Stack> Stack::Start(const std::string& model,
                                    const std::vector<std::string>& worker_flags) {
  auto s = std::make_unique<Stack>();
  std::vector<std::string> prefill = {Bin("tandem-prefill"), "--model", model};
  std::vector<std::string> decode = {Bin("tandem-decode"), "--model", model};
  for (const std::string& f : worker_flags) {
    prefill.push_back(f);
    decode.push_back(f);
  }
  s->prefill_proc_ = StartReady(prefill, &s->prefill_info_);
  s->decode_proc_ = StartReady(decode, &s->decode_info_);
  if (s->prefill_proc_ == nullptr || s->decode_proc_ == nullptr) return nullptr;
  s->gateway_proc_ = StartReady({Bin("tandem-gateway"), "--model", model, "--prefill",
                                 s->prefill_info_.grpc_address, "--decode",
                                 s->decode_info_.grpc_address},
                                &s->gateway_info_);
  if (s->gateway_proc_ == nullptr) return nullptr;
  auto channel = [](const std::string& addr) {
    return grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  };
  s->gateway_ = tandem::v1::Generation::NewStub(channel(s->gateway_info_.grpc_address));
  s->prefill_ = tandem::v1::Prefill::NewStub(channel(s->prefill_info_.grpc_address));
  s->decode_ = tandem::v1::Decode::NewStub(channel(s->decode_info_.grpc_address));
  return s;
}

bool Stack::Stop() {
  // A server's shutdown waits for its clients' connections to close (up to
  // its grace period), so the test's own connections close first.
  gateway_.reset();
  prefill_.reset();
  decode_.reset();
  bool ok = true;
  for (auto* p : {&gateway_proc_, &decode_proc_, &prefill_proc_}) {
    if (*p == nullptr) continue;
    (*p)->Terminate();
    ok &= (*p)->Wait() == 0;
    p->reset();
  }
  return ok;
}

}  // namespace tandem::testing
