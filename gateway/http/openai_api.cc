#include "gateway/http/openai_api.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "gateway/http/openai_json.h"

namespace tandem::gateway::openai {
namespace {

int64_t Utf8Chars(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string FinishReasonName(tandem::v1::FinishReason reason) {
  switch (reason) {
    case tandem::v1::FINISH_REASON_LENGTH: return "length";
    case tandem::v1::FINISH_REASON_EOS:
    case tandem::v1::FINISH_REASON_STOP: return "stop";
    default: return "";
  }
}

Json Bytes(const std::string& raw) {
  Json out = Json::array();
  for (unsigned char c : raw) out.push_back(static_cast<int>(c));
  return out;
}

// The gRPC request's field names where OpenAI's differ.
std::string OpenAiParam(std::string_view message) {
  std::string field(message.substr(0, message.find_first_of(": ")));
  if (field.rfind("sampling.", 0) == 0) field.erase(0, 9);
  if (const size_t bracket = field.find('['); bracket != std::string::npos) {
    field.erase(bracket);
  }
  if (field == "prompt_token_ids") return "prompt";
  if (field == "tools_json") return "tools";
  return field;
}

}  // namespace

ResponseBuilder::ResponseBuilder(const Request& request, std::string id, std::string model,
                                 int64_t created)
    : endpoint_(request.endpoint),
      logprobs_(request.logprobs),
      prompt_logprobs_(request.generate.has_prompt_logprobs()),
      include_usage_(request.include_usage),
      tools_(request.tools),
      tool_format_(request.tool_format),
      id_format_(request.model_tool_format),
      parameter_types_(request.tool_format == tools::ToolCallFormat::kQwen3Coder
                           ? std::make_shared<const tools::ParameterTypes>(
                                 tools::ParameterTypesFromTools(request.generate.tools_json()))
                           : nullptr),
      id_(absl::StrCat(request.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", id)),
      model_(std::move(model)),
      created_(created) {}

Json ResponseBuilder::LogprobsJson(const Tokens& tokens,
                                          int64_t text_offset) const {
  if (endpoint_ == Endpoint::kChat) {
    Json content = Json::array();
    for (const tandem::v1::Token& t : tokens) {
      Json top = Json::array();
      for (const tandem::v1::TopLogprob& alt : t.top_logprobs()) {
        top.push_back({{"token", alt.text()}, {"logprob", alt.logprob()}, {"bytes", Bytes(alt.text())}});
      }
      const std::string token = SanitizeUtf8(t.raw());
      content.push_back({{"token", token},
                         {"logprob", t.logprob()},
                         {"bytes", Bytes(t.raw())},
                         {"top_logprobs", std::move(top)}});
    }
    return Json{{"content", std::move(content)}};
  }
  Json texts = Json::array(), logprobs = Json::array(), tops = Json::array(),
       offsets = Json::array();
  for (const tandem::v1::Token& t : tokens) {
    texts.push_back(SanitizeUtf8(t.raw()));
    logprobs.push_back(t.logprob());
    Json top = Json::object();
    for (const tandem::v1::TopLogprob& alt : t.top_logprobs()) {
      if (!top.contains(alt.text())) top[alt.text()] = alt.logprob();
    }
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += Utf8Chars(t.text());
  }
  return Json{{"tokens", std::move(texts)},
              {"token_logprobs", std::move(logprobs)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

Json ResponseBuilder::PromptLogprobsJson() const {
  Json out = Json::array({nullptr});
  for (const tandem::v1::Token& t : prompt_tokens_) {
    Json entry = Json::object();
    entry[std::to_string(t.id())] = {{"logprob", t.logprob()}, {"decoded_token", t.text()}};
    for (const tandem::v1::TopLogprob& alt : t.top_logprobs()) {
      const std::string id = std::to_string(alt.id());
      if (!entry.contains(id)) {
        entry[id] = {{"logprob", alt.logprob()}, {"decoded_token", alt.text()}};
      }
    }
    out.push_back(std::move(entry));
  }
  return out;
}

Json ResponseBuilder::UsageJson() const {
  // The prompt counts once; the choices' completions add up (OpenAI's usage).
  int32_t prompt = 0, cached = 0, completion = 0;
  for (const Choice& c : choices_) {
    prompt = std::max(prompt, c.usage.prompt_tokens());
    cached += c.usage.cached_prompt_tokens();
    completion += c.usage.completion_tokens();
  }
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", std::min(cached, prompt)}}}};
}

ResponseBuilder::Choice& ResponseBuilder::Take(const tandem::v1::GenerateResponse& message,
                                               bool* first) {
  const size_t index = static_cast<size_t>(std::max(message.index(), 0));
  if (choices_.size() <= index) choices_.resize(index + 1);
  Choice& c = choices_[index];
  *first = !c.started;
  c.started = true;
  if (*first && index == 0) {
    prompt_tokens_.assign(message.prompt_logprobs().begin(), message.prompt_logprobs().end());
  }
  if (message.has_usage()) {
    c.usage = message.usage();
    c.has_usage = true;
  }
  return c;
}

std::string ResponseBuilder::FinishName(const Choice& c, tandem::v1::FinishReason reason) const {
  if (c.calls_sent > 0 && reason != tandem::v1::FINISH_REASON_UNSPECIFIED) return "tool_calls";
  return FinishReasonName(reason);
}

Json ResponseBuilder::ChunkJson(const tandem::v1::GenerateResponse& message, const Choice& c,
                                bool first, Json delta, bool with_logprobs,
                                bool with_finish) const {
  const auto& tokens = message.tokens();
  Json choice = {{"index", message.index()}};
  choice[endpoint_ == Endpoint::kChat ? "delta" : "text"] = std::move(delta);
  choice["logprobs"] = with_logprobs && logprobs_ && !tokens.empty()
                           ? LogprobsJson(tokens, c.streamed_chars)
                           : Json(nullptr);
  const std::string finish = with_finish ? FinishName(c, message.finish_reason()) : "";
  choice["finish_reason"] = finish.empty() ? Json(nullptr) : Json(finish);
  if (first && prompt_logprobs_ && message.index() == 0) {
    choice["prompt_logprobs"] = PromptLogprobsJson();
  }
  Json chunk = {{"id", id_},
                {"object", endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", Json::array({std::move(choice)})}};
  return chunk;
}

std::vector<Json> ResponseBuilder::ToolChunks(const tandem::v1::GenerateResponse& message,
                                              Choice& c, bool first) {
  if (!c.parser.has_value()) c.parser.emplace(tool_format_, tools_.parallel, parameter_types_);
  std::string text;
  for (const tandem::v1::Token& t : message.tokens()) text += t.text();
  tools::ToolCallChunk got = c.parser->Feed(text);
  const bool finished = message.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED;
  if (finished) {
    tools::ToolCallChunk rest = c.parser->Finish();
    got.content += rest.content;
    for (tools::ToolCallDelta& delta : rest.deltas) got.deltas.push_back(std::move(delta));
  }
  std::vector<Json> out;
  // Text held back as a possible call sends nothing (but its logprobs).
  if (first || !got.content.empty() || (logprobs_ && !message.tokens().empty())) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!got.content.empty()) delta["content"] = std::move(got.content);
    out.push_back(ChunkJson(message, c, first, std::move(delta), /*with_logprobs=*/true,
                            /*with_finish=*/false));
  }
  const std::string seed = absl::StrCat(id_, "/", message.index());
  for (const tools::ToolCallDelta& delta : got.deltas) {
    if (!delta.name.empty()) ++c.calls_sent;
    if (delta.name.empty() && delta.arguments.empty()) continue;
    out.push_back(ChunkJson(message, c, false, ToolCallDeltaJson(delta, seed, id_format_), false,
                            false));
  }
  if (finished) out.push_back(ChunkJson(message, c, false, Json::object(), false, true));
  return out;
}

std::vector<std::string> ResponseBuilder::Events(const tandem::v1::GenerateResponse& message) {
  bool first = false;
  Choice& c = Take(message, &first);
  std::vector<Json> chunks;
  if (endpoint_ == Endpoint::kChat && tools_.parse) {
    chunks = ToolChunks(message, c, first);
  } else {
    std::string text;
    for (const tandem::v1::Token& t : message.tokens()) text += t.text();
    Json delta = Json::object();
    if (endpoint_ == Endpoint::kChat) {
      if (first) delta["role"] = "assistant";
      if (!text.empty()) delta["content"] = text;
    } else {
      delta = text;
    }
    chunks.push_back(ChunkJson(message, c, first, std::move(delta), true, true));
  }
  std::vector<std::string> out;
  for (const Json& chunk : chunks) out.push_back(absl::StrCat("data: ", Dump(chunk), "\n\n"));
  for (const tandem::v1::Token& t : message.tokens()) c.streamed_chars += Utf8Chars(t.text());
  return out;
}

std::vector<std::string> ResponseBuilder::Closing() const {
  std::vector<std::string> out;
  if (include_usage_ && !choices_.empty()) {
    Json chunk = {{"id", id_},
                  {"object", endpoint_ == Endpoint::kChat ? "chat.completion.chunk"
                                                          : "text_completion"},
                  {"created", created_},
                  {"model", model_},
                  {"choices", Json::array()},
                  {"usage", UsageJson()}};
    out.push_back(absl::StrCat("data: ", Dump(chunk), "\n\n"));
  }
  out.push_back("data: [DONE]\n\n");
  return out;
}

void ResponseBuilder::Add(const tandem::v1::GenerateResponse& message) {
  bool first = false;
  Choice& c = Take(message, &first);
  for (const tandem::v1::Token& t : message.tokens()) {
    c.text += t.text();
    if (logprobs_) *c.tokens.Add() = t;
  }
  if (message.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
    c.finish = message.finish_reason();
  }
}

std::string ResponseBuilder::Body() const {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice = {{"index", i}};
    std::string finish = FinishReasonName(c.finish);
    if (endpoint_ == Endpoint::kChat && tools_.parse) {
      const tools::ToolCallChunk got =
          tools::ToolCallParser::ParseAll(tool_format_, tools_.parallel, c.text, parameter_types_);
      Json message = {{"role", "assistant"},
                      {"content", got.content.empty() && !got.calls.empty() ? Json(nullptr)
                                                                            : Json(got.content)}};
      if (!got.calls.empty()) {
        message["tool_calls"] = ToolCallsJson(got.calls, absl::StrCat(id_, "/", i), id_format_);
        finish = "tool_calls";
      }
      choice["message"] = std::move(message);
    } else if (endpoint_ == Endpoint::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = logprobs_ ? LogprobsJson(c.tokens, 0) : Json(nullptr);
    choice["finish_reason"] = finish;
    if (prompt_logprobs_ && i == 0) choice["prompt_logprobs"] = PromptLogprobsJson();
    choices.push_back(std::move(choice));
  }
  Json body = {{"id", id_},
               {"object", endpoint_ == Endpoint::kChat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", model_},
               {"choices", std::move(choices)},
               {"usage", UsageJson()}};
  return Dump(body);
}

std::string ModelsBody(const tandem::v1::ListModelsResponse& models) {
  Json data = Json::array();
  for (const tandem::v1::ModelInfo& m : models.models()) {
    data.push_back({{"id", m.id()},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "tandem"},
                    {"max_model_len", m.max_context()}});
  }
  return Dump(Json{{"object", "list"}, {"data", std::move(data)}});
}

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string ErrorBody(const absl::Status& status) {
  const int http = HttpStatus(status.code());
  const char* type = http == 400 ? "invalid_request_error"
                     : http == 401 ? "authentication_error"
                     : http == 403 ? "permission_error"
                     : http == 404 ? "not_found_error"
                     : http == 429 ? "rate_limit_error"
                                   : "server_error";
  const std::string param = http == 400 ? OpenAiParam(std::string(status.message())) : "";
  Json error = {{"message", SanitizeUtf8(std::string(status.message()))},
                {"type", type},
                {"param", param.empty() ? Json(nullptr) : Json(param)},
                {"code", absl::StatusCodeToString(status.code())}};
  return Dump(Json{{"error", std::move(error)}});
}

}  // namespace tandem::gateway::openai
