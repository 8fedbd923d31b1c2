#include "gateway/calls/generate_call.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/json.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "gateway/calls/generate_call_children.h"
#include "rpc/convert.h"
#include "rpc/status.h"
#include "rpc/wire_parse.h"

namespace tandem::gateway {
namespace {

bool Retryable(const grpc::Status& s) {
  // The worker could not be reached or is overloaded: another may serve.
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

}  // namespace

GenerateCall* GenerateCall::Start(const CallEnv& env, grpc::CallbackServerContext* ctx,
                                  absl::StatusOr<ValidatedRequest> request) {
  std::shared_ptr<GenerateCall> call = Open(env, ctx);
  call->Begin(std::move(request));
  return call.get();
}

std::shared_ptr<GenerateCall> GenerateCall::Open(const CallEnv& env,
                                                 grpc::CallbackServerContext* ctx) {
  std::shared_ptr<GenerateCall> call(new GenerateCall(env, ctx));
  call->self_ = call;
  return call;
}

GenerateCall::GenerateCall(const CallEnv& env, grpc::CallbackServerContext* ctx)
    : env_(env), ctx_(ctx) {
  env_.live->Enter();
}

namespace {

constexpr char kRequestIdHeader[] = "x-request-id";

// A request without a request id gets "req-" and 16 random hex digits.
std::string NewRequestId() {
  thread_local absl::BitGen gen;
  return absl::StrCat("req-", absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
}

void LogEnd(const std::string& request_id, const absl::Status& status) {
  // Failures the client did not cause are worth a line at the default level.
  const bool server_side = status.code() == absl::StatusCode::kInternal ||
                           status.code() == absl::StatusCode::kUnknown ||
                           status.code() == absl::StatusCode::kDataLoss;
  if (!common::LogEnabled(server_side ? common::LogLevel::kWarning : common::LogLevel::kDebug)) {
    return;
  }
  common::LogLine("gateway") << "request " << (request_id.empty() ? "-" : request_id) << ": "
                             << (status.ok() ? "OK" : status.ToString());
}

}  // namespace

uint64_t DrawSeed() {
  thread_local absl::BitGen gen;
  return absl::Uniform<uint64_t>(gen);
}

absl::Status AssignRequestId(grpc::CallbackServerContext& ctx, ValidatedRequest& request) {
  if (request.request_id.empty()) {
    const auto& metadata = ctx.client_metadata();
    if (auto it = metadata.find(kRequestIdHeader); it != metadata.end()) {
      const std::string_view id(it->second.data(), it->second.size());
      RETURN_IF_ERROR(ValidateRequestId(id, kRequestIdHeader));
      request.request_id = std::string(id);
    }
  }
  if (request.request_id.empty()) request.request_id = NewRequestId();
  ctx.AddInitialMetadata(kRequestIdHeader, request.request_id);
  return absl::OkStatus();
}

void GenerateCall::Begin(absl::StatusOr<ValidatedRequest> request, SessionTurn turn) {
  Next next;
  bool admitted = false;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kOpened) return;  // the client went away first
    turn_ = std::move(turn);
    if (request.ok()) {
      // Filled in here, once for Generate and Chat alike.
      if (absl::Status id = AssignRequestId(*ctx_, *request); !id.ok()) request = id;
    }
    if (request.ok() && !request->seed_given) request->sampling.seed = DrawSeed();
    if (!request.ok()) {
      next = End(request.status());
    } else {
      request_ = std::move(*request);
      // First come, first served: while others wait, this one waits behind
      // them even if it would fit now.
      const bool others_wait =
          env_.admission_queue != nullptr && env_.admission_queue->depth() > 0;
      absl::Status short_of =
          others_wait ? absl::ResourceExhaustedError("admission queue: requests wait ahead")
                      : TryAdmit();
      if (short_of.ok()) {
        SetUp();
        admitted = true;
      } else {
        next = Enqueue(std::move(short_of));
      }
    }
  }
  if (admitted) {
    Start();
  } else {
    Run(std::move(next));
  }
}

void GenerateCall::StartPrefill() {
  PrefillAttempt* attempt = nullptr;
  Next next;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;
    // From Begin, a retry, a migration, or a local prefill that cannot run.
    Transition(Phase::kPrefilling);
    auto route_among = [&](const std::vector<int>& exclude) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (env_.prefill_router != nullptr) {
        return env_.prefill_router->Route(*env_.prefill, request_.prompt_ids, exclude,
                                          request_.cache_salt);
      }
      RouteDecision r;
      r.pick = env_.prefill->Acquire(exclude, static_cast<int64_t>(request_.prompt_ids.size()));
      return r;
    };
    RouteDecision route;
    // Another worker than the one a decode worker could not reach, if any
    // can take it; that one otherwise (and at once when it is the only one:
    // a second routing would hash the prompt and count a decision twice).
    if (avoid_prefill_ >= 0 &&
        static_cast<size_t>(env_.prefill->size()) > tried_.size() + 1) {
      std::vector<int> exclude = tried_;
      exclude.push_back(avoid_prefill_);
      route = route_among(exclude);
    }
    avoid_prefill_ = -1;
    if (!route.pick.valid()) route = route_among(tried_);
    WorkerPicker::Pick pick = std::move(route.pick);
    // Another worker holds more of the prefix: the chosen one pulls it. A
    // resumed stream (tokens generated before a migration) computes what its
    // worker lacks instead: the engine imports a pulled prefix only under a
    // fresh prompt.
    // Prompt logprobs need the whole prompt computed where they are asked.
    const bool resumed = prefill_request_.generated_token_ids_size() > 0 ||
                         prefill_request_.has_prompt_logprobs();
    prefill_request_.set_prefix_holder(resumed ? "" : route.pull_from);
    prefill_request_.set_prefix_blocks(resumed ? 0 : route.pull_blocks);
    // A session's decode worker holding more of the prompt than any
    // prefill worker: the chosen one takes the session's blocks from it.
    if (!resumed && turn_.holder_blocks > std::max(route.overlap_blocks, route.pull_blocks)) {
      prefill_request_.set_prefix_holder(turn_.kv_holder);
      prefill_request_.set_prefix_blocks(turn_.holder_blocks);
    }
    if (!pick.valid()) {
      next = End(tried_.empty()
                     ? absl::UnavailableError("prefill: no prefill worker is available")
                     : last_prefill_error_);
    } else {
      tried_.push_back(pick.index());
      prefill_index_ = pick.index();
      prefill_address_ = pick.address();
      prefill_pick_ = std::move(pick);
      prefill_ctx_ = ChildContext();
      ++prefill_attempt_no_;
      // A draft model's KV for the prompt (workers with one compute it with
      // the model's) only where decode will propose with it: a request that
      // asks for the draft, or names no method while the decode workers
      // have room to propose for it. Otherwise a decode worker that does
      // propose later computes it itself (DecodeRequest.draft_kv_tokens).
      const engine::Speculation method = request_.sampling.speculation;
      const bool draft_kv =
          method == engine::Speculation::kDraft ||
          (method == engine::Speculation::kDefault &&
           (env_.decode_wants_draft_kv == nullptr || env_.decode_wants_draft_kv()));
      prefill_request_.set_skip_draft_kv(!draft_kv);
      prefill_attempt_ = attempt =
          new PrefillAttempt(shared_from_this(), prefill_ctx_,
                             env_.channels->Get(prefill_address_), prefill_request_);
      ArmPrefillProbe();
    }
  }
  if (attempt == nullptr) {
    Run(std::move(next));
    return;
  }
  attempt->Start();
}

