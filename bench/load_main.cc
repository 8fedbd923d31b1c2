// tandem-load: a load generator for a running gateway (`tandem up` prints its
// address). Sends --requests streaming Generate calls, --concurrency at a
// time, of seeded random token-id prompts whose first --shared-prefix-tokens
// ids are shared within each of --prefix-groups groups (optionally as
// --turns-turn conversations that resend their history); prints TTFT and
// inter-token latency p50/p99, output tokens/s and errors as a table, then
// one JSON line (appended to --out). It reports; it never fails on speed. Flags and wiring only; the
// work is in bench/load_runner.cc and bench/load_stats.cc.
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "bench/load_runner.h"
#include "bench/load_stats.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "rpc/gateway_client.h"

namespace tandem::bench {
namespace {

struct LoadConfig {
  LoadShape shape;
  std::string out;
  absl::Duration request_timeout;
  absl::Duration connect_timeout;
  rpc::GatewayClientOptions client;  // TLS and API key (gRPC; the key over HTTP too)
  // With no --addr (another server's HTTP API): the model's vocabulary.
  int32_t vocab_size = 0;
  std::string http_body;
};

std::vector<common::FlagSpec> LoadFlagSpecs() {
  std::vector<common::FlagSpec> specs = {
      {.name = "addr", .default_value = "",
       .help = "gateway address HOST:PORT; empty with --http-addr: another OpenAI-compatible "
               "server (e.g. llama-server), whose vocabulary --vocab-size gives"},
      {.name = "http-addr", .default_value = "",
       .help = "send the requests to the gateway's OpenAI-compatible HTTP front at HOST:PORT "
               "(streamed POST /v1/completions) instead of gRPC; --addr still answers "
               "ListModels; single-turn only"},
      {.name = "vocab-size", .default_value = "0",
       .help = "with --http-addr and no --addr: the model's vocabulary size (prompt ids are "
               "drawn below it)"},
      {.name = "http-body", .default_value = "",
       .help = "with --http-addr: a JSON object whose fields are added to every request's "
               "body (e.g. '{\"logit_bias\": {\"131\": -100}}')"},
      {.name = "concurrency", .default_value = "8", .help = "requests in flight at once"},
      {.name = "requests", .default_value = "64", .help = "requests in all"},
      {.name = "prompt-tokens", .default_value = "256", .help = "prompt length, token ids"},
      {.name = "shared-prefix-tokens", .default_value = "0",
       .help = "leading prompt ids shared by every request (<= --prompt-tokens)"},
      {.name = "prefix-groups", .default_value = "1",
       .help = "distinct shared prefixes; request i uses prefix i % groups"},
      {.name = "turns", .default_value = "1",
       .help = "requests per conversation: each later turn resends the conversation so far "
               "(prompt and reply ids) plus --turn-tokens new ids; --requests counts "
               "conversations"},
      {.name = "turn-tokens", .default_value = "32", .help = "new ids per later turn"},
      {.name = "max-tokens", .default_value = "64",
       .help = "tokens generated per request (greedy, EOS ignored)"},
      {.name = "model", .help = "model name from ListModels; empty = the first listed"},
      {.name = "seed", .default_value = "1", .help = "seed of the random prompt ids"},
      {.name = "prefix-seed", .default_value = "0",
       .help = "seed of the shared prefixes; 0 = --seed (the same prefix seed with another "
               "--seed asks new questions after the same prefixes)"},
      {.name = "out", .help = "file to append the JSON line to"},
      {.name = "timeout-s", .default_value = "600", .help = "deadline of each request, seconds"},
      {.name = "connect-timeout-s", .default_value = "10",
       .help = "deadline of the first call (ListModels), seconds"},
  };
  for (common::FlagSpec& s : rpc::GatewayClientFlagSpecs()) specs.push_back(std::move(s));
  return specs;
}

absl::StatusOr<LoadConfig> ConfigFromArgs(const common::Args& args) {
  LoadConfig c;
  LoadShape& s = c.shape;
  s.addr = args.String("addr");
  s.model = args.String("model");
  s.http_addr = args.String("http-addr");
  if (s.addr.empty() && s.http_addr.empty()) {
    return absl::InvalidArgumentError("--addr: empty (give it, or --http-addr)");
  }
  ASSIGN_OR_RETURN(c.vocab_size, args.IntInRange("vocab-size", 0, 1 << 24));
  if (s.addr.empty() && c.vocab_size <= kFirstPromptId) {
    return absl::InvalidArgumentError(
        "--vocab-size: needed above 3 when --http-addr names a server without --addr");
  }
  c.http_body = args.String("http-body");
  if (!c.http_body.empty() &&
      !nlohmann::json::parse(c.http_body, nullptr, /*allow_exceptions=*/false).is_object()) {
    return absl::InvalidArgumentError("--http-body: not a JSON object");
  }
  ASSIGN_OR_RETURN(s.concurrency, args.IntInRange("concurrency", 1, 4096));
  ASSIGN_OR_RETURN(s.requests, args.IntInRange("requests", 1, 1 << 24));
  ASSIGN_OR_RETURN(s.prompt_tokens, args.IntInRange("prompt-tokens", 1, 1 << 24));
  ASSIGN_OR_RETURN(s.shared_prefix_tokens,
                   args.IntInRange("shared-prefix-tokens", 0, s.prompt_tokens));
  ASSIGN_OR_RETURN(s.prefix_groups, args.IntInRange("prefix-groups", 1, 1 << 20));
  ASSIGN_OR_RETURN(s.turns, args.IntInRange("turns", 1, 1 << 16));
  ASSIGN_OR_RETURN(s.turn_tokens, args.IntInRange("turn-tokens", 0, 1 << 24));
  if (!s.http_addr.empty() && s.turns > 1) {
    return absl::InvalidArgumentError("--turns: more than 1 needs gRPC (no --http-addr)");
  }
  ASSIGN_OR_RETURN(s.max_tokens, args.IntInRange("max-tokens", 1, 1 << 24));
  ASSIGN_OR_RETURN(s.seed, args.Uint64("seed"));
  ASSIGN_OR_RETURN(s.prefix_seed, args.Uint64("prefix-seed"));
  ASSIGN_OR_RETURN(int32_t timeout_s, args.IntInRange("timeout-s", 1, 86400));
  ASSIGN_OR_RETURN(int32_t connect_s, args.IntInRange("connect-timeout-s", 1, 3600));
  c.request_timeout = absl::Seconds(timeout_s);
  c.connect_timeout = absl::Seconds(connect_s);
  c.out = args.String("out");
  ASSIGN_OR_RETURN(c.client, rpc::GatewayClientOptionsFromArgs(args));
  if (!c.client.tls_ca.empty() && !s.http_addr.empty()) {
    return absl::InvalidArgumentError("--tls-ca: the HTTP load runs plain HTTP (no --http-addr)");
  }
  return c;
}

int Run(LoadConfig config) {
  // One channel: every slot's stream is multiplexed on one HTTP/2
  // connection, as a gateway client library would do.
  // With no --addr every request goes over HTTP: the stub (never called)
  // gets a channel that is never connected.
  std::unique_ptr<v1::Generation::Stub> stub = v1::Generation::NewStub(rpc::DialGateway(
      config.shape.addr.empty() ? "127.0.0.1:1" : config.shape.addr, config.client));

  // No gateway to ask (another server's HTTP API): the flags say the model.
  absl::StatusOr<v1::ModelInfo> model = v1::ModelInfo();
  if (config.shape.addr.empty()) {
    model->set_id(config.shape.model);
    model->set_vocab_size(config.vocab_size);
  } else {
    model = FindModel(*stub, config.shape.model, config.connect_timeout, config.client.api_key);
  }
  if (!model.ok()) {
    std::cerr << "tandem-load: " << config.shape.addr << ": " << model.status().ToString()
              << "\n";
    return model.status().code() == absl::StatusCode::kNotFound ? 2 : 1;
  }
  if (model->vocab_size() <= kFirstPromptId) {
    std::cerr << "tandem-load: model " << model->id() << " reports vocab_size "
              << model->vocab_size() << ", too small for random prompts\n";
    return 1;
  }
  // The last turn's prompt holds every earlier turn and reply.
  const LoadShape& sh = config.shape;
  const int64_t needed = int64_t{sh.prompt_tokens} + sh.max_tokens +
                         int64_t{sh.turns - 1} * (sh.turn_tokens + sh.max_tokens);
  if (model->max_context() > 0 && needed > model->max_context()) {
    std::cerr << "tandem-load: --prompt-tokens + --max-tokens (+ later turns) = " << needed
              << " exceeds the model's max_context " << model->max_context() << "\n";
    return 2;
  }
  config.shape.model = model->id();

  const std::vector<std::vector<int32_t>> prompts = MakePrompts({
      .requests = config.shape.requests,
      .prompt_tokens = config.shape.prompt_tokens,
      .shared_prefix_tokens = config.shape.shared_prefix_tokens,
      .prefix_groups = config.shape.prefix_groups,
      .vocab_size = model->vocab_size(),
      .seed = config.shape.seed,
      .prefix_seed = config.shape.prefix_seed,
  });
  const RunResult run = RunLoad(*stub, prompts,
                                {.model = config.shape.model,
                                 .concurrency = config.shape.concurrency,
                                 .max_tokens = config.shape.max_tokens,
                                 .request_timeout = config.request_timeout,
                                 .turns = config.shape.turns,
                                 .turn_tokens = config.shape.turn_tokens,
                                 .vocab_size = model->vocab_size(),
                                 .seed = config.shape.seed,
                                 .http_address = config.shape.http_addr,
                                 .api_key = config.client.api_key,
                                 .http_body = config.http_body});
  const LoadSummary summary = Summarize(config.shape, run.requests, run.wall_s);
  const std::string json = FormatJson(summary);
  std::cout << FormatTable(summary) << json << "\n" << std::flush;
  if (!config.out.empty()) {
    std::ofstream file(config.out, std::ios::app);
    file << json << "\n";
    if (!file) {
      std::cerr << "tandem-load: --out: cannot append to " << config.out << "\n";
      return 1;
    }
  }
  // Errors are reported above; only a run where nothing succeeded fails.
  return summary.ok > 0 ? 0 : 1;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  const std::vector<tandem::common::FlagSpec> specs = tandem::bench::LoadFlagSpecs();
  absl::StatusOr<tandem::common::Args> args =
      tandem::common::Args::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) std::cerr << "tandem-load: " << args.status().message() << "\n";
    // Args::Usage names `tandem load`; this binary is tandem-load.
    const std::string usage = tandem::common::Args::Usage("load", specs);
    std::cerr << "usage: tandem-load [flags]; drives a gateway with streaming Generate calls"
              << usage.substr(usage.find('\n'));
    return args.ok() ? 0 : 2;
  }
  absl::StatusOr<tandem::bench::LoadConfig> config = tandem::bench::ConfigFromArgs(*args);
  if (!config.ok()) {
    std::cerr << "tandem-load: " << config.status().message() << "\n";
    return 2;
  }
  return tandem::bench::Run(*std::move(config));
}
