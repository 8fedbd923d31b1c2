#include "gateway/generation_service.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/log.h"
#include "gateway/calls/choices_call.h"
#include "gateway/calls/generate_call.h"
#include "gateway/routing/draft_kv_room.h"
#include "rpc/status.h"
#include "rpc/wire_parse.h"

namespace tandem::gateway {

GenerationService::GenerationService(std::unique_ptr<engine::Tokenizer> tokenizer,
                                     GatewayOptions options, prometheus::Registry& registry)
    : tokenizer_(std::move(tokenizer)),
      options_(std::move(options)),
      prefill_(std::vector<std::string>{}),
      decode_(std::vector<std::string>{}),
      channels_(options_.channels),
      releases_(channels_, "tandem-gateway"),
      lease_keeper_(channels_, options_.lease_heartbeat),
      admission_("gateway", options_.admission),
      kv_budget_(options_.kv_overcommit, registry),
      metrics_(registry),
      admission_queue_(options_.admission_queue, registry),
      index_(options_.index),
      prefill_router_(index_, 0, options_.router, registry, RouteRole::kPrefill),
      decode_router_(index_, kDecodeSlotBase, options_.router, registry, RouteRole::kDecode),
      sessions_(channels_,
                {.decode_workers = [this] { return DecodeWorkers(); },
                 .replicas = options_.sessions.replicas,
                 .timeout = options_.sessions.store_timeout,
                 .tracked_sessions = options_.sessions.rereplicate_tracked,
                 .rereplicate_parallel = options_.sessions.rereplicate_parallel,
                 .on_under_replicated =
                     [this] { metrics_.session_records_under_replicated.Increment(); },
                 .on_rereplicated = [this] { metrics_.session_records_rereplicated.Increment(); },
                 .calls_in_flight = &metrics_.session_store_calls_in_flight}) {
  subscriber_ = std::make_unique<BlockEventSubscriber>(
      index_, channels_, std::vector<BlockEventSubscriber::Worker>{}, registry,
      SubscriberOptions{.on_sync_change = [this] { UpdateHealth(); }});
  // Each resolves its targets once here (the first membership) and, for
  // DNS names, again every interval.
  prefill_resolver_ = std::make_unique<WorkerResolver>(
      options_.prefill_workers, options_.resolve_interval,
      [this](const std::vector<std::string>& a) { OnWorkersChanged(prefill_, a); });
  decode_resolver_ = std::make_unique<WorkerResolver>(
      options_.decode_workers, options_.resolve_interval,
      [this](const std::vector<std::string>& a) { OnWorkersChanged(decode_, a); });
}

void GenerationService::OnWorkersChanged(WorkerPicker& picker,
                                         const std::vector<std::string>& addresses) {
  absl::MutexLock lock(&workers_mu_);
  picker.SetAddresses(addresses);
  std::vector<BlockEventSubscriber::Worker> workers;
  for (const auto& [p, base] : {std::pair<WorkerPicker*, int>{&prefill_, 0},
                                std::pair<WorkerPicker*, int>{&decode_, kDecodeSlotBase}}) {
    for (int i = 0; i < p->size(); ++i) {
      if (p->active(i)) workers.push_back({.slot = base + i, .address = p->address(i)});
    }
  }
  subscriber_->SetWorkers(workers);
}

GenerationService::~GenerationService() {
  Detach();
  live_.AwaitNone();
}

void GenerationService::AttachHealth(grpc::HealthCheckServiceInterface* health) {
  {
    absl::MutexLock lock(&health_mu_);
    health_ = health;
  }
  UpdateHealth();
}

void GenerationService::Detach() {
  absl::MutexLock lock(&health_mu_);
  health_ = nullptr;
  attached_ = false;
}

void GenerationService::UpdateHealth() {
  // Under the lock: a detached server is never touched again, and a
  // service being destroyed has detached.
  absl::MutexLock lock(&health_mu_);
  if (!attached_) return;
  // Sessions with a record copy on a decode worker just found down get one
  // elsewhere (after the pickers know it unreachable, so the new copies
  // avoid it). OnWorkerLost only queues reads and starts calls.
  for (const std::string& address : UpdateHealthLocked()) sessions_.OnWorkerLost(address);
}

std::vector<std::string> GenerationService::UpdateHealthLocked() {
  std::vector<std::string> lost_decode_workers;
  const std::vector<int> synced = subscriber_->synced_slots();
  const std::vector<int> down = subscriber_->down_slots();
  int64_t synced_prefill = 0, synced_decode = 0;
  for (int slot : synced) ++(slot < kDecodeSlotBase ? synced_prefill : synced_decode);
  // The pickers try reachable workers first, and only those count toward
  // the decode capacity: a worker is unreachable once its event stream
  // broke (or never connected) until it is synced again; one not yet heard
  // from counts.
  for (const auto& [picker, base] : {std::pair<WorkerPicker*, int>{&prefill_, 0},
                                     std::pair<WorkerPicker*, int>{&decode_, kDecodeSlotBase}}) {
    for (int i = 0; i < picker->size(); ++i) {
      const bool is_down = std::find(down.begin(), down.end(), base + i) != down.end();
      picker->SetReachable(i, !is_down);
      if (picker != &decode_) continue;
      const std::string address = picker->address(i);
      if (is_down && picker->active(i) && decode_down_.insert(address).second) {
        lost_decode_workers.push_back(address);
      } else if (!is_down) {
        decode_down_.erase(address);
      }
    }
  }
  const BlockEventSubscriber::KvCapacity kv = subscriber_->SyncedKvCapacity(kDecodeSlotBase);
  kv_budget_.SetCapacity(kv.tokens, kv.block_size);
  // A gateway that would accept sequences its workers refuse is
  // misconfigured: not SERVING until its --max-context fits theirs.
  const bool consistent = kv.max_context == 0 || options_.limits.max_context <= kv.max_context;
  if (workers_max_context_.exchange(kv.max_context) != kv.max_context && !consistent) {
    common::LogLine("tandem-gateway")
        << "--max-context " << options_.limits.max_context << " exceeds the workers' "
        << kv.max_context << ": not serving until they agree";
  }
  if (health_ != nullptr) {
    // Aggregated (no prefill workers): the decode workers serve alone.
    const bool serving =
        (synced_prefill > 0 || options_.prefill_workers.empty()) && synced_decode > 0 && consistent;
    health_->SetServingStatus(serving);  // "" (this also resets named services)
    health_->SetServingStatus(tandem::v1::Generation::service_full_name(), serving);
  }
  // Last: one who reads these sees the capacity and health they made.
  metrics_.synced_workers.Add({{"role", "prefill"}}).Set(static_cast<double>(synced_prefill));
  metrics_.synced_workers.Add({{"role", "decode"}}).Set(static_cast<double>(synced_decode));
  return lost_decode_workers;
}

grpc::ServerUnaryReactor* GenerationService::Answer(grpc::CallbackServerContext* ctx,
                                                     const char* method,
                                                     const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  FinishUnary(reactor, method, status);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw) {
  tandem::v1::GenerateRequest request;
  absl::StatusOr<ValidatedRequest> validated;
  absl::StatusOr<Tenant> tenant = Authenticate(*ctx, "Generate");
  if (!tenant.ok()) {
    validated = tenant.status();
  } else if (absl::Status parsed = rpc::ParseMessage(*raw, &request); !parsed.ok()) {
    metrics_.malformed_requests.Add({{"method", "Generate"}}).Increment();
    validated = std::move(parsed);
  } else if (draining_.load()) {
    validated = absl::UnavailableError("the gateway is draining (shutting down); retry on another");
  } else {
    validated = ValidateGenerateRequest(request, *tokenizer_, options_.model_name, options_.limits,
                                        &options_.chat_template);
    if (validated.ok()) validated->cache_salt = tenant->salt;
  }
  if (validated.ok() && request.n() > 1) {
    tandem::v1::Generation::Stub* self = self_.load();
    if (self == nullptr) {
      validated = absl::UnimplementedError("n: this gateway runs one completion per request");
    } else if (absl::Status id = AssignRequestId(*ctx, *validated); !id.ok()) {
      validated = id;
    } else {
      // Every choice under one id, seeds consecutive from the request's.
      request.set_request_id(validated->request_id);
      request.mutable_sampling()->set_seed(validated->seed_given ? validated->sampling.seed
                                                                 : DrawSeed());
      return ChoicesCall::Start(ctx, std::move(request), self, &live_);
    }
  }
  return GenerateCall::Start(MakeCallEnv(), ctx, std::move(validated));
}

absl::StatusOr<Tenant> GenerationService::Authenticate(const grpc::CallbackServerContext& ctx,
                                                      const char* method) {
  if (options_.api_keys == nullptr) return Tenant{};
  const auto& metadata = ctx.client_metadata();
  const auto it = metadata.find("authorization");
  const std::string value =
      it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  ApiKeys::Result r = options_.api_keys->Authenticate(it == metadata.end() ? nullptr : &value);
  if (!r.tenant.ok()) {
    metrics_.auth_failures.Add({{"method", method}, {"reason", AuthFailureName(r.failure)}})
        .Increment();
  }
  return std::move(r.tenant);
}

void GenerationService::SetSelfChannel(std::shared_ptr<grpc::Channel> channel) {
  self_owner_ = tandem::v1::Generation::NewStub(std::move(channel));
  self_.store(self_owner_.get());
}

CallEnv GenerationService::MakeCallEnv() {
  return {.tokenizer = tokenizer_.get(),
          .prefill = &prefill_,
          .prefill_router = options_.kv_routing ? &prefill_router_ : nullptr,
          .decode = &decode_,
          .decode_router = options_.kv_routing ? &decode_router_ : nullptr,
          .channels = &channels_,
          .releases = &releases_,
          .lease_keeper = &lease_keeper_,
          .admission = &admission_,
          .kv_budget = &kv_budget_,
          .admission_queue = &admission_queue_,
          .metrics = &metrics_,
          .live = &live_,
          .request_timeout = options_.request_timeout,
          .max_migrations = options_.max_migrations,
          .decode_capacity =
              [this] {
                // Only workers that answer: a dead or cut-off one (its
                // block event stream broke) stops counting at once, and
                // counts again once its stream is back.
                // Each takes --decode-worker-streams, or fewer where it
                // reports a bound of its own (a latency target's).
                int64_t streams = 0;
                for (int i = 0; i < decode_.size(); ++i) {
                  if (!decode_.active(i) || !decode_.reachable(i)) continue;
                  const int32_t own = subscriber_->StreamCapacity(kDecodeSlotBase + i);
                  streams += own > 0 ? std::min(own, options_.streams_per_decode_worker)
                                     : options_.streams_per_decode_worker;
                }
                metrics_.decode_stream_capacity.Set(static_cast<double>(streams));
                return streams;
              },
          .decode_wants_draft_kv =
              [this] {
                std::vector<std::optional<int32_t>> rooms;
                for (int i = 0; i < decode_.size(); ++i) {
                  if (!decode_.active(i) || !decode_.reachable(i)) continue;
                  rooms.push_back(subscriber_->DraftKvRoom(kDecodeSlotBase + i));
                }
                int64_t prefilling = 0;
                for (int i = 0; i < prefill_.size(); ++i) prefilling += prefill_.in_flight(i);
                return DecodeRoomForDraftKv(rooms, prefilling);
              },
          .unavailable_wait = options_.unavailable_wait,
          .progress_timeout = options_.progress_timeout,
          .progress_floor = options_.progress_floor,
          .decode_pace = &decode_pace_,
          .suspect =
              [this](WorkerRole role, int index) {
                subscriber_->Suspect((role == WorkerRole::kDecode ? kDecodeSlotBase : 0) + index);
              },
          .local_prefill_tokens = options_.local_prefill_tokens,
          .local_prefill_queue = options_.local_prefill_queue,
          .kv_block_size =
              [this] {
                const std::optional<BlockHashParams> params = index_.params();
                return params.has_value() ? params->block_size : 0;
              },
          .aggregated = options_.prefill_workers.empty()};
}

std::vector<SessionStoreClient::DecodeWorker> GenerationService::DecodeWorkers() const {
  std::vector<SessionStoreClient::DecodeWorker> out;
  for (int i = 0; i < decode_.size(); ++i) {
    if (decode_.active(i)) {
      out.push_back({.address = decode_.address(i), .reachable = decode_.reachable(i)});
    }
  }
  return out;
}

void GenerationService::FinishUnary(grpc::ServerUnaryReactor* reactor, const char* method,
                                    const absl::Status& status) {
  metrics_.requests.Add({{"method", method}, {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
  reactor->Finish(rpc::ToGrpcStatus(status));
}

void GenerationService::Drain() {
  draining_.store(true);
  AttachHealth(nullptr);
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* raw,
                                                      grpc::ByteBuffer* raw_response) {
  tandem::v1::TokenizeRequest parsed;
  if (absl::StatusOr<Tenant> t = Authenticate(*ctx, "Tokenize"); !t.ok()) {
    return Answer(ctx, "Tokenize", t.status());
  }
  if (absl::Status s = rpc::ParseMessage(*raw, &parsed); !s.ok()) {
    metrics_.malformed_requests.Add({{"method", "Tokenize"}}).Increment();
    return Answer(ctx, "Tokenize", s);
  }
  const tandem::v1::TokenizeRequest* request = &parsed;
  if (absl::Status s = ValidateModel(request->model(), options_.model_name); !s.ok()) {
    return Answer(ctx, "Tokenize", s);
  }
  if (static_cast<int64_t>(request->text().size()) > options_.limits.max_prompt_bytes) {
    return Answer(ctx, "Tokenize", absl::InvalidArgumentError(absl::StrCat(
                                       "text: ", request->text().size(),
                                       " bytes exceed the limit of ",
                                       options_.limits.max_prompt_bytes)));
  }
  const bool special = !request->no_special();
  tandem::v1::TokenizeResponse response;
  for (int32_t id : tokenizer_->Encode(request->text(),
                                       {.add_special = special, .parse_special = special})) {
    response.add_token_ids(id);
  }
  *raw_response = rpc::SerializeMessage(response);
  return Answer(ctx, "Tokenize", absl::OkStatus());
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(
    grpc::CallbackServerContext* ctx, const tandem::v1::DetokenizeRequest* request,
    tandem::v1::DetokenizeResponse* response) {
  if (absl::StatusOr<Tenant> t = Authenticate(*ctx, "Detokenize"); !t.ok()) {
    return Answer(ctx, "Detokenize", t.status());
  }
  if (absl::Status s = ValidateModel(request->model(), options_.model_name); !s.ok()) {
    return Answer(ctx, "Detokenize", s);
  }
  // Bounded as a prompt's ids are.
  if (request->token_ids_size() > options_.limits.max_context) {
    return Answer(ctx, "Detokenize", absl::InvalidArgumentError(absl::StrCat(
                                         "token_ids: ", request->token_ids_size(),
                                         " ids exceed max_context ",
                                         options_.limits.max_context)));
  }
  for (int i = 0; i < request->token_ids_size(); ++i) {
    if (!tokenizer_->IsValidId(request->token_ids(i))) {
      return Answer(ctx, "Detokenize",
                    absl::InvalidArgumentError(absl::StrCat(
                        "token_ids[", i, "]: ", request->token_ids(i), " is out of range [0, ",
                        tokenizer_->n_vocab(), ")")));
    }
  }
  const std::span<const int32_t> ids(request->token_ids().data(), request->token_ids_size());
  response->set_text(SanitizeUtf8(tokenizer_->Decode(ids, !request->skip_special())));
  return Answer(ctx, "Detokenize", absl::OkStatus());
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* ctx,
                                                        const tandem::v1::ListModelsRequest*,
                                                        tandem::v1::ListModelsResponse* response) {
  if (absl::StatusOr<Tenant> t = Authenticate(*ctx, "ListModels"); !t.ok()) {
    return Answer(ctx, "ListModels", t.status());
  }
  tandem::v1::ModelInfo* m = response->add_models();
  m->set_id(options_.model_name);
  m->set_architecture(options_.architecture);
  m->set_vocab_size(tokenizer_->n_vocab());
  // What the workers enforce, when they enforce less than the gateway.
  const int32_t workers = workers_max_context_.load();
  m->set_max_context(workers > 0 ? std::min(workers, options_.limits.max_context)
                                 : options_.limits.max_context);
  return Answer(ctx, "ListModels", absl::OkStatus());
}

}  // namespace tandem::gateway
