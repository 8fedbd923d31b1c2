// `tandem chat`: an interactive client for a person, on a session
// (Generation.CreateSession, then one Generation.Chat per line read from
// stdin): the service keeps the conversation in a rolling window, so only
// each new line is sent and a conversation never outgrows the context. The
// reply streams to stdout; token counts, timings and the window's state go
// to stderr after each turn. Commands: /quit (or EOF) ends and closes the
// session, /reset starts a new one. Single-threaded: the blocking gRPC stub
// runs on the calling thread.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "cli/commands.h"
#include "common/status_macros.h"
#include "rpc/gateway_client.h"
#include "rpc/status.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kHelpTail[] =
    "Each line you type is one user turn of a session the service keeps: the\n"
    "reply streams to stdout and token stats go to stderr. Turns are rendered\n"
    "with the model's chat template (plain \"User:\" / \"Assistant:\" lines when\n"
    "it has none); when the window fills, the oldest turns after the system\n"
    "text are evicted. A reply stops before the model writes \"\\nUser:\" itself.\n"
    "Commands: /quit (or end of input) exits; /reset starts a new session.\n";

// Plain-rendered models go on to write the user's next line themselves.
constexpr char kStopString[] = "\nUser:";

struct ChatConfig {
  std::string addr;
  std::string model;
  int32_t max_tokens = 256;
  float temperature = 0.8f;
  float top_p = 1;
  uint64_t seed = 0;  // 0: a fresh random seed each turn
  std::string system;
  int32_t window = 0;  // 0: the gateway's --session-window
  int timeout_s = 300;
  int connect_timeout_s = 10;
  rpc::GatewayClientOptions client;  // TLS and API key
};

std::vector<common::FlagSpec> ChatFlagSpecs() {
  std::vector<common::FlagSpec> specs = {
      {.name = "addr", .default_value = "127.0.0.1:50051",
       .help = "gateway address HOST:PORT (what `tandem up` printed)"},
      {.name = "model", .help = "model name from ListModels; empty = the gateway's default"},
      {.name = "max-tokens", .default_value = "256", .help = "most tokens per reply"},
      {.name = "temperature", .default_value = "0.8", .help = "0 = greedy"},
      {.name = "top-p", .default_value = "1", .help = "nucleus sampling mass, (0, 1]"},
      {.name = "seed", .default_value = "0",
       .help = "sampling seed for every turn; 0 = a fresh random seed each turn"},
      {.name = "system", .help = "system text put before the conversation (never evicted)"},
      {.name = "window", .default_value = "0",
       .help = "tokens the session keeps (the oldest turns are evicted past it); 0 = the "
               "gateway's --session-window"},
      {.name = "timeout-s", .default_value = "300", .help = "deadline of each reply, seconds"},
      {.name = "connect-timeout-s", .default_value = "10",
       .help = "deadline of the first call (ListModels), seconds"},
  };
  for (common::FlagSpec& s : rpc::GatewayClientFlagSpecs()) specs.push_back(std::move(s));
  return specs;
}

absl::StatusOr<ChatConfig> ConfigFromArgs(const common::Args& args) {
  ChatConfig c;
  c.addr = args.String("addr");
  if (c.addr.empty()) return absl::InvalidArgumentError("--addr: empty");
  c.model = args.String("model");
  c.system = args.String("system");
  ASSIGN_OR_RETURN(c.client, rpc::GatewayClientOptionsFromArgs(args));
  auto int_in = [&](const std::string& name, int64_t lo, int64_t hi) -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(int64_t v, args.Int(name));
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": ", v, " is out of range [", lo, ", ", hi, "]"));
    }
    return static_cast<int>(v);
  };
  ASSIGN_OR_RETURN(c.max_tokens, int_in("max-tokens", 1, 1 << 24));
  ASSIGN_OR_RETURN(c.window, int_in("window", 0, 1 << 24));
  ASSIGN_OR_RETURN(c.timeout_s, int_in("timeout-s", 1, 86400));
  ASSIGN_OR_RETURN(c.connect_timeout_s, int_in("connect-timeout-s", 1, 3600));
  ASSIGN_OR_RETURN(double temperature, args.Double("temperature"));
  if (!(temperature >= 0 && temperature <= 100)) {
    return absl::InvalidArgumentError("--temperature: must be in [0, 100]");
  }
  c.temperature = static_cast<float>(temperature);
  ASSIGN_OR_RETURN(double top_p, args.Double("top-p"));
  if (!(top_p > 0 && top_p <= 1)) return absl::InvalidArgumentError("--top-p: must be in (0, 1]");
  c.top_p = static_cast<float>(top_p);
  ASSIGN_OR_RETURN(c.seed, args.Uint64("seed"));
  return c;
}

