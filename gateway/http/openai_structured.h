// Structured output on the OpenAI front: `response_format` (text,
// json_object, json_schema) and the extensions other servers accept for the
// same thing (vLLM's guided_json / guided_regex / guided_grammar /
// guided_choice, llama.cpp's json_schema / grammar and its json_object with a
// "schema"), read into the gRPC
// request's sampling.response_format. Called by openai_api.cc's
// ParseRequest. Pure functions; thread-safe.
#ifndef TANDEM_GATEWAY_HTTP_OPENAI_STRUCTURED_H_
#define TANDEM_GATEWAY_HTTP_OPENAI_STRUCTURED_H_

#include <nlohmann/json_fwd.hpp>

#include "absl/status/status.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::gateway::openai {

// Sets `sampling.response_format` from the body's fields. InvalidArgument
// naming the field for a bad shape ("response_format.json_schema.schema:
// must be a JSON object") or for two of them at once. The format itself
// (a schema's keywords, a regex, a grammar) is checked by the gateway's
// validation of the gRPC request, as any client's.
absl::Status ParseStructuredOutput(const nlohmann::ordered_json& body,
                                   tandem::v1::SamplingParams& sampling);

}  // namespace tandem::gateway::openai

#endif  // TANDEM_GATEWAY_HTTP_OPENAI_STRUCTURED_H_
