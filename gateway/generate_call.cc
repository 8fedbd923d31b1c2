#include "gateway/generate_call.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
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

// A decode stream that ended this way failed with its worker (or its
// hand-off), not with the request: another worker may carry it on.
// Cancellation, deadlines and refusals of the request itself are final.
bool Migratable(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::NOT_FOUND:  // the lease's worker restarted
      return true;
    default:
      return false;
  }
}

// The index of the decode worker at `address`, or -1 (none named, or gone).
int HolderIndex(const WorkerPicker& picker, const std::string& address) {
  if (address.empty()) return -1;
  for (int i = 0; i < picker.size(); ++i) {
    if (picker.active(i) && picker.address(i) == address) return i;
  }
  return -1;
}

}  // namespace

// One Prefill call of a request (a retry is a new attempt). Owns its context
// and answer, deletes itself in OnDone, and keeps the GenerateCall alive
// until then: a call's context is destroyed by the reactor that ran it, never
// from inside a completion callback of its own.
class GenerateCall::PrefillAttempt final : public grpc::ClientUnaryReactor {
 public:
  PrefillAttempt(std::shared_ptr<GenerateCall> call, std::unique_ptr<grpc::ClientContext> ctx,
                 std::shared_ptr<grpc::Channel> channel, tandem::v1::PrefillRequest request)
      : call_(std::move(call)),
        ctx_(std::move(ctx)),
        stub_(tandem::v1::Prefill::NewStub(channel)),
        request_(std::move(request)) {}

  void Start() {
    stub_->async()->Prefill(ctx_.get(), &request_, &response_, this);
    StartCall();
  }
  void Cancel() { ctx_->TryCancel(); }
  void OnDone(const grpc::Status& status) override {
    call_->OnPrefillDone(status, response_);
    delete this;
  }

 private:
  std::shared_ptr<GenerateCall> call_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<tandem::v1::Prefill::Stub> stub_;
  tandem::v1::PrefillRequest request_;
  tandem::v1::PrefillResponse response_;
};

// The Decode call of one request: reads one message at a time when the
// GenerateCall asks (after the client took the previous one) and hands it
// over. Owns itself until OnDone; keeps the GenerateCall alive until then.
class GenerateCall::DecodeRelay final
    : public grpc::ClientReadReactor<tandem::v1::DecodeResponse> {
 public:
  DecodeRelay(std::shared_ptr<GenerateCall> call, std::unique_ptr<grpc::ClientContext> ctx,
              std::shared_ptr<grpc::Channel> channel, tandem::v1::DecodeRequest request)
      : call_(std::move(call)),
        ctx_(std::move(ctx)),
        stub_(tandem::v1::Decode::NewStub(channel)),
        request_(std::move(request)) {}

  void Start() {
    stub_->async()->Decode(ctx_.get(), &request_, this);
    StartRead(&message_);
    StartCall();
  }
  void Read() { StartRead(&message_); }
  void Cancel() { ctx_->TryCancel(); }

  void OnReadDone(bool ok) override {
    if (ok) call_->OnDecodeMessage(message_);  // else OnDone follows
  }
  void OnDone(const grpc::Status& status) override {
    call_->OnDecodeDone(status);
    delete this;
  }

 private:
  std::shared_ptr<GenerateCall> call_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<tandem::v1::Decode::Stub> stub_;
  tandem::v1::DecodeRequest request_;
  tandem::v1::DecodeResponse message_;
};

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