std::chrono::system_clock::time_point DeadlineIn(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// "INVALID_ARGUMENT: max_tokens: ..." for a failed call.
std::string Describe(const grpc::Status& status) {
  return rpc::FromGrpcStatus(status).ToString();
}

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_STOP:
      return "stop";
    default:
      return "unspecified";
  }
}

class Chat {
 public:
  Chat(ChatConfig config, std::ostream& out, std::ostream& err)
      : config_(std::move(config)),
        out_(out),
        err_(err),
        stub_(v1::Generation::NewStub(rpc::DialGateway(config_.addr, config_.client))),
        seeds_(std::random_device{}()) {}

  // Checks the gateway answers and names the model; the exit code on failure.
  int Connect() {
    grpc::ClientContext ctx;
    rpc::Authorize(ctx, config_.client);
    ctx.set_deadline(DeadlineIn(config_.connect_timeout_s));
    v1::ListModelsResponse models;
    const grpc::Status status = stub_->ListModels(&ctx, v1::ListModelsRequest(), &models);
    if (!status.ok()) {
      err_ << "tandem chat: cannot reach the gateway at " << config_.addr << ": "
           << Describe(status) << "\n";
      return 1;
    }
    for (const v1::ModelInfo& m : models.models()) {
      if (config_.model.empty() || m.id() == config_.model) {
        err_ << "tandem chat: " << config_.addr << " serves " << m.id() << " ("
             << m.architecture() << ", context " << m.max_context()
             << " tokens). /quit exits, /reset starts over.\n";
        return 0;
      }
    }
    err_ << "tandem chat: --model: the gateway at " << config_.addr << " serves no model \""
         << config_.model << "\"\n";
    return 2;
  }

  void Loop() {
    const bool interactive = ::isatty(STDIN_FILENO) == 1;
    std::string line;
    while (true) {
      if (interactive) err_ << "> " << std::flush;
      if (!std::getline(std::cin, line)) break;
      const std::string text(absl::StripAsciiWhitespace(line));
      if (text.empty()) continue;
      if (text == "/quit" || text == "/exit") break;
      if (text == "/reset") {
        Close();
        err_ << "[conversation cleared]\n";
        continue;
      }
      Turn(text);
    }
    Close();
  }

 private:
  // The session, created at the first turn (again after /reset or a failed
  // creation); false when it could not be.
  bool EnsureSession() {
    if (!session_id_.empty()) return true;
    v1::CreateSessionRequest request;
    request.set_model(config_.model);
    request.set_system_prompt(config_.system);
    request.mutable_window()->set_max_tokens(config_.window);
    grpc::ClientContext ctx;
    rpc::Authorize(ctx, config_.client);
    ctx.set_deadline(DeadlineIn(config_.connect_timeout_s));
    v1::SessionInfo info;
    const grpc::Status status = stub_->CreateSession(&ctx, request, &info);
    if (!status.ok()) {
      err_ << "tandem chat: " << Describe(status) << "\n";
      return false;
    }
    session_id_ = info.session_id();
    return true;
  }

