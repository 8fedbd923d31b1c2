#include "rpc/admission.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace tandem::rpc {

Admission::Ticket& Admission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (admission_ != nullptr) admission_->Release(tokens_, /*slot=*/true);
    admission_ = other.admission_;
    tokens_ = other.tokens_;
    other.admission_ = nullptr;
    other.tokens_ = 0;
  }
  return *this;
}

Admission::Ticket::~Ticket() {
  if (admission_ != nullptr) admission_->Release(tokens_, /*slot=*/true);
}

void Admission::Ticket::DoneQueuing() {
  if (admission_ != nullptr && tokens_ > 0) admission_->Release(tokens_, /*slot=*/false);
  tokens_ = 0;
}

Admission::Admission(std::string what, const AdmissionLimits& limits)
    : what_(std::move(what)), limits_(limits) {}

absl::StatusOr<Admission::Ticket> Admission::TryAdmit(int64_t tokens) {
  return TryAdmit(tokens, std::numeric_limits<int64_t>::max(), [] { return absl::OkStatus(); });
}

absl::StatusOr<Admission::Ticket> Admission::TryAdmit(int64_t tokens, int64_t cap,
                                                      absl::FunctionRef<absl::Status()> over_cap) {
  absl::MutexLock lock(&mu_);
  if (in_flight_ >= limits_.max_in_flight) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what_, ": ", in_flight_, " requests in flight (max_in_flight ", limits_.max_in_flight,
        "); retry later"));
  }
  if (queued_tokens_ > 0 && queued_tokens_ + tokens > limits_.max_queued_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what_, ": ", queued_tokens_, " prompt tokens queued, ", tokens,
        " more would pass max_queued_tokens ", limits_.max_queued_tokens, "; retry later"));
  }
  if (in_flight_ >= cap) return over_cap();
  ++in_flight_;
  queued_tokens_ += tokens;
  Ticket t;
  t.admission_ = this;
  t.tokens_ = tokens;
  return t;
}

void Admission::Release(int64_t tokens, bool slot) {
  absl::MutexLock lock(&mu_);
  queued_tokens_ -= tokens;
  if (slot) --in_flight_;
}

int32_t Admission::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

int64_t Admission::queued_tokens() const {
  absl::MutexLock lock(&mu_);
  return queued_tokens_;
}

std::vector<common::FlagSpec> AdmissionFlagSpecs(const AdmissionLimits& defaults) {
  return {
      {.name = "max-inflight", .default_value = absl::StrCat(defaults.max_in_flight),
       .help = "requests in flight before new ones are refused with RESOURCE_EXHAUSTED"},
      {.name = "max-queued-tokens", .default_value = absl::StrCat(defaults.max_queued_tokens),
       .help = "prompt tokens admitted and not yet prefilled before new requests are refused"},
      {.name = "retry-after-ms",
       .default_value = absl::StrCat(absl::ToInt64Milliseconds(defaults.retry_after)),
       .help = "retry hint sent with RESOURCE_EXHAUSTED (trailing metadata tandem-retry-after-ms)"},
  };
}

absl::StatusOr<AdmissionLimits> AdmissionLimitsFromArgs(const common::Args& args) {
  AdmissionLimits limits;
  absl::StatusOr<int32_t> in_flight = args.IntInRange("max-inflight", 1, 1 << 24);
  if (!in_flight.ok()) return in_flight.status();
  absl::StatusOr<int32_t> tokens = args.IntInRange("max-queued-tokens", 1, 1 << 30);
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<int32_t> retry = args.IntInRange("retry-after-ms", 0, 3600 * 1000);
  if (!retry.ok()) return retry.status();
  limits.max_in_flight = *in_flight;
  limits.max_queued_tokens = *tokens;
  limits.retry_after = absl::Milliseconds(*retry);
  return limits;
}

void AddRetryHint(grpc::ServerContextBase& ctx, absl::Duration after) {
  ctx.AddTrailingMetadata(kRetryAfterMsKey, absl::StrCat(absl::ToInt64Milliseconds(after)));
}

}  // namespace tandem::rpc
