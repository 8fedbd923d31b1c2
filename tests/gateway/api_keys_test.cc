#include "gateway/api_keys.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ApiKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(::testing::TempDir(), "/api-keys-", ::getpid(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void Write(const std::string& text) {
    // Written aside and renamed in: a new inode, as a secret mount updates.
    std::ofstream(path_ + ".new") << text;
    std::filesystem::rename(path_ + ".new", path_);
  }
  static std::string Bearer(const std::string& key) { return "Bearer " + key; }

  std::string path_;
};

TEST_F(ApiKeysTest, MapsEachKeyToItsTenant) {
  Write("# tenant key\n\nacme  sk-acme-00000001\nglobex\tsk-globex-0000002  \n");
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(path_, absl::Seconds(30));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 2);
  const std::string a = Bearer("sk-acme-00000001");
  ApiKeys::Result r = (*keys)->Authenticate(&a);
  ASSERT_TRUE(r.tenant.ok());
  EXPECT_EQ(r.tenant->name, "acme");
  EXPECT_EQ(r.tenant->salt, TenantSalt("acme"));
  const std::string g = "bearer sk-globex-0000002";  // the scheme is case-insensitive
  r = (*keys)->Authenticate(&g);
  ASSERT_TRUE(r.tenant.ok());
  EXPECT_EQ(r.tenant->name, "globex");
  EXPECT_NE(TenantSalt("acme"), TenantSalt("globex"));
  EXPECT_NE(TenantSalt("acme"), 0u);
  EXPECT_EQ(TenantSalt(""), 0u);
}

TEST_F(ApiKeysTest, RefusesMissingMalformedAndUnknownKeysWithoutEchoingThem) {
  Write("acme sk-acme-00000001\n");
  std::unique_ptr<ApiKeys> keys = *ApiKeys::Load(path_, absl::Seconds(30));
  ApiKeys::Result r = keys->Authenticate(nullptr);
  EXPECT_TRUE(absl::IsUnauthenticated(r.tenant.status()));
  EXPECT_EQ(r.failure, AuthFailure::kMissing);
  const std::string basic = "Basic sk-acme-00000001";
  r = keys->Authenticate(&basic);
  EXPECT_EQ(r.failure, AuthFailure::kMalformed);
  EXPECT_THAT(r.tenant.status().message(), Not(HasSubstr("sk-acme")));
  for (const std::string wrong : {"sk-acme-00000002", "sk-acme-0000000", "sk-acme-000000011", ""}) {
    const std::string header = Bearer(wrong);
    r = keys->Authenticate(&header);
    EXPECT_TRUE(absl::IsUnauthenticated(r.tenant.status())) << wrong;
    EXPECT_EQ(r.failure, AuthFailure::kUnknownKey) << wrong;
    if (!wrong.empty()) {
      EXPECT_THAT(r.tenant.status().message(), Not(HasSubstr(wrong)));
    }
  }
}

TEST_F(ApiKeysTest, ABadFileIsRefusedNamingTheLine) {
  struct Case {
    std::string text;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"acme\n", "line 1: want \"TENANT KEY\", got 1 fields"},
           {"# c\nac/me sk-acme-00000001\n", "line 2: tenant must be"},
           {"acme short\n", "line 1: key must be 8-256"},
           {"a sk-acme-00000001\nb sk-acme-00000001\n", "line 2: key repeats"},
           {"# only comments\n", "holds no keys"},
       }) {
    Write(c.text);
    absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(path_, absl::Seconds(30));
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_TRUE(absl::IsInvalidArgument(keys.status()));
    EXPECT_THAT(keys.status().message(), HasSubstr(c.message));
    EXPECT_THAT(keys.status().message(), Not(HasSubstr("sk-acme-00000001")));
  }
  EXPECT_TRUE(absl::IsNotFound(ApiKeys::Load(path_ + ".absent", absl::Seconds(1)).status()));
}

TEST_F(ApiKeysTest, ReloadsWhenTheFileChangesAndKeepsTheKeysWhenItBreaks) {
  Write("acme sk-acme-00000001\n");
  // Checked on every call.
  std::unique_ptr<ApiKeys> keys = *ApiKeys::Load(path_, absl::ZeroDuration());
  const std::string old_key = Bearer("sk-acme-00000001");
  const std::string new_key = Bearer("sk-acme-rotated-02");
  EXPECT_TRUE(keys->Authenticate(&old_key).tenant.ok());
  Write("acme sk-acme-rotated-02\n");
  EXPECT_FALSE(keys->Authenticate(&old_key).tenant.ok());
  EXPECT_TRUE(keys->Authenticate(&new_key).tenant.ok());
  Write("this line is broken\n");
  EXPECT_TRUE(keys->Authenticate(&new_key).tenant.ok());  // the last good keys stay
}

}  // namespace
}  // namespace tandem::gateway
