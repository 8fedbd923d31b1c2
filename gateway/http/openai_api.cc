#include "gateway/http/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "gateway/http/openai_structured.h"

namespace tandem::gateway::openai {
namespace {

using Json = nlohmann::ordered_json;

// Serialized, any invalid UTF-8 (a token's partial bytes) replaced.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// OpenAI's default for /v1/completions (its API reference; vLLM's too). A
// chat request without max_tokens runs to end-of-generation, within the
// gateway's --default-max-tokens.
constexpr int32_t kCompletionsDefaultMaxTokens = 16;

absl::Status FieldError(std::string_view field, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(message)));
}

// Typed reads of optional members: absent and null are "unset".
class Reader {
 public:
  explicit Reader(const Json& body) : body_(body) {}

  bool Has(const char* key) const { return body_.contains(key) && !body_[key].is_null(); }
  const Json& Get(const char* key) const { return body_[key]; }

  absl::Status Number(const char* key, float* out) const {
    if (!Has(key)) return absl::OkStatus();
    if (!Get(key).is_number()) return FieldError(key, "must be a number");
    *out = Get(key).get<float>();
    return absl::OkStatus();
  }
  absl::Status Integer(const char* key, int32_t* out) const {
    if (!Has(key)) return absl::OkStatus();
    const Json& v = Get(key);
    if (!v.is_number_integer() || v.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return FieldError(key, "must be a 32-bit integer");
    }
    *out = v.get<int32_t>();
    return absl::OkStatus();
  }
  absl::Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return absl::OkStatus();
    if (!Get(key).is_boolean()) return FieldError(key, "must be true or false");
    *out = Get(key).get<bool>();
    return absl::OkStatus();
  }

 private:
  const Json& body_;
};

absl::Status ParseStop(const Reader& r, tandem::v1::GenerateRequest& g) {
  if (!r.Has("stop")) return absl::OkStatus();
  const Json& stop = r.Get("stop");
  if (stop.is_string()) {
    g.add_stop(stop.get<std::string>());
    return absl::OkStatus();
  }
  if (!stop.is_array()) return FieldError("stop", "must be a string or an array of strings");
  for (const Json& s : stop) {
    if (!s.is_string()) return FieldError("stop", "must be a string or an array of strings");
    g.add_stop(s.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const Reader& r, tandem::v1::GenerateRequest& g) {
  tandem::v1::SamplingParams* s = g.mutable_sampling();
  float temperature = 1.0f;  // OpenAI's default
  RETURN_IF_ERROR(r.Number("temperature", &temperature));
  s->set_temperature(temperature);
  // The numbers whose JSON name is the proto field's; absent is 0 (unset).
  using Setter = void (tandem::v1::SamplingParams::*)(float);
  for (const auto& [key, set] : {std::pair<const char*, Setter>{
                                     "top_p", &tandem::v1::SamplingParams::set_top_p},
                                 {"min_p", &tandem::v1::SamplingParams::set_min_p},
                                 {"presence_penalty",
                                  &tandem::v1::SamplingParams::set_presence_penalty},
                                 {"frequency_penalty",
                                  &tandem::v1::SamplingParams::set_frequency_penalty},
                                 {"repetition_penalty",
                                  &tandem::v1::SamplingParams::set_repetition_penalty}}) {
    float value = 0.0f;
    RETURN_IF_ERROR(r.Number(key, &value));
    (s->*set)(value);
  }
  int32_t top_k = 0;
  RETURN_IF_ERROR(r.Integer("top_k", &top_k));
  // vLLM's -1 means off, as Tandem's 0.
  s->set_top_k(top_k == -1 ? 0 : top_k);
  int32_t min_tokens = 0;
  RETURN_IF_ERROR(r.Integer("min_tokens", &min_tokens));
  s->set_min_tokens(min_tokens);
  if (r.Has("seed")) {
    const Json& seed = r.Get("seed");
    if (!seed.is_number_integer()) return FieldError("seed", "must be an integer");
    // OpenAI's seeds are signed 64-bit; the bits are the seed.
    s->set_seed(seed.is_number_unsigned() ? seed.get<uint64_t>()
                                          : static_cast<uint64_t>(seed.get<int64_t>()));
  }
  if (r.Has("logit_bias")) {
    const Json& bias = r.Get("logit_bias");
    if (!bias.is_object()) return FieldError("logit_bias", "must map token ids to numbers");
    for (const auto& [key, v] : bias.items()) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(key, &id)) {
        return FieldError("logit_bias", absl::StrCat("key \"", SanitizeUtf8(key),
                                                     "\" is not a token id"));
      }
      if (!v.is_number()) return FieldError("logit_bias", "must map token ids to numbers");
      (*s->mutable_logit_bias())[id] = v.get<float>();
    }
  }
  if (r.Has("stop_token_ids")) {
    const Json& ids = r.Get("stop_token_ids");
    if (!ids.is_array()) return FieldError("stop_token_ids", "must be an array of token ids");
    for (const Json& id : ids) {
      if (!id.is_number_integer()) return FieldError("stop_token_ids", "must hold token ids");
      s->add_stop_token_ids(id.get<int32_t>());
    }
  }
  if (r.Has("prompt_logprobs")) {
    int32_t k = 0;
    RETURN_IF_ERROR(r.Integer("prompt_logprobs", &k));
    g.set_prompt_logprobs(k);
  }
  bool ignore_eos = false;
  RETURN_IF_ERROR(r.Bool("ignore_eos", &ignore_eos));
  g.set_ignore_eos(ignore_eos);
  return ParseStop(r, g);
}

