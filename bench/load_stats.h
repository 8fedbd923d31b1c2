// What tandem-load measures per request and the summary it prints: TTFT and
// inter-token latency percentiles, output tokens/s over the run, errors by
// status code, as a table and as one JSON line. Pure functions over values;
// thread-compatible. Used by bench/load_main.cc and tests/bench/.
//
// Inter-token latency: every generated token after a request's first gets
// one sample. A response message carrying k tokens that arrives `gap` after
// the previous token-bearing message gives each of its k tokens gap / k
// (the first message's extra tokens get 0: TTFT already covers them). So
// sum(ITL) = last token - first token and the mean ITL is the usual
// time-per-output-token. Rejected: one sample per message (hides that a
// message brought several tokens) and gap-then-zeros (a worker that sends
// tokens in bursts shows a p50 of 0).
//
// Stalls: the gaps between a request's token-bearing messages (what its
// reader sees as a pause) that overlap another request's prefill, seen from
// the client as the span from sending it to its first token. That is the
// pause a streaming user sees when someone else's prompt is computed; with
// prefill and decode sharing cores it is what grows.
#ifndef TANDEM_BENCH_LOAD_STATS_H_
#define TANDEM_BENCH_LOAD_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tandem::bench {

struct RequestResult {
  absl::StatusCode code = absl::StatusCode::kOk;
  double ttft_s = -1;          // send -> first token; -1 when none arrived
  std::vector<double> itl_s;   // one entry per token after the first
  int64_t output_tokens = 0;   // tokens received, failed requests included
  int64_t messages = 0;        // response messages that carried tokens
  double last_token_s = -1;    // send -> latest token; -1 when none arrived
  int64_t prompt_tokens = 0;   // from the final usage; 0 when none came
  int64_t cached_prompt_tokens = 0;
  double sent_s = 0;               // when it was sent, from the run's start
  std::vector<double> message_s;   // send -> each message with tokens
};

// Accounts one response message of `r` that arrived `at_s` seconds after the
// request was sent and carried `k` tokens (0 for a message without any):
// TTFT, the ITL samples described above, token and message counts.
void RecordMessage(double at_s, int k, RequestResult& r);

// Nearest-rank percentile (p in [0, 100]) of `values`; 0 when empty.
double Percentile(std::vector<double> values, double p);

// What the run was asked to do, echoed in the report.
struct LoadShape {
  std::string addr;
  // Non-empty: requests went through this OpenAI-compatible HTTP front.
  std::string http_addr = {};
  std::string model;
  int32_t concurrency = 0;
  int32_t requests = 0;
  int32_t prompt_tokens = 0;
  int32_t shared_prefix_tokens = 0;
  int32_t prefix_groups = 1;
  int32_t max_tokens = 0;
  int32_t turns = 1;        // requests per conversation
  int32_t turn_tokens = 0;  // new ids per later turn
  uint64_t seed = 0;
  uint64_t prefix_seed = 0;  // 0: seed
};

struct LoadSummary {
  LoadShape shape;
  int32_t ok = 0;
  std::map<std::string, int32_t> errors;  // status code name -> count
  double wall_s = 0;                      // first send -> last stream end
  int64_t output_tokens = 0;
  double output_tokens_per_s = 0;
  double tokens_per_message = 0;  // how much the service batches its stream
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  double ttft_p50_s = 0;
  double ttft_p99_s = 0;
  double itl_p50_s = 0;
  double itl_p99_s = 0;
  // Of the ITL samples, each request's first (first token -> second): where a
  // disaggregated service hands the stream from prefill to decode.
  double second_token_p50_s = 0;
  double second_token_p99_s = 0;
  // Gaps between a request's messages that overlap another's prefill.
  int64_t stalls = 0;
  double stall_p50_s = 0;
  double stall_p99_s = 0;
  double stall_max_s = 0;
};

// The stall samples described above, over every request's messages.
std::vector<double> StallGaps(const std::vector<RequestResult>& results);

LoadSummary Summarize(const LoadShape& shape, const std::vector<RequestResult>& results,
                      double wall_s);

// Human-readable lines, each ending in '\n'.
std::string FormatTable(const LoadSummary& summary);

// One JSON object without a trailing newline.
std::string FormatJson(const LoadSummary& summary);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_LOAD_STATS_H_
