// Request messages read from their wire bytes by the service itself (raw
// gRPC methods) instead of by gRPC's generated code, which answers every
// unparsable message with a bare UNIMPLEMENTED: here the caller learns what
// was wrong, by field. Stateless; any thread.
#ifndef TANDEM_RPC_WIRE_PARSE_H_
#define TANDEM_RPC_WIRE_PARSE_H_

#include <string_view>

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace tandem::rpc {

// Parses `buffer` into `message`. InvalidArgument naming the field (its path,
// e.g. "stop[1]" or "sampling.name") when a proto3 string field holds bytes
// that are not UTF-8, which protobuf refuses, or saying that the bytes are no
// `message` at all. The UTF-8 check runs first, so protobuf's parser never
// sees (nor logs) such a field.
absl::Status ParseMessage(const grpc::ByteBuffer& buffer, google::protobuf::Message* message);
absl::Status ParseMessage(std::string_view bytes, google::protobuf::Message* message);

// `message` in wire form, for a raw method's response.
grpc::ByteBuffer SerializeMessage(const google::protobuf::Message& message);

// Strict UTF-8, as protobuf checks strings: no overlong forms, surrogates or
// code points past U+10FFFF.
bool IsValidUtf8(std::string_view text);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_WIRE_PARSE_H_
