// GenerationService's session methods: CreateSession, Chat, GetSession,
// CloseSession, ListSessions. A session's record lives on the decode
// workers (SessionStoreClient); every handler returns at once and answers
// from the store's callbacks. A Chat turn is planned and committed by
// turn_plan.h's pure functions; here they are wired to the store and a
// GenerateCall.
#include <algorithm>
#include <random>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "gateway/generation_service.h"
#include "gateway/sessions/session_window.h"
#include "gateway/sessions/turn_plan.h"
#include "rpc/status.h"
#include "rpc/wire_parse.h"

namespace tandem::gateway {
namespace {

absl::Status FieldError(const std::string& field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

// 128 random bits as 32 hex digits.
std::string NewSessionId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%016x%016x", rng(), rng());
}

tandem::v1::SessionInfo Info(const tandem::v1::SessionRecord& r) {
  tandem::v1::SessionInfo info;
  info.set_session_id(r.session_id());
  info.set_model(r.model());
  *info.mutable_window() = r.window();
  info.set_idle_ttl_seconds(r.idle_ttl_seconds());
  info.set_turns_held(r.turns_size() / 2);
  info.set_tokens_held(r.tokens_held());
  info.set_turns_evicted(r.turns_evicted());
  info.set_tokens_evicted(r.tokens_evicted());
  for (const engine::ChatMessage& m : SessionMessages(r)) {
    tandem::v1::ChatMessage* out = info.add_messages();
    out->set_role(m.role);
    out->set_content(m.content);
  }
  info.set_created_unix_seconds(r.created_unix_seconds());
  return info;
}

// Another tenant's session is answered as an unknown one.
absl::StatusOr<tandem::v1::SessionRecord> OwnedBy(absl::StatusOr<tandem::v1::SessionRecord> r,
                                                  const Tenant& tenant) {
  if (r.ok() && r->tenant() != tenant.name) {
    return absl::NotFoundError(absl::StrCat("session_id: \"", r->session_id(), "\" is unknown"));
  }
  return r;
}

}  // namespace

int32_t GenerationService::HeldBlocks(const std::string& decode_worker,
                                      std::span<const int32_t> prompt,
                                      uint64_t cache_salt) const {
  constexpr int32_t kUnknown = -1;
  const std::optional<BlockHashParams> params = index_.params();
  if (decode_worker.empty() || !params.has_value()) return kUnknown;
  int index = -1;
  for (int i = 0; i < decode_.size(); ++i) {
    if (decode_.active(i) && decode_.address(i) == decode_worker) index = i;
  }
  const std::vector<int> synced = subscriber_->synced_slots();
  if (index < 0 || std::find(synced.begin(), synced.end(), kDecodeSlotBase + index) ==
                       synced.end()) {
    return kUnknown;  // gone, or not known reachable
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int32_t bs = params->block_size;
  // The block holding the last prompt token is always computed.
  const std::vector<engine::BlockHash> chain = engine::PrefixBlockHashes(
      prompt.first(static_cast<size_t>((n - 1) / bs) * bs), bs, params->model_fingerprint,
      cache_salt);
  const std::vector<int> slot = {kDecodeSlotBase + index};
  return index_.Overlap(slot, chain, absl::Now(), false)[0];
}

grpc::ServerUnaryReactor* GenerationService::CreateSession(
    grpc::CallbackServerContext* ctx, const tandem::v1::CreateSessionRequest* request,
    tandem::v1::SessionInfo* response) {
  const char* kMethod = "CreateSession";
  absl::StatusOr<Tenant> tenant = Authenticate(*ctx, kMethod);
  if (!tenant.ok()) return Answer(ctx, kMethod, tenant.status());
  if (draining_.load()) {
    return Answer(ctx, kMethod,
                  absl::UnavailableError("the gateway is draining (shutting down); retry on "
                                         "another"));
  }
  if (absl::Status s = ValidateModel(request->model(), options_.model_name); !s.ok()) {
    return Answer(ctx, kMethod, s);
  }
  if (static_cast<int64_t>(request->system_prompt().size()) > options_.limits.max_prompt_bytes) {
    return Answer(ctx, kMethod,
                  FieldError("system_prompt", absl::StrCat(request->system_prompt().size(),
                                                           " bytes exceed the limit of ",
                                                           options_.limits.max_prompt_bytes)));
  }
  const tandem::v1::SessionWindow& w = request->window();
  const int32_t max_context = options_.limits.max_context;
  tandem::v1::SessionRecord record;
  tandem::v1::SessionWindow* window = record.mutable_window();
  if (w.max_tokens() < 0 || w.max_tokens() > max_context) {
    return Answer(ctx, kMethod,
                  FieldError("window.max_tokens",
                             absl::StrCat(w.max_tokens(), " is out of range [0, max_context ",
                                          max_context, "] (0: the gateway's --session-window)")));
  }
  window->set_max_tokens(w.max_tokens() > 0
                             ? w.max_tokens()
                             : std::min(options_.sessions.default_window, max_context));
  switch (w.policy()) {
    case tandem::v1::WINDOW_POLICY_UNSPECIFIED:
    case tandem::v1::WINDOW_POLICY_REPREFILL:
      window->set_policy(tandem::v1::WINDOW_POLICY_REPREFILL);
      break;
    case tandem::v1::WINDOW_POLICY_SHIFT:
      window->set_policy(tandem::v1::WINDOW_POLICY_SHIFT);
      break;
    default:
      return Answer(ctx, kMethod,
                    FieldError("window.policy", absl::StrCat("unknown value ", w.policy())));
  }
  if (request->idle_ttl_seconds() < 0 ||
      request->idle_ttl_seconds() > options_.sessions.max_ttl_seconds) {
    return Answer(ctx, kMethod,
                  FieldError("idle_ttl_seconds",
                             absl::StrCat(request->idle_ttl_seconds(), " is out of range [0, ",
                                          options_.sessions.max_ttl_seconds,
                                          "] (0: the gateway's --session-ttl-s; the most is "
                                          "--max-session-ttl-s)")));
  }
  record.set_idle_ttl_seconds(request->idle_ttl_seconds() > 0
                                  ? request->idle_ttl_seconds()
                                  : options_.sessions.default_ttl_seconds);
  record.set_system_prompt(request->system_prompt());
  // The system prompt alone, as every turn's prompt begins.
  absl::StatusOr<std::vector<int32_t>> system =
      RenderTokens(SessionMessages(record), false, *tokenizer_, options_.chat_template);
  if (!system.ok()) return Answer(ctx, kMethod, system.status());
  const int32_t system_tokens = static_cast<int32_t>(system->size());
  if (system_tokens >= window->max_tokens()) {
    return Answer(ctx, kMethod,
                  FieldError("system_prompt",
                             absl::StrCat(system_tokens, " tokens leave no room in "
                                          "window.max_tokens ", window->max_tokens())));
  }
  if (w.keep_first() < 0 || w.keep_first() >= window->max_tokens()) {
    return Answer(ctx, kMethod,
                  FieldError("window.keep_first",
                             absl::StrCat(w.keep_first(), " is out of range [0, window.max_tokens ",
                                          window->max_tokens(), ")")));
  }
  window->set_keep_first(w.keep_first() > 0 ? w.keep_first() : system_tokens);
  record.set_session_id(NewSessionId());
  record.set_version(1);
  record.set_model(options_.model_name);
  record.set_tenant(tenant->name);
  record.set_tokens_held(system_tokens);
  record.set_created_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));

  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  *response = Info(record);
  sessions_.Save(record, "", [this, reactor](absl::Status status) {
    FinishUnary(reactor, "CreateSession", status);
  });
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetSession(
    grpc::CallbackServerContext* ctx, const tandem::v1::GetSessionRequest* request,
    tandem::v1::SessionInfo* response) {
  absl::StatusOr<Tenant> tenant = Authenticate(*ctx, "GetSession");
  if (!tenant.ok()) return Answer(ctx, "GetSession", tenant.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) {
    return Answer(ctx, "GetSession", s);
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  sessions_.Load(request->session_id(), [this, reactor, response, tenant = *tenant](
                                            absl::StatusOr<tandem::v1::SessionRecord> loaded) {
                   absl::StatusOr<tandem::v1::SessionRecord> record =
                       OwnedBy(std::move(loaded), tenant);
                   if (record.ok()) *response = Info(*record);
                   FinishUnary(reactor, "GetSession", record.status());
                 });
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::CloseSession(
    grpc::CallbackServerContext* ctx, const tandem::v1::CloseSessionRequest* request,
    tandem::v1::CloseSessionResponse*) {
  absl::StatusOr<Tenant> tenant = Authenticate(*ctx, "CloseSession");
  if (!tenant.ok()) return Answer(ctx, "CloseSession", tenant.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) {
    return Answer(ctx, "CloseSession", s);
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Unknown sessions are an error, as for every other session method.
  sessions_.Load(request->session_id(), [this, reactor, tenant = *tenant](
                                            absl::StatusOr<tandem::v1::SessionRecord> loaded) {
                   absl::StatusOr<tandem::v1::SessionRecord> record =
                       OwnedBy(std::move(loaded), tenant);
                   if (!record.ok()) {
                     FinishUnary(reactor, "CloseSession", record.status());
                     return;
                   }
                   sessions_.Drop(record->session_id(), [this, reactor](absl::Status status) {
                     FinishUnary(reactor, "CloseSession", status);
                   });
                 });
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::ListSessions(
    grpc::CallbackServerContext* ctx, const tandem::v1::ListSessionsRequest*,
    tandem::v1::ListSessionsResponse* response) {
  absl::StatusOr<Tenant> tenant = Authenticate(*ctx, "ListSessions");
  if (!tenant.ok()) return Answer(ctx, "ListSessions", tenant.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  sessions_.List([this, reactor, response, name = tenant->name](
                     std::vector<tandem::v1::SessionRecord> records) {
    for (const tandem::v1::SessionRecord& r : records) {
      if (r.tenant() == name) *response->add_sessions() = Info(r);
    }
    FinishUnary(reactor, "ListSessions", absl::OkStatus());
  });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Chat(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw) {
  std::shared_ptr<GenerateCall> call = GenerateCall::Open(MakeCallEnv(), ctx);
  tandem::v1::ChatRequest request;
  absl::StatusOr<Tenant> tenant = Authenticate(*ctx, "Chat");
  absl::Status status = tenant.status();
  if (status.ok()) {
    status = rpc::ParseMessage(*raw, &request);
    if (!status.ok()) metrics_.malformed_requests.Add({{"method", "Chat"}}).Increment();
  }
  if (!status.ok()) {
    // Refused as it is.
  } else if (draining_.load()) {
    status = absl::UnavailableError("the gateway is draining (shutting down); retry on another");
  } else {
    // Before the record is read: a bad request costs no store call.
    status = ValidateChatRequest(request, options_.limits);
  }
  if (!status.ok()) {
    call->Begin(status);
    return call.get();
  }
  const std::string id = request.session_id();
  sessions_.Load(id, [this, call, request = std::move(request), tenant = *tenant](
                         absl::StatusOr<tandem::v1::SessionRecord> record) mutable {
    BeginTurn(std::move(call), request, OwnedBy(std::move(record), tenant));
  });
  return call.get();
}

void GenerationService::BeginTurn(std::shared_ptr<GenerateCall> call,
                                  const tandem::v1::ChatRequest& request,
                                  absl::StatusOr<tandem::v1::SessionRecord> record) {
  if (!record.ok()) {
    call->Begin(record.status());
    return;
  }
  TurnOptions options;
  options.tokenizer = tokenizer_.get();
  options.chat_template = &options_.chat_template;
  options.model_name = options_.model_name;
  options.limits = options_.limits;
  options.evict_to = options_.sessions.evict_to;
  options.local_prefill_tokens = options_.sessions.local_prefill_tokens;
  if (const std::optional<BlockHashParams> params = index_.params(); params.has_value()) {
    options.block_size = params->block_size;
  }
  options.held_blocks = [this](const std::string& holder, std::span<const int32_t> prompt,
                               uint64_t salt) { return HeldBlocks(holder, prompt, salt); };
  absl::StatusOr<ChatTurnPlan> plan = PlanChatTurn(*record, request, options);
  if (!plan.ok()) {
    call->Begin(plan.status());
    return;
  }
  absl::StatusOr<ValidatedRequest> generate = std::move(plan->request);
  SessionTurn turn = std::move(plan->turn);
  // The commit reads the plan's window and message; its request and routing
  // go to the call.
  turn.commit = [this, record = std::move(*record), plan = std::move(*plan),
                 options = std::move(options)](std::string reply,
                                               std::vector<int32_t> reply_ids,
                                               std::string decode_address,
                                               SessionTurn::CommitDone done) {
    TurnResult result;
    result.reply = std::move(reply);
    result.reply_ids = std::move(reply_ids);
    result.decode_address = std::move(decode_address);
    const CommittedTurn next = CommitChatTurn(record, plan, result, options);
    sessions_.Save(next.record, record.kv_holder(),
                   [done = std::move(done), usage = next.usage](absl::Status status) {
                     done(std::move(status), usage);
                   });
  };
  call->Begin(std::move(generate), std::move(turn));
}

}  // namespace tandem::gateway
