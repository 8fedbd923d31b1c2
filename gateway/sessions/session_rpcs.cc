// GenerationService's session methods: CreateSession, Chat, GetSession,
// CloseSession, ListSessions. A session's record lives on the decode
// workers (SessionStoreClient); every handler returns at once and answers
// from the store's callbacks.
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
#include "rpc/convert.h"
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

absl::Status ValidateSessionId(const std::string& id) {
  if (id.empty()) return FieldError("session_id", "empty");
  if (id.size() > 128) return FieldError("session_id", "longer than 128 bytes");
  return absl::OkStatus();
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
  } else if (status = ValidateSessionId(request.session_id()); status.ok()) {
    if (request.message().empty()) {
      status = FieldError("message", "empty");
    } else if (static_cast<int64_t>(request.message().size()) >
               options_.limits.max_prompt_bytes) {
      status = FieldError("message", absl::StrCat(request.message().size(),
                                                  " bytes exceed the limit of ",
                                                  options_.limits.max_prompt_bytes));
    } else if (request.max_tokens() < 0) {
      status = FieldError("max_tokens",
                          absl::StrCat("must be >= 0 (0 = unset), got ", request.max_tokens()));
    }
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
  const bool shift = record->window().policy() == tandem::v1::WINDOW_POLICY_SHIFT;
  // The decode worker rolls a reply that outgrows the window (it needs two
  // blocks after the kept prefix; the block size is the workers').
  const std::optional<BlockHashParams> params = index_.params();
  const int32_t window = record->window().max_tokens();
  const int32_t keep = record->window().keep_first();
  const bool can_roll =
      params.has_value() && window >= keep + 2 * params->block_size + 1;
  const int32_t max_tokens =
      request.max_tokens() > 0 ? request.max_tokens() : options_.limits.default_max_tokens;
  absl::StatusOr<TurnPlan> plan =
      shift ? PlanShiftTurn(*record, request.message(), max_tokens, *tokenizer_,
                            options_.chat_template, options_.sessions.evict_to, can_roll)
            : PlanTurn(*record, request.message(), max_tokens, *tokenizer_,
                       options_.chat_template, options_.sessions.evict_to, can_roll);
  if (!plan.ok()) {
    call->Begin(plan.status());
    return;
  }
  tandem::v1::GenerateRequest generate;
  generate.mutable_prompt_token_ids()->Assign(plan->prompt_ids.begin(), plan->prompt_ids.end());
  generate.set_max_tokens(plan->max_tokens);
  rpc::ChatSamplingToGenerate(request, &generate);
  *generate.mutable_stop() = request.stop();
  generate.set_ignore_eos(request.ignore_eos());
  absl::StatusOr<ValidatedRequest> validated = ValidateGenerateRequest(
      generate, *tokenizer_, options_.model_name, options_.limits, &options_.chat_template);
  const uint64_t salt = TenantSalt(record->tenant());
  if (validated.ok()) validated->cache_salt = salt;

  SessionTurn turn;
  turn.session_id = record->session_id();
  turn.kv_holder = record->kv_holder();
  if (can_roll) {
    turn.roll_window = window;
    turn.roll_keep = keep;
  }
  if (shift) {
    // The KV is the holder's alone (the index knows none of it): the turn
    // goes there, or is rebuilt from its tokens on another worker.
    turn.local_prefill = !record->kv_holder().empty();
    turn.private_kv = true;
    turn.shift_from = plan->shift_from;
    turn.shift_count = plan->shift_count;
  } else if (validated.ok() && params.has_value()) {
    // Few tokens to compute: the holder prefills them itself. Otherwise a
    // prefill worker does, pulling the blocks the holder keeps.
    const int32_t held = HeldBlocks(record->kv_holder(), validated->prompt_ids, salt);
    const int64_t to_compute =
        static_cast<int64_t>(validated->prompt_ids.size()) - int64_t{held} * params->block_size;
    turn.local_prefill = held >= 0 && options_.sessions.local_prefill_tokens > 0 &&
                         to_compute <= options_.sessions.local_prefill_tokens;
    turn.holder_blocks = std::max(held, 0);
  }
  turn.commit = [this, record = std::move(*record), plan = std::move(*plan),
                 message = request.message(), shift](std::string reply,
                                                     std::vector<int32_t> reply_ids,
                                                     std::string decode_address,
                                                     SessionTurn::CommitDone done) {
    tandem::v1::SessionRecord next = record;
    next.set_version(record.version() + 1);
    next.clear_turns();
    for (const tandem::v1::ChatMessage& m : plan.kept_turns) *next.add_turns() = m;
    tandem::v1::ChatMessage* user = next.add_turns();
    user->set_role("user");
    user->set_content(message);
    tandem::v1::ChatMessage* assistant = next.add_turns();
    assistant->set_role("assistant");
    assistant->set_content(std::move(reply));
    next.set_turns_evicted(record.turns_evicted() + plan.turns_evicted);
    next.set_tokens_evicted(record.tokens_evicted() + plan.tokens_evicted);
    if (shift) {
      // What the holder's KV is built from: the prompt, then the reply's
      // tokens (an end-of-generation token left out: the template's own
      // end of turn follows in the next turn's tokens).
      next.mutable_kv_token_ids()->Assign(plan.prompt_ids.begin(), plan.prompt_ids.end());
      if (!reply_ids.empty() && tokenizer_->IsEog(reply_ids.back())) reply_ids.pop_back();
      next.mutable_kv_token_ids()->Add(reply_ids.begin(), reply_ids.end());
      next.mutable_turn_token_offsets()->Assign(plan.turn_offsets.begin(),
                                                plan.turn_offsets.end());
      next.set_tokens_held(next.kv_token_ids_size());
    } else {
      absl::StatusOr<std::vector<int32_t>> held =
          RenderTokens(SessionMessages(next), false, *tokenizer_, options_.chat_template);
      next.set_tokens_held(held.ok() ? static_cast<int32_t>(held->size()) : 0);
    }
    if (!decode_address.empty()) next.set_kv_holder(decode_address);
    tandem::v1::Usage usage;
    usage.set_session_tokens_evicted(static_cast<int32_t>(plan.tokens_evicted));
    usage.set_session_tokens_held(next.tokens_held());
    usage.set_session_rebuilt(!record.kv_holder().empty() && !decode_address.empty() &&
                              decode_address != record.kv_holder());
    sessions_.Save(next, record.kv_holder(),
                   [done = std::move(done), usage](absl::Status status) {
                     done(std::move(status), usage);
                   });
  };
  call->Begin(std::move(validated), std::move(turn));
}

}  // namespace tandem::gateway