void GenerateCall::ArmPrefillProbe() {
  if (env_.progress_timeout <= absl::ZeroDuration() ||
      env_.progress_floor <= absl::ZeroDuration()) {
    return;
  }
  prefill_probe_alarm_ = std::make_unique<grpc::Alarm>();
  // Weak, as the other alarms: the server call keeps this object alive.
  std::weak_ptr<GenerateCall> weak = weak_from_this();
  const int64_t attempt = prefill_attempt_no_;
  prefill_probe_alarm_->Set(absl::ToChronoTime(absl::Now() + env_.progress_floor / 2),
                            [weak, attempt](bool ok) {
                              if (std::shared_ptr<GenerateCall> self = weak.lock();
                                  ok && self != nullptr) {
                                self->ProbePrefill(attempt);
                              }
                            });
}

void GenerateCall::ProbePrefill(int64_t attempt) {
  struct Probe {
    grpc::ClientContext ctx;
    tandem::v1::WorkerStatsRequest request;
    tandem::v1::WorkerStats response;
    std::unique_ptr<tandem::v1::Prefill::Stub> stub;
  };
  auto probe = std::make_shared<Probe>();
  {
    absl::MutexLock lock(&mu_);
    if (attempt != prefill_attempt_no_ || prefill_attempt_ == nullptr || Ended()) return;
    probe->ctx.set_deadline(absl::ToChronoTime(absl::Now() + env_.progress_floor));
    probe->stub = tandem::v1::Prefill::NewStub(env_.channels->Get(prefill_address_));
  }
  std::weak_ptr<GenerateCall> weak = weak_from_this();
  Probe* p = probe.get();
  p->stub->async()->GetWorkerStats(&p->ctx, &p->request, &p->response,
                                   [weak, attempt, probe](grpc::Status status) {
                                     if (std::shared_ptr<GenerateCall> self = weak.lock()) {
                                       self->OnPrefillProbe(attempt, status);
                                     }
                                   });
}

