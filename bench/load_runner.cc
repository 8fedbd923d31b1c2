#include "bench/load_runner.h"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/load_http.h"
#include "rpc/status.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

// One request; the reply's ids go to `reply` when it is non-null.
RequestResult RunOne(v1::Generation::StubInterface& stub, const std::vector<int32_t>& prompt,
                     const RunOptions& options, std::vector<int32_t>* reply) {
  v1::GenerateRequest request;
  request.set_model(options.model);
  request.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
  request.set_max_tokens(options.max_tokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);  // greedy

  RequestResult result;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(options.request_timeout));
  if (!options.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + options.api_key);
  const Clock::time_point sent = Clock::now();
  std::unique_ptr<grpc::ClientReaderInterface<v1::GenerateResponse>> reader =
      stub.Generate(&ctx, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    RecordMessage(Seconds(sent, Clock::now()), response.tokens_size(), result);
    if (reply != nullptr) {
      for (const v1::Token& t : response.tokens()) reply->push_back(t.id());
    }
    if (response.has_usage()) {
      result.prompt_tokens = response.usage().prompt_tokens();
      result.cached_prompt_tokens = response.usage().cached_prompt_tokens();
    }
  }
  result.code = rpc::FromGrpcStatus(reader->Finish()).code();
  return result;
}

}  // namespace

std::vector<std::vector<int32_t>> MakePrompts(const PromptOptions& options) {
  std::uniform_int_distribution<int32_t> id(kFirstPromptId, options.vocab_size - 1);
  std::vector<std::vector<int32_t>> shared(std::max(options.prefix_groups, 1));
  std::mt19937_64 prefix_rng(options.prefix_seed != 0 ? options.prefix_seed : options.seed);
  for (std::vector<int32_t>& prefix : shared) {
    prefix.resize(options.shared_prefix_tokens);
    for (int32_t& t : prefix) t = id(prefix_rng);
  }
  // The rest from a stream of its own, so a run with another --seed and the
  // same --prefix-seed asks new questions after the same prefixes.
  std::seed_seq rest{options.seed, uint64_t{0x9e3779b97f4a7c15}};
  std::mt19937_64 rng(rest);
  std::vector<std::vector<int32_t>> prompts(options.requests);
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t>& p = prompts[i];
    p = shared[i % shared.size()];
    while (static_cast<int32_t>(p.size()) < options.prompt_tokens) p.push_back(id(rng));
  }
  return prompts;
}

std::vector<int32_t> TurnTokens(const RunOptions& options, size_t conversation, int32_t turn) {
  std::seed_seq seq{options.seed, static_cast<uint64_t>(conversation),
                    static_cast<uint64_t>(turn)};
  std::mt19937_64 rng(seq);
  std::uniform_int_distribution<int32_t> id(kFirstPromptId, options.vocab_size - 1);
  std::vector<int32_t> ids(std::max(options.turn_tokens, 0));
  for (int32_t& t : ids) t = id(rng);
  return ids;
}

absl::StatusOr<v1::ModelInfo> FindModel(v1::Generation::StubInterface& stub,
                                        const std::string& model, absl::Duration timeout,
                                        const std::string& api_key) {
  grpc::ClientContext ctx;
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  ctx.set_deadline(DeadlineAfter(timeout));
  v1::ListModelsResponse response;
  const grpc::Status status = stub.ListModels(&ctx, v1::ListModelsRequest(), &response);
  if (!status.ok()) return rpc::FromGrpcStatus(status);
  for (const v1::ModelInfo& m : response.models()) {
    if (model.empty() || m.id() == model) return m;
  }
  return absl::NotFoundError(
      model.empty() ? "the gateway lists no models"
                    : absl::StrCat("--model: the gateway serves no model \"", model, "\""));
}

RunResult RunLoad(v1::Generation::StubInterface& stub,
                  const std::vector<std::vector<int32_t>>& prompts, const RunOptions& options) {
  RunResult run;
  const Clock::time_point start = Clock::now();
  const size_t turns = static_cast<size_t>(std::max(options.turns, 1));
  run.requests.resize(prompts.size() * turns);
  for (RequestResult& r : run.requests) r.code = absl::StatusCode::kAborted;
  // A conversation: its turns in order, each prompt the last one plus the
  // reply and the new turn's ids.
  auto converse = [&](size_t c) {
    std::vector<int32_t> prompt = prompts[c];
    for (size_t t = 0; t < turns; ++t) {
      if (t > 0) {
        const std::vector<int32_t> more = TurnTokens(options, c, static_cast<int32_t>(t));
        prompt.insert(prompt.end(), more.begin(), more.end());
      }
      std::vector<int32_t> reply;
      RequestResult& r = run.requests[c * turns + t];
      const double sent_s = Seconds(start, Clock::now());
      r = options.http_address.empty()
              ? RunOne(stub, prompt, options, turns > 1 ? &reply : nullptr)
              : RunOneHttp(options.http_address, options.model, prompt, options.max_tokens,
                           options.request_timeout, options.api_key, options.http_body);
      r.sent_s = sent_s;
      if (r.code != absl::StatusCode::kOk) return;
      prompt.insert(prompt.end(), reply.begin(), reply.end());
    }
  };
  std::atomic<size_t> next{0};
  std::vector<std::thread> slots;
  const size_t n_slots = std::min<size_t>(std::max(options.concurrency, 1), prompts.size());
  for (size_t s = 0; s < n_slots; ++s) {
    // Each slot takes the next unsent prompt as soon as its last one ended,
    // so `concurrency` requests are in flight until the queue drains.
    slots.emplace_back([&] {
      for (size_t i = next++; i < prompts.size(); i = next++) {
        converse(i);
      }
    });
  }
  for (std::thread& t : slots) t.join();
  run.wall_s = Seconds(start, Clock::now());
  return run;
}

}  // namespace tandem::bench
