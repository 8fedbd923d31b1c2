// tandem-session-bench: one long conversation against a running gateway,
// twice: on a session (Generation.Chat: only each new message is sent; the
// service keeps a rolling window) and as a client without sessions does it
// (Generation.Generate with every earlier message resent each turn, as
// llama-server and vLLM users do). Per turn it records the time to the
// first token and the prompt tokens prefilled (prompt minus cached); it
// prints a summary of both curves and appends one JSON line per mode to
// --out. The stateless run stops at its first failed turn (the conversation
// outgrew the context). It reports; it never fails on speed.
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "rpc/status.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::bench {
namespace {

namespace v1 = tandem::v1;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string addr;
  int32_t turns = 200;
  int32_t window = 1024;
  int32_t message_words = 24;
  int32_t max_tokens = 32;
  std::string out;
  std::string label;
  std::string mode = "both";
  v1::WindowPolicy policy = v1::WINDOW_POLICY_REPREFILL;
};

struct TurnResult {
  double ttft_s = 0;
  int32_t prompt_tokens = 0;
  int32_t prefilled_tokens = 0;
  int32_t evicted_tokens = 0;
  grpc::Status status;
  std::string reply;
};

// A deterministic user message: turn `i`, `words` words of a small
// vocabulary (the same text in both modes).
std::string Message(int i, int words) {
  static const char* const kWords[] = {"the", "cat", "ran", "to", "a", "big", "red", "house",
                                       "and", "saw", "dog", "who", "was", "very", "happy",
                                       "then", "they", "played", "in", "sun"};
  std::string m = absl::StrCat("Day ", i, ":");
  for (int w = 0; w < words; ++w) {
    absl::StrAppend(&m, " ", kWords[(i * 7 + w * 3) % (sizeof(kWords) / sizeof(kWords[0]))]);
  }
  return m + ".";
}

template <typename Reader>
TurnResult Read(Reader& reader, Clock::time_point sent) {
  TurnResult r;
  v1::GenerateResponse resp;
  bool first = true;
  while (reader.Read(&resp)) {
    if (first && resp.tokens_size() > 0) {
      r.ttft_s = std::chrono::duration<double>(Clock::now() - sent).count();
      first = false;
    }
    for (const v1::Token& t : resp.tokens()) r.reply += t.text();
    if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      r.prompt_tokens = resp.usage().prompt_tokens();
      r.prefilled_tokens = resp.usage().prompt_tokens() - resp.usage().cached_prompt_tokens();
      r.evicted_tokens = resp.usage().session_tokens_evicted();
    }
  }
  r.status = reader.Finish();
  return r;
}

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(600);
}

const char kSystem[] = "You are a storyteller. Tell short, happy stories about animals.";

std::vector<TurnResult> RunSession(v1::Generation::Stub& stub, const Config& c) {
  std::vector<TurnResult> out;
  v1::CreateSessionRequest create;
  create.set_system_prompt(kSystem);
  create.mutable_window()->set_max_tokens(c.window);
  create.mutable_window()->set_policy(c.policy);
  v1::SessionInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    const grpc::Status s = stub.CreateSession(&ctx, create, &info);
    if (!s.ok()) {
      std::cerr << "tandem-session-bench: CreateSession: " << rpc::FromGrpcStatus(s) << "\n";
      return out;
    }
  }
  for (int i = 0; i < c.turns; ++i) {
    v1::ChatRequest req;
    req.set_session_id(info.session_id());
    req.set_message(Message(i, c.message_words));
    req.set_max_tokens(c.max_tokens);
    req.set_ignore_eos(true);  // every reply as long as the other mode's
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    const Clock::time_point sent = Clock::now();
    auto reader = stub.Chat(&ctx, req);
    out.push_back(Read(*reader, sent));
    if (!out.back().status.ok()) break;
  }
  grpc::ClientContext ctx;
  v1::CloseSessionRequest close;
  close.set_session_id(info.session_id());
  v1::CloseSessionResponse closed;
  (void)stub.CloseSession(&ctx, close, &closed);
  return out;
}