void GenerateCall::OnPrefillProbe(int64_t attempt, const grpc::Status& status) {
  std::shared_ptr<grpc::ClientContext> stalled;
  {
    absl::MutexLock lock(&mu_);
    if (attempt != prefill_attempt_no_ || prefill_attempt_ == nullptr || Ended()) return;
    if (status.ok()) {
      ArmPrefillProbe();
    } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
               status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // Not answered: the worker is stopped or cut off (the keepalive would
      // take its 5 to 15 s to say so).
      prefill_stalled_ = true;
      env_.metrics->progress_timeouts.Increment();
      stalled = prefill_ctx_;
    }
    // Any other answer (a worker without the method) came from a live
    // worker: no more probes for this attempt.
  }
  if (stalled != nullptr) stalled->TryCancel();  // OnPrefillDone follows
}

void GenerateCall::OnPrefillDone(const grpc::Status& result,
                                 const tandem::v1::PrefillResponse& response) {
  Next next;
  bool retry = false;
  int suspect = -1;  // a prefill worker whose call failed as a lost worker's do
  {
    absl::MutexLock lock(&mu_);
    // A result that raced the probe's cancellation stands.
    const grpc::Status status =
        prefill_stalled_ && !result.ok()
            ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                           absl::StrCat("the prefill worker at ", prefill_address_,
                                        " did not answer a probe within ",
                                        absl::FormatDuration(env_.progress_floor)))
            : result;
    prefill_stalled_ = false;
    prefill_ctx_.reset();
    prefill_probe_alarm_.reset();
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) suspect = prefill_index_;
    prefill_attempt_ = nullptr;
    prefill_pick_ = WorkerPicker::Pick();
    if (status.ok()) prefill_ = response;
    if (Ended()) {
      // The client went away while the prefill ran: its blocks are nobody's.
      if (status.ok()) {
        env_.releases->Release(prefill_address_, prefill_.lease_id(),
                               absl::CancelledError("the client went away"));
      }
      return;
    }
    if (status.ok()) {
      Transition(Phase::kHandingOff);
      ticket_.DoneQueuing();
      NotifyQueue();
      lease_ = Lease::kHeld;
      keep_lease_ = env_.lease_keeper->Keep(prefill_address_, prefill_.lease_id());
      if (migrations_ == 0) {  // the request's own prefill, not a resumption's
        usage_.set_queue_seconds(prefill_.queue_seconds());
        usage_.set_prefill_seconds(prefill_.prefill_seconds());
        usage_.set_cached_prompt_tokens(prefill_.cached_prompt_tokens());
        env_.metrics->queue_time.Observe(prefill_.queue_seconds());
        for (const tandem::v1::SampledTokenProto& t : prefill_.prompt_logprobs()) {
          tandem::v1::Token token = PublicToken(*env_.tokenizer, t);
          token.set_text(SanitizeUtf8(token.raw()));
          prompt_tokens_.push_back(std::move(token));
        }
      }
      generated_ids_.push_back(prefill_.first_token().id());
      std::vector<tandem::v1::Token> out;
      const bool done = emitter_->Push(prefill_.first_token(), &out);
      next.write = Prepare(out);
      if (done) {
        Next end = Complete();
        next.finish = end.finish;
        next.status = end.status;
        next.commit = end.commit;
      } else if (!next.write) {
        next.decode = true;  // the first token's text is held back
      }
    } else if (Retryable(status) && !cancelled_ &&
               tried_.size() < static_cast<size_t>(env_.prefill->size())) {
      env_.metrics->prefill_retries.Increment();
      last_prefill_error_ = rpc::FromGrpcStatus(status, "prefill");
      retry = true;
    } else if (!cancelled_ && ((status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                                waited_ < env_.unavailable_wait) ||
                               ResumedStreamMayWaitForRoom(status))) {
      // Every worker tried is down (restarting, say): wait, then try them
      // all again, up to unavailable_wait in all. A migrated stream, whose
      // client has tokens already, waits for a full worker's room as long
      // as its deadline allows: a refusal now would come after its first
      // token.
      env_.metrics->prefill_retries.Increment();
      last_prefill_error_ = rpc::FromGrpcStatus(status, "prefill");
      absl::Duration pause = NextWaitPause();
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        pause = std::min(pause, env_.unavailable_wait - waited_);
      }
      waited_ += pause;
      ArmRetryAlarm(absl::Now() + pause, &GenerateCall::RetryRound);
    } else {
      next = End(rpc::FromGrpcStatus(status, "prefill"));
    }
  }
  if (suspect >= 0 && env_.suspect) env_.suspect(WorkerRole::kPrefill, suspect);
  if (retry) {
    StartPrefill();
  } else {
    Run(std::move(next));
  }
}

