#include "rpc/tls.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

common::Args Parse(const std::vector<std::string>& flags) {
  std::vector<common::FlagSpec> specs = InternalTlsFlagSpecs();
  for (common::FlagSpec& s : PublicTlsFlagSpecs()) specs.push_back(s);
  return *common::Args::Parse(flags, specs);
}

class TlsFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pem_ = absl::StrCat(::testing::TempDir(), "/tls-flags-", ::getpid(), ".pem");
    std::ofstream(pem_) << "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    text_ = pem_ + ".txt";
    std::ofstream(text_) << "not a certificate\n";
  }
  void TearDown() override {
    std::filesystem::remove(pem_);
    std::filesystem::remove(text_);
  }
  std::string pem_, text_;
};

TEST_F(TlsFlagsTest, OffWithoutFlags) {
  absl::StatusOr<InternalTls> internal = InternalTlsFromArgs(Parse({}));
  ASSERT_TRUE(internal.ok());
  EXPECT_FALSE(internal->enabled());
  absl::StatusOr<TlsFiles> pub = PublicTlsFromArgs(Parse({}));
  ASSERT_TRUE(pub.ok());
  EXPECT_TRUE(pub->cert.empty());
}

TEST_F(TlsFlagsTest, MutualTlsNeedsAllThreeReadablePemFiles) {
  absl::StatusOr<InternalTls> tls =
      InternalTlsFromArgs(Parse({"--mtls-cert=" + pem_, "--mtls-key=" + pem_}));
  EXPECT_THAT(tls.status().message(), HasSubstr("give all three"));
  tls = InternalTlsFromArgs(
      Parse({"--mtls-cert=" + pem_, "--mtls-key=" + pem_, "--mtls-ca=/nonexistent/ca.pem"}));
  EXPECT_THAT(tls.status().message(), HasSubstr("--mtls-ca /nonexistent/ca.pem: unreadable"));
  tls = InternalTlsFromArgs(
      Parse({"--mtls-cert=" + text_, "--mtls-key=" + pem_, "--mtls-ca=" + pem_}));
  EXPECT_THAT(tls.status().message(), HasSubstr("--mtls-cert"));
  EXPECT_THAT(tls.status().message(), HasSubstr("holds no PEM block"));
  tls = InternalTlsFromArgs(Parse({"--mtls-server-name=x"}));
  EXPECT_THAT(tls.status().message(), HasSubstr("--mtls-server-name"));
  tls = InternalTlsFromArgs(Parse({"--mtls-cert=" + pem_, "--mtls-key=" + pem_,
                                   "--mtls-ca=" + pem_, "--tls-reload-s=7"}));
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->enabled());
  EXPECT_EQ(tls->files.reload_s, 7);
  EXPECT_FALSE(InternalTlsFromArgs(Parse({"--tls-reload-s=0"})).ok());
}

TEST_F(TlsFlagsTest, PublicTlsNeedsCertAndKeyTogether) {
  EXPECT_THAT(PublicTlsFromArgs(Parse({"--tls-cert=" + pem_})).status().message(),
              HasSubstr("--tls-cert and --tls-key"));
  EXPECT_THAT(PublicTlsFromArgs(Parse({"--tls-client-ca=" + pem_})).status().message(),
              HasSubstr("--tls-client-ca: needs"));
  absl::StatusOr<TlsFiles> files =
      PublicTlsFromArgs(Parse({"--tls-cert=" + pem_, "--tls-key=" + pem_}));
  ASSERT_TRUE(files.ok());
  EXPECT_TRUE(files->ca.empty());
}

}  // namespace
}  // namespace tandem::rpc
