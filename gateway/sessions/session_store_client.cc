#include "gateway/sessions/session_store_client.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include <xxhash.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "rpc/status.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::gateway {
namespace {

using Stub = tandem::v1::Decode::Stub;

// The in-flight gauge of `method` calls to `address` (null: not counted).
prometheus::Gauge* InFlight(prometheus::Family<prometheus::Gauge>* family,
                            const std::string& address, const char* method) {
  if (family == nullptr) return nullptr;
  return &family->Add({{"worker", address}, {"method", method}});
}

// One unary call to a decode worker; deletes itself when done.
template <typename Req, typename Resp>
class UnaryCall final : public grpc::ClientUnaryReactor {
 public:
  using Starter = void (*)(Stub&, grpc::ClientContext*, const Req*, Resp*,
                           grpc::ClientUnaryReactor*);
  using Done = std::function<void(const grpc::Status&, Resp&)>;

  // `in_flight` (may be null) counts the call while it runs.
  static void Run(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout, Req request,
                  Starter starter, prometheus::Gauge* in_flight, Done done) {
    auto* call = new UnaryCall(std::move(channel), std::move(request), std::move(done));
    call->in_flight_ = in_flight;
    if (in_flight != nullptr) in_flight->Increment();
    call->ctx_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    starter(*call->stub_, &call->ctx_, &call->request_, &call->response_, call);
    call->StartCall();
  }

  void OnDone(const grpc::Status& status) override {
    if (in_flight_ != nullptr) in_flight_->Decrement();
    done_(status, response_);
    delete this;
  }

 private:
  UnaryCall(std::shared_ptr<grpc::Channel> channel, Req request, Done done)
      : stub_(tandem::v1::Decode::NewStub(channel)),
        request_(std::move(request)),
        done_(std::move(done)) {}

  std::unique_ptr<Stub> stub_;
  grpc::ClientContext ctx_;
  Req request_;
  Resp response_;
  Done done_;
  prometheus::Gauge* in_flight_ = nullptr;
};

// Gathers one answer per target, then runs `finish` once with all of them.
template <typename Resp>
class Gather {
 public:
  struct Answer {
    std::string address;
    grpc::Status status;
    Resp response;
  };
  using Finish = std::function<void(std::vector<Answer>)>;

  Gather(size_t expected, Finish finish) : expected_(expected), finish_(std::move(finish)) {}

  void Add(std::string address, const grpc::Status& status, Resp& response) {
    std::vector<Answer> all;
    {
      absl::MutexLock lock(&mu_);
      answers_.push_back({std::move(address), status, std::move(response)});
      if (answers_.size() < expected_) return;
      all.swap(answers_);
    }
    finish_(std::move(all));
  }

 private:
  const size_t expected_;
  const Finish finish_;
  absl::Mutex mu_;
  std::vector<Answer> answers_ ABSL_GUARDED_BY(mu_);
};

// Sends `request` to every address; `finish` gets every answer.
template <typename Req, typename Resp>
void FanOut(rpc::ChannelCache& channels, const std::vector<std::string>& addresses,
            absl::Duration timeout, const Req& request,
            typename UnaryCall<Req, Resp>::Starter starter,
            prometheus::Family<prometheus::Gauge>* in_flight, const char* method,
            typename Gather<Resp>::Finish finish) {
  if (addresses.empty()) {
    finish({});
    return;
  }
  auto gather = std::make_shared<Gather<Resp>>(addresses.size(), std::move(finish));
  for (const std::string& address : addresses) {
    UnaryCall<Req, Resp>::Run(channels.Get(address), timeout, request, starter,
                              InFlight(in_flight, address, method), [gather, address](const grpc::Status& s, Resp& r) {
                                gather->Add(address, s, r);
                              });
  }
}

bool Unreachable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// Puts one record to workers in rank order, `want` copies at once; a copy
// whose worker cannot be reached moves on to the next worker not yet
// tried. Lives (shared) until its last answer; needs nothing of the client
// (its channels are taken when it is made), so a repair may outlive it.
class Placer : public std::enable_shared_from_this<Placer> {
 public:
  struct Outcome {
    std::vector<std::string> stored;  // addresses that took the record
    absl::Status aborted;             // a target held the same or a newer version
    absl::Status first_error;
  };
  using Finish = std::function<void(Outcome)>;