absl::Duration GenerateCall::WaitPause(int round) {
  return absl::Milliseconds(100) * (1 << std::min(round - 1, 4));
}

absl::Duration GenerateCall::NextWaitPause() { return WaitPause(++wait_rounds_); }

void GenerateCall::ArmRetryAlarm(absl::Time at, void (GenerateCall::*retry)()) {
  retry_alarm_ = std::make_unique<grpc::Alarm>();
  // Weak: the alarm, a member, keeps its callback; the server call keeps
  // this object alive while it waits.
  std::weak_ptr<GenerateCall> weak = weak_from_this();
  retry_alarm_->Set(absl::ToChronoTime(at), [weak, retry](bool ok) {
    if (std::shared_ptr<GenerateCall> self = weak.lock(); ok && self != nullptr) {
      (self.get()->*retry)();
    }
  });
}

bool GenerateCall::ResumedStreamMayWaitForRoom(const grpc::Status& status) const {
  if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED || !sent_first_) return false;
  const absl::Duration next = WaitPause(wait_rounds_ + 1);
  const absl::Time deadline =
      std::min(absl::FromChrono(ctx_->deadline()), start_ + env_.request_timeout);
  return absl::Now() + next < deadline;
}

void GenerateCall::RetryRound() {
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;
    tried_.clear();
  }
  StartPrefill();
}