void GenerateCall::Begin(absl::StatusOr<ValidatedRequest> request, SessionTurn turn) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    if (ending_) return;  // the client went away first
    turn_ = std::move(turn);
    if (!request.ok()) {
      next = End(request.status());
    } else {
      const int64_t prompt_tokens = static_cast<int64_t>(request->prompt_ids.size());
      absl::StatusOr<rpc::Admission::Ticket> ticket = env_.admission->TryAdmit(prompt_tokens);
      // Every request in flight holds (or will hold) a decode stream.
      if (ticket.ok() && env_.decode_capacity &&
          env_.admission->in_flight() > env_.decode_capacity()) {
        ticket = absl::ResourceExhaustedError(absl::StrCat(
            "decode capacity: ", env_.decode_capacity(),
            " streams are in flight on the decode workers; retry later"));
      }
      if (ticket.ok()) {
        // The most KV its decode worker will hold for it.
        absl::StatusOr<KvBudget::Ticket> kv =
            env_.kv_budget->TryCharge(prompt_tokens + request->max_tokens);
        if (kv.ok()) {
          kv_ticket_ = std::move(*kv);
        } else {
          ticket = kv.status();
        }
      }
      if (!ticket.ok()) {
        rpc::AddRetryHint(*ctx_, env_.admission->retry_after());
        next = End(ticket.status());
      } else {
        ticket_ = std::move(*ticket);
        request_ = std::move(*request);
        usage_.set_prompt_tokens(static_cast<int32_t>(prompt_tokens));
        env_.metrics->prompt_tokens.Increment(static_cast<double>(prompt_tokens));
        emitter_ = std::make_unique<TokenEmitter>(
            *env_.tokenizer, EmitterOptions{.max_tokens = request_.max_tokens,
                                            .ignore_eos = request_.ignore_eos,
                                            .stop = request_.stop});
        prefill_request_.mutable_prompt_token_ids()->Assign(request_.prompt_ids.begin(),
                                                            request_.prompt_ids.end());
        rpc::SamplingToProto(request_.sampling, prefill_request_.mutable_sampling());
        prefill_request_.set_top_logprobs(request_.top_logprobs);
      }
    }
  }
  bool local = false;
  if (!next.finish) {
    absl::MutexLock lock(&mu_);
    local = turn_.local_prefill;
  }
  if (next.finish) {
    Run(std::move(next));
  } else if (local) {
    StartDecode();
  } else {
    StartPrefill();
  }
}

void GenerateCall::StartPrefill() {
  PrefillAttempt* attempt = nullptr;
  Next next;
  {
    absl::MutexLock lock(&mu_);
    if (ending_) return;
    RouteDecision route;
    if (env_.prefill_router != nullptr) {
      route = env_.prefill_router->Route(*env_.prefill, request_.prompt_ids, tried_);
    } else {
      route.pick =
          env_.prefill->Acquire(tried_, static_cast<int64_t>(request_.prompt_ids.size()));
    }
    WorkerPicker::Pick pick = std::move(route.pick);
    // Another worker holds more of the prefix: the chosen one pulls it. A
    // resumed stream (tokens generated before a migration) computes what its
    // worker lacks instead: the engine imports a pulled prefix only under a
    // fresh prompt.
    const bool resumed = prefill_request_.generated_token_ids_size() > 0;
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
      prefill_address_ = pick.address();
      prefill_pick_ = std::move(pick);
      prefill_attempt_ = attempt =
          new PrefillAttempt(shared_from_this(), ChildContext(),
                             env_.channels->Get(prefill_address_), prefill_request_);
    }
  }
  if (attempt == nullptr) {
    Run(std::move(next));
    return;
  }
  attempt->Start();
}

void GenerateCall::OnPrefillDone(const grpc::Status& status,
                                 const tandem::v1::PrefillResponse& response) {
  Next next;
  bool retry = false;
  {
    absl::MutexLock lock(&mu_);
    prefill_attempt_ = nullptr;
    prefill_pick_ = WorkerPicker::Pick();
    if (status.ok()) prefill_ = response;
    if (ending_) {
      // The client went away while the prefill ran: its blocks are nobody's.
      if (status.ok()) {
        env_.releases->Release(prefill_address_, prefill_.lease_id(),
                               absl::CancelledError("the client went away"));
      }
      return;
    }
    if (status.ok()) {
      ticket_.DoneQueuing();
      lease_held_ = true;
      keep_lease_ = env_.lease_keeper->Keep(prefill_address_, prefill_.lease_id());
      if (migrations_ == 0) {  // the request's own prefill, not a resumption's
        usage_.set_queue_seconds(prefill_.queue_seconds());
        usage_.set_prefill_seconds(prefill_.prefill_seconds());
        usage_.set_cached_prompt_tokens(prefill_.cached_prompt_tokens());
        env_.metrics->queue_time.Observe(prefill_.queue_seconds());
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
    } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !cancelled_ &&
               waited_ < env_.unavailable_wait) {
      // Every worker tried is down (restarting, say): wait, then try them
      // all again, up to unavailable_wait in all.
      env_.metrics->prefill_retries.Increment();
      last_prefill_error_ = rpc::FromGrpcStatus(status, "prefill");
      // 100 ms, doubling to 1.6 s.
      ++wait_rounds_;
      const absl::Duration pause =
          std::min(absl::Milliseconds(100) * (1 << std::min(wait_rounds_ - 1, 4)),
                   env_.unavailable_wait - waited_);
      waited_ += pause;
      retry_alarm_ = std::make_unique<grpc::Alarm>();
      // Weak: the alarm, a member, keeps its callback; the server call keeps
      // this object alive while it waits.
      std::weak_ptr<GenerateCall> weak = weak_from_this();
      retry_alarm_->Set(absl::ToChronoTime(absl::Now() + pause), [weak](bool ok) {
        if (std::shared_ptr<GenerateCall> self = weak.lock(); ok && self != nullptr) {
          self->RetryRound();
        }
      });
    } else {
      next = End(rpc::FromGrpcStatus(status, "prefill"));
    }
  }
  if (retry) {
    StartPrefill();
  } else {
    Run(std::move(next));
  }
}

