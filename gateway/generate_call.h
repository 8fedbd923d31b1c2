// One Generate request's path through the gateway, on the gRPC handler
// thread: prefill on a prefill worker (retried elsewhere if unreachable),
// first token to the client, then the decode worker's stream relayed token
// by token through the TokenEmitter. Child calls inherit the client's
// deadline and cancellation. Thread-compatible (one per request).
#ifndef TANDEM_GATEWAY_GENERATE_CALL_H_
#define TANDEM_GATEWAY_GENERATE_CALL_H_

#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/tokenizer.h"
#include "gateway/gateway_metrics.h"
#include "gateway/token_emitter.h"
#include "gateway/validated_request.h"
#include "gateway/worker_picker.h"
#include "rpc/channel_cache.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::gateway {

// What a call needs from the service; all outlive the call.
struct CallEnv {
  const engine::Tokenizer* tokenizer;
  WorkerPicker* prefill;
  WorkerPicker* decode;
  rpc::ChannelCache* channels;
  GatewayMetrics* metrics;
  // Deadline for worker calls when the client's is later (or unset).
  absl::Duration request_timeout;
};

class GenerateCall {
 public:
  GenerateCall(const CallEnv& env, grpc::ServerContext* ctx,
               grpc::ServerWriter<tandem::v1::GenerateResponse>* writer);

  absl::Status Run(const ValidatedRequest& request);

 private:
  absl::Status Prefill(const ValidatedRequest& request, tandem::v1::PrefillResponse* out,
                       std::string* prefill_address);
  absl::Status Decode(const ValidatedRequest& request, const tandem::v1::PrefillResponse& prefill,
                      const std::string& prefill_address, TokenEmitter& emitter);
  // Sends `tokens` (and, when the emitter has finished, the finish reason
  // and usage). False when the client has gone.
  bool Send(std::vector<tandem::v1::Token>& tokens, const TokenEmitter& emitter);
  // A child call context: the client's cancellation and deadline, capped by
  // request_timeout.
  std::unique_ptr<grpc::ClientContext> ChildContext() const;
  void ReleaseLease(const std::string& prefill_address, const std::string& lease_id,
                    const absl::Status& why);

  CallEnv env_;
  grpc::ServerContext* ctx_;
  grpc::ServerWriter<tandem::v1::GenerateResponse>* writer_;
  const absl::Time start_ = absl::Now();
  absl::Time last_token_ = absl::InfinitePast();
  tandem::v1::Usage usage_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_GENERATE_CALL_H_