void GenerateCall::OnWriteDone(bool ok) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (phase_ == Phase::kEnding) {
      Transition(Phase::kFinished);
      next.finish = true;
      next.status = end_status_;
    } else if (!ok) {
      next = End(absl::CancelledError("the client went away"));
    } else if (phase_ == Phase::kMigrating) {
      next.prefill = true;  // the resumed prefill waited for this write
    } else if (phase_ == Phase::kHandingOff) {
      next.decode = true;  // the first token is out
    } else {
      // kDecoding: a write is outstanding in no other phase (a session's
      // last message is written only once its commit ended the call).
      next.read = true;
      AwaitDecodeMessage();
    }
  }
  Run(std::move(next));
}

void GenerateCall::OnCancel() {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (queue_id_ != 0) env_.admission_queue->Cancel(queue_id_);
    queue_id_ = 0;
    if (prefill_attempt_ != nullptr) prefill_attempt_->Cancel();
    if (retry_alarm_ != nullptr) retry_alarm_->Cancel();
    // Counted as the client saw it: a deadline that passed is not a cancel.
    next = End(absl::FromChrono(ctx_->deadline()) <= absl::Now()
                   ? absl::DeadlineExceededError("the request's deadline passed")
                   : absl::CancelledError("the client cancelled"));
  }
  Run(std::move(next));
}

void GenerateCall::OnDone() { self_.reset(); }

void GenerateCall::Run(Next next) {
  DecodeRelay* relay = nullptr;
  if (next.read) {
    absl::MutexLock lock(&mu_);
    relay = relay_;
  }
  if (next.write) StartWrite(&write_buffer_);
  if (next.finish) Finish(rpc::ToGrpcStatus(next.status));
  if (relay != nullptr) relay->Read();
  if (next.decode) StartDecode();
  if (next.prefill) Resume();
  if (next.commit) Commit();
}

void GenerateCall::Transition(Phase to) {
  TANDEM_CHECK(IsLegalTransition(phase_, to), "GenerateCall phase change not in call_phase.h")
      << CallPhaseName(phase_) << " -> " << CallPhaseName(to);
  phase_ = to;
}

GenerateCall::Next GenerateCall::Complete() {
  if (!turn_.commit) return End(absl::OkStatus());
  Next next;
  Transition(Phase::kCommitting);
  // A decode call still producing (a stop string matched) is stopped; its
  // worker keeps the KV computed so far for the session.
  if (relay_ != nullptr && !decode_finishing_) relay_->Cancel();
  next.commit = true;
  return next;
}

void GenerateCall::Commit() {
  std::string reply, address;
  std::vector<int32_t> reply_ids;
  SessionTurn::Commit commit;
  {
    absl::MutexLock lock(&mu_);
    reply = reply_;
    reply_ids = reply_ids_;
    address = decode_address_;
    commit = turn_.commit;
  }
  commit(std::move(reply), std::move(reply_ids), std::move(address),
               [self = shared_from_this()](absl::Status status, tandem::v1::Usage usage) {
                 self->OnCommitted(std::move(status), usage);
               });
}

void GenerateCall::OnCommitted(absl::Status status, const tandem::v1::Usage& usage) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;  // the client went away meanwhile
    if (status.ok()) {
      usage_.MergeFrom(usage);
      std::vector<tandem::v1::Token> out = std::move(final_tokens_);
      next.write = Prepare(out);
    }
    Next end = End(std::move(status));
    next.finish = end.finish;
    next.status = end.status;
  }
  Run(std::move(next));
}

