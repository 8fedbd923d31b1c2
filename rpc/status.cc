#include "rpc/status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::rpc {

// Both enums are google.rpc.Code with identical numbers (0..16), so the cast
// is the mapping; a code outside that range (never produced by either
// library) becomes UNKNOWN rather than an invalid enum value.
namespace {
constexpr int kMaxCode = 16;  // UNAUTHENTICATED
}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  int code = static_cast<int>(status.code());
  if (code < 0 || code > kMaxCode) code = grpc::StatusCode::UNKNOWN;
  return grpc::Status(static_cast<grpc::StatusCode>(code),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  if (code < 0 || code > kMaxCode) {
    code = static_cast<int>(absl::StatusCode::kUnknown);
  }
  return absl::Status(static_cast<absl::StatusCode>(code),
                      status.error_message());
}

absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& context) {
  const absl::Status s = FromGrpcStatus(status);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace tandem::rpc
