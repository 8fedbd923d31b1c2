#include "bench/load_http.h"

#include <chrono>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/host_port.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

absl::StatusCode CodeOfHttp(int status) {
  switch (status) {
    case 400: return absl::StatusCode::kInvalidArgument;
    case 401: return absl::StatusCode::kUnauthenticated;
    case 404: return absl::StatusCode::kNotFound;
    case 429: return absl::StatusCode::kResourceExhausted;
    case 503: return absl::StatusCode::kUnavailable;
    case 504: return absl::StatusCode::kDeadlineExceeded;
    default: return absl::StatusCode::kUnknown;
  }
}

int EventTokens(const Json& chunk) {
  if (!chunk.is_object() || !chunk.contains("choices") || !chunk["choices"].is_array() ||
      chunk["choices"].empty()) {
    return 0;
  }
  const Json& choice = chunk["choices"][0];
  if (choice.contains("logprobs") && choice["logprobs"].is_object() &&
      choice["logprobs"].contains("tokens") && choice["logprobs"]["tokens"].is_array()) {
    return static_cast<int>(choice["logprobs"]["tokens"].size());
  }
  return choice.contains("text") && choice["text"].is_string() &&
                 !choice["text"].get<std::string>().empty()
             ? 1
             : 0;
}

}  // namespace

RequestResult RunOneHttp(const std::string& address, const std::string& model,
                         const std::vector<int32_t>& prompt, int32_t max_tokens,
                         absl::Duration timeout, const std::string& api_key,
                         const std::string& extra_body) {
  RequestResult result;
  absl::StatusOr<common::HostPort> hp = common::SplitHostPort(address);
  if (!hp.ok()) {
    result.code = absl::StatusCode::kInvalidArgument;
    return result;
  }
  httplib::Client client(common::StripBrackets(hp->host), hp->port);
  const auto seconds = absl::ToInt64Seconds(timeout);
  client.set_read_timeout(seconds, 0);
  client.set_write_timeout(seconds, 0);
  Json body = {{"model", model},           {"prompt", prompt},
               {"max_tokens", max_tokens}, {"temperature", 0},
               {"ignore_eos", true},       {"logprobs", 0},
               {"stream", true},           {"stream_options", {{"include_usage", true}}}};
  if (!extra_body.empty()) {
    const Json extra = Json::parse(extra_body, nullptr, /*allow_exceptions=*/false);
    if (extra.is_object()) body.update(extra);
  }
  const std::string payload = body.dump();
  std::string pending;  // SSE bytes not yet split into events
  bool error_event = false;
  const Clock::time_point sent = Clock::now();
  auto on_event = [&](const std::string& event) {
    if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") return;
    const Json chunk = Json::parse(event.substr(6), nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded() || chunk.contains("error")) {
      error_event = true;
      return;
    }
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      result.prompt_tokens = chunk["usage"].value("prompt_tokens", 0);
      result.cached_prompt_tokens =
          chunk["usage"]["prompt_tokens_details"].value("cached_tokens", 0);
    }
    RecordMessage(std::chrono::duration<double>(Clock::now() - sent).count(),
                  EventTokens(chunk), result);
  };
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = payload;
  req.set_header("Content-Type", "application/json");
  if (!api_key.empty()) req.set_header("Authorization", "Bearer " + api_key);
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    pending.append(data, size);
    for (size_t end = pending.find("\n\n"); end != std::string::npos;
         end = pending.find("\n\n")) {
      on_event(pending.substr(0, end));
      pending.erase(0, end + 2);
    }
    return true;
  };
  httplib::Result res = client.send(req);
  if (!res) {
    result.code = absl::StatusCode::kUnavailable;
  } else if (res->status != 200) {
    result.code = CodeOfHttp(res->status);
  } else {
    result.code = error_event ? absl::StatusCode::kInternal : absl::StatusCode::kOk;
  }
  return result;
}

int TokensInEvent(const std::string& chunk_json) {
  return EventTokens(Json::parse(chunk_json, nullptr, /*allow_exceptions=*/false));
}

}  // namespace tandem::bench