  // `release_kv`: a worker other than the record's holder lets go of KV it
  // kept for the session.
  Placer(rpc::ChannelCache& channels, absl::Duration timeout, tandem::v1::SessionRecord record,
         const std::vector<std::string>& ranked, bool release_kv,
         prometheus::Family<prometheus::Gauge>* in_flight, Finish finish)
      : timeout_(timeout),
        record_(std::move(record)),
        release_kv_(release_kv),
        finish_(std::move(finish)) {
    for (const std::string& address : ranked) {
      workers_.push_back(
          {address, channels.Get(address), InFlight(in_flight, address, "PutSession")});
    }
  }

  // Sends the first `want` copies; `finish` runs once every copy landed or
  // ran out of workers.
  void Start(int want) {
    std::vector<size_t> first;
    {
      absl::MutexLock lock(&mu_);
      while (static_cast<int>(first.size()) < want && next_ < workers_.size()) {
        first.push_back(next_++);
      }
      in_flight_ = static_cast<int>(first.size());
    }
    if (first.empty()) {
      finish_(Outcome{});
      return;
    }
    for (size_t i : first) Put(i);
  }

 private:
  struct Worker {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    prometheus::Gauge* in_flight = nullptr;
  };

  void Put(size_t i) {
    tandem::v1::PutSessionRequest put;
    *put.mutable_record() = record_;
    put.set_release_kv(release_kv_ && workers_[i].address != record_.kv_holder());
    UnaryCall<tandem::v1::PutSessionRequest, tandem::v1::PutSessionResponse>::Run(
        workers_[i].channel, timeout_, std::move(put),
        [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::PutSessionRequest* req,
           tandem::v1::PutSessionResponse* resp, grpc::ClientUnaryReactor* r) {
          stub.async()->PutSession(ctx, req, resp, r);
        },
        workers_[i].in_flight, [self = shared_from_this(), i](const grpc::Status& s, tandem::v1::PutSessionResponse&) {
          self->OnAnswer(i, s);
        });
  }

  void OnAnswer(size_t i, const grpc::Status& status) {
    std::optional<size_t> retry;
    Outcome done;
    {
      absl::MutexLock lock(&mu_);
      if (status.ok()) {
        outcome_.stored.push_back(workers_[i].address);
      } else if (status.error_code() == grpc::StatusCode::ABORTED) {
        outcome_.aborted = rpc::FromGrpcStatus(status);
      } else {
        if (outcome_.first_error.ok()) {
          outcome_.first_error =
              rpc::FromGrpcStatus(status, absl::StrCat("session store ", workers_[i].address));
        }
        // A newer version elsewhere makes another copy pointless.
        if (Unreachable(status) && outcome_.aborted.ok() && next_ < workers_.size()) {
          retry = next_++;
        }
      }
      if (!retry.has_value() && --in_flight_ > 0) return;
      if (!retry.has_value()) done = std::move(outcome_);
    }
    if (retry.has_value()) {
      Put(*retry);
    } else {
      finish_(std::move(done));
    }
  }

