// Admission control for a service: a bound on requests in flight and on the
// prompt tokens they have queued for prefill, checked once when a request
// arrives. Over either bound the request is refused at once with
// RESOURCE_EXHAUSTED and a retry hint in the trailing metadata, so overload
// costs neither threads nor memory. Used by the gateway and both workers.
// Thread-safe.
#ifndef TANDEM_RPC_ADMISSION_H_
#define TANDEM_RPC_ADMISSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include <grpcpp/server_context.h>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/flags.h"

namespace tandem::rpc {

// Trailing metadata key of the retry hint: milliseconds, as decimal text.
inline constexpr char kRetryAfterMsKey[] = "tandem-retry-after-ms";
// Trailing metadata of a decode worker's RESOURCE_EXHAUSTED when it refused a
// hand-off (or a local prefill) at admission, before touching its KV: the
// prefill's lease (or the prompt) is still the caller's, who may hand it to
// another worker or wait for room.
inline constexpr char kRefusedHandOffKey[] = "tandem-refused-hand-off";
// Trailing metadata a decode worker adds when a hand-off failed fetching the
// KV from the prefill worker (rather than on this worker): the gateway
// resumes the stream on another prefill worker where it has one.
inline constexpr char kKvFetchFailedKey[] = "tandem-kv-fetch-failed";

struct AdmissionLimits {
  int32_t max_in_flight = 1024;       // requests admitted and not yet finished
  int64_t max_queued_tokens = 1 << 20;  // prompt tokens admitted and not yet prefilled
  absl::Duration retry_after = absl::Milliseconds(200);  // the hint refused callers get
};

class Admission {
 public:
  // Holds an admitted request's slot (and its queued tokens until
  // DoneQueuing); releases them when destroyed. Move-only.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket();
    // The request's prompt is prefilled: its tokens no longer count as queued.
    void DoneQueuing();
    bool valid() const { return admission_ != nullptr; }

   private:
    friend class Admission;
    Admission* admission_ = nullptr;
    int64_t tokens_ = 0;
  };

  // `what` names the service in refusals ("gateway", "prefill worker").
  Admission(std::string what, const AdmissionLimits& limits);

  // ResourceExhausted naming the bound when admitting `tokens` more would
  // pass either limit. A request larger than max_queued_tokens alone is
  // admitted when nothing else is queued, so no prompt is refused forever.
  absl::StatusOr<Ticket> TryAdmit(int64_t tokens);
  // The same, refused with `over_cap()` too while `cap` or more requests are
  // in flight (a bound that moves, such as the decode workers' streams):
  // checked and taken under one lock, so concurrent callers cannot pass it
  // together or refuse each other.
  absl::StatusOr<Ticket> TryAdmit(int64_t tokens, int64_t cap,
                                  absl::FunctionRef<absl::Status()> over_cap);

  int32_t in_flight() const;
  int64_t queued_tokens() const;
  absl::Duration retry_after() const { return limits_.retry_after; }

 private:
  void Release(int64_t tokens, bool slot);

  const std::string what_;
  const AdmissionLimits limits_;
  mutable absl::Mutex mu_;
  int32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_tokens_ ABSL_GUARDED_BY(mu_) = 0;
};

// --max-inflight, --max-queued-tokens and --retry-after-ms with these
// defaults, and their values (InvalidArgument naming the flag when out of
// range).
std::vector<common::FlagSpec> AdmissionFlagSpecs(const AdmissionLimits& defaults);
absl::StatusOr<AdmissionLimits> AdmissionLimitsFromArgs(const common::Args& args);

// Puts the retry hint for a RESOURCE_EXHAUSTED answer in `ctx`'s trailing
// metadata. Call before the call finishes.
void AddRetryHint(grpc::ServerContextBase& ctx, absl::Duration after);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_ADMISSION_H_
