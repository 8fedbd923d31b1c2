// One Generate request's path through the gateway, as a gRPC callback
// reactor (no thread waits on a worker): admission, prefill on a prefill
// worker (retried elsewhere when one is unreachable or overloaded), the first
// token to the client, then the decode worker's stream relayed message by
// message through the TokenEmitter, one client write outstanding. When a
// decode worker fails under the stream (or its KV hand-off does), the
// stream migrates: prefilled again from the prompt plus every token already
// produced, then decoded on another worker, the sampler continuing where it
// was, so the client sees no gap and no repeat. Child calls
// carry the client's deadline (capped by the request timeout); a client
// cancel cancels them at once; every way a request can die after prefill
// releases its KV lease (ReleaseClient, never blocking). The call's phase
// is one CallPhase (call_phase.h, with its transition table).
// Thread-safe: reactions on gRPC threads are serialized by `mu_`.
#ifndef TANDEM_GATEWAY_CALLS_GENERATE_CALL_H_
#define TANDEM_GATEWAY_CALLS_GENERATE_CALL_H_

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/calls/call_phase.h"
#include "gateway/calls/token_emitter.h"
#include "gateway/calls/validated_request.h"
#include "gateway/gateway_metrics.h"
#include "gateway/routing/admission_queue.h"
#include "gateway/routing/kv_budget.h"
#include "gateway/routing/kv_router.h"
#include "gateway/routing/worker_pace.h"
#include "gateway/routing/worker_picker.h"
#include "kvtransfer/rpc/lease_keeper.h"
#include "kvtransfer/rpc/release_client.h"
#include "rpc/admission.h"
#include "rpc/channel_cache.h"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::gateway {

// Counts GenerateCall objects alive. A call can outlive its RPC (its child
// calls finish after the client's stream ended), so the service waits for
// none to be left before the objects calls use go away. Thread-safe.
class LiveCalls {
 public:
  void Enter() {
    absl::MutexLock lock(&mu_);
    ++live_;
  }
  void Exit() {
    absl::MutexLock lock(&mu_);
    --live_;
  }
  void AwaitNone() const {
    absl::MutexLock lock(&mu_);
    auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return live_ == 0; };
    mu_.Await(absl::Condition(&none));
  }

 private:
  mutable absl::Mutex mu_;
  int live_ ABSL_GUARDED_BY(mu_) = 0;
};

enum class WorkerRole { kPrefill, kDecode };

// What a call needs from the service; all outlive the call.
struct CallEnv {
  const engine::Tokenizer* tokenizer;
  WorkerPicker* prefill;
  KvRouter* prefill_router;  // null: least-loaded prefill worker
  WorkerPicker* decode;
  KvRouter* decode_router;  // null: least-loaded decode worker
  rpc::ChannelCache* channels;
  kvtransfer::ReleaseClient* releases;
  // Renews a lease from the prefill's answer until the decode worker takes
  // over (its first message) or the request ends.
  kvtransfer::LeaseKeeper* lease_keeper;
  rpc::Admission* admission;
  KvBudget* kv_budget;  // the decode workers' KV, charged per request
  // Where a request waits when admission, the decode streams or the KV
  // budget are short; null or disabled: it is refused at once.
  AdmissionQueue* admission_queue = nullptr;
  GatewayMetrics* metrics;
  LiveCalls* live;
  // Deadline for worker calls when the client's is later (or unset).
  absl::Duration request_timeout;
  // How many times a stream may move to another worker after one failed
  // under it (0: never).
  int32_t max_migrations;
  // Streams the decode workers can take now (their number times each one's
  // capacity): a request past it is refused before any work, never after
  // its first token.
  std::function<int64_t()> decode_capacity;
  // Whether the decode workers have room for this request's hand-off to
  // propose with their draft model from its first step: their reported room
  // (BlockEventBatch.draft_kv_room; any, for one not heard from) covers
  // this gateway's prompts in prefill (DecodeRoomForDraftKv). A request that
  // names no speculation method has its prefill worker compute the prompt's
  // draft KV only then (PrefillRequest.skip_draft_kv). Null: always.
  std::function<bool()> decode_wants_draft_kv;
  // When every prefill worker tried was unavailable, the request waits and
  // tries them all again, for this long in all (a worker restarting).
  absl::Duration unavailable_wait;
  // A decode worker that sends nothing for this long while the gateway
  // waits on it (its first message, covering the KV fetch, or the next
  // step's tokens) is treated as failed and the stream migrates; zero: off.
  // Within it the silence allowed adapts to the worker's pace (decode_pace),
  // never below progress_floor.
  absl::Duration progress_timeout;
  absl::Duration progress_floor;
  WorkerPace* decode_pace = nullptr;
  // A worker's call failed the way a lost worker's do (UNAVAILABLE, or no
  // progress within the deadline): it stops being picked and counted until
  // it answers again (BlockEventSubscriber::Suspect). Null: nothing.
  std::function<void(WorkerRole role, int index)> suspect;
  // Conditional disaggregation of requests that are no session turns: the
  // decode worker picked for one prefills it itself when at most
  // `local_prefill_tokens` of its prompt are not in that worker's cache, or
  // when the prefill workers have `local_prefill_queue` prefills in flight
  // each (0: that rule off); otherwise a prefill worker does.
  int32_t local_prefill_tokens = 0;
  int32_t local_prefill_queue = 0;
  // The workers' KV block size (0: not known yet).
  std::function<int32_t()> kv_block_size;
  // No prefill workers (tandem up --mode aggregated): every request is
  // prefilled by its decode worker, migrated streams too.
  bool aggregated = false;
};

