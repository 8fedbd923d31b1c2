// Drives a gateway with streaming Generate requests for tandem-load: builds
// the seeded prompts, runs them `concurrency` at a time (one thread per slot,
// each with the blocking stub, all on one channel) and times every token.
// Called from bench/load_main.cc. RunLoad is thread-safe to call once at a
// time; the stub must be thread-safe (generated stubs are).
#ifndef TANDEM_BENCH_LOAD_RUNNER_H_
#define TANDEM_BENCH_LOAD_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/load_stats.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::bench {

struct PromptOptions {
  int32_t requests = 1;
  int32_t prompt_tokens = 1;
  int32_t shared_prefix_tokens = 0;  // <= prompt_tokens
  // Prompt i shares its prefix with the prompts of group i % prefix_groups;
  // each group's prefix is its own.
  int32_t prefix_groups = 1;
  int32_t vocab_size = 0;            // ids are drawn from [kFirstPromptId, vocab_size)
  uint64_t seed = 1;         // the ids after the shared prefixes
  uint64_t prefix_seed = 0;  // the shared prefixes; 0: `seed`
};

// Ids below this are special in the models Tandem serves (unk, BOS, EOS).
inline constexpr int32_t kFirstPromptId = 3;

// `requests` prompts; the first shared_prefix_tokens ids are the same in all
// of a group's prompts, the rest differ. Same options, same prompts.
std::vector<std::vector<int32_t>> MakePrompts(const PromptOptions& options);

// The ModelInfo named `model` (the first listed when empty). NotFound when
// the gateway does not serve it; the RPC's own error when it fails.
// `api_key`: sent as "authorization: Bearer KEY" unless empty.
absl::StatusOr<v1::ModelInfo> FindModel(v1::Generation::StubInterface& stub,
                                        const std::string& model, absl::Duration timeout,
                                        const std::string& api_key = "");

struct RunOptions {
  std::string model;
  int32_t concurrency = 1;
  int32_t max_tokens = 1;
  absl::Duration request_timeout = absl::Minutes(10);
  // Multi-turn: each prompt opens a conversation of `turns` requests, each
  // resending the whole conversation so far (its prompt, the reply's ids)
  // plus `turn_tokens` new seeded ids, as a chat client without sessions
  // does. A failed turn ends its conversation.
  int32_t turns = 1;
  int32_t turn_tokens = 32;
  int32_t vocab_size = 0;  // for the new ids of later turns
  uint64_t seed = 1;
  // Non-empty: send each request to this OpenAI-compatible HTTP front
  // ("host:port", POST /v1/completions streamed) instead of the stub; the
  // stub still answers ListModels. Single-turn only (a completion's text
  // does not say its ids).
  std::string http_address = {};
  // Sent with every request as "authorization: Bearer KEY" unless empty.
  std::string api_key = {};
  // HTTP only: fields added to every request's JSON body (an object).
  std::string http_body = {};
};

struct RunResult {
  // Conversation c's turn t at c * turns + t (one per prompt when turns is
  // 1); turns never sent (after a failure) stay default with code kAborted.
  std::vector<RequestResult> requests;
  double wall_s = 0;  // first send -> last stream end
};

// The ids a conversation appends for its turn `turn` (>= 1).
std::vector<int32_t> TurnTokens(const RunOptions& options, size_t conversation, int32_t turn);

// Sends greedy, ignore_eos requests (every turn of every prompt's
// conversation, conversations `concurrency` at a time) and waits for all.
RunResult RunLoad(v1::Generation::StubInterface& stub,
                  const std::vector<std::vector<int32_t>>& prompts, const RunOptions& options);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_LOAD_RUNNER_H_