  const absl::Duration timeout_;
  const tandem::v1::SessionRecord record_;
  const bool release_kv_;
  const Finish finish_;
  std::vector<Worker> workers_;  // in rank order; set before Start
  absl::Mutex mu_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // the first worker not yet tried
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  Outcome outcome_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

SessionStoreClient::SessionStoreClient(rpc::ChannelCache& channels, Options options)
    : channels_(channels),
      options_(std::move(options)),
      placements_(std::make_shared<SessionPlacements>(options_.tracked_sessions)),
      rereplication_(std::make_shared<Rereplication>()) {}

SessionStoreClient::~SessionStoreClient() {
  Rereplication& r = *rereplication_;
  absl::MutexLock lock(&r.mu);
  r.stopped = true;
  r.queue.clear();
  r.queued.clear();
  // Each read ends within the timeout (its repair needs nothing of the
  // client).
  auto idle = [&r]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) { return r.in_flight == 0; };
  r.mu.Await(absl::Condition(&idle));
}

SessionStoreClient::Placement SessionStoreClient::Place(const std::string& session_id,
                                                        const std::string& holder) const {
  std::vector<DecodeWorker> workers = options_.decode_workers();
  // Reachable workers first, each group by rendezvous hash; the holder
  // leads its group.
  std::vector<std::tuple<bool, bool, uint64_t, std::string>> ranked;
  bool holder_known = false;
  int reachable = 0;
  for (DecodeWorker& w : workers) {
    const bool is_holder = !holder.empty() && w.address == holder;
    holder_known = holder_known || is_holder;
    reachable += w.reachable ? 1 : 0;
    const std::string key = absl::StrCat(session_id, "\n", w.address);
    ranked.emplace_back(!w.reachable, !is_holder, XXH3_64bits(key.data(), key.size()),
                        std::move(w.address));
  }
  // A holder no longer listed is tried last.
  if (!holder.empty() && !holder_known) ranked.emplace_back(true, true, ~uint64_t{0}, holder);
  std::sort(ranked.begin(), ranked.end());
  Placement out;
  for (auto& r : ranked) out.ranked.push_back(std::move(std::get<3>(r)));
  out.want = std::min(options_.replicas, std::max(reachable, 1));
  return out;
}

std::vector<std::string> SessionStoreClient::Addresses(bool reachable_only) const {
  std::vector<std::string> out;
  for (DecodeWorker& w : options_.decode_workers()) {
    if (w.reachable || !reachable_only) out.push_back(std::move(w.address));
  }
  return out;
}

std::vector<std::string> SessionStoreClient::Ranked(const std::string& session_id,
                                                    const std::string& holder) const {
  return Place(session_id, holder).ranked;
}

std::vector<std::string> SessionStoreClient::Targets(const std::string& session_id,
                                                     const std::string& holder) const {
  std::vector<std::string> ranked = Ranked(session_id, holder);
  if (static_cast<int>(ranked.size()) > options_.replicas) ranked.resize(options_.replicas);
  return ranked;
}

void SessionStoreClient::Load(const std::string& session_id, RecordDone done) const {
  std::vector<std::string> reachable = Addresses(/*reachable_only=*/true);
  if (reachable.size() == Addresses().size() || reachable.empty()) {
    LoadFrom(session_id, Addresses(), std::move(done), nullptr);
    return;
  }
  LoadFrom(session_id, std::move(reachable),
           [this, session_id, done = std::move(done)](
               absl::StatusOr<tandem::v1::SessionRecord> record) mutable {
             if (record.ok()) {
               done(std::move(record));
               return;
             }
             // Not on the reachable workers: every worker is asked, the
             // down ones within the timeout.
             LoadFrom(session_id, Addresses(), std::move(done), nullptr);
           },
           nullptr);
}

void SessionStoreClient::LoadFrom(const std::string& session_id,
                                  std::vector<std::string> addresses, RecordDone done,
                                  std::function<void(int)> repaired) const {
  tandem::v1::SessionKey key;
  key.set_session_id(session_id);
  FanOut<tandem::v1::SessionKey, tandem::v1::SessionRecord>(
      channels_, addresses, options_.timeout, key,
      [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::SessionKey* req,
         tandem::v1::SessionRecord* resp, grpc::ClientUnaryReactor* r) {
        stub.async()->GetSession(ctx, req, resp, r);
      },
      options_.calls_in_flight, "GetSession",
      [this, session_id, done = std::move(done),
       repaired = std::move(repaired)](auto answers) mutable {
        const tandem::v1::SessionRecord* newest = nullptr;
        int unreachable = 0;
        std::vector<std::string> unanswered;
        for (const auto& a : answers) {
          if (a.status.ok()) {
            if (newest == nullptr || a.response.version() > newest->version()) {
              newest = &a.response;
            }
          } else if (a.status.error_code() != grpc::StatusCode::NOT_FOUND) {
            ++unreachable;
            unanswered.push_back(a.address);
          }
        }
        if (newest == nullptr) {
          absl::Status status;
          if (unreachable > 0) {
            status = absl::UnavailableError(absl::StrCat(
                "session_id: \"", session_id,
                "\" was not found on the reachable decode workers; ", unreachable,
                " could not be asked"));
          } else {
            placements_->Erase(session_id);
            status = absl::FailedPreconditionError(absl::StrCat(
                "session_id: \"", session_id, "\" is unknown, closed or expired"));
          }
          // Last: a re-replication's slot may let the client go.
          if (repaired != nullptr) repaired(0);
          done(std::move(status));
          return;
        }
        std::vector<std::string> holding;
        for (const auto& a : answers) {
          if (a.status.ok() && a.response.version() == newest->version()) {
            holding.push_back(a.address);
          }
        }
        const tandem::v1::SessionRecord record = *newest;
        placements_->Set(session_id, holding);
        // The repair is planned before `done`, which may end the caller's
        // call (and the client with it); its puts need nothing of either.
        Repair(record, std::move(holding), std::move(unanswered), std::move(repaired));
        done(record);
      });
}

void SessionStoreClient::Repair(const tandem::v1::SessionRecord& record,
                                std::vector<std::string> holding,
                                std::vector<std::string> unanswered,
                                std::function<void(int)> repaired) const {
  Placement place = Place(record.session_id(), record.kv_holder());
  const int missing = place.want - static_cast<int>(holding.size());
  std::vector<std::string> candidates;
  for (std::string& w : place.ranked) {
    if (std::find(holding.begin(), holding.end(), w) != holding.end()) continue;
    if (std::find(unanswered.begin(), unanswered.end(), w) != unanswered.end()) continue;
    candidates.push_back(std::move(w));
  }
  if (missing <= 0 || candidates.empty()) {
    if (repaired != nullptr) repaired(0);
    return;
  }
  // KV stays where it is: the copy is the record's alone, and a turn may be
  // pinning KV on that worker right now.
  auto placer = std::make_shared<Placer>(
      channels_, options_.timeout, record, candidates, /*release_kv=*/false,
      options_.calls_in_flight,
      [placements = placements_, id = record.session_id(),
       repaired = std::move(repaired)](Placer::Outcome outcome) {
        placements->Add(id, outcome.stored);
        if (repaired != nullptr) repaired(static_cast<int>(outcome.stored.size()));
      });
  placer->Start(missing);
}

void SessionStoreClient::Save(const tandem::v1::SessionRecord& record,
                              const std::string& previous_holder, StatusDone done) const {
  Placement place = Place(record.session_id(), record.kv_holder());
  if (place.ranked.empty()) {
    done(absl::UnavailableError("session: no decode worker is available to store it"));
    return;
  }
  // The old holder, when it takes no copy, lets go of the KV and the stale
  // record after the puts: dropping it first (or at once) could land after
  // a put to it and erase the record just written.
  std::shared_ptr<grpc::Channel> previous;
  if (!previous_holder.empty() && previous_holder != record.kv_holder()) {
    previous = channels_.Get(previous_holder);
  }
  prometheus::Gauge* drop_in_flight =
      previous == nullptr ? nullptr
                          : InFlight(options_.calls_in_flight, previous_holder, "DropSession");
  auto placer = std::make_shared<Placer>(
      channels_, options_.timeout, record, place.ranked, /*release_kv=*/true,
      options_.calls_in_flight,
      [want = place.want, id = record.session_id(), previous, previous_holder, drop_in_flight,
       placements = placements_, under = options_.on_under_replicated,
       timeout = options_.timeout, done = std::move(done)](Placer::Outcome outcome) {
        const int stored = static_cast<int>(outcome.stored.size());
        if (stored < want && outcome.aborted.ok()) {
          common::LogLine("tandem-gateway")
              << "session " << id << ": its record is on " << stored << " of the " << want
              << " decode workers aimed for";
          if (under != nullptr) under();
        }
        // Where this version landed, for re-replication after a loss (a
        // newer version written elsewhere is learnt at its next read).
        if (stored > 0 && outcome.aborted.ok()) placements->Set(id, outcome.stored);
        if (previous != nullptr && stored > 0 &&
            std::find(outcome.stored.begin(), outcome.stored.end(), previous_holder) ==
                outcome.stored.end()) {
          tandem::v1::SessionKey key;
          key.set_session_id(id);
          UnaryCall<tandem::v1::SessionKey, tandem::v1::DropSessionResponse>::Run(
              previous, timeout, std::move(key),
              [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::SessionKey* req,
                 tandem::v1::DropSessionResponse* resp, grpc::ClientUnaryReactor* r) {
                stub.async()->DropSession(ctx, req, resp, r);
              },
              drop_in_flight, [](const grpc::Status&, tandem::v1::DropSessionResponse&) {});
        }
        if (!outcome.aborted.ok()) {
          done(outcome.aborted);
        } else if (stored > 0) {
          done(absl::OkStatus());
        } else {
          done(outcome.first_error.ok()
                   ? absl::UnavailableError("session: no decode worker stored it")
                   : outcome.first_error);
        }
      });
  placer->Start(place.want);
}

void SessionStoreClient::Drop(const std::string& session_id, StatusDone done) const {
  placements_->Erase(session_id);
  tandem::v1::SessionKey key;
  key.set_session_id(session_id);
  FanOut<tandem::v1::SessionKey, tandem::v1::DropSessionResponse>(
      channels_, Addresses(), options_.timeout, key,
      [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::SessionKey* req,
         tandem::v1::DropSessionResponse* resp, grpc::ClientUnaryReactor* r) {
        stub.async()->DropSession(ctx, req, resp, r);
      },
      options_.calls_in_flight, "DropSession",
      [done = std::move(done)](auto answers) {
        for (const auto& a : answers) {
          if (!a.status.ok()) {
            done(rpc::FromGrpcStatus(a.status, absl::StrCat("session store ", a.address)));
            return;
          }
        }
        done(absl::OkStatus());
      });
}

void SessionStoreClient::List(ListDone done) const {
  FanOut<tandem::v1::ListSessionRecordsRequest, tandem::v1::ListSessionRecordsResponse>(
      channels_, Addresses(), options_.timeout, tandem::v1::ListSessionRecordsRequest(),
      [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::ListSessionRecordsRequest* req,
         tandem::v1::ListSessionRecordsResponse* resp, grpc::ClientUnaryReactor* r) {
        stub.async()->ListSessions(ctx, req, resp, r);
      },
      options_.calls_in_flight, "ListSessions",
      [done = std::move(done)](auto answers) {
        absl::flat_hash_map<std::string, tandem::v1::SessionRecord> newest;
        for (auto& a : answers) {
          if (!a.status.ok()) continue;
          for (tandem::v1::SessionRecord& r : *a.response.mutable_records()) {
            auto [it, inserted] = newest.try_emplace(r.session_id(), r);
            if (!inserted && r.version() > it->second.version()) it->second = std::move(r);
          }
        }
        std::vector<tandem::v1::SessionRecord> out;
        out.reserve(newest.size());
        for (auto& [id, r] : newest) out.push_back(std::move(r));
        std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
          return a.session_id() < b.session_id();
        });
        done(std::move(out));
      });
}

