#include "rpc/health.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "rpc/status.h"

namespace tandem::rpc {
namespace {

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

bool ReadVarint(const std::string& in, size_t* pos, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64 && *pos < in.size(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in[(*pos)++]);
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// HealthCheckRequest { string service = 1; }
std::string EncodeRequest(const std::string& service) {
  std::string bytes;
  if (!service.empty()) {
    bytes.push_back(0x0a);  // field 1, length-delimited
    AppendVarint(service.size(), &bytes);
    bytes += service;
  }
  return bytes;
}

// HealthCheckResponse { ServingStatus status = 1; }; other fields skipped so
// a newer server's additions do not break us.
absl::StatusOr<HealthState> DecodeResponse(const std::string& bytes) {
  uint64_t status = 0;
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint64_t tag = 0;
    uint64_t value = 0;
    if (!ReadVarint(bytes, &pos, &tag)) break;
    const int wire_type = static_cast<int>(tag & 7);
    bool ok = true;
    switch (wire_type) {
      case 0:
        ok = ReadVarint(bytes, &pos, &value);
        if (ok && (tag >> 3) == 1) status = value;
        break;
      case 1:
        pos += 8;
        break;
      case 2:
        ok = ReadVarint(bytes, &pos, &value) && value <= bytes.size() - pos;
        pos += value;
        break;
      case 5:
        pos += 4;
        break;
      default:
        ok = false;
    }
    if (!ok || pos > bytes.size()) {
      return absl::DataLossError("health: malformed HealthCheckResponse");
    }
  }
  if (status > 3) status = 0;  // an unknown enum value reads as UNKNOWN
  return static_cast<HealthState>(status);
}

}  // namespace

absl::StatusOr<HealthState> CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
    absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(timeout));
  const std::string request_bytes = EncodeRequest(service);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status rpc_status;
  absl::Notification done;
  stub.UnaryCall(&context, kCheckMethod, grpc::StubOptions(), &request,
                 &response, [&](grpc::Status s) {
                   rpc_status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();  // the deadline bounds the wait
  if (!rpc_status.ok()) return FromGrpcStatus(rpc_status);

  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return absl::DataLossError("health: unreadable response");
  }
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return DecodeResponse(bytes);
}

}  // namespace tandem::rpc