std::vector<TurnResult> RunStateless(v1::Generation::Stub& stub, const Config& c) {
  std::vector<TurnResult> out;
  std::vector<v1::ChatMessage> history;
  v1::ChatMessage system;
  system.set_role("system");
  system.set_content(kSystem);
  history.push_back(system);
  for (int i = 0; i < c.turns; ++i) {
    v1::ChatMessage user;
    user.set_role("user");
    user.set_content(Message(i, c.message_words));
    history.push_back(user);
    v1::GenerateRequest req;
    for (const v1::ChatMessage& m : history) *req.add_messages() = m;
    req.set_max_tokens(c.max_tokens);
    req.set_ignore_eos(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    const Clock::time_point sent = Clock::now();
    auto reader = stub.Generate(&ctx, req);
    out.push_back(Read(*reader, sent));
    if (!out.back().status.ok()) break;
    v1::ChatMessage assistant;
    assistant.set_role("assistant");
    assistant.set_content(out.back().reply);
    history.push_back(assistant);
  }
  return out;
}

// Means over turns [from, to) of those that succeeded.
struct Span {
  double ttft_ms = 0;
  double prefilled = 0;
  int n = 0;
};
Span Mean(const std::vector<TurnResult>& r, int from, int to) {
  Span s;
  for (int i = from; i < to && i < static_cast<int>(r.size()); ++i) {
    if (!r[i].status.ok()) continue;
    s.ttft_ms += r[i].ttft_s * 1e3;
    s.prefilled += r[i].prefilled_tokens;
    ++s.n;
  }
  if (s.n > 0) {
    s.ttft_ms /= s.n;
    s.prefilled /= s.n;
  }
  return s;
}

void Report(const std::string& mode, const std::vector<TurnResult>& r, const Config& c) {
  int ok = 0;
  for (const TurnResult& t : r) ok += t.status.ok() ? 1 : 0;
  const int n = static_cast<int>(r.size());
  const Span first = Mean(r, 0, 10);
  const Span mid = Mean(r, n / 2 - 5, n / 2 + 5);
  const Span last = Mean(r, std::max(0, ok - 10), ok);
  std::cout << absl::StrFormat(
      "%-9s turns ok %3d/%d; TTFT ms / prefilled tokens: turns 1-10 %.1f / %.0f, around %d "
      "%.1f / %.0f, last 10 ok %.1f / %.0f; last prompt %d tokens%s\n",
      mode, ok, c.turns, first.ttft_ms, first.prefilled, n / 2, mid.ttft_ms, mid.prefilled,
      last.ttft_ms, last.prefilled, ok > 0 ? r[ok - 1].prompt_tokens : 0,
      ok < n ? absl::StrCat("; turn ", ok + 1, " failed: ",
                            rpc::FromGrpcStatus(r[ok].status).ToString())
             : "");
  if (c.out.empty()) return;
  std::ofstream f(c.out, std::ios::app);
  std::string ttft, prefilled;
  for (int i = 0; i < ok; ++i) {
    absl::StrAppend(&ttft, i > 0 ? ", " : "", absl::StrFormat("%.2f", r[i].ttft_s * 1e3));
    absl::StrAppend(&prefilled, i > 0 ? ", " : "", r[i].prefilled_tokens);
  }
  f << absl::StrFormat(
      "{\"bench\": \"session\", \"label\": \"%s\", \"mode\": \"%s\", \"turns\": %d, "
      "\"turns_ok\": %d, \"window\": %d, \"max_tokens\": %d, \"ttft_ms\": [%s], "
      "\"prefilled_tokens\": [%s]}\n",
      c.label, mode, c.turns, ok, c.window, c.max_tokens, ttft, prefilled);
}

absl::StatusOr<Config> ConfigFromArgs(const common::Args& args) {
  Config c;
  c.addr = args.String("addr");
  ASSIGN_OR_RETURN(c.turns, args.IntInRange("turns", 1, 1 << 20));
  ASSIGN_OR_RETURN(c.window, args.IntInRange("window", 2, 1 << 24));
  ASSIGN_OR_RETURN(c.message_words, args.IntInRange("message-words", 1, 1 << 16));
  ASSIGN_OR_RETURN(c.max_tokens, args.IntInRange("max-tokens", 1, 1 << 20));
  c.out = args.String("out");
  c.label = args.String("label");
  c.mode = args.String("mode");
  if (args.String("policy") == "shift") {
    c.policy = v1::WINDOW_POLICY_SHIFT;
  } else if (args.String("policy") != "reprefill") {
    return absl::InvalidArgumentError(
        absl::StrCat("--policy: \"", args.String("policy"), "\" is not reprefill or shift"));
  }
  if (c.mode != "both" && c.mode != "sessions" && c.mode != "stateless") {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode: \"", c.mode, "\" is not sessions, stateless or both"));
  }
  return c;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  const std::vector<tandem::common::FlagSpec> specs = {
      {.name = "addr", .help = "gateway address HOST:PORT", .required = true},
      {.name = "turns", .default_value = "200", .help = "turns of the conversation"},
      {.name = "window", .default_value = "1024", .help = "the session's window, tokens"},
      {.name = "message-words", .default_value = "24", .help = "words per user message"},
      {.name = "max-tokens", .default_value = "32", .help = "tokens per reply (EOS ignored)"},
      {.name = "label", .help = "put in the JSON lines (the model, say)"},
      {.name = "policy", .default_value = "reprefill",
       .help = "the session's window policy: reprefill or shift"},
      {.name = "mode", .default_value = "both",
       .help = "sessions, stateless or both (one after the other: the second then finds the "
               "first's blocks in the prefix cache; use fresh processes to compare)"},
      {.name = "out", .help = "file to append the JSON lines to"},
  };
  int exit_code = 0;
  std::optional<tandem::common::Args> args =
      tandem::common::ParseFlagsOrExit("tandem-session-bench", argc, argv, specs, &exit_code);
  if (!args.has_value()) return exit_code;
  absl::StatusOr<tandem::bench::Config> config = tandem::bench::ConfigFromArgs(*args);
  if (!config.ok()) {
    std::cerr << "tandem-session-bench: " << config.status().message() << "\n";
    return 2;
  }
  auto stub = tandem::v1::Generation::NewStub(
      grpc::CreateChannel(config->addr, grpc::InsecureChannelCredentials()));
  if (config->mode != "stateless") {
    tandem::bench::Report(config->policy == tandem::v1::WINDOW_POLICY_SHIFT ? "shift" : "reprefill",
                          tandem::bench::RunSession(*stub, *config), *config);
  }
  if (config->mode != "sessions") {
    tandem::bench::Report("stateless", tandem::bench::RunStateless(*stub, *config), *config);
  }
  return 0;
}
