// tandem-gateway: the public entry point. Parses flags, loads the model's
// tokenizer (not its weights), wires the Generation service to the workers
// and serves.
#include <filesystem>
#include <iostream>
#include <utility>

#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/api_keys.h"
#include "gateway/generation_service.h"
#include "gateway/http/http_front.h"
#include "gateway/routing/worker_resolver.h"
#include "kvtransfer/rpc/lease_keeper.h"
#include "rpc/admission.h"
#include "rpc/bootstrap.h"
#include "rpc/health_port.h"
#include "rpc/metrics.h"
#include "rpc/tls.h"

namespace {

std::vector<std::string> SplitAddresses(const std::string& list) {
  return absl::StrSplit(list, ',', absl::SkipWhitespace());
}

}  // namespace

int main(int argc, char** argv) {
  tandem::rpc::BlockShutdownSignals();
  std::vector<tandem::common::FlagSpec> specs = {
      {.name = "listen", .default_value = "127.0.0.1:0",
       .help = "gRPC listen address host:port (port 0 = ephemeral)"},
      {.name = "metrics-listen", .default_value = "127.0.0.1:0",
       .help = "Prometheus /metrics address host:port; empty = off"},
      {.name = "http-listen", .default_value = "",
       .help = "OpenAI-compatible HTTP address host:port (/v1/completions, "
               "/v1/chat/completions, /v1/models; port 0 = ephemeral); empty = off"},
      {.name = "http-threads", .default_value = "64",
       .help = "HTTP requests served at once (a streaming response holds one)"},
      {.name = "http-max-body-bytes", .default_value = "8388608",
       .help = "largest HTTP request body (413 above it)"},
      {.name = "model", .help = "GGUF model file (only its tokenizer is read)", .required = true},
      {.name = "model-name", .default_value = "",
       .help = "name clients use in GenerateRequest.model (default: the file's stem)"},
      {.name = "prefill",
       .help = "prefill workers, comma-separated: host:port, or dns:///host:port for every "
               "address the name has (a Kubernetes headless Service), looked up again every "
               "--resolve-interval-ms",
       .required = true},
      {.name = "decode", .help = "decode workers, as --prefill", .required = true},
      tandem::rpc::DrainFlagSpec(),
      {.name = "decode-worker-streams", .default_value = "1024",
       .help = "streams one decode worker takes (match its --max-inflight): requests past "
               "the decode workers' total are refused before any work is done"},
      {.name = "unavailable-wait-ms", .default_value = "10000",
       .help = "when every prefill worker tried is unavailable, how long a request waits for "
               "one to come back (retrying) before it fails"},
      {.name = "progress-timeout-ms", .default_value = "20000",
       .help = "a decode worker that sends nothing this long while a stream waits on it (the "
               "KV fetch and first step, or any later step) is treated as failed and the "
               "stream moves on; 0 = off"},
      {.name = "kv-overcommit", .default_value = "1.0",
       .help = "requests in flight may be charged (prompt + max_tokens each) this many times "
               "the KV the decode workers report; past it a request is refused before any "
               "work (RESOURCE_EXHAUSTED); 0 = off"},
      {.name = "session-window", .default_value = "4096",
       .help = "tokens a session holds when CreateSession names no window (at most "
               "--max-context)"},
      {.name = "session-ttl-s", .default_value = "1800",
       .help = "idle seconds after which a session that names no TTL expires"},
      {.name = "max-session-ttl-s", .default_value = "86400",
       .help = "the longest idle TTL a session may name"},
      {.name = "session-replicas", .default_value = "2",
       .help = "decode workers each session record is kept on (its KV holder first), so a "
               "session outlives the loss of all but one of them"},
      {.name = "session-local-prefill-tokens", .default_value = "512",
       .help = "a session turn whose decode worker holds all but at most this many of its "
               "prompt tokens is prefilled there, without a prefill worker or a KV transfer "
               "(conditional disaggregation); 0 = always on a prefill worker"},
      {.name = "session-evict-percent", .default_value = "75",
       .help = "a session turn that would overflow its window evicts its oldest turns until "
               "prompt + max_tokens fits this percent of the window (100: only what the turn "
               "needs; less leaves room for the next turns to reuse the KV)"},
      {.name = "session-store-timeout-ms", .default_value = "5000",
       .help = "deadline of each call to a decode worker's session store"},
      {.name = "max-migrations", .default_value = "3",
       .help = "times a stream may move to another worker after one failed under it "
               "(0 = a worker failure ends the stream)"},
      {.name = "resolve-interval-ms", .default_value = "5000",
       .help = "how often dns:/// worker targets are looked up again"},
      {.name = "max-context", .default_value = "0",
       .help = "longest prompt + completion accepted, in tokens (match the workers'); "
               "0 = the model's trained context length"},
      {.name = "chat-template", .default_value = "",
       .help = "how GenerateRequest.messages are rendered: empty = the family of the model's "
               "tokenizer.chat_template (plain User:/Assistant: when it has none), or one of "
               "plain, chatml, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1, "
               "mistral-v3, mistral-v3-tekken, mistral-v7, llama3, gemma, phi3, zephyr"},
      {.name = "max-stop-strings", .default_value = "16", .help = "stop strings per request"},
      {.name = "default-max-tokens", .default_value = "4096",
       .help = "tokens generated for a request that sets no max_tokens (it stops earlier at "
               "end-of-generation or the context limit)"},
      {.name = "max-logit-bias", .default_value = "1024",
       .help = "entries of sampling.logit_bias per request"},
      {.name = "max-stop-token-ids", .default_value = "64",
       .help = "entries of sampling.stop_token_ids per request"},
      {.name = "max-n", .default_value = "16", .help = "completions per request (n)"},
      {.name = "request-timeout-ms", .default_value = "600000",
       .help = "deadline for Generate calls that set none"},
      {.name = "router", .default_value = "kv",
       .help = "how prefill workers are chosen: kv (by the block index and load) or "
               "least-loaded"},
      {.name = "router-overlap-weight", .default_value = "1.0",
       .help = "router cost per prompt block a worker would have to compute"},
      {.name = "router-host-tier-weight", .default_value = "0.8",
       .help = "credit, as a fraction of a block held in a worker's pool, for a prompt block "
               "it holds only in host RAM (it is copied back, not computed); [0, 1]"},
      {.name = "router-disk-tier-weight", .default_value = "0.5",
       .help = "the same for a block held only on the worker's disk tier; [0, 1]"},
      {.name = "router-load-weight", .default_value = "1.0",
       .help = "router cost per block charged to a worker by requests in flight (prefill: "
               "the blocks it computes; decode: the prompt's blocks)"},
      {.name = "router-pull-min-blocks", .default_value = "4",
       .help = "a prefill worker pulls a prompt's prefix from another that has reported at "
               "least this many more of its leading blocks, instead of computing them; 0 = never"},
      {.name = "router-prediction-ms", .default_value = "10000",
       .help = "how long a routed prompt's blocks count as held by its worker before the "
               "worker reports them; 0 = off"},
      {.name = "index-max-entries", .default_value = "4194304",
       .help = "(block hash, worker) entries the block index holds at most"},
      {.name = "log-level", .default_value = "info",
       .help = "stderr diagnostics: error, warning, info or debug (routing decisions)"},
      {.name = "api-keys-file", .default_value = "",
       .help = "require API keys (authorization: Bearer KEY): one \"TENANT KEY\" per line; "
               "each tenant's prefix cache is its own; re-read when it changes"},
      {.name = "api-keys-reload-s", .default_value = "30",
       .help = "check --api-keys-file for changes at most this often"},
  };
  for (tandem::common::FlagSpec& s : tandem::rpc::PublicTlsFlagSpecs()) specs.push_back(s);
  specs.push_back(tandem::rpc::HealthListenFlagSpec());
  for (tandem::common::FlagSpec& s :
       tandem::rpc::AdmissionFlagSpecs({.max_in_flight = 4096, .max_queued_tokens = 1 << 20})) {
    specs.push_back(std::move(s));
  }
  specs.push_back(tandem::kvtransfer::LeaseHeartbeatFlagSpec());
  for (tandem::common::FlagSpec& s : tandem::rpc::PeerChannelFlagSpecs()) specs.push_back(s);
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-gateway", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;

  tandem::gateway::GatewayOptions options;
  const std::string model_path = args->String("model");
  options.model_name = args->String("model-name").empty()
                           ? std::filesystem::path(model_path).stem().string()
                           : args->String("model-name");
  options.prefill_workers = SplitAddresses(args->String("prefill"));
  options.decode_workers = SplitAddresses(args->String("decode"));
  absl::StatusOr<int32_t> max_migrations = args->IntInRange("max-migrations", 0, 1000);
  absl::StatusOr<int32_t> decode_streams = args->IntInRange("decode-worker-streams", 1, 1 << 24);
  absl::StatusOr<int32_t> unavailable_ms =
      args->IntInRange("unavailable-wait-ms", 0, 24 * 3600 * 1000);
  absl::StatusOr<int32_t> progress_ms =
      args->IntInRange("progress-timeout-ms", 0, 24 * 3600 * 1000);
  absl::StatusOr<int32_t> heartbeat_ms =
      args->IntInRange("lease-heartbeat-ms", 0, 24 * 3600 * 1000);
  absl::StatusOr<int32_t> drain_s = args->IntInRange("drain-timeout-s", 0, 24 * 3600);
  absl::StatusOr<int32_t> resolve_ms = args->IntInRange("resolve-interval-ms", 100, 3600 * 1000);
  absl::Status targets = tandem::gateway::ValidateTargets(options.prefill_workers, "--prefill");
  if (targets.ok()) {
    targets = tandem::gateway::ValidateTargets(options.decode_workers, "--decode");
  }
  absl::StatusOr<int32_t> max_context = args->IntInRange("max-context", 0, 1 << 24);
  absl::StatusOr<int32_t> max_stops = args->IntInRange("max-stop-strings", 0, 1024);
  absl::StatusOr<int32_t> http_threads = args->IntInRange("http-threads", 1, 4096);
  absl::StatusOr<int32_t> http_body = args->IntInRange("http-max-body-bytes", 1024, 1 << 30);
  absl::StatusOr<int32_t> default_max_tokens =
      args->IntInRange("default-max-tokens", 1, 1 << 24);
  absl::StatusOr<int32_t> max_logit_bias = args->IntInRange("max-logit-bias", 0, 1 << 20);
  absl::StatusOr<int32_t> max_stop_ids = args->IntInRange("max-stop-token-ids", 0, 1 << 16);
  absl::StatusOr<int32_t> max_n = args->IntInRange("max-n", 1, 1024);
  absl::StatusOr<int32_t> timeout_ms =
      args->IntInRange("request-timeout-ms", 1, 24 * 3600 * 1000);
  absl::StatusOr<tandem::rpc::ChannelCacheOptions> channels =
      tandem::rpc::PeerChannelOptionsFromArgs(*args);
  absl::StatusOr<tandem::rpc::TlsFiles> public_tls = tandem::rpc::PublicTlsFromArgs(*args);
  absl::StatusOr<int32_t> keys_reload_s = args->IntInRange("api-keys-reload-s", 1, 86400);
  absl::StatusOr<std::unique_ptr<tandem::gateway::ApiKeys>> api_keys = nullptr;
  if (keys_reload_s.ok() && !args->String("api-keys-file").empty()) {
    api_keys = tandem::gateway::ApiKeys::Load(args->String("api-keys-file"),
                                              absl::Seconds(*keys_reload_s));
  }
  absl::StatusOr<tandem::rpc::AdmissionLimits> admission =
      tandem::rpc::AdmissionLimitsFromArgs(*args);
  absl::StatusOr<double> overlap_weight = args->Double("router-overlap-weight");
  absl::StatusOr<double> load_weight = args->Double("router-load-weight");
  absl::StatusOr<double> host_weight = args->Double("router-host-tier-weight");
  absl::StatusOr<double> disk_weight = args->Double("router-disk-tier-weight");
  for (auto [w, name] : {std::pair{&host_weight, "host"}, std::pair{&disk_weight, "disk"}}) {
    if (w->ok() && (**w < 0 || **w > 1)) {
      *w = absl::InvalidArgumentError(
          absl::StrCat("--router-", name, "-tier-weight: ", **w, " is outside [0, 1]"));
    }
  }
  absl::StatusOr<double> overcommit = args->Double("kv-overcommit");
  if (overcommit.ok() && (*overcommit < 0 || *overcommit > 1000)) {
    overcommit = absl::InvalidArgumentError(
        absl::StrCat("--kv-overcommit: ", *overcommit, " is outside [0, 1000]"));
  }
  absl::StatusOr<int32_t> pull_min_blocks = args->IntInRange("router-pull-min-blocks", 0, 1 << 20);
  absl::StatusOr<int32_t> prediction_ms =
      args->IntInRange("router-prediction-ms", 0, 24 * 3600 * 1000);
  absl::StatusOr<int32_t> index_entries = args->IntInRange("index-max-entries", 0, 1 << 30);
  absl::StatusOr<int32_t> session_window = args->IntInRange("session-window", 2, 1 << 24);
  absl::StatusOr<int32_t> max_ttl = args->IntInRange("max-session-ttl-s", 1, 365 * 24 * 3600);
  absl::StatusOr<int32_t> session_ttl =
      args->IntInRange("session-ttl-s", 1, max_ttl.ok() ? *max_ttl : 365 * 24 * 3600);
  absl::StatusOr<int32_t> replicas = args->IntInRange("session-replicas", 1, 16);
  absl::StatusOr<int32_t> evict_percent = args->IntInRange("session-evict-percent", 1, 100);
  absl::StatusOr<int32_t> local_prefill = args->IntInRange("session-local-prefill-tokens", 0,
                                                           1 << 24);
  absl::StatusOr<int32_t> store_ms =
      args->IntInRange("session-store-timeout-ms", 1, 24 * 3600 * 1000);
  absl::StatusOr<tandem::common::LogLevel> log_level =
      tandem::common::ParseLogLevel(args->String("log-level"));
  absl::Status router = absl::OkStatus();
  if (args->String("router") != "kv" && args->String("router") != "least-loaded") {
    router = absl::InvalidArgumentError(absl::StrCat(
        "--router: \"", args->String("router"), "\" is not kv or least-loaded"));
  }
  for (const absl::Status& s :
       {max_context.status(), max_stops.status(), default_max_tokens.status(),
        http_threads.status(), http_body.status(),
        max_logit_bias.status(), max_stop_ids.status(), max_n.status(), timeout_ms.status(),
        channels.status(), public_tls.status(), keys_reload_s.status(), api_keys.status(),
        admission.status(), overlap_weight.status(), load_weight.status(),
        host_weight.status(), disk_weight.status(),
        index_entries.status(), log_level.status(), prediction_ms.status(), router,
        resolve_ms.status(), targets, pull_min_blocks.status(), max_migrations.status(),
        drain_s.status(), decode_streams.status(), unavailable_ms.status(),
        progress_ms.status(), heartbeat_ms.status(), overcommit.status(),
        session_window.status(), max_ttl.status(), session_ttl.status(), replicas.status(),
        store_ms.status(), evict_percent.status(), local_prefill.status()}) {
    if (!s.ok()) {
      std::cerr << "tandem-gateway: " << s.message() << "\n";
      return 2;
    }
  }
  if (options.prefill_workers.empty() || options.decode_workers.empty()) {
    std::cerr << "tandem-gateway: --prefill and --decode need at least one address each\n";
    return 2;
  }
  options.limits.max_context = static_cast<int32_t>(*max_context);
  options.limits.max_stop_strings = static_cast<int32_t>(*max_stops);
  options.limits.default_max_tokens = *default_max_tokens;
  options.limits.max_logit_bias = *max_logit_bias;
  options.limits.max_stop_token_ids = *max_stop_ids;
  options.limits.max_n = *max_n;
  options.request_timeout = absl::Milliseconds(*timeout_ms);
  options.admission = *admission;
  options.kv_overcommit = *overcommit;
  options.channels = *channels;
  options.api_keys = std::move(*api_keys);
  options.kv_routing = args->String("router") == "kv";
  options.router = {.overlap_weight = *overlap_weight,
                    .tier_weights = {1.0, *host_weight, *disk_weight},
                    .load_weight = *load_weight,
                    .prediction_ttl = absl::Milliseconds(*prediction_ms),
                    .pull_min_blocks = *pull_min_blocks};
  options.index.max_entries = *index_entries;
  options.resolve_interval = absl::Milliseconds(*resolve_ms);
  options.max_migrations = *max_migrations;
  options.streams_per_decode_worker = *decode_streams;
  options.unavailable_wait = absl::Milliseconds(*unavailable_ms);
  options.progress_timeout = absl::Milliseconds(*progress_ms);
  options.lease_heartbeat = absl::Milliseconds(*heartbeat_ms);
  options.sessions = {.default_window = *session_window,
                      .default_ttl_seconds = *session_ttl,
                      .max_ttl_seconds = *max_ttl,
                      .replicas = *replicas,
                      .local_prefill_tokens = *local_prefill,
                      .evict_to = *evict_percent / 100.0,
                      .store_timeout = absl::Milliseconds(*store_ms)};
  tandem::common::SetLogLevel(*log_level);

  absl::StatusOr<std::unique_ptr<tandem::engine::GgufFile>> file =
      tandem::engine::GgufFile::Open(model_path, {.require_tensor_data = false});
  absl::StatusOr<std::unique_ptr<tandem::engine::Tokenizer>> tokenizer =
      file.ok() ? tandem::engine::Tokenizer::FromGguf(**file) : file.status();
  if (!tokenizer.ok()) {
    std::cerr << "tandem-gateway: " << tokenizer.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::string_view> arch = (*file)->GetString("general.architecture");
  options.architecture = arch.ok() ? std::string(*arch) : "";
  if (options.limits.max_context == 0) {
    // As the workers: the model's trained context length.
    absl::StatusOr<int64_t> trained =
        (*file)->GetInt(options.architecture + ".context_length");
    if (!trained.ok() || *trained < 2 || *trained > (1 << 24)) {
      std::cerr << "tandem-gateway: the model states no usable " << options.architecture
                << ".context_length; pass --max-context\n";
      return 2;
    }
    options.limits.max_context = static_cast<int32_t>(*trained);
  }
  if (args->String("chat-template").empty()) {
    absl::StatusOr<std::string_view> jinja = (*file)->GetString("tokenizer.chat_template");
    options.chat_template = tandem::engine::ChatTemplate::Detect(jinja.ok() ? *jinja : "");
    if (!options.chat_template.recognised()) {
      std::cerr << "tandem-gateway: the model's chat template is of no known family; messages "
                   "are rendered plainly (pass --chat-template)\n";
    }
  } else {
    absl::StatusOr<tandem::engine::ChatTemplate> chat =
        tandem::engine::ChatTemplate::FromName(args->String("chat-template"));
    if (!chat.ok()) {
      std::cerr << "tandem-gateway: --chat-template: " << chat.status().message() << "\n";
      return 2;
    }
    options.chat_template = *chat;
  }
  file->reset();

  absl::StatusOr<std::unique_ptr<tandem::rpc::MetricsServer>> metrics =
      tandem::rpc::MetricsServer::Start(args->String("metrics-listen"));
  if (!metrics.ok()) {
    std::cerr << "tandem-gateway: " << metrics.status().message() << "\n";
    return 1;
  }
  tandem::gateway::GenerationService service(std::move(*tokenizer), options,
                                             (*metrics)->registry());
  // With --tls-cert the HTTP front is HTTPS, with the same certificate.
  std::shared_ptr<tandem::gateway::HttpsCertificate> https;
  if (!public_tls->cert.empty() && !args->String("http-listen").empty()) {
    absl::StatusOr<std::shared_ptr<tandem::gateway::HttpsCertificate>> loaded =
        tandem::gateway::HttpsCertificate::Load(public_tls->cert, public_tls->key,
                                                public_tls->ca,
                                                absl::Seconds(public_tls->reload_s));
    if (!loaded.ok()) {
      std::cerr << "tandem-gateway: " << loaded.status().message() << "\n";
      return 2;
    }
    https = std::move(*loaded);
  }
  const tandem::gateway::HttpFrontOptions http_options{
      .listen = args->String("http-listen"),
      .threads = *http_threads,
      .max_body_bytes = static_cast<size_t>(*http_body),
      .model_name = options.model_name,
      .https = https};
  std::unique_ptr<tandem::gateway::HttpFront> http;
  return tandem::rpc::ServeUntilSignal(
      "tandem-gateway", args->String("listen"), {&service}, **metrics,
      {.on_started =
           [&](grpc::Server& s,
               grpc::HealthCheckServiceInterface* health) -> absl::StatusOr<std::string> {
             service.AttachHealth(health);
             // Choices of an n > 1 request and the HTTP front call this
             // server's Generation service in-process.
             grpc::ChannelArguments channel_args;
             channel_args.SetMaxReceiveMessageSize(-1);
             service.SetSelfChannel(s.InProcessChannel(channel_args));
             if (http_options.listen.empty()) return "";
             ASSIGN_OR_RETURN(http, tandem::gateway::HttpFront::Start(
                                        http_options, s.InProcessChannel(channel_args),
                                        (*metrics)->registry()));
             return http->address();
           },
       .on_signal =
           [&] {
             if (http != nullptr) http->Stop();
             service.Drain();
           },
       .max_receive_bytes = options.limits.MaxRequestBytes(),
       .drain_timeout = absl::Seconds(*drain_s),
       .credentials = tandem::rpc::ServerCredentials(*public_tls),
       .health_listen = args->String("health-listen")});
}