void GenerateCall::RetryRound() {
  {
    absl::MutexLock lock(&mu_);
    if (ending_) return;
    tried_.clear();
  }
  StartPrefill();
}

void GenerateCall::StartDecode() {
  DecodeRelay* relay = nullptr;
  Next next;
  bool fall_back = false;  // to a prefill worker, when a local prefill cannot run
  {
    absl::MutexLock lock(&mu_);
    if (ending_) return;
    // A decode worker holding the prompt's leading blocks fetches only the
    // rest (delta transfer), so decode is routed on overlap and load too.
    auto pick = [&](const std::vector<int>& exclude) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      // A session's turn goes where its KV is kept while that worker is
      // reachable (one that is not is picked only when no other is left).
      const int holder = HolderIndex(*env_.decode, turn_.kv_holder);
      if (holder >= 0 && std::find(exclude.begin(), exclude.end(), holder) == exclude.end()) {
        return env_.decode->Acquire(exclude, 0, [holder](int i, const WorkerPicker::Load& l) {
          return i == holder ? -1.0 : static_cast<double>(l.in_flight);
        });
      }
      return env_.decode_router != nullptr
                 ? env_.decode_router->Route(*env_.decode, request_.prompt_ids, exclude).pick
                 : env_.decode->Acquire(exclude);
    };
    // A local prefill runs on the session's KV holder or not at all.
    local_ = turn_.local_prefill && migrations_ == 0 && prefill_.lease_id().empty();
    decode_pick_ = pick(decode_tried_);
    // Every decode worker failed once: one may be back.
    if (!decode_pick_.valid() && !decode_tried_.empty()) decode_pick_ = pick({});
    if (local_ && (!decode_pick_.valid() || decode_pick_.address() != turn_.kv_holder)) {
      decode_pick_ = WorkerPicker::Pick();
      local_ = false;
      turn_.local_prefill = false;
      fall_back = true;
    } else if (!decode_pick_.valid()) {
      next = End(absl::UnavailableError("decode: no decode worker is available"));
    } else {
      tandem::v1::DecodeRequest req;
      req.mutable_prompt_token_ids()->Assign(request_.prompt_ids.begin(),
                                             request_.prompt_ids.end());
      if (local_) env_.metrics->local_prefills.Increment();
      if (!local_) *req.mutable_first_token() = prefill_.first_token();
      rpc::SamplingToProto(request_.sampling, req.mutable_sampling());
      req.set_max_tokens(request_.max_tokens);
      req.set_top_logprobs(request_.top_logprobs);
      // Stop strings and EOS are judged here, on text; the worker stops at
      // EOS too unless told to ignore it.
      req.set_ignore_eos(request_.ignore_eos);
      if (!local_) {
        req.set_prefill_address(prefill_address_);
        req.set_lease_id(prefill_.lease_id());
        req.set_num_blocks(prefill_.num_blocks());
        *req.mutable_block_hashes() = prefill_.block_hashes();
      }
      *req.mutable_generated_token_ids() = prefill_request_.generated_token_ids();
      req.set_session_id(turn_.session_id);
      req.set_private_kv(turn_.private_kv);
      req.set_shift_from(turn_.shift_from);
      req.set_shift_count(turn_.shift_count);
      req.set_roll_window(turn_.roll_window);
      req.set_roll_keep(turn_.roll_keep);
      decode_started_ = true;
      decode_address_ = decode_pick_.address();
      relay_ = relay = new DecodeRelay(shared_from_this(), ChildContext(),
                                       env_.channels->Get(decode_pick_.address()),
                                       std::move(req));
      AwaitDecodeMessage();
    }
  }
  if (relay != nullptr) {
    relay->Start();
  } else if (fall_back) {
    StartPrefill();
  } else {
    Run(std::move(next));
  }
}

