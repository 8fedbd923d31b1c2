#include "rpc/bootstrap.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "rpc/health.h"
#include "tests/rpc/loopback_socket.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::rpc {
namespace {

std::shared_ptr<grpc::Channel> Connect(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

// Every length-delimited field `number` at the top level of `bytes` (enough
// protobuf to read a reflection response without its generated code).
std::vector<std::string> Fields(const std::string& bytes, int number) {
  std::vector<std::string> out;
  size_t pos = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; pos < bytes.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(bytes[pos++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  while (pos < bytes.size()) {
    uint64_t tag = 0, value = 0;
    if (!varint(&tag)) break;
    switch (tag & 7) {
      case 0: varint(&value); break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2:
        varint(&value);
        if (static_cast<int>(tag >> 3) == number) {
          out.push_back(bytes.substr(pos, value));
        }
        pos += value;
        break;
      default: return out;
    }
  }
  return out;
}

// grpc.reflection.v1alpha ServerReflectionInfo with list_services = "*".
std::vector<std::string> ListServices(const std::string& address) {
  grpc::GenericStub stub(Connect(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](int expected) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, reinterpret_cast<void*>(expected));
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  if (!step(1)) return {};
  const std::string request("\x3a\x01*", 3);  // field 7 (list_services): "*"
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  call->Write(request_buffer, reinterpret_cast<void*>(2));
  if (!step(2)) return {};
  call->WritesDone(reinterpret_cast<void*>(3));
  step(3);
  grpc::ByteBuffer response_buffer;
  call->Read(&response_buffer, reinterpret_cast<void*>(4));
  const bool got = step(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  EXPECT_TRUE(status.ok()) << status.error_message();
  if (!got) return {};

  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(response_buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  std::vector<std::string> names;
  // list_services_response = 6 { repeated ServiceResponse service = 1 {
  //   string name = 1 } }
  for (const std::string& list : Fields(bytes, 6)) {
    for (const std::string& service : Fields(list, 1)) {
      for (const std::string& name : Fields(service, 1)) names.push_back(name);
    }
  }
  return names;
}

// Answers nothing (every method UNIMPLEMENTED); registers the service name.
class EmptyGeneration final : public tandem::v1::Generation::Service {};

TEST(BootstrapTest, ServesHealthAndReflectionOnAnEphemeralPort) {
  EmptyGeneration service;
  absl::StatusOr<StartedServer> started = StartGrpcServer({}, {&service});
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(absl::StartsWith(started->address, "127.0.0.1:"));
  EXPECT_NE(started->address, "127.0.0.1:0");

  auto channel = Connect(started->address);
  absl::StatusOr<HealthState> health = CheckHealth(channel);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthState::kServing);

  // Named services are unknown to the health service until set.
  EXPECT_EQ(CheckHealth(channel, "tandem.v1.Generation").status().code(),
            absl::StatusCode::kNotFound);
  SetServing(*started->server, true, {"tandem.v1.Generation"});
  health = CheckHealth(channel, "tandem.v1.Generation");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthState::kServing);

  SetServing(*started->server, false);
  health = CheckHealth(channel);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthState::kNotServing);

  const std::vector<std::string> services = ListServices(started->address);
  auto has = [&](const std::string& name) {
    return std::find(services.begin(), services.end(), name) != services.end();
  };
  EXPECT_TRUE(has("tandem.v1.Generation"));
  EXPECT_TRUE(has("grpc.health.v1.Health"));
  EXPECT_TRUE(has("grpc.reflection.v1alpha.ServerReflection"));

  // The registered service answers (UNIMPLEMENTED, as it overrides nothing).
  tandem::v1::Generation::Stub stub(channel);
  grpc::ClientContext context;
  tandem::v1::TokenizeRequest request;
  tandem::v1::TokenizeResponse response;
  EXPECT_EQ(stub.Tokenize(&context, request, &response).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);

  ShutdownServer(*started->server, absl::Seconds(1));
  EXPECT_FALSE(CheckHealth(channel, "", absl::Milliseconds(500)).ok());
}

TEST(BootstrapTest, BusyPortIsUnavailable) {
  // A plain socket without SO_REUSEPORT, so gRPC cannot share the port.
  testing::LoopbackSocket busy(/*listen=*/true);
  ASSERT_TRUE(busy.ok());
  ServerOptions options;
  options.listen = busy.address();
  absl::StatusOr<StartedServer> started = StartGrpcServer(options, {});
  EXPECT_EQ(started.status().code(), absl::StatusCode::kUnavailable)
      << started.status();
}

TEST(BootstrapTest, MalformedListenAddressIsInvalidArgument) {
  ServerOptions options;
  options.listen = "localhost";
  EXPECT_EQ(StartGrpcServer(options, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BootstrapTest, HealthCheckAgainstNothingIsAnError) {
  // Port 1 on loopback: nothing listens there in a test sandbox.
  absl::StatusOr<HealthState> health =
      CheckHealth(Connect("127.0.0.1:1"), "", absl::Milliseconds(500));
  EXPECT_FALSE(health.ok());
}

}  // namespace
}  // namespace tandem::rpc
