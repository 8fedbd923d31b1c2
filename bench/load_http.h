// tandem-load's HTTP mode: one request as a streaming POST /v1/completions to
// the gateway's OpenAI-compatible front (prompt as token ids, greedy,
// ignore_eos, logprobs 0 so that each event says how many tokens it
// carries), timed as the gRPC requests are. Another server's events (e.g.
// llama-server's, whose logprobs are null) count one token per event with
// text. Stateless; thread-safe (each call opens its own connection).
#ifndef TANDEM_BENCH_LOAD_HTTP_H_
#define TANDEM_BENCH_LOAD_HTTP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/load_stats.h"

namespace tandem::bench {

// `address` is the front's "host:port".
// `extra_body`: a JSON object whose fields are added to every request's body
// (e.g. a logit_bias); empty for none.
RequestResult RunOneHttp(const std::string& address, const std::string& model,
                         const std::vector<int32_t>& prompt, int32_t max_tokens,
                         absl::Duration timeout, const std::string& api_key,
                         const std::string& extra_body = {});

// Tokens one streamed completion event carries: logprobs.tokens' count
// (OpenAI's completions format, which Tandem's front sends with logprobs 0),
// else one for an event with text, else none.
int TokensInEvent(const std::string& chunk_json);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_LOAD_HTTP_H_
