// The gateway's session store client (gateway/sessions/session_store_client.h)
// against in-process fake decode workers keeping records in a map: the
// replica set skips workers known unreachable, a write that finds a target
// down goes on to the next worker, a read puts the newest version back to
// the targets lacking it, and a write drops the session from its previous
// holder alone, after the puts; a worker found down has the sessions it
// held a copy of re-replicated at once, and a stuck worker holds a write
// back by the store's deadline alone.
#include "gateway/sessions/session_store_client.h"

#include <atomic>
#include <map>
#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "prometheus/registry.h"
#include "rpc/bootstrap.h"
#include "rpc/metrics.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

// A decode worker's session store, and no more.
class FakeStore final : public tandem::v1::Decode::CallbackService {
 public:
  ~FakeStore() { Unstick(); }

  grpc::ServerUnaryReactor* PutSession(grpc::CallbackServerContext* ctx,
                                       const tandem::v1::PutSessionRequest* request,
                                       tandem::v1::PutSessionResponse*) override {
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (stuck_) {
        // A stuck worker: the call is answered only when it is unstuck.
        held_.push_back(ctx->DefaultReactor());
        return held_.back();
      }
      const tandem::v1::SessionRecord& r = request->record();
      auto it = records_.find(r.session_id());
      if (it != records_.end() && it->second.version() >= r.version()) {
        status = grpc::Status(grpc::StatusCode::ABORTED, "held version is newer");
      } else {
        records_[r.session_id()] = r;
        releases_ += request->release_kv() ? 1 : 0;
      }
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* ctx,
                                       const tandem::v1::SessionKey* request,
                                       tandem::v1::SessionRecord* response) override {
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      ++gets_;
      if (stuck_) {
        held_.push_back(ctx->DefaultReactor());
        return held_.back();
      }
      auto it = records_.find(request->session_id());
      if (it == records_.end()) {
        status = grpc::Status(grpc::StatusCode::NOT_FOUND, "not held here");
      } else {
        *response = it->second;
      }
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }
  grpc::ServerUnaryReactor* DropSession(grpc::CallbackServerContext* ctx,
                                        const tandem::v1::SessionKey* request,
                                        tandem::v1::DropSessionResponse*) override {
    {
      absl::MutexLock lock(&mu_);
      records_.erase(request->session_id());
      ++drops_;
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // The version held of `id` (0: none).
  uint64_t Version(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(id);
    return it == records_.end() ? 0 : it->second.version();
  }
  // Waits up to 10 s until version `version` of `id` is held.
  bool AwaitVersion(const std::string& id, uint64_t version) {
    absl::MutexLock lock(&mu_);
    auto held = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = records_.find(id);
      return it != records_.end() && it->second.version() >= version;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&held), absl::Seconds(10));
  }
  // Waits up to 10 s until `n` drops arrived.
  bool AwaitDrops(int n) {
    absl::MutexLock lock(&mu_);
    auto dropped = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return drops_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&dropped), absl::Seconds(10));
  }
  void Put(const tandem::v1::SessionRecord& r) {
    absl::MutexLock lock(&mu_);
    records_[r.session_id()] = r;
  }
  int drops() {
    absl::MutexLock lock(&mu_);
    return drops_;
  }
  int gets() {
    absl::MutexLock lock(&mu_);
    return gets_;
  }
  // From now on puts and gets are left unanswered (as by a stopped process).
  void Stick() {
    absl::MutexLock lock(&mu_);
    stuck_ = true;
  }
  // Answers the puts held (CANCELLED: their callers have gone on).
  void Unstick() {
    std::vector<grpc::ServerUnaryReactor*> held;
    {
      absl::MutexLock lock(&mu_);
      stuck_ = false;
      held.swap(held_);
    }
    for (grpc::ServerUnaryReactor* r : held) r->Finish(grpc::Status::CANCELLED);
  }

 private:
  absl::Mutex mu_;
  bool stuck_ ABSL_GUARDED_BY(mu_) = false;
  int gets_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<grpc::ServerUnaryReactor*> held_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, tandem::v1::SessionRecord> records_ ABSL_GUARDED_BY(mu_);
  int drops_ ABSL_GUARDED_BY(mu_) = 0;
  int releases_ ABSL_GUARDED_BY(mu_) = 0;
};

class SessionStoreClientTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& store : stores_) store->Unstick();
    for (rpc::StartedServer& s : servers_) s.server->Shutdown();
  }

  // Starts a live fake worker; its address.
  std::string Live() {
    stores_.push_back(std::make_unique<FakeStore>());
    auto s = rpc::StartGrpcServer({}, {stores_.back().get()});
    EXPECT_TRUE(s.ok()) << s.status();
    servers_.push_back(std::move(*s));
    store_of_[servers_.back().address] = stores_.back().get();
    return servers_.back().address;
  }
  // An address nothing listens on any longer (a worker killed).
  std::string Dead() {
    FakeStore store;
    auto s = rpc::StartGrpcServer({}, {&store});
    EXPECT_TRUE(s.ok()) << s.status();
    s->server->Shutdown();
    return s->address;
  }
  FakeStore& Store(const std::string& address) { return *store_of_.at(address); }
  // Kills the live worker at `address`: its server shuts down.
  void Kill(const std::string& address) {
    for (rpc::StartedServer& s : servers_) {
      if (s.address == address) s.server->Shutdown();
    }
  }

  std::unique_ptr<SessionStoreClient> Client(int replicas = 2,
                                             absl::Duration timeout = absl::Seconds(5),
                                             int64_t tracked = 1024) {
    return std::make_unique<SessionStoreClient>(
        channels_, SessionStoreClient::Options{
                       .decode_workers =
                           [this] {
                             absl::MutexLock lock(&mu_);
                             return workers_;
                           },
                       .replicas = replicas,
                       .timeout = timeout,
                       .tracked_sessions = tracked,
                       .rereplicate_parallel = 2,
                       .on_under_replicated = [this] { ++under_replicated_; },
                       .on_rereplicated = [this] { ++rereplicated_; },
                       .calls_in_flight = &in_flight_});
  }
  double InFlight(const std::string& address, const char* method) {
    return in_flight_.Add({{"worker", address}, {"method", method}}).Value();
  }
  void SetWorkers(std::vector<SessionStoreClient::DecodeWorker> workers) {
    absl::MutexLock lock(&mu_);
    workers_ = std::move(workers);
  }
  static tandem::v1::SessionRecord Record(const std::string& id, uint64_t version,
                                          const std::string& holder) {
    tandem::v1::SessionRecord r;
    r.set_session_id(id);
    r.set_version(version);
    r.set_kv_holder(holder);
    return r;
  }
  static absl::Status SaveNow(SessionStoreClient& client, const tandem::v1::SessionRecord& r,
                              const std::string& previous = "") {
    absl::Notification done;
    absl::Status status;
    client.Save(r, previous, [&](absl::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  }
  static absl::StatusOr<tandem::v1::SessionRecord> LoadNow(SessionStoreClient& client,
                                                           const std::string& id) {
    absl::Notification done;
    absl::StatusOr<tandem::v1::SessionRecord> record;
    client.Load(id, [&](absl::StatusOr<tandem::v1::SessionRecord> r) {
      record = std::move(r);
      done.Notify();
    });
    done.WaitForNotification();
    return record;
  }

  rpc::ChannelCache channels_;
  std::vector<std::unique_ptr<FakeStore>> stores_;
  std::vector<rpc::StartedServer> servers_;
  std::map<std::string, FakeStore*> store_of_;
  absl::Mutex mu_;
  std::vector<SessionStoreClient::DecodeWorker> workers_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> under_replicated_{0};
  std::atomic<int> rereplicated_{0};
  prometheus::Registry registry_;
  prometheus::Family<prometheus::Gauge>& in_flight_ =
      rpc::GaugeFamily(registry_, "tandem_session_store_calls_in_flight", "in flight");
};

TEST_F(SessionStoreClientTest, TargetsSkipAWorkerKnownUnreachable) {
  SetWorkers({{.address = "a"}, {.address = "b"}, {.address = "c"}});
  auto client = Client();
  const std::vector<std::string> all = client->Ranked("s-1", "a");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], "a");
  EXPECT_THAT(client->Targets("s-1", "a"), ElementsAre("a", all[1]));
  // The replica the hash picks is down: the next one takes its place, and
  // the down one is only a last resort.
  SetWorkers({{.address = "a"},
              {.address = "b", .reachable = all[1] != "b"},
              {.address = "c", .reachable = all[1] != "c"}});
  EXPECT_THAT(client->Targets("s-1", "a"), ElementsAre("a", all[2]));
  EXPECT_THAT(client->Ranked("s-1", "a"), ElementsAre("a", all[2], all[1]));
  // An unreachable holder is no longer first either.
  SetWorkers({{.address = "a", .reachable = false}, {.address = "b"}, {.address = "c"}});
  const std::vector<std::string> without_holder = client->Ranked("s-1", "a");
  EXPECT_EQ(without_holder.back(), "a");
  EXPECT_THAT(client->Targets("s-1", "a"), UnorderedElementsAre("b", "c"));
}

