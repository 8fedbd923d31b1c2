// The phases of one GenerateCall (generate_call.h) and the transitions
// between them. GenerateCall keeps its phase in one CallPhase under its
// mutex and moves it only through Transition, which CHECKs
// IsLegalTransition; the facts that are not phases (a client write
// outstanding, the first message sent, the client cancelled, who releases
// the KV lease) stay beside it. Pure; thread-safe.
#ifndef TANDEM_GATEWAY_CALLS_CALL_PHASE_H_
#define TANDEM_GATEWAY_CALLS_CALL_PHASE_H_

#include <string_view>

namespace tandem::gateway {

// Transitions, each with the event that makes it (every phase but kEnding
// and kFinished may also go to kEnding: End(), on an error, a client cancel
// or the reply sent whole):
//
//   kOpened     -> kPrefilling  Begin: the prompt goes to a prefill worker
//                               (or a session's local prefill cannot run)
//               -> kDecoding    Begin: a session's KV holder prefills the
//                               prompt itself (local prefill)
//               -> kQueued      Begin: no capacity now; the request waits in
//                               the admission queue
//   kQueued     -> kPrefilling  the queue admitted it (as from kOpened)
//               -> kDecoding    the queue admitted it, for a local prefill
//   kPrefilling -> kPrefilling  a retry on another worker, or after a wait
//               -> kHandingOff  the prefill answered with the first token
//   kHandingOff -> kDecoding    the first token is written (or held back):
//                               the Decode call starts
//               -> kCommitting  the first token completed a session's reply
//               -> kPrefilling  a local prefill's decode worker refused it or
//                               could not be reached, and no other may run
//                               it: a prefill worker computes the prompt
//   kDecoding   -> kMigrating   the decode worker failed (or stalled) under
//                               the stream, and it may move
//               -> kHandingOff  the decode worker refused the hand-off for
//                               capacity, or could not be reached: the lease
//                               is still ours, for another worker (or after
//                               a wait)
//               -> kCommitting  the reply of a session's turn is complete
//   kMigrating  -> kPrefilling  the resumed prefill starts (after the
//                               client's write in flight, if any)
//               -> kDecoding    no prefill worker: the next decode worker
//                               prefills the stream so far itself
//   kCommitting -> kEnding      the commit answered (its last message goes
//                               out first when it succeeded)
//   kEnding     -> kFinished    no write is outstanding: Finish() is called
//   kFinished                   terminal
enum class CallPhase {
  // Open() ran; the request comes with Begin().
  kOpened,
  // Waiting in the gateway's admission queue for capacity; nothing started.
  kQueued,
  // A prefill attempt is in flight, or a wait before the next round.
  kPrefilling,
  // The prefill's first token is out (or held back); no Decode call yet (or
  // the last one refused the hand-off, and another is to come).
  kHandingOff,
  // The Decode call runs; its messages are relayed to the client.
  kDecoding,
  // The decode worker failed; the resumed prefill starts once the client's
  // write in flight completes.
  kMigrating,
  // The reply is complete and the session's turn is being committed; the
  // last message waits for it.
  kCommitting,
  // End() ran; Finish() follows the write in flight.
  kEnding,
  // Finish() was called.
  kFinished,
};

constexpr std::string_view CallPhaseName(CallPhase phase) {
  switch (phase) {
    case CallPhase::kOpened: return "opened";
    case CallPhase::kQueued: return "queued";
    case CallPhase::kPrefilling: return "prefilling";
    case CallPhase::kHandingOff: return "handing off";
    case CallPhase::kDecoding: return "decoding";
    case CallPhase::kMigrating: return "migrating";
    case CallPhase::kCommitting: return "committing";
    case CallPhase::kEnding: return "ending";
    case CallPhase::kFinished: return "finished";
  }
  return "?";
}

// True when the table above allows `from` -> `to`.
constexpr bool IsLegalTransition(CallPhase from, CallPhase to) {
  using P = CallPhase;
  if (to == P::kEnding) return from != P::kEnding && from != P::kFinished;
  switch (from) {
    case P::kOpened: return to == P::kPrefilling || to == P::kDecoding || to == P::kQueued;
    case P::kQueued: return to == P::kPrefilling || to == P::kDecoding;
    case P::kPrefilling: return to == P::kPrefilling || to == P::kHandingOff;
    case P::kHandingOff:
      return to == P::kDecoding || to == P::kCommitting || to == P::kPrefilling;
    case P::kDecoding:
      return to == P::kMigrating || to == P::kCommitting || to == P::kHandingOff;
    case P::kMigrating: return to == P::kPrefilling || to == P::kDecoding;
    case P::kCommitting: return false;  // only to kEnding
    case P::kEnding: return to == P::kFinished;
    case P::kFinished: return false;
  }
  return false;
}

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_CALLS_CALL_PHASE_H_
