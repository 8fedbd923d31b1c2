// ParseRequest (openai_api.h): an OpenAI request body read into the gRPC
// GenerateRequest; the responses are built in openai_api.cc.
#include <cstdint>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "gateway/http/openai_json.h"
#include "common/status_macros.h"
#include "gateway/http/openai_api.h"
#include "gateway/http/openai_structured.h"
#include "gateway/http/openai_tools.h"

namespace tandem::gateway::openai {
namespace {

// OpenAI's default for /v1/completions (its API reference; vLLM's too). A
// chat request without max_tokens runs to end-of-generation, within the
// gateway's --default-max-tokens.
constexpr int32_t kCompletionsDefaultMaxTokens = 16;

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
    // An assistant that only calls tools has no content; templates test
    // for that (other roles' absent content stays the empty string).
    out->set_content_is_null(role == "assistant" && content.is_null());
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
  out.model_tool_format = tool_format;
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

}  // namespace tandem::gateway::openai