void SessionStoreClient::OnWorkerLost(const std::string& address) {
  const std::vector<std::string> ids = placements_->TakeWorker(address);
  if (ids.empty()) return;
  common::LogLine("tandem-gateway") << "decode worker " << address << " lost: re-replicating "
                                    << ids.size() << " session record(s) it held";
  {
    Rereplication& r = *rereplication_;
    absl::MutexLock lock(&r.mu);
    if (r.stopped) return;
    for (const std::string& id : ids) {
      if (r.queued.insert(id).second) r.queue.push_back(id);
    }
  }
  PumpRereplication();
}

int64_t SessionStoreClient::rereplications_pending() const {
  absl::MutexLock lock(&rereplication_->mu);
  return static_cast<int64_t>(rereplication_->queue.size()) + rereplication_->in_flight;
}

void SessionStoreClient::PumpRereplication() {
  Rereplication& r = *rereplication_;
  std::vector<std::string> start;
  {
    absl::MutexLock lock(&r.mu);
    while (!r.stopped && !r.queue.empty() && r.in_flight < options_.rereplicate_parallel) {
      start.push_back(std::move(r.queue.front()));
      r.queued.erase(start.back());
      r.queue.pop_front();
      ++r.in_flight;
    }
  }
  for (std::string& id : start) Rereplicate(std::move(id));
}

