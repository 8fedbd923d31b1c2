// Conversions between the engine's value types and their proto messages,
// shared by the workers and the gateway: the only place a request's sampling
// fields are copied between proto and engine types, one function per
// direction whatever the message. Pure functions; thread-safe.
#ifndef TANDEM_RPC_CONVERT_H_
#define TANDEM_RPC_CONVERT_H_

#include "engine/kv/block_hash.h"
#include "engine/sample/sampling_params.h"
#include "tandem/v1/generation.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::rpc {

// Proto defaults mean "unset": top_p and repetition_penalty 0 become 1 (off).
engine::SamplingParams SamplingFromProto(const tandem::v1::SamplingParams& p);
void SamplingToProto(const engine::SamplingParams& s, tandem::v1::SamplingParams* p);

// A request's SamplingRequest: its `sampling` message and the fields beside
// it (top_logprobs, and prompt_logprobs where the message has one; absent, it
// is -1). Each overload is one template in convert.cc, so a field added to
// engine::SamplingRequest is converted for every message there.
engine::SamplingRequest SamplingRequestFromProto(const tandem::v1::GenerateRequest& r);
engine::SamplingRequest SamplingRequestFromProto(const tandem::v1::ChatRequest& r);
engine::SamplingRequest SamplingRequestFromProto(const tandem::v1::PrefillRequest& r);
engine::SamplingRequest SamplingRequestFromProto(const tandem::v1::DecodeRequest& r);
// Sets those fields of `r` (prompt_logprobs only when >= 0). A DecodeRequest
// has no prompt_logprobs: the prefill worker reports them.
void SamplingRequestToProto(const engine::SamplingRequest& s, tandem::v1::GenerateRequest* r);
void SamplingRequestToProto(const engine::SamplingRequest& s, tandem::v1::PrefillRequest* r);
void SamplingRequestToProto(const engine::SamplingRequest& s, tandem::v1::DecodeRequest* r);

// A session's turn restated as the GenerateRequest the gateway validates:
// the two conversions above in turn, except that an unset seed stays unset
// (the gateway then draws one), which the engine's always-seeded type cannot
// say.
void ChatSamplingToGenerate(const tandem::v1::ChatRequest& chat,
                            tandem::v1::GenerateRequest* generate);

void SampledTokenToProto(const engine::SampledToken& t, tandem::v1::SampledTokenProto* p);
engine::SampledToken SampledTokenFromProto(const tandem::v1::SampledTokenProto& p);

void BlockHashToProto(const engine::BlockHash& h, tandem::v1::BlockHashProto* out);
engine::BlockHash BlockHashFromProto(const tandem::v1::BlockHashProto& p);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CONVERT_H_