// A session's turn, run as a Generate call of its truncated conversation
// (Chat).
struct SessionTurn {
  // Named to the decode worker, which keeps the turn's KV pinned for the
  // next one.
  std::string session_id;
  // The decode worker keeping the session's KV: decode goes there while it
  // is reachable.
  std::string kv_holder;
  // Conditional disaggregation: the holder has all but a few of the
  // prompt's tokens, so it computes them itself (no prefill worker, no
  // transfer). Falls back to the prefill worker when the holder cannot be
  // picked.
  bool local_prefill = false;
  // Leading prompt blocks the holder has reported: a prefill worker holding
  // fewer pulls them from it (ExportPrefix on the decode worker).
  int32_t holder_blocks = 0;
  // WINDOW_POLICY_SHIFT: the KV is private to its holder, and this turn
  // cuts [shift_from, shift_from + shift_count) out of the holder's tokens.
  bool private_kv = false;
  int32_t shift_from = 0;
  int32_t shift_count = 0;
  // The window the decode worker rolls the reply in (0: none).
  int32_t roll_window = 0;
  int32_t roll_keep = 0;
  // Done with the turn's status and the usage fields it adds.
  using CommitDone = std::function<void(absl::Status, tandem::v1::Usage)>;
  // Runs once the reply is complete (`reply`: its text, `reply_ids`: the
  // ids of the tokens sent; `decode_address`: the decode worker that
  // produced it, "" when the prefill's token ended it), before the last
  // message goes out, and calls `done` exactly once, from any thread. The
  // last message carries the usage it adds; an error ends the call with it
  // instead.
  using Commit = std::function<void(std::string reply, std::vector<int32_t> reply_ids,
                                    std::string decode_address, CommitDone done)>;
  Commit commit;
};

// On the raw form of Generate (the service parses requests itself, to say
// what is wrong with one gRPC could not parse): each GenerateResponse goes
// out serialized.
// A fresh random seed for a request that names none.
uint64_t DrawSeed();
// Sets request.request_id from the x-request-id metadata when the request
// has none (a fresh one when neither has), and echoes it in the initial
// metadata. InvalidArgument for a malformed x-request-id.
absl::Status AssignRequestId(grpc::CallbackServerContext& ctx, ValidatedRequest& request);

class GenerateCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public std::enable_shared_from_this<GenerateCall> {
 public:
  // Starts the call for `request` (or finishes it at once with the
  // validation error); the reactor owns itself until OnDone.
  static GenerateCall* Start(const CallEnv& env, grpc::CallbackServerContext* ctx,
                             absl::StatusOr<ValidatedRequest> request);
  // A call whose request comes later (Begin), once the session it belongs
  // to is read; the reactor owns itself until OnDone, and the caller's
  // reference keeps it alive until Begin.
  static std::shared_ptr<GenerateCall> Open(const CallEnv& env,
                                            grpc::CallbackServerContext* ctx);
  // Runs `request` (or finishes with its error); `turn`: a session's.
  // Nothing happens when the client already went away.
  void Begin(absl::StatusOr<ValidatedRequest> request, SessionTurn turn = {});

