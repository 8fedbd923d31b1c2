// tandem-load's HTTP mode: one request as a streaming POST /v1/completions to
// the gateway's OpenAI-compatible front (prompt as token ids, greedy,
// ignore_eos, logprobs 0 so that each event says how many tokens it
// carries), timed as the gRPC requests are. Stateless; thread-safe (each
// call opens its own connection).
#ifndef TANDEM_BENCH_LOAD_HTTP_H_
#define TANDEM_BENCH_LOAD_HTTP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/load_stats.h"

namespace tandem::bench {

// `address` is the front's "host:port".
RequestResult RunOneHttp(const std::string& address, const std::string& model,
                         const std::vector<int32_t>& prompt, int32_t max_tokens,
                         absl::Duration timeout, const std::string& api_key);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_LOAD_HTTP_H_
