#include "gateway/gateway_options.h"

#include <bit>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/constrain/constraint.h"
#include "gateway/api_keys.h"
#include "gateway/routing/worker_resolver.h"
#include "kvtransfer/rpc/lease_keeper.h"
#include "rpc/admission.h"
#include "rpc/bootstrap.h"
#include "rpc/channel_cache.h"
#include "rpc/health_port.h"

namespace tandem::gateway {

namespace {

std::vector<std::string> SplitAddresses(const std::string& list) {
  return absl::StrSplit(list, ',', absl::SkipWhitespace());
}

// A --router-*-tier-weight: a number in [0, 1].
absl::StatusOr<double> TierWeight(const common::Args& args, const char* tier) {
  ASSIGN_OR_RETURN(const double w, args.Double(absl::StrCat("router-", tier, "-tier-weight")));
  if (w < 0 || w > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--router-", tier, "-tier-weight: ", w, " is outside [0, 1]"));
  }
  return w;
}

}  // namespace

std::vector<common::FlagSpec> GatewayFlagSpecs() {
  std::vector<common::FlagSpec> specs = {
      {.name = "listen",
       .default_value = "127.0.0.1:0",
       .help = "gRPC listen address host:port (port 0 = ephemeral)"},
      {.name = "metrics-listen",
       .default_value = "127.0.0.1:0",
       .help = "Prometheus /metrics address host:port; empty = off"},
      {.name = "http-listen",
       .default_value = "",
       .help = "OpenAI-compatible HTTP address host:port (/v1/completions, "
               "/v1/chat/completions, /v1/models; port 0 = ephemeral); empty = off"},
      {.name = "http-threads",
       .default_value = "64",
       .help = "HTTP requests served at once (a streaming response holds one)"},
      {.name = "http-max-body-bytes",
       .default_value = "8388608",
       .help = "largest HTTP request body (413 above it)"},
      {.name = "model", .help = "GGUF model file (only its tokenizer is read)", .required = true},
      {.name = "model-name",
       .default_value = "",
       .help = "name clients use in GenerateRequest.model (default: the file's stem)"},
      {.name = "prefill",
       .default_value = "",
       .help = "prefill workers, comma-separated: host:port, or dns:///host:port for every "
               "address the name has (a Kubernetes headless Service), looked up again every "
               "--resolve-interval-ms; empty: none, every request is prefilled by its decode "
               "worker (aggregated mode)"},
      {.name = "decode", .help = "decode workers, as --prefill", .required = true},
      rpc::DrainFlagSpec(),
      {.name = "decode-worker-streams",
       .default_value = "64",
       .help = "streams one decode worker decodes at once (match its --max-running): "
               "requests past the decode workers' total wait in the admission queue before "
               "any work is done, rather than on a decode worker after their first token; "
               "a worker that reports a bound of its own (--itl-target-ms) is handed at "
               "most that"},
      {.name = "unavailable-wait-ms",
       .default_value = "10000",
       .help = "when every prefill worker tried, or every decode worker a hand-off tried, is "
               "unavailable, how long a request waits in all for one to come back (retrying) "
               "before it fails"},
      {.name = "progress-timeout-ms",
       .default_value = "20000",
       .help = "the most a decode worker may send nothing while a stream waits on it before "
               "it is treated as failed and the stream moves on; within it the silence "
               "allowed adapts to the worker's pace (5x its p99 gap between messages, "
               "heartbeats included); 0 = off"},
      {.name = "progress-timeout-floor-ms",
       .default_value = "1000",
       .help = "the least silence the adaptive progress deadline allows a decode worker "
               "that has been quick"},
      {.name = "kv-overcommit",
       .default_value = "1.0",
       .help = "requests in flight may be charged (prompt + max_tokens each) this many times "
               "the KV the decode workers report; past it a request is refused before any "
               "work (RESOURCE_EXHAUSTED); 0 = off"},
      {.name = "admission-queue",
       .default_value = "1024",
       .help = "requests that may wait at the gateway for capacity (the in-flight bound, the "
               "decode workers' streams and KV) instead of being refused, served first come "
               "first served within each request's deadline; past it, or when a request's "
               "deadline is sooner than the queue's expected wait, it is refused at once "
               "(RESOURCE_EXHAUSTED); 0 = no queue"},
      {.name = "session-window",
       .default_value = "4096",
       .help = "tokens a session holds when CreateSession names no window (at most "
               "--max-context)"},
      {.name = "session-ttl-s",
       .default_value = "1800",
       .help = "idle seconds after which a session that names no TTL expires"},
      {.name = "max-session-ttl-s",
       .default_value = "86400",
       .help = "the longest idle TTL a session may name"},
      {.name = "session-replicas",
       .default_value = "2",
       .help = "decode workers each session record is kept on (its KV holder first), so a "
               "session outlives the loss of all but one of them"},
      {.name = "session-local-prefill-tokens",
       .default_value = "512",
       .help = "a session turn whose decode worker holds all but at most this many of its "
               "prompt tokens is prefilled there, without a prefill worker or a KV transfer "
               "(conditional disaggregation); 0 = always on a prefill worker"},
      {.name = "local-prefill-tokens",
       .default_value = "32",
       .help = "a request that is no session turn whose decode worker holds all but at most "
               "this many of its prompt tokens is prefilled there, without a prefill worker "
               "or a KV transfer (conditional disaggregation); 0 = off"},
      {.name = "local-prefill-queue",
       .default_value = "0",
       .help = "with this many prefills in flight on each prefill worker, new requests that "
               "are no session turns are prefilled by their decode worker whatever their "
               "length (conditional disaggregation on the prefill queue); 0 = off"},
      {.name = "session-evict-percent",
       .default_value = "75",
       .help = "a session turn that would overflow its window evicts its oldest turns until "
               "prompt + max_tokens fits this percent of the window (100: only what the turn "
               "needs; less leaves room for the next turns to reuse the KV)"},
      {.name = "session-store-timeout-ms",
       .default_value = "5000",
       .help = "deadline of each call to a decode worker's session store (a stuck worker "
               "delays a turn's record write by at most this per copy; the copy then goes "
               "to the next worker)"},
      {.name = "session-rereplicate-tracked",
       .default_value = "65536",
       .help = "sessions whose record copies this gateway remembers (the latest it wrote or "
               "read, a few hundred bytes each), so that a decode worker found down has their "
               "records copied to another worker at once; past it the least recently used "
               "are forgotten and repaired at their next read; 0 = off"},
      {.name = "session-rereplicate-parallel",
       .default_value = "8",
       .help = "re-replications (a read of the record from the reachable decode workers, "
               "then a put) in flight at once after a decode worker is lost"},
      {.name = "max-migrations",
       .default_value = "3",
       .help = "times a stream may move to another worker after one failed under it "
               "(0 = a worker failure ends the stream)"},
      {.name = "resolve-interval-ms",
       .default_value = "5000",
       .help = "how often dns:/// worker targets are looked up again"},
      {.name = "max-context",
       .default_value = "0",
       .help = "longest prompt + completion accepted, in tokens (match the workers'); "
               "0 = the model's trained context length"},
      {.name = "chat-template",
       .default_value = "",
       .help = "how GenerateRequest.messages are rendered: empty = the model's own "
               "tokenizer.chat_template, rendered (its family's rendering where it cannot; "
               "plain User:/Assistant: when it has none), or a family by name: "
               "plain, chatml, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1, "
               "mistral-v3, mistral-v3-tekken, mistral-v7, llama3, gemma, phi3, zephyr"},
      {.name = "tool-call-parser",
       .default_value = "auto",
       .help = "how the HTTP front reads tool calls out of a chat reply: auto = from the "
               "model's chat template's markers (json where it has none), or one of hermes "
               "(<tool_call>, Qwen), qwen3_coder (<function=...> XML), llama3_json, mistral, "
               "granite, json (the reply is JSON calls), none (never parsed)"},
      {.name = "max-stop-strings", .default_value = "16", .help = "stop strings per request"},
      {.name = "default-max-tokens",
       .default_value = "4096",
       .help = "tokens generated for a request that sets no max_tokens (it stops earlier at "
               "end-of-generation or the context limit)"},
      {.name = "max-logit-bias",
       .default_value = "1024",
       .help = "entries of sampling.logit_bias per request"},
      {.name = "max-stop-token-ids",
       .default_value = "64",
       .help = "entries of sampling.stop_token_ids per request"},
      {.name = "max-n", .default_value = "16", .help = "completions per request (n)"},
      {.name = "chat-template-max-steps",
       .default_value = "2000000",
       .help = "statements and expressions one render of the model's chat template may "
               "evaluate (a template past it fails the request)"},
      {.name = "chat-template-max-output-bytes",
       .default_value = "8388608",
       .help = "bytes one render of the model's chat template may produce"},
      {.name = "max-response-format-bytes",
       .default_value = "65536",
       .help = "bytes of a request's response format (JSON schema, regex or grammar)"},
      {.name = "request-timeout-ms",
       .default_value = "600000",
       .help = "deadline for Generate calls that set none"},
      {.name = "router",
       .default_value = "kv",
       .help = "how prefill workers are chosen: kv (by the block index and load) or "
               "least-loaded"},
      {.name = "router-overlap-weight",
       .default_value = "1.0",
       .help = "router cost per prompt block a worker would have to compute"},
      {.name = "router-host-tier-weight",
       .default_value = "0.8",
       .help = "credit, as a fraction of a block held in a worker's pool, for a prompt block "
               "it holds only in host RAM (it is copied back, not computed); [0, 1]"},
      {.name = "router-disk-tier-weight",
       .default_value = "0.5",
       .help = "the same for a block held only on the worker's disk tier; [0, 1]"},
      {.name = "router-load-weight",
       .default_value = "1.0",
       .help = "router cost per block charged to a worker by requests in flight (prefill: "
               "the blocks it computes; decode: the prompt's blocks)"},
      {.name = "router-pull-min-blocks",
       .default_value = "4",
       .help = "a prefill worker pulls a prompt's prefix from another that has reported at "
               "least this many more of its leading blocks, instead of computing them; 0 = never"},
      {.name = "router-prediction-ms",
       .default_value = "10000",
       .help = "how long a routed prompt's blocks count as held by its worker before the "
               "worker reports them; 0 = off"},
      {.name = "index-max-entries",
       .default_value = "50331648",
       .help = "(block hash, worker) entries the block index holds at most (~20 bytes each; "
               "past it the blocks least used by routes are evicted)"},
      {.name = "index-shards",
       .default_value = "32",
       .help = "the block index's shards, each with its writers' lock: a power of two in "
               "1..4096 (fewer: larger tables, on huge pages sooner; more: writers meet less)"},
      {.name = "index-retired-per-sweep",
       .default_value = "16",
       .help = "workers whose entries go (restarted or gone) swept out of the block index "
               "together, one pass over it for this many (1..1024; 1: each at once)"},
      {.name = "log-level",
       .default_value = "info",
       .help = "stderr diagnostics: error, warning, info or debug (routing decisions)"},
      {.name = "api-keys-file",
       .default_value = "",
       .help = "require API keys (authorization: Bearer KEY): one \"TENANT KEY\" per line; "
               "each tenant's prefix cache is its own; re-read when it changes"},
      {.name = "api-keys-reload-s",
       .default_value = "30",
       .help = "check --api-keys-file for changes at most this often"},
  };
  for (common::FlagSpec& s : rpc::PublicTlsFlagSpecs()) specs.push_back(s);
  for (common::FlagSpec& s : engine::constrain::CompileLimitFlagSpecs()) specs.push_back(s);
  specs.push_back(rpc::HealthListenFlagSpec());
  for (common::FlagSpec& s :
       rpc::AdmissionFlagSpecs({.max_in_flight = 4096, .max_queued_tokens = 1 << 20})) {
    specs.push_back(std::move(s));
  }
  specs.push_back(kvtransfer::LeaseHeartbeatFlagSpec());
  for (common::FlagSpec& s : rpc::PeerChannelFlagSpecs()) specs.push_back(s);
  return specs;
}

absl::StatusOr<GatewaySetup> GatewaySetupFromArgs(const common::Args& args) {
  GatewaySetup setup;
  GatewayOptions& options = setup.service;
  // Flags are checked in the order main() always reported them, so the
  // first bad one named is the same one as before this code moved here.
  ASSIGN_OR_RETURN(options.limits.max_context, args.IntInRange("max-context", 0, 1 << 24));
  ASSIGN_OR_RETURN(options.limits.max_stop_strings,
                   args.IntInRange("max-stop-strings", 0, 1024));
  ASSIGN_OR_RETURN(options.limits.default_max_tokens,
                   args.IntInRange("default-max-tokens", 1, 1 << 24));
  ASSIGN_OR_RETURN(setup.http.threads, args.IntInRange("http-threads", 1, 4096));
  ASSIGN_OR_RETURN(const int32_t http_body, args.IntInRange("http-max-body-bytes", 1024, 1 << 30));
  setup.http.max_body_bytes = static_cast<size_t>(http_body);
  ASSIGN_OR_RETURN(options.limits.max_logit_bias, args.IntInRange("max-logit-bias", 0, 1 << 20));
  ASSIGN_OR_RETURN(options.limits.max_stop_token_ids,
                   args.IntInRange("max-stop-token-ids", 0, 1 << 16));
  ASSIGN_OR_RETURN(options.limits.max_n, args.IntInRange("max-n", 1, 1024));
  ASSIGN_OR_RETURN(const int32_t template_steps,
                   args.IntInRange("chat-template-max-steps", 1000, 1 << 30));
  setup.chat_template_limits.max_steps = template_steps;
  ASSIGN_OR_RETURN(const int32_t template_bytes,
                   args.IntInRange("chat-template-max-output-bytes", 1024, 1 << 30));
  setup.chat_template_limits.max_output_bytes = template_bytes;
  ASSIGN_OR_RETURN(options.limits.max_response_format_bytes,
                   args.IntInRange("max-response-format-bytes", 16, 1 << 26));
  ASSIGN_OR_RETURN(options.limits.response_format,
                   engine::constrain::CompileLimitsFromArgs(args));
  ASSIGN_OR_RETURN(const int32_t timeout_ms,
                   args.IntInRange("request-timeout-ms", 1, 24 * 3600 * 1000));
  options.request_timeout = absl::Milliseconds(timeout_ms);
  ASSIGN_OR_RETURN(options.channels, rpc::PeerChannelOptionsFromArgs(args));
  ASSIGN_OR_RETURN(setup.public_tls, rpc::PublicTlsFromArgs(args));
  ASSIGN_OR_RETURN(const int32_t keys_reload_s, args.IntInRange("api-keys-reload-s", 1, 86400));
  if (!args.String("api-keys-file").empty()) {
    ASSIGN_OR_RETURN(options.api_keys,
                     ApiKeys::Load(args.String("api-keys-file"), absl::Seconds(keys_reload_s)));
  }
  ASSIGN_OR_RETURN(options.admission, rpc::AdmissionLimitsFromArgs(args));
  ASSIGN_OR_RETURN(options.router.overlap_weight, args.Double("router-overlap-weight"));
  ASSIGN_OR_RETURN(options.router.load_weight, args.Double("router-load-weight"));
  ASSIGN_OR_RETURN(const double host_weight, TierWeight(args, "host"));
  ASSIGN_OR_RETURN(const double disk_weight, TierWeight(args, "disk"));
  options.router.tier_weights = {1.0, host_weight, disk_weight};
  ASSIGN_OR_RETURN(options.index.max_entries, args.IntInRange("index-max-entries", 0, 1 << 30));
  ASSIGN_OR_RETURN(options.index.shards, args.IntInRange("index-shards", 1, 4096));
  if (!std::has_single_bit(static_cast<unsigned>(options.index.shards))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--index-shards: must be a power of two, got ", options.index.shards));
  }
  ASSIGN_OR_RETURN(options.index.retired_per_sweep,
                   args.IntInRange("index-retired-per-sweep", 1, 1024));
  ASSIGN_OR_RETURN(setup.log_level, common::ParseLogLevel(args.String("log-level")));
  ASSIGN_OR_RETURN(const int32_t prediction_ms,
                   args.IntInRange("router-prediction-ms", 0, 24 * 3600 * 1000));
  options.router.prediction_ttl = absl::Milliseconds(prediction_ms);
  if (args.String("router") != "kv" && args.String("router") != "least-loaded") {
    return absl::InvalidArgumentError(
        absl::StrCat("--router: \"", args.String("router"), "\" is not kv or least-loaded"));
  }
  options.kv_routing = args.String("router") == "kv";
  ASSIGN_OR_RETURN(const int32_t resolve_ms,
                   args.IntInRange("resolve-interval-ms", 100, 3600 * 1000));
  options.resolve_interval = absl::Milliseconds(resolve_ms);
  options.prefill_workers = SplitAddresses(args.String("prefill"));
  options.decode_workers = SplitAddresses(args.String("decode"));
  RETURN_IF_ERROR(ValidateTargets(options.prefill_workers, "--prefill"));
  RETURN_IF_ERROR(ValidateTargets(options.decode_workers, "--decode"));
  ASSIGN_OR_RETURN(options.router.pull_min_blocks,
                   args.IntInRange("router-pull-min-blocks", 0, 1 << 20));
  ASSIGN_OR_RETURN(options.max_migrations, args.IntInRange("max-migrations", 0, 1000));
  ASSIGN_OR_RETURN(const int32_t drain_s, args.IntInRange("drain-timeout-s", 0, 24 * 3600));
  setup.drain_timeout = absl::Seconds(drain_s);
  ASSIGN_OR_RETURN(options.streams_per_decode_worker,
                   args.IntInRange("decode-worker-streams", 1, 1 << 24));
  ASSIGN_OR_RETURN(const int32_t unavailable_ms,
                   args.IntInRange("unavailable-wait-ms", 0, 24 * 3600 * 1000));
  options.unavailable_wait = absl::Milliseconds(unavailable_ms);
  ASSIGN_OR_RETURN(const int32_t progress_ms,
                   args.IntInRange("progress-timeout-ms", 0, 24 * 3600 * 1000));
  options.progress_timeout = absl::Milliseconds(progress_ms);
  ASSIGN_OR_RETURN(const int32_t floor_ms,
                   args.IntInRange("progress-timeout-floor-ms", 1, 24 * 3600 * 1000));
  options.progress_floor = absl::Milliseconds(floor_ms);
  ASSIGN_OR_RETURN(const int32_t heartbeat_ms,
                   args.IntInRange("lease-heartbeat-ms", 0, 24 * 3600 * 1000));
  options.lease_heartbeat = absl::Milliseconds(heartbeat_ms);
  ASSIGN_OR_RETURN(options.kv_overcommit, args.Double("kv-overcommit"));
  if (options.kv_overcommit < 0 || options.kv_overcommit > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-overcommit: ", options.kv_overcommit, " is outside [0, 1000]"));
  }
  ASSIGN_OR_RETURN(options.admission_queue.max_waiting,
                   args.IntInRange("admission-queue", 0, 1 << 20));
  SessionOptions& sessions = options.sessions;
  ASSIGN_OR_RETURN(sessions.default_window, args.IntInRange("session-window", 2, 1 << 24));
  ASSIGN_OR_RETURN(sessions.max_ttl_seconds,
                   args.IntInRange("max-session-ttl-s", 1, 365 * 24 * 3600));
  ASSIGN_OR_RETURN(sessions.default_ttl_seconds,
                   args.IntInRange("session-ttl-s", 1, sessions.max_ttl_seconds));
  ASSIGN_OR_RETURN(sessions.replicas, args.IntInRange("session-replicas", 1, 16));
  ASSIGN_OR_RETURN(const int32_t store_ms,
                   args.IntInRange("session-store-timeout-ms", 1, 24 * 3600 * 1000));
  sessions.store_timeout = absl::Milliseconds(store_ms);
  ASSIGN_OR_RETURN(const int32_t tracked,
                   args.IntInRange("session-rereplicate-tracked", 0, 1 << 30));
  sessions.rereplicate_tracked = tracked;
  ASSIGN_OR_RETURN(sessions.rereplicate_parallel,
                   args.IntInRange("session-rereplicate-parallel", 1, 1024));
  ASSIGN_OR_RETURN(const int32_t evict_percent, args.IntInRange("session-evict-percent", 1, 100));
  sessions.evict_to = evict_percent / 100.0;
  ASSIGN_OR_RETURN(sessions.local_prefill_tokens,
                   args.IntInRange("session-local-prefill-tokens", 0, 1 << 24));
  ASSIGN_OR_RETURN(options.local_prefill_tokens,
                   args.IntInRange("local-prefill-tokens", 0, 1 << 24));
  ASSIGN_OR_RETURN(options.local_prefill_queue, args.IntInRange("local-prefill-queue", 0, 1 << 20));
  if (options.decode_workers.empty()) {
    return absl::InvalidArgumentError("--decode needs at least one address");
  }

  setup.model_path = args.String("model");
  options.model_name = args.String("model-name").empty()
                           ? std::filesystem::path(setup.model_path).stem().string()
                           : args.String("model-name");
  setup.chat_template = args.String("chat-template");
  setup.tool_call_parser = args.String("tool-call-parser");
  if (setup.tool_call_parser != "auto") {
    absl::StatusOr<tools::ToolCallFormat> format =
        tools::ToolCallFormatFromName(setup.tool_call_parser);
    if (!format.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tool-call-parser: ", format.status().message()));
    }
    setup.http.tool_call_format = *format;
  }
  setup.listen = args.String("listen");
  setup.metrics_listen = args.String("metrics-listen");
  setup.health_listen = args.String("health-listen");
  setup.http.listen = args.String("http-listen");
  setup.http.model_name = options.model_name;
  return setup;
}

absl::StatusOr<int32_t> TrainedContextLength(const engine::GgufFile& model,
                                             std::string_view architecture) {
  const std::string key = std::string(architecture) + ".context_length";
  absl::StatusOr<int64_t> trained = model.GetInt(key);
  if (!trained.ok() || *trained < 2 || *trained > (1 << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model states no usable ", key, "; pass --max-context"));
  }
  return static_cast<int32_t>(*trained);
}

engine::ChatTemplate DetectChatTemplate(const engine::GgufFile& model) {
  // The model's own template, rendered by the Jinja interpreter (falling
  // back to its recognised family where it cannot render); without a
  // vocabulary to take BOS and EOS from, the family alone.
  absl::StatusOr<engine::ChatTemplate> own = engine::ChatTemplate::FromGguf(model);
  if (own.ok()) return *std::move(own);
  absl::StatusOr<std::string_view> jinja = model.GetString("tokenizer.chat_template");
  return engine::ChatTemplate::Detect(jinja.ok() ? *jinja : "");
}

absl::Status ApplyModelMetadata(const engine::GgufFile& model, GatewaySetup& setup) {
  GatewayOptions& options = setup.service;
  absl::StatusOr<std::string_view> arch = model.GetString("general.architecture");
  options.architecture = arch.ok() ? std::string(*arch) : "";
  if (options.limits.max_context == 0) {
    ASSIGN_OR_RETURN(options.limits.max_context,
                     TrainedContextLength(model, options.architecture));
  }
  if (setup.chat_template.empty()) {
    options.chat_template = DetectChatTemplate(model);
    options.chat_template.set_render_limits(setup.chat_template_limits);
    if (setup.tool_call_parser == "auto") {
      absl::StatusOr<std::string_view> jinja = model.GetString("tokenizer.chat_template");
      setup.http.tool_call_format = tools::DetectToolCallFormat(jinja.ok() ? *jinja : "");
    }
    return absl::OkStatus();
  }
  // A family by name renders no tools: the gateway's description of them
  // asks for JSON calls (tools/tool_prompt.h), which "auto" leaves at kJson.
  absl::StatusOr<engine::ChatTemplate> named = engine::ChatTemplate::FromName(setup.chat_template);
  if (!named.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chat-template: ", named.status().message()));
  }
  options.chat_template = *named;
  options.chat_template.set_render_limits(setup.chat_template_limits);
  return absl::OkStatus();
}

}  // namespace tandem::gateway