void GenerateCall::OnDecodeMessage(const tandem::v1::DecodeResponse& message) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    // The relay is being cancelled, or the reply is complete.
    if (ending_ || decode_stalled_ || committing_ || committed_) return;
    awaiting_decode_ = false;
    keep_lease_.Reset();  // the decode worker fetched the blocks
    if (!got_decode_message_) {
      got_decode_message_ = true;
      usage_.set_kv_transfer_seconds(message.kv_transfer_seconds());
      usage_.set_first_decode_seconds(message.first_decode_seconds());
      if (local_ && migrations_ == 0) {
        // The decode worker prefilled the prompt: its first message holds
        // the first token.
        ticket_.DoneQueuing();
        usage_.set_prefill_seconds(message.first_decode_seconds());
        usage_.set_cached_prompt_tokens(message.cached_prompt_tokens());
      }
    }
    std::vector<tandem::v1::Token> out;
    for (const tandem::v1::SampledTokenProto& t : message.tokens()) {
      generated_ids_.push_back(t.id());
      if (emitter_->Push(t, &out)) break;
    }
    // The worker ends its call after this message by itself.
    decode_finishing_ = message.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED;
    if (!emitter_->finished() &&
        message.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      emitter_->Finish(message.finish_reason(), &out);
    }
    next.write = Prepare(out);
    if (emitter_->finished()) {
      // Done here (e.g. a stop string matched): stop the decode worker.
      Next end = Complete();
      next.finish = end.finish;
      next.status = end.status;
      next.commit = end.commit;
    } else if (!next.write) {
      next.read = true;
      AwaitDecodeMessage();
    }
  }
  Run(std::move(next));
}

void GenerateCall::AwaitDecodeMessage() {
  awaiting_decode_ = true;
  awaiting_since_ = absl::Now();
  if (env_.progress_timeout > absl::ZeroDuration() && !progress_alarm_set_) {
    ArmProgressAlarm(awaiting_since_ + env_.progress_timeout);
  }
}

void GenerateCall::ArmProgressAlarm(absl::Time at) {
  progress_alarm_set_ = true;
  progress_alarm_ = std::make_unique<grpc::Alarm>();
  // Weak, as the retry alarm's: the server call keeps this object alive.
  std::weak_ptr<GenerateCall> weak = weak_from_this();
  progress_alarm_->Set(absl::ToChronoTime(at), [weak](bool ok) {
    if (std::shared_ptr<GenerateCall> self = weak.lock(); ok && self != nullptr) {
      self->CheckProgress();
    }
  });
}

void GenerateCall::CheckProgress() {
  DecodeRelay* stalled = nullptr;
  {
    absl::MutexLock lock(&mu_);
    progress_alarm_set_ = false;
    if (ending_ || relay_ == nullptr || !awaiting_decode_) return;  // set again on the next read
    const absl::Time due = awaiting_since_ + env_.progress_timeout;
    if (absl::Now() < due) {
      ArmProgressAlarm(due);
      return;
    }
    // The worker is alive enough to hold the call open but makes no
    // progress (its engine is stuck, or its process stopped before the
    // keepalive noticed): it is treated as failed.
    decode_stalled_ = true;
    env_.metrics->progress_timeouts.Increment();
    stalled = relay_;
  }
  stalled->Cancel();  // OnDecodeDone follows and migrates the stream
}

