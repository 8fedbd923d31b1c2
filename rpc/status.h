// The one place where absl::Status and grpc::Status meet. Every RPC handler
// in gateway/, prefill_worker/ and decode_worker/ returns ToGrpcStatus(...) of
// its library's result; every client wrapper turns a grpc::Status back with
// FromGrpcStatus. Codes map 1:1 (both follow google.rpc.Code); messages are
// kept verbatim. Pure functions, any thread.
#ifndef TANDEM_RPC_STATUS_H_
#define TANDEM_RPC_STATUS_H_

#include <string>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tandem::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);
// The same, with "context: " before the message (e.g. "prefill", naming the
// peer call that failed). OK stays OK.
absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& context);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_STATUS_H_
