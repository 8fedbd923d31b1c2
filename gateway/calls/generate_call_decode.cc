// GenerateCall's decode phase: the Decode call on the decode worker (the
// session's KV holder first; a local prefill when it computes the prompt
// itself), its messages relayed to the client, the progress deadline, and
// migration to another worker when one fails under the stream.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "gateway/calls/generate_call.h"
#include "gateway/calls/generate_call_children.h"
#include "rpc/convert.h"
#include "rpc/status.h"

namespace tandem::gateway {
namespace {

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

// A decode stream whose worker could not fetch the hand-off's blocks failed
// with the hand-off, whatever code the holder gave (a lease another fetch
// had taken over, blocks of another model): never with the request, unless
// its deadline passed or it was cancelled.
bool MigratableFetchFailure(const grpc::Status& s) {
  return s.error_code() != grpc::StatusCode::CANCELLED &&
         s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
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

void GenerateCall::StartDecode() {
  DecodeRelay* relay = nullptr;
  Next next;
  bool fall_back = false;  // to a prefill worker, when a local prefill cannot run
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;
    // A decode worker holding the prompt's leading blocks fetches only the
    // rest (delta transfer), so decode is routed on overlap and load too.
    int32_t overlap_blocks = 0;  // of the worker picked, as the router saw it
    auto pick = [&](const std::vector<int>& exclude) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      // A session's turn goes where its KV is kept while that worker is
      // reachable (one that is not is picked only when no other is left).
      const int holder = HolderIndex(*env_.decode, turn_.kv_holder);
      if (holder >= 0 && std::find(exclude.begin(), exclude.end(), holder) == exclude.end()) {
        return env_.decode->Acquire(exclude, 0, [holder](int i, const WorkerPicker::Load& l) {
          return i == holder ? -1.0 : static_cast<double>(l.in_flight);
        });
      }
      if (env_.decode_router == nullptr) return env_.decode->Acquire(exclude);
      RouteDecision route = env_.decode_router->Route(*env_.decode, request_.prompt_ids, exclude,
                                                      request_.cache_salt);
      overlap_blocks = route.overlap_blocks;
      return std::move(route.pick);
    };
    // A session turn's local prefill runs on its KV holder or not at all;
    // any other request's on the worker picked, when that one holds enough
    // of its prompt (or always, with no prefill worker).
    local_ = (turn_.local_prefill || may_prefill_on_decode_) && prefill_.lease_id().empty() &&
             (migrations_ == 0 || env_.aggregated);
    // Workers that refused this hand-off for capacity are asked again only
    // after a wait (RetryHandOff).
    // Workers this hand-off could not reach are asked again only after a
    // wait too (RetryUnreached).
    std::vector<int> exclude = decode_tried_;
    exclude.insert(exclude.end(), decode_refused_.begin(), decode_refused_.end());
    exclude.insert(exclude.end(), decode_unreached_.begin(), decode_unreached_.end());
    decode_pick_ = pick(exclude);
    // Every decode worker failed once under this stream: one may be back.
    // But a worker that refused for room is alive: it is waited for (below)
    // rather than one that failed being tried again; and one that could not
    // be reached just now is not tried again before a wait.
    if (!decode_pick_.valid() && !decode_tried_.empty() && decode_refused_.empty()) {
      decode_pick_ = pick(decode_unreached_);
    }
    const bool holder_lost = turn_.local_prefill && !env_.aggregated &&
                             (!decode_pick_.valid() || decode_pick_.address() != turn_.kv_holder);
    const bool to_prefill_worker = local_ && !turn_.local_prefill && decode_pick_.valid() &&
                                   !PrefillOnDecodeWorker(overlap_blocks);
    if (local_ && (holder_lost || to_prefill_worker)) {
      decode_pick_ = WorkerPicker::Pick();
      local_ = false;
      turn_.local_prefill = false;
      may_prefill_on_decode_ = false;
      fall_back = true;
    } else if (!decode_pick_.valid() && !decode_refused_.empty()) {
      next = WaitForDecodeRoom();
    } else if (!decode_pick_.valid() && !decode_unreached_.empty()) {
      next = WaitForDecodeWorker();
    } else if (!decode_pick_.valid()) {
      next = End(absl::UnavailableError("decode: no decode worker is available"));
    } else {
      tandem::v1::DecodeRequest req;
      req.mutable_prompt_token_ids()->Assign(request_.prompt_ids.begin(),
                                             request_.prompt_ids.end());
      if (local_) env_.metrics->local_prefills.Increment();
      if (!local_) *req.mutable_first_token() = prefill_.first_token();
      rpc::SamplingRequestToProto(request_, &req);
      // Prompt logprobs come with the first token: from this worker only
      // when it prefills the request's own prompt.
      if (!local_ || migrations_ > 0) req.clear_prompt_logprobs();
      req.set_max_tokens(request_.max_tokens);
      // Stop strings and EOS are judged here, on text; the worker stops at
      // EOS too unless told to ignore it.
      req.set_ignore_eos(request_.ignore_eos);
      if (!local_) {
        req.set_prefill_address(prefill_address_);
        req.set_lease_id(prefill_.lease_id());
        req.set_num_blocks(prefill_.num_blocks());
        *req.mutable_block_hashes() = prefill_.block_hashes();
        if (prefill_.has_draft_kv_tokens()) req.set_draft_kv_tokens(prefill_.draft_kv_tokens());
      }
      *req.mutable_generated_token_ids() = prefill_request_.generated_token_ids();
      req.set_session_id(turn_.session_id);
      req.set_private_kv(turn_.private_kv);
      req.set_shift_from(turn_.shift_from);
      req.set_shift_count(turn_.shift_count);
      req.set_roll_window(turn_.roll_window);
      req.set_roll_keep(turn_.roll_keep);
      req.set_cache_salt(request_.cache_salt);
      Transition(Phase::kDecoding);  // from kHandingOff, or kOpened / kQueued for a local prefill
      if (lease_ == Lease::kHeld) lease_ = Lease::kHandedOff;
      decode_address_ = decode_pick_.address();
      relay_answered_ = false;
      relay_heard_ = false;
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
    if (phase_ != Phase::kDecoding || decode_stalled_) return;
    awaiting_decode_ = false;
    relay_heard_ = true;
    // The wait for this message sets the worker's pace (and this stream's).
    const absl::Duration gap = absl::Now() - awaiting_since_;
    longest_gap_ = std::max(longest_gap_, gap);
    if (env_.decode_pace != nullptr) env_.decode_pace->Observe(decode_pick_.index(), gap);
    if (message.heartbeat()) {
      // Alive and working (fetching the KV, or in a long step): nothing
      // else changes.
      next.read = true;
      AwaitDecodeMessage();
    } else {
      OnDecodeTokens(message, next);
    }
  }
  Run(std::move(next));
}

void GenerateCall::OnDecodeTokens(const tandem::v1::DecodeResponse& message, Next& next) {
  relay_answered_ = true;
  keep_lease_.Reset();  // the decode worker fetched the blocks
  if (!got_decode_message_) {
    got_decode_message_ = true;
    usage_.set_kv_transfer_seconds(message.kv_transfer_seconds());
    usage_.set_first_decode_seconds(message.first_decode_seconds());
    if (local_ && migrations_ == 0) {
      // The decode worker prefilled the prompt: its first message holds
      // the first token.
      ticket_.DoneQueuing();
      NotifyQueue();
      usage_.set_prefill_seconds(message.first_decode_seconds());
      usage_.set_cached_prompt_tokens(message.cached_prompt_tokens());
      for (const tandem::v1::SampledTokenProto& t : message.prompt_logprobs()) {
        tandem::v1::Token token = PublicToken(*env_.tokenizer, t);
        token.set_text(SanitizeUtf8(token.raw()));
        prompt_tokens_.push_back(std::move(token));
      }
    }
  }
  usage_.set_speculative_proposed_tokens(usage_.speculative_proposed_tokens() +
                                         message.speculative_proposed_tokens());
  usage_.set_speculative_accepted_tokens(usage_.speculative_accepted_tokens() +
                                         message.speculative_accepted_tokens());
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

void GenerateCall::AwaitDecodeMessage() {
  awaiting_decode_ = true;
  awaiting_since_ = absl::Now();
  if (env_.progress_timeout <= absl::ZeroDuration()) return;
  progress_due_ = awaiting_since_ + ProgressSilence();
  // One alarm at a time; set again when this read is due before it rings
  // (the worker's pace became known, or quicker).
  if (!progress_alarm_set_ || progress_due_ < progress_alarm_at_) ArmProgressAlarm(progress_due_);
}

absl::Duration GenerateCall::ProgressSilence() const {
  if (env_.decode_pace == nullptr) return env_.progress_timeout;
  return env_.decode_pace->Silence(decode_pick_.index(), longest_gap_, env_.progress_floor,
                                   env_.progress_timeout);
}

void GenerateCall::ArmProgressAlarm(absl::Time at) {
  progress_alarm_set_ = true;
  progress_alarm_at_ = at;
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
  absl::MutexLock lock(&mu_);
  progress_alarm_set_ = false;
  // Set again on the next read.
  if (phase_ != Phase::kDecoding || relay_ == nullptr || !awaiting_decode_) return;
  if (absl::Now() < progress_due_) {
    ArmProgressAlarm(progress_due_);
    return;
  }
  // The worker is alive enough to hold the call open but makes no progress
  // (its engine is stuck, or its process stopped or cut off before the
  // keepalive noticed): it is treated as failed. Cancelled under the lock,
  // as everywhere: the relay is not deleted before OnDecodeDone has taken
  // it, which needs the lock.
  decode_stalled_ = true;
  env_.metrics->progress_timeouts.Increment();
  relay_->Cancel();  // OnDecodeDone follows and migrates the stream
}

GenerateCall::Next GenerateCall::TakeHandOffBack() {
  // The worker touched neither the KV nor the lease: the lease is ours
  // again, kept alive while another worker is asked or one is awaited (a
  // local prefill has none).
  if (!local_) {
    lease_ = Lease::kHeld;
    keep_lease_ = env_.lease_keeper->Keep(prefill_address_, prefill_.lease_id());
  }
  Transition(Phase::kHandingOff);
  Next next;
  next.decode = true;  // StartDecode: another worker, or a wait
  return next;
}

GenerateCall::Next GenerateCall::OnHandOffRefused(int refused, absl::Duration retry_after) {
  if (refused >= 0) decode_refused_.push_back(refused);
  if (first_refusal_ == absl::InfinitePast()) first_refusal_ = absl::Now();
  retry_after_ = retry_after;
  env_.metrics->hand_off_refusals.Increment();
  return TakeHandOffBack();
}

GenerateCall::Next GenerateCall::WaitForDecodeRoom() {
  // Every decode worker refused this hand-off: wait, then ask them all
  // again. 20 ms (or the workers' hint) doubling to 1 s, while the request's
  // deadline allows.
  const absl::Time now = absl::Now();
  const absl::Time deadline =
      std::min(absl::FromChrono(ctx_->deadline()), start_ + env_.request_timeout);
  const absl::Duration pause =
      std::min(std::max(retry_after_, absl::Milliseconds(20)) * (1 << std::min(hand_off_waits_, 6)),
               absl::Seconds(1));
  if (now + pause >= deadline) {
    return End(absl::ResourceExhaustedError(absl::StrCat(
        "decode: every decode worker refused the stream for capacity for ",
        absl::FormatDuration(now - first_refusal_), " (", decode_refused_.size(),
        " asked last); the request's deadline leaves no time to wait longer")));
  }
  ++hand_off_waits_;
  ArmRetryAlarm(now + pause, &GenerateCall::RetryHandOff);
  return {};
}

void GenerateCall::RetryHandOff() {
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;
    decode_refused_.clear();
  }
  StartDecode();
}

GenerateCall::Next GenerateCall::OnDecodeUnreached(int unreached, const grpc::Status& status) {
  if (unreached >= 0) decode_unreached_.push_back(unreached);
  last_decode_error_ = rpc::FromGrpcStatus(status, "decode");
  env_.metrics->decode_retries.Increment();
  return TakeHandOffBack();
}

GenerateCall::Next GenerateCall::WaitForDecodeWorker() {
  // Every decode worker was out of reach (restarting, say): wait, then try
  // them again, 100 ms doubling to 1.6 s, up to --unavailable-wait-ms in
  // all (the same budget as the waits for prefill workers).
  if (waited_ >= env_.unavailable_wait) {
    return End(absl::UnavailableError(absl::StrCat(
        "decode: no decode worker could be reached (waited ", absl::FormatDuration(waited_),
        " in all); the last: ", last_decode_error_.message())));
  }
  const absl::Duration pause = std::min(NextWaitPause(), env_.unavailable_wait - waited_);
  waited_ += pause;
  ArmRetryAlarm(absl::Now() + pause, &GenerateCall::RetryUnreached);
  return {};
}

void GenerateCall::RetryUnreached() {
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;
    decode_unreached_.clear();
  }
  StartDecode();
}

void GenerateCall::OnDecodeDone(const grpc::Status& result, const DecodeEnd& end) {
  Next next;
  bool migrate = false;
  int suspect = -1;  // a decode worker to report as lost
  {
    absl::MutexLock lock(&mu_);
    relay_ = nullptr;
    awaiting_decode_ = false;
    keep_lease_.Reset();
    const int failed = decode_pick_.index();
    decode_pick_ = WorkerPicker::Pick();
    if (phase_ != Phase::kDecoding) return;  // ended, or the reply is complete
    const grpc::Status status =
        decode_stalled_
            ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                           absl::StrCat("the decode worker sent nothing in ",
                                        absl::FormatDuration(absl::Now() - awaiting_since_)))
            : result;
    // Silent past its deadline, or its call failed as a lost worker's do
    // (not a fetch from the prefill worker, which may be the lost one).
    if (failed >= 0 && !end.kv_fetch_failed &&
        (decode_stalled_ || (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                             !end.refused_hand_off))) {
      suspect = failed;
    }
    const bool stalled = decode_stalled_;
    decode_stalled_ = false;
    const bool hand_off_ours = local_ || lease_ == Lease::kHandedOff;
    // Refused at admission, before touching anything: another worker or a
    // wait, for a hand-off (its lease still ours) or a local prefill alike.
    if (end.refused_hand_off && !relay_answered_ && hand_off_ours && !cancelled_ &&
        status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      next = OnHandOffRefused(failed, end.retry_after);
    } else if (!relay_heard_ && !stalled && !end.kv_fetch_failed && hand_off_ours && !cancelled_ &&
               status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // Not reached (a restarting worker refuses connections): nothing was
      // sent, so nothing is lost but the attempt. Had the worker fetched the
      // lease's blocks before it died, the next worker's fetch fails and
      // the stream migrates then.
      next = OnDecodeUnreached(failed, status);
    } else if (status.ok()) {
      next = End(absl::InternalError("decode: the stream ended without a finish reason"));
    } else if ((Migratable(status) || (end.kv_fetch_failed && MigratableFetchFailure(status))) &&
               !cancelled_ && migrations_ < env_.max_migrations) {
      // Resume elsewhere from everything produced so far: prefilled again
      // (the prompt's blocks are likely cached), decoded on another worker.
      ++migrations_;
      usage_.set_migrations(migrations_);
      env_.metrics->migrations.Increment();
      if (failed >= 0) decode_tried_.push_back(failed);
      // The next hand-off is another one: whoever was out of reach for this
      // one may be back.
      decode_unreached_.clear();
      // The old lease is of no use now (the worker may have died before it
      // fetched or released it; releasing twice is harmless). A local
      // prefill had none.
      if (!local_) {
        env_.releases->Release(prefill_address_, prefill_.lease_id(),
                               rpc::FromGrpcStatus(status, "decode"));
      }
      if (end.kv_fetch_failed && !local_) avoid_prefill_ = prefill_index_;
      // With no prefill worker the next decode worker prefills it again.
      resume_on_decode_ = env_.aggregated;
      local_ = false;
      lease_ = Lease::kNone;
      decode_finishing_ = false;
      tried_.clear();
      last_prefill_error_ = rpc::FromGrpcStatus(status, "decode");
      prefill_request_.mutable_generated_token_ids()->Assign(generated_ids_.begin(),
                                                             generated_ids_.end());
      prefill_request_.clear_prompt_logprobs();  // reported with the first message
      // The resumed prefill's token is written next: after the client's
      // write in flight, if any (one write outstanding; OnWriteDone starts
      // it).
      Transition(Phase::kMigrating);
      migrate = !writing_;
    } else {
      next = End(rpc::FromGrpcStatus(status, "decode"));
    }
  }
  if (suspect >= 0 && env_.suspect) env_.suspect(WorkerRole::kDecode, suspect);
  if (migrate) {
    Resume();
  } else {
    Run(std::move(next));
  }
}

}  // namespace tandem::gateway