// What Tandem does not do is refused rather than silently ignored.
absl::Status RefuseUnsupported(const Reader& r) {
  int32_t best_of = 1;
  RETURN_IF_ERROR(r.Integer("best_of", &best_of));
  if (best_of != 1) return FieldError("best_of", "only 1 is supported");
  bool echo = false;
  RETURN_IF_ERROR(r.Bool("echo", &echo));
  if (echo) return FieldError("echo", "is not supported");
  if (r.Has("suffix") && !(r.Get("suffix").is_string() && r.Get("suffix").empty())) {
    return FieldError("suffix", "is not supported");
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const Reader& r, tandem::v1::GenerateRequest& g) {
  if (!r.Has("prompt")) return FieldError("prompt", "is required");
  const Json& prompt = r.Get("prompt");
  if (prompt.is_string()) {
    g.set_prompt(prompt.get<std::string>());
    return absl::OkStatus();
  }
  if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    g.set_prompt(prompt[0].get<std::string>());
    return absl::OkStatus();
  }
  if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    for (const Json& id : prompt) {
      if (!id.is_number_integer()) return FieldError("prompt", "mixes token ids with other values");
      g.add_prompt_token_ids(id.get<int32_t>());
    }
    return absl::OkStatus();
  }
  return FieldError("prompt", "must be a string, one string in an array, or token ids");
}

absl::Status ParseMessages(const Reader& r, tandem::v1::GenerateRequest& g) {
  if (!r.Has("messages") || !r.Get("messages").is_array()) {
    return FieldError("messages", "must be an array of messages");
  }
  const Json& messages = r.Get("messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = absl::StrCat("messages[", i, "]");
    const Json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return FieldError(field, "must be an object with a string role");
    }
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return FieldError(absl::StrCat(field, ".role"),
                        absl::StrCat("\"", SanitizeUtf8(role), "\" is not supported"));
    }
    tandem::v1::ChatMessage* out = g.add_messages();
    out->set_role(role);
    RETURN_IF_ERROR(ParseMessageToolFields(m, field, *out));
    const Json content = m.contains("content") ? m["content"] : Json();
    out->set_content_is_null(content.is_null());
    if (content.is_string()) {
      out->set_content(content.get<std::string>());
    } else if (content.is_array()) {
      // Content parts: text parts are concatenated; others are refused.
      for (const Json& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return FieldError(absl::StrCat(field, ".content"), "only text parts are supported");
        }
        out->mutable_content()->append(part["text"].get<std::string>());
      }
    } else if (!content.is_null()) {
      return FieldError(absl::StrCat(field, ".content"), "must be a string or text parts");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(Endpoint endpoint, const Reader& r, Request& out) {
  if (endpoint == Endpoint::kCompletions) {
    // "logprobs": k, the alternatives per token (0: the chosen one only).
    int32_t k = -1;
    RETURN_IF_ERROR(r.Integer("logprobs", &k));
    out.logprobs = k >= 0;
    out.generate.set_top_logprobs(k < 0 ? 0 : k);
    if (k < -1) return FieldError("logprobs", "must be >= 0");
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(r.Bool("logprobs", &out.logprobs));
  int32_t k = 0;
  RETURN_IF_ERROR(r.Integer("top_logprobs", &k));
  if (k != 0 && !out.logprobs) return FieldError("top_logprobs", "needs \"logprobs\": true");
  out.generate.set_top_logprobs(k);
  return absl::OkStatus();
}

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
  return field;
}

}  // namespace