TEST_F(SessionStoreClientTest, SaveFallsOverToTheNextWorkerWhenATargetIsDown) {
  const std::string holder = Live(), other = Live(), dead = Dead();
  // The dead worker is not known down yet (its stream has not broken).
  SetWorkers({{.address = holder}, {.address = other}, {.address = dead}});
  auto client = Client();
  // A session whose replica, after its holder, is the dead worker.
  std::string id;
  for (int i = 0; i < 100 && id.empty(); ++i) {
    const std::string candidate = absl::StrCat("s-", i);
    if (client->Targets(candidate, holder)[1] == dead) id = candidate;
  }
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(SaveNow(*client, Record(id, 1, holder)).ok());
  EXPECT_EQ(Store(holder).Version(id), 1u);
  EXPECT_EQ(Store(other).Version(id), 1u);  // the dead one's copy
  EXPECT_EQ(under_replicated_.load(), 0);

  // With every other worker gone the write still lands, and says it is short.
  SetWorkers({{.address = holder}, {.address = dead}});
  ASSERT_TRUE(SaveNow(*client, Record(id, 2, holder)).ok());
  EXPECT_EQ(Store(holder).Version(id), 2u);
  EXPECT_EQ(under_replicated_.load(), 1);
  // A stale version is refused.
  EXPECT_EQ(SaveNow(*client, Record(id, 2, holder)).code(), absl::StatusCode::kAborted);
}

TEST_F(SessionStoreClientTest, SaveDropsOnlyThePreviousHolderAfterThePuts) {
  const std::string a = Live(), b = Live(), c = Live(), d = Live();
  SetWorkers({{.address = a}, {.address = b}, {.address = c}, {.address = d}});
  auto client = Client();
  // A session whose previous holder `a` is not among the new targets.
  std::string id, holder;
  for (int i = 0; i < 100 && id.empty(); ++i) {
    const std::string candidate = absl::StrCat("s-", i);
    for (const std::string& h : {b, c, d}) {
      const std::vector<std::string> t = client->Targets(candidate, h);
      if (std::find(t.begin(), t.end(), a) == t.end()) {
        id = candidate;
        holder = h;
        break;
      }
    }
  }
  ASSERT_FALSE(id.empty());
  Store(a).Put(Record(id, 1, a));
  ASSERT_TRUE(SaveNow(*client, Record(id, 2, holder), a).ok());
  for (const std::string& w : client->Targets(id, holder)) EXPECT_EQ(Store(w).Version(id), 2u);
  // The drop is sent after the puts; it reaches `a` alone.
  ASSERT_TRUE(Store(a).AwaitDrops(1));
  EXPECT_EQ(Store(a).drops(), 1);
  EXPECT_EQ(Store(a).Version(id), 0u);
  for (const std::string& w : {b, c, d}) EXPECT_EQ(Store(w).drops(), 0) << w;
}

TEST_F(SessionStoreClientTest, LoadPutsTheNewestVersionBackWhereItIsMissing) {
  const std::string a = Live(), b = Live(), c = Live(), dead = Dead();
  // The holder died; its replica alone has the record.
  SetWorkers({{.address = a}, {.address = b}, {.address = c}, {.address = dead, .reachable = false}});
  auto client = Client();
  const std::string id = "s-repair";
  const std::vector<std::string> targets = client->Targets(id, dead);
  ASSERT_EQ(targets.size(), 2u);
  Store(targets[0]).Put(Record(id, 3, dead));
  for (const std::string& w : {a, b, c}) {
    if (w != targets[0]) Store(w).Put(Record(id, 2, dead));  // a stale copy
  }
  absl::StatusOr<tandem::v1::SessionRecord> loaded = LoadNow(*client, id);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->version(), 3u);
  // The next target in rank order gets the newest version.
  EXPECT_TRUE(Store(targets[1]).AwaitVersion(id, 3));

  // Loss after loss, as long as one worker is left the session is read.
  SetWorkers({{.address = targets[1]}, {.address = dead, .reachable = false}});
  loaded = LoadNow(*client, id);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->version(), 3u);
}

