// GenerateCall from admission to its first worker (generate_call.h): the
// tickets a request needs to start, the admission queue it waits in when
// they are short, and where its prompt is computed (a prefill worker, or its
// decode worker: docs/architecture.md#where-a-prompt-is-computed).
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "gateway/calls/generate_call.h"
#include "rpc/convert.h"

namespace tandem::gateway {

absl::Status GenerateCall::TryAdmit() {
  const auto prompt_tokens = static_cast<int64_t>(request_.prompt_ids.size());
  // Every request in flight holds (or will hold) a decode stream: counted
  // and taken under the admission's lock, so a burst cannot pass the bound
  // together (nor refuse each other, each counting the other's ticket).
  const int64_t capacity =
      env_.decode_capacity ? env_.decode_capacity() : std::numeric_limits<int64_t>::max();
  absl::StatusOr<rpc::Admission::Ticket> ticket =
      env_.admission->TryAdmit(prompt_tokens, capacity, [capacity] {
        return absl::ResourceExhaustedError(
            absl::StrCat("decode capacity: ", capacity,
                         " streams are in flight on the decode workers; retry later"));
      });
  if (!ticket.ok()) return ticket.status();
  // The most KV its decode worker will hold for it.
  absl::StatusOr<KvBudget::Ticket> kv =
      env_.kv_budget->TryCharge(prompt_tokens + request_.max_tokens);
  if (!kv.ok()) return kv.status();
  ticket_ = std::move(*ticket);
  kv_ticket_ = std::move(*kv);
  return absl::OkStatus();
}

void GenerateCall::SetUp() {
  const auto prompt_tokens = static_cast<int64_t>(request_.prompt_ids.size());
  usage_.set_prompt_tokens(static_cast<int32_t>(prompt_tokens));
  env_.metrics->prompt_tokens.Increment(static_cast<double>(prompt_tokens));
  emitter_ = std::make_unique<TokenEmitter>(
      *env_.tokenizer, EmitterOptions{.max_tokens = request_.max_tokens,
                                      .ignore_eos = request_.ignore_eos,
                                      .stop = request_.stop,
                                      .stop_token_ids = request_.sampling.stop_token_ids});
  prefill_request_.mutable_prompt_token_ids()->Assign(request_.prompt_ids.begin(),
                                                      request_.prompt_ids.end());
  rpc::SamplingRequestToProto(request_, &prefill_request_);
  prefill_request_.set_request_id(request_.request_id);
  prefill_request_.set_cache_salt(request_.cache_salt);
}

GenerateCall::Next GenerateCall::Enqueue(absl::Status short_of) {
  const bool queueable = absl::IsResourceExhausted(short_of) && env_.admission_queue != nullptr &&
                         env_.admission_queue->enabled();
  if (queueable) {
    std::weak_ptr<GenerateCall> weak = weak_from_this();
    AdmissionQueue::Waiter waiter{
        .try_admit =
            [weak] {
              std::shared_ptr<GenerateCall> self = weak.lock();
              return self == nullptr ? absl::CancelledError("the call is gone")
                                     : self->TryAdmitQueued();
            },
        .done =
            [weak](absl::Status status) {
              if (std::shared_ptr<GenerateCall> self = weak.lock()) {
                self->OnQueueDone(std::move(status));
              }
            },
        .deadline = std::min(absl::FromChrono(ctx_->deadline()), start_ + env_.request_timeout)};
    absl::StatusOr<uint64_t> id = env_.admission_queue->Enqueue(std::move(waiter));
    if (id.ok()) {
      Transition(Phase::kQueued);
      queue_id_ = *id;
      queued_at_ = absl::Now();
      return {};
    }
    short_of = absl::ResourceExhaustedError(
        absl::StrCat(short_of.message(), "; and ", id.status().message()));
  }
  if (absl::IsResourceExhausted(short_of)) rpc::AddRetryHint(*ctx_, env_.admission->retry_after());
  return End(std::move(short_of));
}

absl::Status GenerateCall::TryAdmitQueued() {
  absl::MutexLock lock(&mu_);
  if (Ended()) return absl::CancelledError("the request ended while it waited");
  RETURN_IF_ERROR(TryAdmit());
  queue_id_ = 0;
  SetUp();
  usage_.set_admission_queue_seconds(absl::ToDoubleSeconds(absl::Now() - queued_at_));
  return absl::OkStatus();
}

void GenerateCall::OnQueueDone(absl::Status status) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;  // it let go of anything it took
    if (status.ok()) {
      TANDEM_CHECK(phase_ == Phase::kQueued, "admitted out of the queue once");
    } else {
      queue_id_ = 0;
      next = End(std::move(status));
    }
  }
  if (status.ok()) {
    Start();
  } else {
    Run(std::move(next));
  }
}

void GenerateCall::Start() {
  bool local = false;
  {
    absl::MutexLock lock(&mu_);
    if (Ended()) return;
    // With no prefill worker every request is prefilled by its decode
    // worker. Otherwise one that is no session turn may be (StartDecode
    // decides once it knows the worker's cached prefix), unless it asks for
    // prompt logprobs, which prefill workers report.
    const bool conditional = env_.local_prefill_tokens > 0 || env_.local_prefill_queue > 0;
    may_prefill_on_decode_ = env_.aggregated || (conditional && turn_.kv_holder.empty() &&
                                                 !prefill_request_.has_prompt_logprobs());
    local = turn_.local_prefill || may_prefill_on_decode_;
  }
  if (local) {
    StartDecode();
  } else {
    StartPrefill();
  }
}

bool GenerateCall::PrefillOnDecodeWorker(int32_t overlap_blocks) const {
  if (env_.aggregated) return true;
  const int32_t block_size = env_.kv_block_size ? env_.kv_block_size() : 0;
  const int64_t uncached = static_cast<int64_t>(request_.prompt_ids.size()) -
                           int64_t{std::max(overlap_blocks, 0)} * block_size;
  if (env_.local_prefill_tokens > 0 && block_size > 0 && uncached <= env_.local_prefill_tokens) {
    return true;
  }
  if (env_.local_prefill_queue <= 0) return false;
  // The prefill workers' queue: prefills in flight on the active ones.
  int64_t workers = 0, in_flight = 0;
  for (int i = 0; i < env_.prefill->size(); ++i) {
    if (!env_.prefill->active(i) || !env_.prefill->reachable(i)) continue;
    ++workers;
    in_flight += env_.prefill->in_flight(i);
  }
  return workers == 0 || in_flight >= int64_t{env_.local_prefill_queue} * workers;
}

void GenerateCall::Resume() {
  bool on_decode = false;
  {
    absl::MutexLock lock(&mu_);
    on_decode = resume_on_decode_;
  }
  if (on_decode) {
    StartDecode();
  } else {
    StartPrefill();
  }
}

void GenerateCall::NotifyQueue() const {
  if (env_.admission_queue != nullptr) env_.admission_queue->Notify();
}

}  // namespace tandem::gateway