absl::StatusOr<Request> ParseRequest(Endpoint endpoint, std::string_view body,
                                     tools::ToolCallFormat tool_format) {
  Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return FieldError("body", "is not valid JSON");
  if (!json.is_object()) return FieldError("body", "must be a JSON object");
  const Reader r(json);
  Request out;
  out.endpoint = endpoint;
  tandem::v1::GenerateRequest& g = out.generate;
  if (r.Has("model")) {
    if (!r.Get("model").is_string()) return FieldError("model", "must be a string");
    g.set_model(r.Get("model").get<std::string>());
  }
  RETURN_IF_ERROR(RefuseUnsupported(r));
  if (endpoint == Endpoint::kCompletions) {
    RETURN_IF_ERROR(ParsePrompt(r, g));
  } else {
    RETURN_IF_ERROR(ParseMessages(r, g));
  }
  int32_t max_tokens = endpoint == Endpoint::kCompletions ? kCompletionsDefaultMaxTokens : 0;
  RETURN_IF_ERROR(r.Integer("max_tokens", &max_tokens));
  RETURN_IF_ERROR(r.Integer("max_completion_tokens", &max_tokens));
  if (max_tokens < 1 && (r.Has("max_tokens") || r.Has("max_completion_tokens"))) {
    return FieldError(r.Has("max_tokens") ? "max_tokens" : "max_completion_tokens",
                      "must be >= 1");
  }
  g.set_max_tokens(max_tokens);
  RETURN_IF_ERROR(ParseSampling(r, g));
  RETURN_IF_ERROR(ParseStructuredOutput(json, *g.mutable_sampling()));
  ASSIGN_OR_RETURN(out.tools, ParseTools(json, endpoint == Endpoint::kChat, g));
  out.tool_format = !out.tools.parse   ? tools::ToolCallFormat::kNone
                    : out.tools.forced ? tools::ToolCallFormat::kJson
                                       : tool_format;
  RETURN_IF_ERROR(ParseLogprobs(endpoint, r, out));
  int32_t n = 1;
  RETURN_IF_ERROR(r.Integer("n", &n));
  if (n < 1) return FieldError("n", "must be >= 1");
  g.set_n(n);
  RETURN_IF_ERROR(r.Bool("stream", &out.stream));
  if (r.Has("stream_options")) {
    const Json& options = r.Get("stream_options");
    if (!options.is_object()) return FieldError("stream_options", "must be an object");
    RETURN_IF_ERROR(Reader(options).Bool("include_usage", &out.include_usage));
  }
  return out;
}

ResponseBuilder::ResponseBuilder(const Request& request, std::string id, std::string model,
                                 int64_t created)
    : endpoint_(request.endpoint),
      logprobs_(request.logprobs),
      prompt_logprobs_(request.generate.has_prompt_logprobs()),
      include_usage_(request.include_usage),
      tools_(request.tools),
      tool_format_(request.tool_format),
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
  if (!c.parser.has_value()) c.parser.emplace(tool_format_, tools_.parallel);
  std::string text;
  for (const tandem::v1::Token& t : message.tokens()) text += t.text();
  tools::ToolCallChunk got = c.parser->Feed(text);
  const bool finished = message.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED;
  if (finished) {
    tools::ToolCallChunk rest = c.parser->Finish();
    got.content += rest.content;
    for (tools::ParsedToolCall& call : rest.calls) got.calls.push_back(std::move(call));
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
  for (const tools::ParsedToolCall& call : got.calls) {
    for (Json& delta : ToolCallDeltas(call, c.calls_sent, seed, tool_format_)) {
      out.push_back(ChunkJson(message, c, false, std::move(delta), false, false));
    }
    ++c.calls_sent;
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
          tools::ToolCallParser::ParseAll(tool_format_, tools_.parallel, c.text);
      Json message = {{"role", "assistant"},
                      {"content", got.content.empty() && !got.calls.empty() ? Json(nullptr)
                                                                            : Json(got.content)}};
      if (!got.calls.empty()) {
        message["tool_calls"] = ToolCallsJson(got.calls, absl::StrCat(id_, "/", i), tool_format_);
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
