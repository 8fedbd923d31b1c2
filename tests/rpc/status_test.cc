#include "rpc/status.h"

#include <gtest/gtest.h>

namespace tandem::rpc {
namespace {

TEST(StatusTest, OkMapsToOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(StatusTest, EveryCodeRoundTripsWithItsMessage) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status original(static_cast<absl::StatusCode>(code),
                                "field top_k: must be in [0, 20]");
    const grpc::Status wire = ToGrpcStatus(original);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(wire.error_message(), "field top_k: must be in [0, 20]");
    EXPECT_EQ(FromGrpcStatus(wire), original) << "code " << code;
  }
}

TEST(StatusTest, NamedCodesAgree) {
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("kv pool full"))
                .error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                        "late"))
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"))
                .code(),
            absl::StatusCode::kUnavailable);
}

TEST(StatusTest, ContextPrefixesTheMessageAndKeepsTheCode) {
  const absl::Status s =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"), "prefill");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "prefill: connection refused");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "prefill").ok());
}

}  // namespace
}  // namespace tandem::rpc
