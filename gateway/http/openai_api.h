// The OpenAI-compatible HTTP API's bodies, translated to and from the public
// gRPC messages: a /v1/completions or /v1/chat/completions JSON body becomes
// a tandem.v1.GenerateRequest (sent through the gateway's own Generation
// service, so both fronts share one path), and the GenerateResponse stream
// becomes OpenAI's JSON response or its server-sent-event chunks. Errors take
// OpenAI's shape ({"error": {"message", "type", "param", "code"}}) and the
// HTTP status matching the gRPC code. Pure functions and value types;
// thread-compatible.
#ifndef TANDEM_GATEWAY_HTTP_OPENAI_API_H_
#define TANDEM_GATEWAY_HTTP_OPENAI_API_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gateway/http/openai_tools.h"
#include "gateway/tools/tool_call_parser.h"
#include "tandem/v1/generation.pb.h"

namespace tandem::gateway::openai {

enum class Endpoint { kCompletions, kChat };

struct Request {
  Endpoint endpoint = Endpoint::kCompletions;
  tandem::v1::GenerateRequest generate;
  bool stream = false;
  // stream_options.include_usage: a last chunk with the usage and no choices.
  bool include_usage = false;
  // Whether choices carry logprobs (completions: "logprobs" set; chat:
  // "logprobs": true).
  bool logprobs = false;
  // Chat with tools: whether and how the reply is read for tool calls.
  ToolUse tools;
  // The format calls are read in: kNone unless tools.parse; kJson for a
  // forced call; else the model's (ParseRequest's `tool_format`).
  tools::ToolCallFormat tool_format = tools::ToolCallFormat::kNone;
  // The model's format, which also shapes call ids (Mistral's templates
  // take only 9 alphanumerics), forced call or not.
  tools::ToolCallFormat model_tool_format = tools::ToolCallFormat::kJson;
};

// Parses and checks a request body. InvalidArgument naming the OpenAI field
// ("temperature: must be a number") for malformed JSON, wrong types and the
// parameters Tandem does not implement (best_of > 1, echo, suffix, the
// legacy functions). Values are range-checked later, by the gateway's
// validation of the GenerateRequest, like any gRPC request's. Besides
// OpenAI's parameters the extensions vLLM accepts are read: top_k, min_p,
// repetition_penalty, min_tokens, stop_token_ids, ignore_eos,
// prompt_logprobs, guided_json / guided_regex / guided_grammar /
// guided_choice, and llama.cpp's json_schema and grammar
// (openai_structured.h). Chat requests take tools (openai_tools.h); their
// replies are read for calls in `tool_format`, the model's format.
absl::StatusOr<Request> ParseRequest(
    Endpoint endpoint, std::string_view body,
    tools::ToolCallFormat tool_format = tools::ToolCallFormat::kJson);

// Builds the response of one request from its GenerateResponse messages.
class ResponseBuilder {
 public:
  // `id` is the response id's suffix (the request id); `model` the name the
  // response reports; `created` Unix seconds.
  ResponseBuilder(const Request& request, std::string id, std::string model, int64_t created);

  // Streaming: the SSE events (each "data: {...}\n\n") for one message.
  std::vector<std::string> Events(const tandem::v1::GenerateResponse& message);
  // Streaming: the events after the last message (the usage chunk when
  // asked for, then "data: [DONE]").
  std::vector<std::string> Closing() const;
  // Whole response: folds one message in.
  void Add(const tandem::v1::GenerateResponse& message);
  // Whole response: the JSON body once every message is in.
  std::string Body() const;

 private:
  using Tokens = google::protobuf::RepeatedPtrField<tandem::v1::Token>;
  struct Choice {
    bool started = false;
    std::string text;
    tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;
    Tokens tokens;                          // kept only with logprobs
    int64_t streamed_chars = 0;             // completions text_offset across chunks
    tandem::v1::Usage usage;
    bool has_usage = false;
    // Chat with tools, streaming: reads the calls out as the text comes.
    std::optional<tools::ToolCallParser> parser;
    int calls_sent = 0;  // tool calls started in the stream
  };

  // The choice a message belongs to, marked started; `first` tells whether
  // this is its first message.
  Choice& Take(const tandem::v1::GenerateResponse& message, bool* first);
  // One chunk of choice `message.index()`: `delta` (chat) or `text`
  // (completions), the message's logprobs when `with_logprobs`, and its
  // finish reason when `with_finish`.
  nlohmann::ordered_json ChunkJson(const tandem::v1::GenerateResponse& message,
                                   const Choice& choice, bool first, nlohmann::ordered_json delta,
                                   bool with_logprobs, bool with_finish) const;
  // Streaming with tool calls: the message's chunks (content, each call,
  // the finish).
  std::vector<nlohmann::ordered_json> ToolChunks(const tandem::v1::GenerateResponse& message,
                                                 Choice& choice, bool first);
  std::string FinishName(const Choice& choice, tandem::v1::FinishReason reason) const;
  nlohmann::ordered_json LogprobsJson(const Tokens& tokens, int64_t text_offset) const;
  nlohmann::ordered_json UsageJson() const;
  // vLLM's "prompt_logprobs": null for the first prompt token, then one
  // {"<id>": {"logprob", "decoded_token"}} object per token (the token and
  // its alternatives).
  nlohmann::ordered_json PromptLogprobsJson() const;

  Endpoint endpoint_;
  bool logprobs_;
  bool prompt_logprobs_;
  bool include_usage_;
  ToolUse tools_;
  tools::ToolCallFormat tool_format_;
  tools::ToolCallFormat id_format_;  // the model's (Request::model_tool_format)
  // The tools' parameter types (kQwen3Coder's values are text); null: none.
  std::shared_ptr<const tools::ParameterTypes> parameter_types_;
  std::string id_;
  std::string model_;
  int64_t created_;
  std::vector<Choice> choices_;                   // by index
  std::vector<tandem::v1::Token> prompt_tokens_;  // from choice 0's first message
};

// GET /v1/models: {"object": "list", "data": [...]}, each model with the
// context length the gateway enforces as "max_model_len" (vLLM's name).
std::string ModelsBody(const tandem::v1::ListModelsResponse& models);

// The HTTP status OpenAI's API uses for what the gRPC code means.
int HttpStatus(absl::StatusCode code);
// {"error": {...}} for `status` (the gRPC field names in its message mapped
// to OpenAI's where they differ, e.g. "sampling.top_p" -> "top_p").
std::string ErrorBody(const absl::Status& status);

}  // namespace tandem::gateway::openai

#endif  // TANDEM_GATEWAY_HTTP_OPENAI_API_H_
