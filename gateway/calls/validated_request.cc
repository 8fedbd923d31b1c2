#include "gateway/calls/validated_request.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "engine/constrain/constraint.h"
#include "gateway/tools/tool_prompt.h"
#include "rpc/convert.h"

namespace tandem::gateway {
namespace {

absl::Status FieldError(const std::string& field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}


// A response format is compiled here, so that a bad one is refused before
// any worker sees it, naming the field and the position in it.
absl::Status CheckResponseFormat(const engine::OutputConstraint& constraint,
                                 const GatewayLimits& limits) {
  if (!constraint.active()) return absl::OkStatus();
  const std::string field =
      absl::StrCat("sampling.response_format.", engine::OutputConstraintKindName(constraint.kind));
  if (constraint.source.size() > static_cast<size_t>(limits.max_response_format_bytes)) {
    return FieldError(field, absl::StrCat(constraint.source.size(),
                                          " bytes is more than the limit of ",
                                          limits.max_response_format_bytes));
  }
  if (constraint.kind != engine::OutputConstraint::Kind::kJsonObject &&
      constraint.source.empty()) {
    return FieldError(field, "is empty");
  }
  absl::StatusOr<engine::constrain::Grammar> grammar =
      engine::constrain::CompileConstraint(constraint, limits.response_format);
  if (!grammar.ok()) return FieldError(field, std::string(grammar.status().message()));
  return absl::OkStatus();
}

// The proto's ranges are checked here, field by field, so that each message
// names the proto field; engine::ValidateSamplingParams then runs on the
// converted `params` as well so that a rule added to the engine can never be
// bypassed by the gateway.
absl::Status CheckSampling(const tandem::v1::SamplingParams& proto,
                           const engine::SamplingParams& params, const GatewayLimits& limits,
                           int32_t n_vocab) {
  // Each test is written as !(in range) so that NaN fails it.
  if (!(std::isfinite(proto.temperature()) && proto.temperature() >= 0.0f)) {
    return FieldError("sampling.temperature",
                      absl::StrCat("must be finite and >= 0, got ", proto.temperature()));
  }
  if (!(proto.top_p() >= 0.0f && proto.top_p() <= 1.0f)) {
    return FieldError("sampling.top_p",
                      absl::StrCat("must be in [0, 1] (0 = unset), got ", proto.top_p()));
  }
  if (proto.top_k() < 0) {
    return FieldError("sampling.top_k", absl::StrCat("must be >= 0 (0 = off), got ", proto.top_k()));
  }
  if (!(proto.min_p() >= 0.0f && proto.min_p() <= 1.0f)) {
    return FieldError("sampling.min_p", absl::StrCat("must be in [0, 1], got ", proto.min_p()));
  }
  if (proto.logit_bias_size() > limits.max_logit_bias) {
    return FieldError("sampling.logit_bias", absl::StrCat("more than ", limits.max_logit_bias,
                                                          " entries (got ",
                                                          proto.logit_bias_size(), ")"));
  }
  if (proto.stop_token_ids_size() > limits.max_stop_token_ids) {
    return FieldError("sampling.stop_token_ids",
                      absl::StrCat("more than ", limits.max_stop_token_ids, " ids (got ",
                                   proto.stop_token_ids_size(), ")"));
  }
  // The rest (penalty ranges, biases, token ids) is the engine's own check,
  // whose messages start with the bare field name.
  if (absl::Status status = engine::ValidateSamplingParams(params, n_vocab); !status.ok()) {
    // The engine's messages start with the bare field name ("top_p must ...").
    return absl::InvalidArgumentError(absl::StrCat("sampling.", status.message()));
  }
  return CheckResponseFormat(params.constraint, limits);
}

// The request's SamplingRequest, converted as every later hop converts it
// (rpc/convert.h), then checked. prompt_logprobs is checked on the proto: an
// explicit -1 is out of range there, though the converted value means "off".
absl::StatusOr<engine::SamplingRequest> ParseSamplingRequest(
    const tandem::v1::GenerateRequest& request, const GatewayLimits& limits, int32_t n_vocab) {
  engine::SamplingRequest out = rpc::SamplingRequestFromProto(request);
  RETURN_IF_ERROR(CheckSampling(request.sampling(), out.sampling, limits, n_vocab));
  if (out.top_logprobs < 0 || out.top_logprobs > engine::kMaxTopLogprobs) {
    return FieldError("top_logprobs", absl::StrCat(out.top_logprobs, " is out of range [0, ",
                                                   engine::kMaxTopLogprobs, "]"));
  }
  if (request.has_prompt_logprobs()) {
    const int32_t k = request.prompt_logprobs();
    if (k < 0 || k > engine::kMaxTopLogprobs) {
      return FieldError("prompt_logprobs",
                        absl::StrCat(k, " is out of range [0, ", engine::kMaxTopLogprobs, "]"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseStop(
    const google::protobuf::RepeatedPtrField<std::string>& stop, const GatewayLimits& limits) {
  if (stop.size() > limits.max_stop_strings) {
    return FieldError("stop", absl::StrCat("more than ", limits.max_stop_strings,
                                           " stop strings (got ", stop.size(), ")"));
  }
  std::vector<std::string> out;
  out.reserve(stop.size());
  for (int i = 0; i < stop.size(); ++i) {
    const std::string& s = stop[i];
    const std::string field = absl::StrCat("stop[", i, "]");
    if (s.empty()) return FieldError(field, "empty string");
    if (s.size() > static_cast<size_t>(limits.max_stop_bytes)) {
      return FieldError(field, absl::StrCat(s.size(), " bytes is more than the limit of ",
                                            limits.max_stop_bytes));
    }
    // Stop strings are matched against the decoded text, which is always
    // valid UTF-8, so an invalid one could never match.
    if (SanitizeUtf8(s) != s) return FieldError(field, "not valid UTF-8");
    out.push_back(s);
  }
  return out;
}

struct ParsedPrompt {
  std::vector<int32_t> ids;
  // The request field the ids came from, for later messages.
  const char* field;
};

// The conversation in request.messages, rendered and tokenized.
absl::StatusOr<ParsedPrompt> ParseMessages(const tandem::v1::GenerateRequest& request,
                                           const engine::Tokenizer& tokenizer,
                                           const GatewayLimits& limits,
                                           const engine::ChatTemplate& chat) {
  if (!request.prompt().empty() || !request.prompt_token_ids().empty()) {
    return FieldError("messages", "set together with prompt or prompt_token_ids; send one");
  }
  std::vector<engine::ChatMessage> messages;
  size_t bytes = request.tools_json().size();
  for (const tandem::v1::ChatMessage& m : request.messages()) {
    bytes += m.role().size() + m.content().size() + m.tool_call_id().size() + m.name().size();
    engine::ChatMessage message{.role = m.role(),
                                .content = m.content(),
                                .content_is_null = m.content_is_null(),
                                .tool_call_id = m.tool_call_id(),
                                .name = m.name()};
    for (const tandem::v1::ToolCall& call : m.tool_calls()) {
      bytes += call.id().size() + call.name().size() + call.arguments().size();
      message.tool_calls.push_back(
          {.id = call.id(), .name = call.name(), .arguments = call.arguments()});
    }
    if (bytes > static_cast<size_t>(limits.max_prompt_bytes)) {
      return FieldError("messages", absl::StrCat("more than the limit of ",
                                                 limits.max_prompt_bytes, " bytes"));
    }
    messages.push_back(std::move(message));
  }
  RETURN_IF_ERROR(tools::ValidateToolsJson(request.tools_json(), "tools_json"));
  // With tools, the template renders them where it can, else the gateway's
  // description of them (tools/tool_prompt.h).
  ASSIGN_OR_RETURN(std::string text,
                   tools::UsesTools(messages, request.tools_json())
                       ? tools::RenderWithTools(chat, messages, request.tools_json())
                       : chat.Render(messages, /*add_generation_prompt=*/true));
  std::vector<int32_t> ids =
      tokenizer.Encode(text, {.add_special = true, .parse_special = true});
  if (ids.empty()) return FieldError("messages", "render to no tokens");
  return ParsedPrompt{.ids = std::move(ids), .field = "messages"};
}

absl::StatusOr<ParsedPrompt> ParsePrompt(const tandem::v1::GenerateRequest& request,
                                         const engine::Tokenizer& tokenizer,
                                         const GatewayLimits& limits,
                                         const engine::ChatTemplate& chat) {
  if (!request.messages().empty()) return ParseMessages(request, tokenizer, limits, chat);
  if (!request.tools_json().empty()) return FieldError("tools_json", "needs messages");
  if (!request.prompt_token_ids().empty()) {
    const auto& ids = request.prompt_token_ids();
    for (int i = 0; i < ids.size(); ++i) {
      if (!tokenizer.IsValidId(ids[i])) {
        return FieldError(absl::StrCat("prompt_token_ids[", i, "]"),
                          absl::StrCat(ids[i], " is out of range [0, ", tokenizer.n_vocab(), ")"));
      }
    }
    return ParsedPrompt{.ids = {ids.begin(), ids.end()}, .field = "prompt_token_ids"};
  }
  const std::string& prompt = request.prompt();
  if (prompt.empty()) return FieldError("prompt", "empty prompt and no prompt_token_ids or messages");
  if (prompt.size() > static_cast<size_t>(limits.max_prompt_bytes)) {
    return FieldError("prompt", absl::StrCat(prompt.size(), " bytes is more than the limit of ",
                                             limits.max_prompt_bytes));
  }
  std::vector<int32_t> ids =
      tokenizer.Encode(prompt, {.add_special = true, .parse_special = true});
  if (ids.empty()) return FieldError("prompt", "tokenizes to no tokens");
  return ParsedPrompt{.ids = std::move(ids), .field = "prompt"};
}

}  // namespace

absl::Status ValidateModel(const std::string& requested, const std::string& served) {
  if (requested.empty() || requested == served) return absl::OkStatus();
  // INVALID_ARGUMENT rather than NOT_FOUND: the request names something this
  // gateway never serves, which retrying will not change.
  return FieldError("model", absl::StrCat("unknown model \"", SanitizeUtf8(requested),
                                          "\"; this gateway serves \"", served, "\""));
}

absl::Status ValidateRequestId(std::string_view id, std::string_view field) {
  if (id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(field), ": ", id.size(), " bytes is more than the limit of ",
        kMaxRequestIdBytes));
  }
  for (char c : id) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(field), ": must be printable ASCII without spaces"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(
    const tandem::v1::GenerateRequest& request, const engine::Tokenizer& tokenizer,
    const std::string& model_name, const GatewayLimits& limits,
    const engine::ChatTemplate* chat) {
  // Cheap checks first; tokenizing the prompt comes last.
  RETURN_IF_ERROR(ValidateModel(request.model(), model_name));
  if (request.max_tokens() < 0) {
    return FieldError("max_tokens",
                      absl::StrCat("must be >= 0 (0 = unset), got ", request.max_tokens()));
  }
  if (request.n() < 0 || request.n() > limits.max_n) {
    return FieldError("n", absl::StrCat(request.n(), " is out of range [0, ", limits.max_n, "]"));
  }
  ValidatedRequest out;
  RETURN_IF_ERROR(ValidateRequestId(request.request_id(), "request_id"));
  out.request_id = request.request_id();
  engine::SamplingRequest& sampling = out;
  ASSIGN_OR_RETURN(sampling, ParseSamplingRequest(request, limits, tokenizer.n_vocab()));
  out.seed_given = request.sampling().has_seed();
  ASSIGN_OR_RETURN(out.stop, ParseStop(request.stop(), limits));
  out.ignore_eos = request.ignore_eos();

  static const engine::ChatTemplate kPlain = engine::ChatTemplate::Detect("");
  ASSIGN_OR_RETURN(ParsedPrompt prompt,
                   ParsePrompt(request, tokenizer, limits, chat != nullptr ? *chat : kPlain));
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.ids.size());
  if (prompt_tokens >= limits.max_context) {
    return FieldError(prompt.field,
                      absl::StrCat(prompt_tokens, " tokens leave no room to generate within "
                                   "max_context ", limits.max_context));
  }
  const int64_t room = limits.max_context - prompt_tokens;
  const int32_t asked =
      request.max_tokens() > 0 ? request.max_tokens() : std::max(limits.default_max_tokens, 1);
  out.max_tokens = static_cast<int32_t>(std::min<int64_t>(asked, room));
  out.prompt_ids = std::move(prompt.ids);
  return out;
}

}  // namespace tandem::gateway
