// The decode worker's session store: the newest version wins and an older
// one, or another of the same version, is ABORTED (the same record again is
// taken as written), a full store is RESOURCE_EXHAUSTED naming
// --max-sessions, records expire after their own idle TTL (reads refresh
// it, listing does not), and every record dropped or expired lets go of
// its session's KV.
#include "decode_worker/session_store.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::decode {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

tandem::v1::SessionRecord Record(const std::string& id, uint64_t version, int32_t ttl_s = 60) {
  tandem::v1::SessionRecord r;
  r.set_session_id(id);
  r.set_version(version);
  r.set_idle_ttl_seconds(ttl_s);
  return r;
}

class SessionStoreTest : public ::testing::Test {
 protected:
  SessionStore Make(int32_t max_sessions = 8) {
    return SessionStore({.max_sessions = max_sessions,
                         .sweep_interval = absl::ZeroDuration(),  // swept by hand
                         .clock = [this] { return now_; }},
                        [this](const std::string& id) { dropped_.push_back(id); });
  }
  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::vector<std::string> dropped_;
};

TEST_F(SessionStoreTest, TheNewestVersionWins) {
  SessionStore store = Make();
  ASSERT_TRUE(store.Put(Record("a", 1)).ok());
  ASSERT_TRUE(store.Put(Record("a", 3)).ok());
  // The same record again is taken as written; another one of that version
  // is another turn's.
  EXPECT_TRUE(store.Put(Record("a", 3)).ok());
  tandem::v1::SessionRecord other = Record("a", 3);
  other.set_kv_holder("elsewhere");
  const absl::Status stale = store.Put(other);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(stale.message(), HasSubstr("session_id"));
  EXPECT_EQ(store.Put(Record("a", 2)).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store.Get("a")->version(), 3u);
  EXPECT_EQ(store.Get("b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Put(Record("", 1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Put(Record("c", 0)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SessionStoreTest, AFullStoreRefusesNewSessionsNamingTheFlag) {
  SessionStore store = Make(2);
  ASSERT_TRUE(store.Put(Record("a", 1)).ok());
  ASSERT_TRUE(store.Put(Record("b", 1)).ok());
  const absl::Status full = store.Put(Record("c", 1));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("max-sessions"));
  EXPECT_TRUE(store.Put(Record("a", 2)).ok());  // an existing one still updates
  EXPECT_TRUE(store.Drop("b"));
  EXPECT_TRUE(store.Put(Record("c", 1)).ok());
  EXPECT_THAT(dropped_, ElementsAre("b"));
}

TEST_F(SessionStoreTest, IdleRecordsExpireAndLetGoOfTheirKv) {
  SessionStore store = Make();
  ASSERT_TRUE(store.Put(Record("short", 1, 10)).ok());
  ASSERT_TRUE(store.Put(Record("long", 1, 100)).ok());
  now_ += absl::Seconds(8);
  ASSERT_TRUE(store.Get("short").ok());  // a read restarts its idle time
  now_ += absl::Seconds(8);
  EXPECT_EQ(store.List().size(), 2u);  // listing does not
  store.ExpireIdle();
  EXPECT_TRUE(dropped_.empty());
  now_ += absl::Seconds(3);
  EXPECT_EQ(store.List().size(), 1u);
  store.ExpireIdle();
  EXPECT_THAT(dropped_, ElementsAre("short"));
  EXPECT_EQ(store.size(), 1);
  now_ += absl::Seconds(100);
  // Read after its TTL: gone, and its KV let go, before any sweep.
  EXPECT_EQ(store.Get("long").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dropped_, ElementsAre("short", "long"));
}

}  // namespace
}  // namespace tandem::decode
