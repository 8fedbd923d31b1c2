#include "common/ready_line.h"

#include <gtest/gtest.h>

namespace tandem::common {
namespace {

TEST(ReadyLineTest, FormatThenParse) {
  const ReadyInfo info{"127.0.0.1:50051", "127.0.0.1:9100"};
  EXPECT_EQ(FormatReadyLine(info),
            "READY grpc=127.0.0.1:50051 metrics=127.0.0.1:9100");
  absl::StatusOr<ReadyInfo> parsed = ParseReadyLine(FormatReadyLine(info));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->grpc_address, "127.0.0.1:50051");
  EXPECT_EQ(parsed->metrics_address, "127.0.0.1:9100");
}

TEST(ReadyLineTest, EmptyMetricsAndExtraKeysAndLineEnd) {
  absl::StatusOr<ReadyInfo> parsed =
      ParseReadyLine("READY grpc=[::1]:7 metrics= epoch=42\r\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->grpc_address, "[::1]:7");
  EXPECT_EQ(parsed->metrics_address, "");
}

TEST(ReadyLineTest, RejectsOtherLines) {
  EXPECT_EQ(ParseReadyLine("loading model").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseReadyLine("READY metrics=1.2.3.4:5").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseReadyLine("READYgrpc=1:2").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseReadyLine("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::common
