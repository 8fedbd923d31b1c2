// Conversions between the engine's value types and their proto messages,
// shared by the workers and the gateway. Pure functions; thread-safe.
#ifndef TANDEM_RPC_CONVERT_H_
#define TANDEM_RPC_CONVERT_H_

#include "engine/kv/block_hash.h"
#include "engine/sample/sampling_params.h"
#include "tandem/v1/generation.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::rpc {

// Proto defaults mean "unset": top_p 0 becomes 1 (off).
engine::SamplingParams SamplingFromProto(const tandem::v1::SamplingParams& p);
void SamplingToProto(const engine::SamplingParams& s, tandem::v1::SamplingParams* p);

void SampledTokenToProto(const engine::SampledToken& t, tandem::v1::SampledTokenProto* p);
engine::SampledToken SampledTokenFromProto(const tandem::v1::SampledTokenProto& p);

void BlockHashToProto(const engine::BlockHash& h, tandem::v1::BlockHashProto* out);
engine::BlockHash BlockHashFromProto(const tandem::v1::BlockHashProto& p);

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_CONVERT_H_
