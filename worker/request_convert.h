// The engine's request for a worker RPC: a PrefillRequest or DecodeRequest
// converted whole as its call begins, the fields both messages carry (the
// prompt, a resumed stream's tokens, the SamplingRequest, the cache salt) by
// one function. Called by the Prefill and Decode services. Pure functions;
// thread-safe.
#ifndef TANDEM_WORKER_REQUEST_CONVERT_H_
#define TANDEM_WORKER_REQUEST_CONVERT_H_

#include "engine/sched/request.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::worker {

// What a Prefill call computes: the prompt and a resumed stream's tokens, and
// the one token after them (max_tokens counts `generated`), whatever it is
// (ignore_eos), its KV exported for the hand-off. A pulled prefix is the
// service's to attach.
engine::GenerationRequest EngineRequestFromProto(const tandem::v1::PrefillRequest& request);

// What a Decode call generates, with a session's pin, window and shift.
engine::GenerationRequest EngineRequestFromProto(const tandem::v1::DecodeRequest& request);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_REQUEST_CONVERT_H_