  ~GenerateCall() override { env_.live->Exit(); }

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  class PrefillAttempt;
  class DecodeRelay;
  using Phase = CallPhase;
  // Who releases the KV lease of the last prefill when the request ends.
  enum class Lease {
    kNone,      // no lease (none yet, a local prefill, or released)
    kHeld,      // ours: released on every end
    kHandedOff  // named to the Decode call: its worker releases it once it
                // fetched the blocks, we only on a failure
  };
  // What to do after a state change, done outside `mu_`.
  struct Next {
    bool write = false;        // StartWrite(&write_buffer_)
    bool read = false;         // the relay's next read
    bool decode = false;       // start the decode call
    bool prefill = false;      // start a migration's prefill
    bool commit = false;       // run the session turn's commit
    bool finish = false;       // Finish(status)
    absl::Status status;
  };

  GenerateCall(const CallEnv& env, grpc::CallbackServerContext* ctx);
  // Moves phase_ to `to`; CHECKs that call_phase.h's table allows it.
  void Transition(Phase to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // End() ran (the phase is kEnding or kFinished).
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return phase_ == Phase::kEnding || phase_ == Phase::kFinished;
  }
  // The reply is complete: commit the session's turn first when there is
  // one (the last message waits for it), else end.
  Next Complete() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Commit() ABSL_LOCKS_EXCLUDED(mu_);
  void OnCommitted(absl::Status status, const tandem::v1::Usage& usage) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the admission ticket, a decode stream and the KV charge
  // (ResourceExhausted naming what is short, holding none of them).
  absl::Status TryAdmit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admitted: the usage, the emitter and the prefill request set up.
  void SetUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Short of capacity in Begin: the request waits in the admission queue
  // (or is refused, when it is full or the deadline is too near).
  Next Enqueue(absl::Status short_of) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The admission queue's calls (on its thread).
  absl::Status TryAdmitQueued() ABSL_LOCKS_EXCLUDED(mu_);
  void OnQueueDone(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Prefill or a local prefill, once admitted.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Conditional disaggregation, once the decode worker is picked: whether
  // that worker prefills the prompt, given how many of its blocks it holds.
  bool PrefillOnDecodeWorker(int32_t overlap_blocks) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Capacity went back (a ticket released or its tokens prefilled): the
  // admission queue's head may start.
  void NotifyQueue() const;
  void StartPrefill() ABSL_LOCKS_EXCLUDED(mu_);
  // A migrated stream's next step: its resumed prefill, or straight to a
  // decode worker that prefills it.
  void Resume() ABSL_LOCKS_EXCLUDED(mu_);
  // After a wait: every prefill worker may be tried again.
  void RetryRound() ABSL_LOCKS_EXCLUDED(mu_);
  // The waits for unavailable workers: 100 ms for round 1, doubling to
  // 1.6 s; NextWaitPause counts a round.
  static absl::Duration WaitPause(int round);
  absl::Duration NextWaitPause() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets retry_alarm_ to call `retry` at `at` (while this object lives).
  void ArmRetryAlarm(absl::Time at, void (GenerateCall::*retry)())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every prefill worker refused a migrated stream (tokens already out) for
  // capacity, and its deadline leaves time for another wait.
  bool ResumedStreamMayWaitForRoom(const grpc::Status& status) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnPrefillDone(const grpc::Status& status, const tandem::v1::PrefillResponse& response)
      ABSL_LOCKS_EXCLUDED(mu_);
  void StartDecode() ABSL_LOCKS_EXCLUDED(mu_);
  void OnDecodeMessage(const tandem::v1::DecodeResponse& message) ABSL_LOCKS_EXCLUDED(mu_);
  // A message with tokens (not a heartbeat): relayed to the client.
  void OnDecodeTokens(const tandem::v1::DecodeResponse& message, Next& next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How a Decode call ended besides its status (its trailing metadata).
  struct DecodeEnd {
    // The worker refused the hand-off at admission (full), before touching
    // the KV: the lease is still ours.
    bool refused_hand_off = false;
    absl::Duration retry_after;  // its hint, zero when none
    // The worker could not fetch the KV from the prefill worker (which may
    // be the one cut off): the resumption prefers another prefill worker.
    bool kv_fetch_failed = false;
  };
  void OnDecodeDone(const grpc::Status& result, const DecodeEnd& end) ABSL_LOCKS_EXCLUDED(mu_);
  // The hand-off's worker did not take it (refused, or not reached): the
  // lease is kept alive again and StartDecode runs next.
  Next TakeHandOffBack() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A decode worker refused the hand-off: the stream goes to another one,
  // or waits for one to have room within the request's deadline.
  Next OnHandOffRefused(int refused, absl::Duration retry_after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every decode worker refused: a wait (then RetryHandOff), or the end
  // when the deadline leaves no time for one.
  Next WaitForDecodeRoom() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a wait for decode capacity: every worker may be asked again.
  void RetryHandOff() ABSL_LOCKS_EXCLUDED(mu_);
  // The Decode call failed UNAVAILABLE before the worker sent anything (it
  // could not be reached): the hand-off goes to another decode worker, the
  // lease still ours, with no migration and no second prefill.
  Next OnDecodeUnreached(int unreached, const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No decode worker could be reached: a wait for one to come back (then
  // RetryUnreached), within --unavailable-wait-ms in all, or the end.
  Next WaitForDecodeWorker() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetryUnreached() ABSL_LOCKS_EXCLUDED(mu_);
  // The relay's next read is about to be issued: the decode worker owes a
  // message within the progress timeout from now.
  void AwaitDecodeMessage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The progress alarm rang: a decode worker silent past the timeout is
  // given up on (its call cancelled, the stream migrated); otherwise the
  // alarm is set again for the read outstanding.
  void CheckProgress() ABSL_LOCKS_EXCLUDED(mu_);
  void ArmProgressAlarm(absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The prefill call's liveness probe: while attempt `attempt` is out, its
  // worker is asked for its stats every half progress floor; a probe not
  // answered within the floor (a stopped or cut-off worker: a prefill sends
  // nothing until it ends, however long the prompt) fails the attempt
  // UNAVAILABLE, and it is retried on another worker.
  void ArmPrefillProbe() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProbePrefill(int64_t attempt) ABSL_LOCKS_EXCLUDED(mu_);
  void OnPrefillProbe(int64_t attempt, const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // How long the decode worker in use may stay silent now (WorkerPace).
  absl::Duration ProgressSilence() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(Next next) ABSL_LOCKS_EXCLUDED(mu_);
  // Builds response_ (and write_buffer_) from `tokens` (and the finish, when
  // the emitter is done); false when there is nothing to send.
  bool Prepare(std::vector<tandem::v1::Token>& tokens) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the call with `status` after any write outstanding; releases the
  // lease when the request failed after prefill.
  Next End(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker call's context: the client's deadline (capped by
  // --request-timeout), not its cancellation.
  std::unique_ptr<grpc::ClientContext> ChildContext() const;

  const CallEnv env_;
  grpc::CallbackServerContext* const ctx_;
  const absl::Time start_ = absl::Now();
  std::shared_ptr<GenerateCall> self_;  // until OnDone
  rpc::Admission::Ticket ticket_;
  KvBudget::Ticket kv_ticket_;  // both taken and released under mu_ (Begin or the queue, End)

  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kOpened;  // only through Transition()
  // The admission queue's id for this call while it waits (0: not queued).
  uint64_t queue_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time queued_at_ ABSL_GUARDED_BY(mu_);
  ValidatedRequest request_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<TokenEmitter> emitter_ ABSL_GUARDED_BY(mu_);
  std::vector<int> tried_ ABSL_GUARDED_BY(mu_);
  WorkerPicker::Pick prefill_pick_ ABSL_GUARDED_BY(mu_);
  WorkerPicker::Pick decode_pick_ ABSL_GUARDED_BY(mu_);
  // The prefill call in flight, if any (it owns itself; cleared before it
  // goes), and what every attempt sends.
  PrefillAttempt* prefill_attempt_ ABSL_GUARDED_BY(mu_) = nullptr;
  tandem::v1::PrefillRequest prefill_request_ ABSL_GUARDED_BY(mu_);
  tandem::v1::PrefillResponse prefill_ ABSL_GUARDED_BY(mu_);
  std::string prefill_address_ ABSL_GUARDED_BY(mu_);
  int prefill_index_ ABSL_GUARDED_BY(mu_) = -1;  // the worker of prefill_address_
  // A prefill worker the next prefill avoids where another can take it (a
  // decode worker could not fetch the KV from it); -1 when none.
  int avoid_prefill_ ABSL_GUARDED_BY(mu_) = -1;
  Lease lease_ ABSL_GUARDED_BY(mu_) = Lease::kNone;  // prefill_'s lease
  kvtransfer::LeaseKeeper::Handle keep_lease_ ABSL_GUARDED_BY(mu_);  // the heartbeat
  absl::Status last_prefill_error_ ABSL_GUARDED_BY(mu_);
  // The decode call in flight prefills the prompt itself (local prefill).
  bool local_ ABSL_GUARDED_BY(mu_) = false;
  // A request that is no session turn whose decode worker may prefill it
  // (conditional disaggregation; every request when aggregated).
  bool may_prefill_on_decode_ ABSL_GUARDED_BY(mu_) = false;
  // A migrated stream resumes on a decode worker that prefills it (no
  // prefill worker), not through a prefill worker.
  bool resume_on_decode_ ABSL_GUARDED_BY(mu_) = false;
  // A decode worker's message has arrived (the first one carries usage).
  bool got_decode_message_ ABSL_GUARDED_BY(mu_) = false;
  // The decode call in flight sent its finish reason: it ends by itself.
  bool decode_finishing_ ABSL_GUARDED_BY(mu_) = false;
  // Every token id the workers produced that the emitter took (the first
  // from prefill, then decode's): what a migrated stream resumes after.
  std::vector<int32_t> generated_ids_ ABSL_GUARDED_BY(mu_);
  int32_t migrations_ ABSL_GUARDED_BY(mu_) = 0;
  // Waiting for unavailable workers to come back (RetryRound).
  std::unique_ptr<grpc::Alarm> retry_alarm_ ABSL_GUARDED_BY(mu_);
  absl::Duration waited_ ABSL_GUARDED_BY(mu_);
  int wait_rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> decode_tried_ ABSL_GUARDED_BY(mu_);  // decode workers that failed
  // Decode workers that refused this hand-off for capacity (cleared after
  // each wait), the waits so far, and the first refusal's time.
  std::vector<int> decode_refused_ ABSL_GUARDED_BY(mu_);
  int hand_off_waits_ ABSL_GUARDED_BY(mu_) = 0;
  // Decode workers this hand-off could not reach (cleared after each wait),
  // and the last one's error.
  std::vector<int> decode_unreached_ ABSL_GUARDED_BY(mu_);
  absl::Status last_decode_error_ ABSL_GUARDED_BY(mu_);
  absl::Duration retry_after_ ABSL_GUARDED_BY(mu_);  // the last refusal's hint
  absl::Time first_refusal_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The decode call in flight has sent tokens (relay_answered_), or any
  // message, a heartbeat included (relay_heard_).
  bool relay_answered_ ABSL_GUARDED_BY(mu_) = false;
  bool relay_heard_ ABSL_GUARDED_BY(mu_) = false;
  DecodeRelay* relay_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A read from the decode worker is outstanding since `awaiting_since_`;
  // the alarm checks it (one alarm set at a time, while decoding).
  bool awaiting_decode_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time awaiting_since_ ABSL_GUARDED_BY(mu_);
  // When the read outstanding is overdue (AwaitDecodeMessage), and the
  // longest this stream has waited for a message.
  absl::Time progress_due_ ABSL_GUARDED_BY(mu_);
  absl::Duration longest_gap_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Alarm> progress_alarm_ ABSL_GUARDED_BY(mu_);
  bool progress_alarm_set_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time progress_alarm_at_ ABSL_GUARDED_BY(mu_);  // when it rings
  // The relay was cancelled here because its worker made no progress (its
  // end migrates the stream).
  bool decode_stalled_ ABSL_GUARDED_BY(mu_) = false;
  // The prefill attempt out (numbered), its context, and its probe.
  int64_t prefill_attempt_no_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<grpc::ClientContext> prefill_ctx_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Alarm> prefill_probe_alarm_ ABSL_GUARDED_BY(mu_);
  bool prefill_stalled_ ABSL_GUARDED_BY(mu_) = false;  // its probe went unanswered
  tandem::v1::GenerateResponse response_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer write_buffer_;  // response_ serialized; the write in flight
  tandem::v1::Usage usage_ ABSL_GUARDED_BY(mu_);
  absl::Time last_token_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a client write is outstanding
  // The first message (which carries the seed, the request id and the
  // prompt logprobs) is sent.
  bool sent_first_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<tandem::v1::Token> prompt_tokens_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // OnCancel ran
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);  // End()'s, for Finish()
  SessionTurn turn_ ABSL_GUARDED_BY(mu_);
  std::string reply_ ABSL_GUARDED_BY(mu_);           // a session turn's text so far
  std::vector<int32_t> reply_ids_ ABSL_GUARDED_BY(mu_);  // and its tokens' ids
  std::string decode_address_ ABSL_GUARDED_BY(mu_);  // the last decode worker started
  // The last message's tokens, waiting for the commit (kCommitting).
  std::vector<tandem::v1::Token> final_tokens_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_CALLS_GENERATE_CALL_H_