bool GenerateCall::Prepare(std::vector<tandem::v1::Token>& tokens) {
  // A session turn's text is collected and its last message held back for
  // the commit; in kCommitting that message is what goes out.
  if (turn_.commit && phase_ != Phase::kCommitting) {
    for (const tandem::v1::Token& t : tokens) {
      reply_ += t.text();
      reply_ids_.push_back(t.id());
    }
    if (emitter_->finished()) {
      // The last message waits for the turn's commit (OnCommitted).
      for (tandem::v1::Token& t : tokens) final_tokens_.push_back(std::move(t));
      return false;
    }
  }
  if (tokens.empty() && !emitter_->finished()) return false;
  response_.Clear();
  if (!sent_first_) {
    sent_first_ = true;
    response_.set_seed(request_.sampling.seed);
    response_.set_request_id(request_.request_id);
    for (tandem::v1::Token& t : prompt_tokens_) *response_.add_prompt_logprobs() = std::move(t);
    prompt_tokens_.clear();
  }
  const absl::Time now = absl::Now();
  for (tandem::v1::Token& t : tokens) *response_.add_tokens() = std::move(t);
  if (!tokens.empty()) {
    if (last_token_ == absl::InfinitePast()) {
      env_.metrics->time_to_first_token.Observe(absl::ToDoubleSeconds(now - start_));
    } else {
      const double gap = absl::ToDoubleSeconds(now - last_token_) / tokens.size();
      for (size_t i = 0; i < tokens.size(); ++i) env_.metrics->inter_token_latency.Observe(gap);
    }
    last_token_ = now;
    env_.metrics->generated_tokens.Increment(static_cast<double>(tokens.size()));
  }
  if (emitter_->finished()) {
    response_.set_finish_reason(emitter_->finish_reason());
    usage_.set_completion_tokens(emitter_->completion_tokens());
    *response_.mutable_usage() = usage_;
  }
  write_buffer_ = rpc::SerializeMessage(response_);
  writing_ = true;
  return true;
}

GenerateCall::Next GenerateCall::End(absl::Status status) {
  Next next;
  if (Ended()) return next;
  Transition(Phase::kEnding);
  end_status_ = status;
  // The decode worker releases a lease it fetched; any other end after
  // prefill leaves the lease to us.
  if (lease_ == Lease::kHeld || (lease_ == Lease::kHandedOff && !status.ok())) {
    env_.releases->Release(prefill_address_, prefill_.lease_id(), status);
  }
  lease_ = Lease::kNone;
  keep_lease_.Reset();
  // A decode call still producing is stopped (a stop string matched, the
  // client went away); one that sent its finish ends by itself.
  if (relay_ != nullptr && !decode_finishing_) relay_->Cancel();
  if (status.ok()) env_.metrics->e2e_latency.Observe(absl::ToDoubleSeconds(absl::Now() - start_));
  LogEnd(request_.request_id, status);
  env_.metrics->requests
      .Add({{"method", turn_.commit ? "Chat" : "Generate"},
            {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
  const bool held = ticket_.valid();
  ticket_ = rpc::Admission::Ticket();
  kv_ticket_.Reset();
  if (held) NotifyQueue();
  if (!writing_) {
    Transition(Phase::kFinished);
    next.finish = true;
    next.status = std::move(status);
  }
  return next;
}

std::unique_ptr<grpc::ClientContext> GenerateCall::ChildContext() const {
  // The deadline is inherited; cancellation is not: the client's call ends
  // as soon as its last message is out, which would cancel a Decode call
  // whose worker has sent its finish but not yet its status (the worker
  // then counts a cancel). A client's cancel and an early end cancel their
  // worker calls themselves (OnCancel, End).
  grpc::PropagationOptions propagation;
  propagation.disable_cancellation_propagation();
  std::unique_ptr<grpc::ClientContext> cctx =
      grpc::ClientContext::FromCallbackServerContext(*ctx_, propagation);
  const auto cap = absl::ToChronoTime(start_ + env_.request_timeout);
  if (cctx->deadline() > cap) cctx->set_deadline(cap);
  return cctx;
}

}  // namespace tandem::gateway
