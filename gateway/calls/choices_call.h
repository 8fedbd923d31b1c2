// A Generate call with n > 1 (several completions of one prompt): a server
// reactor that runs each choice as its own n = 1 Generate call through the
// gateway's in-process channel (so each is validated, admitted, routed and
// migrated like any request) and interleaves their messages into its one
// stream, each tagged with its choice `index`. Choice i samples with seed +
// i. Choices 1..n-1 start once choice 0's first message came, i.e. its
// prefill is done: the prompt's full blocks are then in the prefill worker's
// prefix cache (and, once its KV moved, the decode worker's pool), so the
// later choices take them from there instead of computing them again. The
// first choice to fail ends the call with its status and cancels the rest.
// Owns itself until the server reactor and every choice are done.
// Thread-safe.
#ifndef TANDEM_GATEWAY_CALLS_CHOICES_CALL_H_
#define TANDEM_GATEWAY_CALLS_CHOICES_CALL_H_

#include <deque>
#include <memory>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gateway/calls/generate_call.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::gateway {

class ChoicesCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // `request` has passed validation and has n > 1, a seed and a request id;
  // `stub` reaches this gateway's own Generation service; `live` counts the
  // call until it is destroyed.
  static ChoicesCall* Start(grpc::CallbackServerContext* ctx, tandem::v1::GenerateRequest request,
                            tandem::v1::Generation::Stub* stub, LiveCalls* live);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  class Choice;

  ChoicesCall(grpc::CallbackServerContext* ctx, tandem::v1::GenerateRequest request,
              tandem::v1::Generation::Stub* stub, LiveCalls* live);
  ~ChoicesCall() override;

  // What to do on the server stream once mu_ is released (gRPC may run
  // reactions inline, so nothing is started under the lock).
  struct Action {
    bool write = false;   // StartWrite(&writing_buffer_)
    bool finish = false;  // Finish(status)
    grpc::Status status;
  };

  // Adds choice `index` (its reactor is begun by the caller, unlocked).
  Choice* AddChoice(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // From the choices' reactors.
  void OnMessage(int index, tandem::v1::GenerateResponse message);
  void OnChoiceDone(int index, const grpc::Status& status);
  // The next write (a queued message), or the finish once every choice is
  // done and nothing is left to write, or the first failure.
  Action Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Act(const Action& action);

  grpc::CallbackServerContext* const ctx_;
  const tandem::v1::GenerateRequest request_;
  tandem::v1::Generation::Stub* const stub_;
  LiveCalls* const live_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Choice>> choices_ ABSL_GUARDED_BY(mu_);
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer writing_buffer_;  // the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool server_done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);  // the first choice's failure
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_CALLS_CHOICES_CALL_H_
