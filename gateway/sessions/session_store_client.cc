#include "gateway/sessions/session_store_client.h"

#include <algorithm>
#include <memory>
#include <utility>

#include <xxhash.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "rpc/status.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::gateway {
namespace {

using Stub = tandem::v1::Decode::Stub;

// One unary call to a decode worker; deletes itself when done.
template <typename Req, typename Resp>
class UnaryCall final : public grpc::ClientUnaryReactor {
 public:
  using Starter = void (*)(Stub&, grpc::ClientContext*, const Req*, Resp*,
                           grpc::ClientUnaryReactor*);
  using Done = std::function<void(const grpc::Status&, Resp&)>;

  static void Run(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout, Req request,
                  Starter starter, Done done) {
    auto* call = new UnaryCall(std::move(channel), std::move(request), std::move(done));
    call->ctx_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    starter(*call->stub_, &call->ctx_, &call->request_, &call->response_, call);
    call->StartCall();
  }

  void OnDone(const grpc::Status& status) override {
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
            typename Gather<Resp>::Finish finish) {
  if (addresses.empty()) {
    finish({});
    return;
  }
  auto gather = std::make_shared<Gather<Resp>>(addresses.size(), std::move(finish));
  for (const std::string& address : addresses) {
    UnaryCall<Req, Resp>::Run(channels.Get(address), timeout, request, starter,
                              [gather, address](const grpc::Status& s, Resp& r) {
                                gather->Add(address, s, r);
                              });
  }
}

}  // namespace

SessionStoreClient::SessionStoreClient(rpc::ChannelCache& channels,
                                       std::function<std::vector<std::string>()> decode_workers,
                                       int replicas, absl::Duration timeout)
    : channels_(channels),
      decode_workers_(std::move(decode_workers)),
      replicas_(std::max(replicas, 1)),
      timeout_(timeout) {}

std::vector<std::string> SessionStoreClient::Targets(const std::string& session_id,
                                                     const std::string& holder) const {
  std::vector<std::string> workers = decode_workers_();
  std::vector<std::pair<uint64_t, std::string>> ranked;
  for (std::string& w : workers) {
    if (w == holder) continue;
    const std::string key = absl::StrCat(session_id, "\n", w);
    ranked.emplace_back(XXH3_64bits(key.data(), key.size()), std::move(w));
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  if (!holder.empty()) out.push_back(holder);
  for (auto& [rank, w] : ranked) {
    if (static_cast<int>(out.size()) >= replicas_) break;
    out.push_back(std::move(w));
  }
  return out;
}

void SessionStoreClient::Load(const std::string& session_id, RecordDone done) const {
  tandem::v1::SessionKey key;
  key.set_session_id(session_id);
  FanOut<tandem::v1::SessionKey, tandem::v1::SessionRecord>(
      channels_, decode_workers_(), timeout_, key,
      [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::SessionKey* req,
         tandem::v1::SessionRecord* resp, grpc::ClientUnaryReactor* r) {
        stub.async()->GetSession(ctx, req, resp, r);
      },
      [session_id, done = std::move(done)](auto answers) {
        const tandem::v1::SessionRecord* newest = nullptr;
        int unreachable = 0;
        for (const auto& a : answers) {
          if (a.status.ok()) {
            if (newest == nullptr || a.response.version() > newest->version()) {
              newest = &a.response;
            }
          } else if (a.status.error_code() != grpc::StatusCode::NOT_FOUND) {
            ++unreachable;
          }
        }
        if (newest != nullptr) {
          done(*newest);
        } else if (unreachable > 0) {
          done(absl::UnavailableError(absl::StrCat(
              "session_id: \"", session_id, "\" was not found on the reachable decode workers; ",
              unreachable, " could not be asked")));
        } else {
          done(absl::FailedPreconditionError(absl::StrCat("session_id: \"", session_id,
                                                "\" is unknown, closed or expired")));
        }
      });
}

void SessionStoreClient::Save(const tandem::v1::SessionRecord& record,
                              const std::string& previous_holder, StatusDone done) const {
  std::vector<std::string> targets = Targets(record.session_id(), record.kv_holder());
  if (targets.empty()) {
    done(absl::UnavailableError("session: no decode worker is available to store it"));
    return;
  }
  if (!previous_holder.empty() && previous_holder != record.kv_holder() &&
      std::find(targets.begin(), targets.end(), previous_holder) == targets.end()) {
    // The old holder keeps neither the record nor the KV any longer.
    Drop(record.session_id(), [](absl::Status) {});
  }
  // A decode worker that takes the record without being the holder lets go
  // of KV it may have kept for the session before.
  auto gather = std::make_shared<Gather<tandem::v1::PutSessionResponse>>(
      targets.size(), [done = std::move(done)](auto answers) {
        absl::Status first_error;
        bool stored = false;
        for (const auto& a : answers) {
          if (a.status.ok()) {
            stored = true;
          } else if (a.status.error_code() == grpc::StatusCode::ABORTED) {
            done(rpc::FromGrpcStatus(a.status));
            return;
          } else if (first_error.ok()) {
            first_error = rpc::FromGrpcStatus(a.status, absl::StrCat("session store ", a.address));
          }
        }
        done(stored ? absl::OkStatus() : first_error);
      });
  for (const std::string& address : targets) {
    tandem::v1::PutSessionRequest put;
    *put.mutable_record() = record;
    put.set_release_kv(address != record.kv_holder());
    UnaryCall<tandem::v1::PutSessionRequest, tandem::v1::PutSessionResponse>::Run(
        channels_.Get(address), timeout_, std::move(put),
        [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::PutSessionRequest* req,
           tandem::v1::PutSessionResponse* resp, grpc::ClientUnaryReactor* r) {
          stub.async()->PutSession(ctx, req, resp, r);
        },
        [gather, address](const grpc::Status& s, tandem::v1::PutSessionResponse& r) {
          gather->Add(address, s, r);
        });
  }
}

void SessionStoreClient::Drop(const std::string& session_id, StatusDone done) const {
  tandem::v1::SessionKey key;
  key.set_session_id(session_id);
  FanOut<tandem::v1::SessionKey, tandem::v1::DropSessionResponse>(
      channels_, decode_workers_(), timeout_, key,
      [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::SessionKey* req,
         tandem::v1::DropSessionResponse* resp, grpc::ClientUnaryReactor* r) {
        stub.async()->DropSession(ctx, req, resp, r);
      },
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
      channels_, decode_workers_(), timeout_, tandem::v1::ListSessionRecordsRequest(),
      [](Stub& stub, grpc::ClientContext* ctx, const tandem::v1::ListSessionRecordsRequest* req,
         tandem::v1::ListSessionRecordsResponse* resp, grpc::ClientUnaryReactor* r) {
        stub.async()->ListSessions(ctx, req, resp, r);
      },
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

}  // namespace tandem::gateway
