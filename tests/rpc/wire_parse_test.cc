// rpc::ParseMessage and IsValidUtf8: what gRPC's generated code would parse
// parses the same; invalid UTF-8 in a string field is named by its path;
// bytes that are no message are refused saying so.
#include "rpc/wire_parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tandem/v1/generation.pb.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

TEST(IsValidUtf8Test, AcceptsUtf8AndRefusesWhatProtobufRefuses) {
  for (const char* ok : {"", "plain", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                         "\xf4\x8f\xbf\xbf"}) {
    EXPECT_TRUE(IsValidUtf8(ok)) << ok;
  }
  for (const char* bad : {"\xff", "\x80", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80",
                          "\xf0\x80\x80\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xc3",
                          "\xe2\x82", "ok\xc3("}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << ::testing::PrintToString(std::string(bad));
  }
}

TEST(ParseMessageTest, ParsesWhatProtobufParses) {
  tandem::v1::GenerateRequest in;
  in.set_prompt("caf\xc3\xa9");
  in.add_stop("\n");
  in.set_max_tokens(7);
  in.mutable_sampling()->set_temperature(0.5f);
  tandem::v1::GenerateRequest out;
  ASSERT_TRUE(ParseMessage(in.SerializeAsString(), &out).ok());
  EXPECT_EQ(out.SerializeAsString(), in.SerializeAsString());
  // Through a ByteBuffer too.
  tandem::v1::GenerateRequest again;
  ASSERT_TRUE(ParseMessage(SerializeMessage(in), &again).ok());
  EXPECT_EQ(again.max_tokens(), 7);
}

TEST(ParseMessageTest, InvalidUtf8IsNamedByItsField) {
  tandem::v1::GenerateRequest in;
  in.set_prompt("fine");
  in.add_stop("a");
  in.add_stop("b");
  in.add_stop("\xff");
  tandem::v1::GenerateRequest out;
  const absl::Status s = ParseMessage(in.SerializeAsString(), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("stop[2]: not valid UTF-8"));

  in.clear_stop();
  in.set_model("\xed\xa0\x80");  // a surrogate
  EXPECT_THAT(std::string(ParseMessage(in.SerializeAsString(), &out).message()),
              HasSubstr("model: not valid UTF-8"));
}

TEST(ParseMessageTest, BytesThatAreNoMessageAreRefused) {
  tandem::v1::GenerateRequest out;
  for (const std::string& bytes :
       {std::string("\x0a\x05" "ab", 4),  // a length past the end
        std::string("\x0f"),           // wire type 7
        std::string("\x12\x02\x08", 3)}) {
    const absl::Status s = ParseMessage(bytes, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("not a valid tandem.v1.GenerateRequest"));
  }
}

}  // namespace
}  // namespace tandem::rpc
