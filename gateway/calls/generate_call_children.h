// GenerateCall's child calls, shared by generate_call.cc (the request's
// prefill and end) and generate_call_decode.cc (its decode stream and
// migrations). Internal to those two files.
#ifndef TANDEM_GATEWAY_CALLS_GENERATE_CALL_CHILDREN_H_
#define TANDEM_GATEWAY_CALLS_GENERATE_CALL_CHILDREN_H_

#include <cstdint>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gateway/calls/generate_call.h"
#include "rpc/admission.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::gateway {

// One Prefill call of a request (a retry is a new attempt). Owns its context
// and answer, deletes itself in OnDone, and keeps the GenerateCall alive
// until then: a call's context is destroyed by the reactor that ran it, never
// from inside a completion callback of its own.
class GenerateCall::PrefillAttempt final : public grpc::ClientUnaryReactor {
 public:
  // `ctx` is shared with the GenerateCall, whose liveness probe may cancel
  // it from another thread as this attempt ends.
  PrefillAttempt(std::shared_ptr<GenerateCall> call, std::shared_ptr<grpc::ClientContext> ctx,
                 std::shared_ptr<grpc::Channel> channel, tandem::v1::PrefillRequest request)
      : call_(std::move(call)),
        ctx_(std::move(ctx)),
        stub_(tandem::v1::Prefill::NewStub(channel)),
        request_(std::move(request)) {}

  void Start() {
    stub_->async()->Prefill(ctx_.get(), &request_, &response_, this);
    StartCall();
  }
  void Cancel() { ctx_->TryCancel(); }
  void OnDone(const grpc::Status& status) override {
    call_->OnPrefillDone(status, response_);
    delete this;
  }

 private:
  std::shared_ptr<GenerateCall> call_;
  std::shared_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<tandem::v1::Prefill::Stub> stub_;
  tandem::v1::PrefillRequest request_;
  tandem::v1::PrefillResponse response_;
};

// The Decode call of one request: reads one message at a time when the
// GenerateCall asks (after the client took the previous one) and hands it
// over. Owns itself until OnDone; keeps the GenerateCall alive until then.
class GenerateCall::DecodeRelay final
    : public grpc::ClientReadReactor<tandem::v1::DecodeResponse> {
 public:
  DecodeRelay(std::shared_ptr<GenerateCall> call, std::unique_ptr<grpc::ClientContext> ctx,
              std::shared_ptr<grpc::Channel> channel, tandem::v1::DecodeRequest request)
      : call_(std::move(call)),
        ctx_(std::move(ctx)),
        stub_(tandem::v1::Decode::NewStub(channel)),
        request_(std::move(request)) {}

  void Start() {
    stub_->async()->Decode(ctx_.get(), &request_, this);
    StartRead(&message_);
    StartCall();
  }
  void Read() { StartRead(&message_); }
  void Cancel() { ctx_->TryCancel(); }

  void OnReadDone(bool ok) override {
    if (ok) call_->OnDecodeMessage(message_);  // else OnDone follows
  }
  void OnDone(const grpc::Status& status) override {
    // A refusal at the worker's admission leaves the lease to us.
    const auto& trailers = ctx_->GetServerTrailingMetadata();
    DecodeEnd end{.refused_hand_off = trailers.count(rpc::kRefusedHandOffKey) > 0,
                  .retry_after = absl::ZeroDuration(),
                  .kv_fetch_failed = trailers.count(rpc::kKvFetchFailedKey) > 0};
    if (auto hint = trailers.find(rpc::kRetryAfterMsKey); hint != trailers.end()) {
      int64_t ms = 0;
      if (absl::SimpleAtoi(absl::string_view(hint->second.data(), hint->second.size()), &ms)) {
        end.retry_after = absl::Milliseconds(ms);
      }
    }
    call_->OnDecodeDone(status, end);
    delete this;
  }

 private:
  std::shared_ptr<GenerateCall> call_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<tandem::v1::Decode::Stub> stub_;
  tandem::v1::DecodeRequest request_;
  tandem::v1::DecodeResponse message_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_CALLS_GENERATE_CALL_CHILDREN_H_
