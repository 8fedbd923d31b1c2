#include "bench/load_runner.h"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

RequestResult RunOne(v1::Generation::StubInterface& stub, const std::vector<int32_t>& prompt,
                     const RunOptions& options) {
  v1::GenerateRequest request;
  request.set_model(options.model);
  request.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
  request.set_max_tokens(options.max_tokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);  // greedy

  RequestResult result;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(options.request_timeout));
  const Clock::time_point sent = Clock::now();
  std::unique_ptr<grpc::ClientReaderInterface<v1::GenerateResponse>> reader =
      stub.Generate(&ctx, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    RecordMessage(Seconds(sent, Clock::now()), response.tokens_size(), result);
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
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int32_t> id(kFirstPromptId, options.vocab_size - 1);
  std::vector<int32_t> shared(options.shared_prefix_tokens);
  for (int32_t& t : shared) t = id(rng);
  std::vector<std::vector<int32_t>> prompts(options.requests);
  for (std::vector<int32_t>& p : prompts) {
    p = shared;
    while (static_cast<int32_t>(p.size()) < options.prompt_tokens) p.push_back(id(rng));
  }
  return prompts;
}

absl::StatusOr<v1::ModelInfo> FindModel(v1::Generation::StubInterface& stub,
                                        const std::string& model, absl::Duration timeout) {
  grpc::ClientContext ctx;
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
  run.requests.resize(prompts.size());
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> slots;
  const size_t n_slots = std::min<size_t>(std::max(options.concurrency, 1), prompts.size());
  for (size_t s = 0; s < n_slots; ++s) {
    // Each slot takes the next unsent prompt as soon as its last one ended,
    // so `concurrency` requests are in flight until the queue drains.
    slots.emplace_back([&] {
      for (size_t i = next++; i < prompts.size(); i = next++) {
        run.requests[i] = RunOne(stub, prompts[i], options);
      }
    });
  }
  for (std::thread& t : slots) t.join();
  run.wall_s = Seconds(start, Clock::now());
  return run;
}

}  // namespace tandem::bench