  void Close() {
    if (session_id_.empty()) return;
    v1::CloseSessionRequest request;
    request.set_session_id(session_id_);
    grpc::ClientContext ctx;
    rpc::Authorize(ctx, config_.client);
    ctx.set_deadline(DeadlineIn(config_.connect_timeout_s));
    v1::CloseSessionResponse response;
    // Best effort: an unclosed session expires after its idle TTL.
    (void)stub_->CloseSession(&ctx, request, &response);
    session_id_.clear();
  }

  void Turn(const std::string& user_text) {
    if (!EnsureSession()) return;
    v1::ChatRequest request;
    request.set_session_id(session_id_);
    request.set_message(user_text);
    request.set_max_tokens(config_.max_tokens);
    request.add_stop(kStopString);
    v1::SamplingParams* sampling = request.mutable_sampling();
    sampling->set_temperature(config_.temperature);
    sampling->set_top_p(config_.top_p);
    sampling->set_seed(config_.seed != 0 ? config_.seed : seeds_());

    grpc::ClientContext ctx;
    rpc::Authorize(ctx, config_.client);
    ctx.set_deadline(DeadlineIn(config_.timeout_s));
    const Clock::time_point sent = Clock::now();
    Clock::time_point first;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Chat(&ctx, request);
    v1::GenerateResponse response;
    int64_t n_tokens = 0;
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    v1::Usage usage;
    while (reader->Read(&response)) {
      for (const v1::Token& t : response.tokens()) {
        if (n_tokens++ == 0) first = Clock::now();
        out_ << t.text();
      }
      out_.flush();
      if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        finish = response.finish_reason();
        usage = response.usage();
      }
    }
    const grpc::Status status = reader->Finish();
    const Clock::time_point done = Clock::now();
    if (n_tokens > 0) out_ << "\n" << std::flush;
    if (!status.ok()) {
      // The session does not keep a failed turn: the next one is asked as if
      // this never was.
      err_ << "tandem chat: " << Describe(status) << "\n";
      if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        session_id_.clear();  // expired or lost: the next turn starts a new one
        err_ << "[the session is gone; the next line starts a new one]\n";
      }
      return;
    }
    const double ttft = std::chrono::duration<double>(first - sent).count();
    const double decode_s = std::chrono::duration<double>(done - first).count();
    err_ << absl::StrFormat(
        "[%d tokens, finish %s; prompt %d tokens (%d cached); TTFT %.3f s; %.1f tokens/s; "
        "session holds %d tokens%s]\n",
        n_tokens, FinishName(finish), usage.prompt_tokens(), usage.cached_prompt_tokens(),
        n_tokens > 0 ? ttft : 0.0,
        n_tokens > 1 ? static_cast<double>(n_tokens - 1) / std::max(decode_s, 1e-9) : 0.0,
        usage.session_tokens_held(),
        usage.session_tokens_evicted() > 0
            ? absl::StrCat(", this turn evicted ", usage.session_tokens_evicted())
            : std::string());
  }

  const ChatConfig config_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<v1::Generation::Stub> stub_;
  std::string session_id_;  // empty until the first turn
  std::mt19937_64 seeds_;  // per-turn seeds when --seed is 0
};

}  // namespace

int RunChat(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<common::FlagSpec> specs = ChatFlagSpecs();
  absl::StatusOr<common::Args> args = common::Args::Parse(argv, specs);
  if (!args.ok() || args->help()) {
    if (!args.ok()) err << "tandem chat: " << args.status().message() << "\n";
    err << common::Args::Usage("chat", specs) << kHelpTail;
    return args.ok() ? 0 : 2;
  }
  absl::StatusOr<ChatConfig> config = ConfigFromArgs(*args);
  if (!config.ok()) {
    err << "tandem chat: " << config.status().message() << "\n";
    return 2;
  }
  Chat chat(*std::move(config), out, err);
  if (const int code = chat.Connect(); code != 0) return code;
  chat.Loop();
  return 0;
}

}  // namespace tandem::cli