void SessionStoreClient::Rereplicate(std::string id) {
  while (true) {
    // Only the reachable workers are read: a stuck one would hold every
    // read for the timeout, and a newer version it may hold wins at the
    // session's next read anyway (versions order the copies).
    std::vector<std::string> addresses = Addresses(/*reachable_only=*/true);
    if (!addresses.empty()) {
      LoadFrom(id, std::move(addresses), [](absl::StatusOr<tandem::v1::SessionRecord>) {},
               [this](int added) {
                 if (added > 0 && options_.on_rereplicated != nullptr) {
                   options_.on_rereplicated();
                 }
                 // The slot goes to the next session while the client is
                 // kept (the destructor waits for in_flight 0).
                 std::optional<std::string> next = NextRereplication();
                 if (next.has_value()) Rereplicate(std::move(*next));
               });
      return;
    }
    // No reachable worker to copy to: the session is left to its next
    // read's repair, and this slot goes on to the next (the queue drains).
    std::optional<std::string> next = NextRereplication();
    if (!next.has_value()) return;
    id = std::move(*next);
  }
}

std::optional<std::string> SessionStoreClient::NextRereplication() {
  // Held here: once the slot is released the destructor may return, and
  // the client go, while this still unlocks.
  const std::shared_ptr<Rereplication> state = rereplication_;
  Rereplication& r = *state;
  absl::MutexLock lock(&r.mu);
  if (r.stopped || r.queue.empty()) {
    --r.in_flight;  // the last touch of the client by this slot
    return std::nullopt;
  }
  std::string id = std::move(r.queue.front());
  r.queue.pop_front();
  r.queued.erase(id);
  return id;
}

}  // namespace tandem::gateway