TEST_F(SessionStoreClientTest, AWorkerFoundDownHasItsSessionsReReplicatedAtOnce) {
  const std::string a = Live(), b = Live(), c = Live();
  SetWorkers({{.address = a}, {.address = b}, {.address = c}});
  auto client = Client();
  // Sessions held by `a`, each with one more copy on b or c.
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(absl::StrCat("s-", i));
    ASSERT_TRUE(SaveNow(*client, Record(ids.back(), 1, a)).ok());
  }
  // A session only another gateway wrote: this one knows nothing of it.
  Store(a).Put(Record("elsewhere", 1, a));
  Store(b).Put(Record("elsewhere", 1, a));
  EXPECT_EQ(client->tracked(), 6);

  // `a` dies, and its block event stream says so.
  Kill(a);
  SetWorkers({{.address = a, .reachable = false}, {.address = b}, {.address = c}});
  client->OnWorkerLost(a);
  // Without a read or a write, every session is on both survivors again.
  for (const std::string& id : ids) {
    EXPECT_TRUE(Store(b).AwaitVersion(id, 1)) << id;
    EXPECT_TRUE(Store(c).AwaitVersion(id, 1)) << id;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (client->rereplications_pending() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(client->rereplications_pending(), 0);
  EXPECT_EQ(rereplicated_.load(), 6);
  EXPECT_EQ(Store(c).Version("elsewhere"), 0u);
  // Losing `a` again (its stream flapping) finds nothing left to copy.
  client->OnWorkerLost(a);
  EXPECT_EQ(client->rereplications_pending(), 0);
  // A closed session is forgotten.
  absl::Notification dropped;
  client->Drop(ids[0], [&](absl::Status) { dropped.Notify(); });
  dropped.WaitForNotification();
  EXPECT_EQ(client->tracked(), 5);
}

TEST_F(SessionStoreClientTest, NothingIsRememberedWhenTrackingIsOff) {
  const std::string a = Live(), b = Live(), c = Live();
  SetWorkers({{.address = a}, {.address = b}, {.address = c}});
  auto client = Client(2, absl::Seconds(5), /*tracked=*/0);
  ASSERT_TRUE(SaveNow(*client, Record("s-1", 1, a)).ok());
  EXPECT_EQ(client->tracked(), 0);
  client->OnWorkerLost(a);
  EXPECT_EQ(client->rereplications_pending(), 0);
}

TEST_F(SessionStoreClientTest, AStuckTargetHoldsASaveBackByTheDeadlineAlone) {
  const std::string holder = Live(), stuck = Live(), third = Live();
  SetWorkers({{.address = holder}, {.address = stuck}, {.address = third}});
  constexpr absl::Duration kTimeout = absl::Milliseconds(300);
  auto client = Client(2, kTimeout);
  // A session whose replica, after its holder, is the worker that hangs.
  std::string id;
  for (int i = 0; i < 100 && id.empty(); ++i) {
    const std::string candidate = absl::StrCat("s-", i);
    if (client->Targets(candidate, holder)[1] == stuck) id = candidate;
  }
  ASSERT_FALSE(id.empty());
  Store(stuck).Stick();
  absl::Notification saved;
  absl::Status status;
  client->Save(Record(id, 1, holder), "", [&](absl::Status s) {
    status = std::move(s);
    saved.Notify();
  });
  // The stuck call is in flight (the holder's lands at once).
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (InFlight(stuck, "PutSession") < 1 && !saved.HasBeenNotified() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(InFlight(stuck, "PutSession"), 1);
  // The deadline ends it and its copy goes to the next worker.
  ASSERT_TRUE(saved.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(Store(holder).Version(id), 1u);
  EXPECT_EQ(Store(third).Version(id), 1u);
  EXPECT_EQ(Store(stuck).Version(id), 0u);
  EXPECT_EQ(InFlight(stuck, "PutSession"), 0);
  EXPECT_EQ(under_replicated_.load(), 0);
}

// A worker known down (cut off: its calls would hang to the deadline) is
// not asked while the reachable workers have the session; it is asked when
// they do not.
TEST_F(SessionStoreClientTest, LoadAsksAWorkerKnownDownOnlyWhenNoReachableOneHasTheSession) {
  const std::string holder = Live(), down = Live(), third = Live();
  SetWorkers({{.address = holder}, {.address = down, .reachable = false}, {.address = third}});
  auto client = Client(2, absl::Seconds(60));  // a wait on `down` would show
  Store(holder).Put(Record("s-on-reachable", 4, holder));
  Store(down).Put(Record("s-on-reachable", 3, holder));
  Store(down).Stick();
  absl::StatusOr<tandem::v1::SessionRecord> loaded = LoadNow(*client, "s-on-reachable");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->version(), 4u);
  EXPECT_EQ(Store(down).gets(), 0);
  Store(down).Unstick();

  // Only the down worker has it (its last write found no reachable one).
  Store(down).Put(Record("s-on-down", 7, down));
  loaded = LoadNow(*client, "s-on-down");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->version(), 7u);
  EXPECT_EQ(Store(down).gets(), 1);
  // Nowhere: unknown, after every worker answered.
  EXPECT_EQ(LoadNow(*client, "s-nowhere").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::gateway
