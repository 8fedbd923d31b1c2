// tandem-gateway's flags and their translation into the service's and the
// process's options, so the gateway's main() only parses flags, builds
// objects and serves (as worker/worker_main.h does for the workers). Called
// from main() and tests; nothing here keeps state. Thread-compatible.
#ifndef TANDEM_GATEWAY_GATEWAY_OPTIONS_H_
#define TANDEM_GATEWAY_GATEWAY_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/log.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/chat_template.h"
#include "gateway/generation_service.h"
#include "gateway/http/http_front.h"
#include "gateway/tools/tool_call_parser.h"
#include "rpc/tls.h"

namespace tandem::gateway {

// Every flag tandem-gateway takes, in --help order.
std::vector<common::FlagSpec> GatewayFlagSpecs();

// What the flags say. Named after engine::EngineSetup: GatewayOptions is
// already the service's part of it.
struct GatewaySetup {
  // The GenerationService's options. `architecture` and `chat_template` are
  // the model's to give, and `limits.max_context` too when --max-context is
  // 0: ApplyModelMetadata fills them in.
  GatewayOptions service;
  std::string model_path;     // --model (only its tokenizer and metadata are read)
  std::string chat_template;  // --chat-template; empty: detected from the model
  // --chat-template-max-steps, --chat-template-max-output-bytes: bounds on
  // rendering a request's conversation with the model's template.
  engine::jinja::RenderLimits chat_template_limits;
  // --tool-call-parser: "auto" (resolved by ApplyModelMetadata into
  // http.tool_call_format) or a tools::ToolCallFormat's name.
  std::string tool_call_parser = "auto";
  std::string listen;         // --listen (gRPC)
  std::string metrics_listen;  // --metrics-listen; empty: off
  std::string health_listen;   // --health-listen; empty: off
  // The HTTP front; `listen` empty: off. `https` stays null here: main()
  // loads the certificate of `public_tls` when there is one.
  HttpFrontOptions http;
  rpc::TlsFiles public_tls;  // --tls-cert and friends; cert empty: plaintext
  absl::Duration drain_timeout;  // --drain-timeout-s
  common::LogLevel log_level = common::LogLevel::kInfo;
};

// Checks every flag and fills a GatewaySetup. InvalidArgument (or the
// loader's NotFound for an unreadable --api-keys-file) whose message names
// the flag; flags are checked in a fixed order and the first bad one is
// reported. Reads --api-keys-file, but not the model.
absl::StatusOr<GatewaySetup> GatewaySetupFromArgs(const common::Args& args);

// "<architecture>.context_length" from the model's metadata: what
// --max-context 0 means, as on the workers. InvalidArgument asking for
// --max-context when it is absent or outside [2, 2^24].
absl::StatusOr<int32_t> TrainedContextLength(const engine::GgufFile& model,
                                             std::string_view architecture);

// The family of the model's tokenizer.chat_template; a model without one
// renders plainly (recognised()), as does one of no known family
// (!recognised()).
engine::ChatTemplate DetectChatTemplate(const engine::GgufFile& model);

// Fills in what `setup.service` takes from the model: its architecture
// (general.architecture, "" when absent), the trained context length when
// --max-context was 0, and the chat template: --chat-template's when given,
// else the model's (DetectChatTemplate); with --tool-call-parser auto, the
// tool-call format of the model's template (tools::DetectToolCallFormat).
// InvalidArgument from
// TrainedContextLength, or naming --chat-template for an unknown name.
absl::Status ApplyModelMetadata(const engine::GgufFile& model, GatewaySetup& setup);

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_GATEWAY_OPTIONS_H_