void GenerateCall::OnDecodeDone(const grpc::Status& result) {
  Next next;
  bool migrate = false;
  {
    absl::MutexLock lock(&mu_);
    relay_ = nullptr;
    awaiting_decode_ = false;
    keep_lease_.Reset();
    const int failed = decode_pick_.index();
    decode_pick_ = WorkerPicker::Pick();
    if (ending_ || committing_ || committed_) return;
    const grpc::Status status =
        decode_stalled_
            ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                           absl::StrCat("the decode worker made no progress in ",
                                        absl::FormatDuration(env_.progress_timeout)))
            : result;
    decode_stalled_ = false;
    if (status.ok()) {
      next = End(absl::InternalError("decode: the stream ended without a finish reason"));
    } else if (Migratable(status) && !cancelled_ && migrations_ < env_.max_migrations) {
      // Resume elsewhere from everything produced so far: prefilled again
      // (the prompt's blocks are likely cached), decoded on another worker.
      ++migrations_;
      usage_.set_migrations(migrations_);
      env_.metrics->migrations.Increment();
      if (failed >= 0) decode_tried_.push_back(failed);
      // The old lease is of no use now (the worker may have died before it
      // fetched or released it; releasing twice is harmless). A local
      // prefill had none.
      if (!local_) {
        env_.releases->Release(prefill_address_, prefill_.lease_id(),
                               rpc::FromGrpcStatus(status, "decode"));
      }
      local_ = false;
      lease_held_ = false;
      decode_started_ = false;
      decode_finishing_ = false;
      tried_.clear();
      last_prefill_error_ = rpc::FromGrpcStatus(status, "decode");
      prefill_request_.mutable_generated_token_ids()->Assign(generated_ids_.begin(),
                                                             generated_ids_.end());
      // The resumed prefill's token is written next: after the client's
      // write in flight, if any (one write outstanding).
      if (writing_) {
        migrate_after_write_ = true;
      } else {
        migrate = true;
      }
    } else {
      next = End(rpc::FromGrpcStatus(status, "decode"));
    }
  }
  if (migrate) {
    StartPrefill();
  } else {
    Run(std::move(next));
  }
}

void GenerateCall::OnWriteDone(bool ok) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (ending_) {
      finished_ = next.finish = true;
      next.status = end_status_;
    } else if (!ok) {
      next = End(absl::CancelledError("the client went away"));
    } else if (migrate_after_write_) {
      migrate_after_write_ = false;
      next.prefill = true;
    } else if (!decode_started_) {
      next.decode = true;  // the first token is out
    } else {
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
  if (next.prefill) StartPrefill();
  if (next.commit) Commit();
}

GenerateCall::Next GenerateCall::Complete() {
  if (!turn_.commit || committed_) return End(absl::OkStatus());
  Next next;
  if (committing_) return next;
  committing_ = true;
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
    committing_ = false;
    committed_ = true;
    if (ending_) return;  // the client went away meanwhile
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
  if (turn_.commit && !committed_) {
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
  if (ending_) return next;
  ending_ = true;
  end_status_ = status;
  // The decode worker releases a lease it fetched; any other end after
  // prefill leaves the lease to us.
  if (lease_held_ && (!status.ok() || !decode_started_)) {
    env_.releases->Release(prefill_address_, prefill_.lease_id(), status);
  }
  lease_held_ = false;
  keep_lease_.Reset();
  // A decode call still producing is stopped (a stop string matched, the
  // client went away); one that sent its finish ends by itself.
  if (relay_ != nullptr && !decode_finishing_) relay_->Cancel();
  if (status.ok()) env_.metrics->e2e_latency.Observe(absl::ToDoubleSeconds(absl::Now() - start_));
  env_.metrics->requests
      .Add({{"method", turn_.commit ? "Chat" : "Generate"},
            {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
  ticket_ = rpc::Admission::Ticket();
  kv_ticket_.Reset();
  if (!writing_) {
    finished_ = next.finish = true;
    next.status = std::move(status);
  }
  return next;
}

std::unique_ptr<grpc::ClientContext> GenerateCall::ChildContext() const {
  std::unique_ptr<grpc::ClientContext> cctx = grpc::ClientContext::FromCallbackServerContext(*ctx_);
  const auto cap = absl::ToChronoTime(start_ + env_.request_timeout);
  if (cctx->deadline() > cap) cctx->set_deadline(cap);
  return cctx;
}

}  // namespace tandem::gateway
