// The public tandem.v1.Generation service (callback API): validates each
// request into a ValidatedRequest and runs it as a GenerateCall reactor over
// the workers; answers Tokenize and ListModels from the tokenizer it loaded
// (the gateway never loads weights). No handler blocks. Thread-safe.
#ifndef TANDEM_GATEWAY_GENERATION_SERVICE_H_
#define TANDEM_GATEWAY_GENERATION_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/api_keys.h"
#include "gateway/routing/block_event_subscriber.h"
#include "gateway/routing/block_index.h"
#include "gateway/gateway_metrics.h"
#include "gateway/calls/generate_call.h"
#include "gateway/routing/admission_queue.h"
#include "gateway/routing/kv_budget.h"
#include "gateway/routing/kv_router.h"
#include "gateway/sessions/session_store_client.h"
#include "gateway/routing/worker_resolver.h"
#include "gateway/calls/validated_request.h"
#include "gateway/routing/worker_pace.h"
#include "gateway/routing/worker_picker.h"
#include "kvtransfer/rpc/lease_keeper.h"
#include "kvtransfer/rpc/release_client.h"
#include "prometheus/registry.h"
#include "rpc/admission.h"
#include "rpc/channel_cache.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::gateway {

// Sessions (CreateSession, Chat, ...); set from flags.
struct SessionOptions {
  // Window of a session that names none, in tokens (at most max_context).
  int32_t default_window = 4096;
  // Idle TTL of a session that names none, and the most one may name.
  int32_t default_ttl_seconds = 1800;
  int32_t max_ttl_seconds = 86400;
  // Decode workers each record is written to (the KV holder first).
  int32_t replicas = 2;
  // A turn whose decode worker holds all but at most this many of its
  // prompt tokens is prefilled there (0: always on a prefill worker).
  int32_t local_prefill_tokens = 512;
  // A turn that overflows its window evicts down to this fraction of it.
  double evict_to = 0.75;
  // Deadline of each call to a decode worker's session store.
  absl::Duration store_timeout = absl::Seconds(5);
  // Sessions whose record copies are remembered, so that a decode worker
  // found down has their records re-replicated at once (0: at their next
  // read), and how many of those re-replications run at once.
  int64_t rereplicate_tracked = 65536;
  int32_t rereplicate_parallel = 8;
};

struct GatewayOptions {
  std::string model_name;
  std::string architecture;
  GatewayLimits limits;
  // Renders GenerateRequest.messages (the model's, or --chat-template).
  engine::ChatTemplate chat_template = engine::ChatTemplate::Detect("");
  // Targets: "host:port" or "dns:///host:port" (every address the name has,
  // looked up again every `resolve_interval`).
  std::vector<std::string> prefill_workers;
  std::vector<std::string> decode_workers;
  absl::Duration resolve_interval = absl::Seconds(5);
  // Null: no API keys, every call is the anonymous tenant's.
  std::shared_ptr<ApiKeys> api_keys = nullptr;
  // Applied to Generate calls whose client set no earlier deadline.
  absl::Duration request_timeout = absl::Minutes(10);
  // Times a stream may move to another worker after one failed under it.
  int32_t max_migrations = 3;
  // Streams one decode worker decodes at once (match its --max-running):
  // requests past decode workers x this wait at admission.
  int32_t streams_per_decode_worker = 64;
  // How long a request waits for an unavailable prefill worker to come back.
  absl::Duration unavailable_wait = absl::Seconds(10);
  // A decode worker silent this long while owing a message is given up on.
  absl::Duration progress_timeout = absl::Seconds(20);
  // The least silence the adaptive deadline allows (WorkerPace).
  absl::Duration progress_floor = absl::Seconds(1);
  // How often a lease waiting for its decode worker is renewed (zero: off).
  absl::Duration lease_heartbeat = absl::Seconds(5);
  rpc::AdmissionLimits admission;
  // Requests are charged prompt + max_tokens of KV until they end, against
  // the decode workers' reported KV times this (<= 0: not checked).
  double kv_overcommit = 1.0;
  // Conditional disaggregation of requests that are no session turns
  // (CallEnv::local_prefill_tokens, local_prefill_queue).
  int32_t local_prefill_tokens = 32;
  int32_t local_prefill_queue = 0;
  // The admission queue (--admission-queue): requests waiting for capacity
  // instead of being refused; max_waiting 0 refuses at once.
  AdmissionQueueOptions admission_queue;
  rpc::ChannelCacheOptions channels;
  // Route prefills by the block index (false: to the least-loaded worker).
  bool kv_routing = true;
  RouterOptions router;
  BlockIndexOptions index;
  SessionOptions sessions;
};

// Generate and Tokenize are served on their raw (ByteBuffer) forms: requests
// are parsed here (rpc::ParseMessage), so one gRPC's generated code could not
// parse (invalid UTF-8 in a string field) is answered INVALID_ARGUMENT naming
// the field, and counted, instead of a bare UNIMPLEMENTED.
using GenerationServiceBase = tandem::v1::Generation::WithRawCallbackMethod_Generate<
    tandem::v1::Generation::WithRawCallbackMethod_Tokenize<
        tandem::v1::Generation::WithRawCallbackMethod_Chat<
            tandem::v1::Generation::CallbackService>>>;

class GenerationService final : public GenerationServiceBase {
 public:
  GenerationService(std::unique_ptr<engine::Tokenizer> tokenizer, GatewayOptions options,
                    prometheus::Registry& registry);
  // Waits for calls whose child calls are still finishing (after the gRPC
  // server was shut down, every one of them is ending).
  ~GenerationService() override;

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  // The channel to this service's own server (in-process): requests with
  // n > 1 run each choice through it (ChoicesCall). Set once, before serving.
  void SetSelfChannel(std::shared_ptr<grpc::Channel> channel);
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx,
                                       const tandem::v1::DetokenizeRequest* request,
                                       tandem::v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const tandem::v1::ListModelsRequest* request,
                                       tandem::v1::ListModelsResponse* response) override;

  // Sessions (session_rpcs.cc): records kept on the decode workers
  // (SessionStoreClient), each turn run as a GenerateCall of the window's
  // conversation (PlanChatTurn) and committed before its last message
  // (CommitChatTurn).
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* ctx,
                                          const tandem::v1::CreateSessionRequest* request,
                                          tandem::v1::SessionInfo* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Chat(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* ctx,
                                       const tandem::v1::GetSessionRequest* request,
                                       tandem::v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* ctx,
                                         const tandem::v1::CloseSessionRequest* request,
                                         tandem::v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* ctx,
                                         const tandem::v1::ListSessionsRequest* request,
                                         tandem::v1::ListSessionsResponse* response) override;

  const rpc::Admission& admission() const { return admission_; }
  const BlockIndex& block_index() const { return index_; }

  // Index slots of decode workers start here (prefill worker i is slot i).
  static constexpr int kDecodeSlotBase = 1 << 20;

  // From now on the server's health ("" and tandem.v1.Generation) follows
  // the workers: SERVING while at least one prefill and one decode worker
  // are reachable (their block event streams are synced). Null lets go
  // (before the server goes away).
  void AttachHealth(grpc::HealthCheckServiceInterface* health);
  // SIGTERM: new Generate calls are refused (UNAVAILABLE) while those in
  // flight finish; health is let go (the server's shutdown reports
  // NOT_SERVING).
  void Drain();

 private:
  // A resolver's new addresses for `picker`: the picker and the subscriber
  // follow them.
  void OnWorkersChanged(WorkerPicker& picker, const std::vector<std::string>& addresses);
  // Follows which workers are reachable: the pickers prefer them and the
  // health (once attached) reports whether the gateway can serve.
  void UpdateHealth();
  // UpdateHealth's work once attached; the decode workers it found down
  // that were not before.
  std::vector<std::string> UpdateHealthLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_);
  void Detach();

  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, const char* method,
                                   const absl::Status& status);
  // Counts a unary call that ends asynchronously and finishes `reactor`.
  void FinishUnary(grpc::ServerUnaryReactor* reactor, const char* method,
                   const absl::Status& status);
  CallEnv MakeCallEnv();
  // The caller's tenant from its API key (the anonymous one without keys);
  // Unauthenticated, counted, otherwise.
  absl::StatusOr<Tenant> Authenticate(const grpc::CallbackServerContext& ctx, const char* method);
  // The session's turn `request` once its record is read: planned by
  // PlanChatTurn, run by `call`, committed by CommitChatTurn and the store.
  void BeginTurn(std::shared_ptr<GenerateCall> call, const tandem::v1::ChatRequest& request,
                 absl::StatusOr<tandem::v1::SessionRecord> record);
  // How many leading blocks of `prompt` decode worker `decode_worker` has
  // reported (never the one holding the last token); -1 when it is not
  // known reachable.
  int32_t HeldBlocks(const std::string& decode_worker, std::span<const int32_t> prompt,
                     uint64_t cache_salt) const;
  // The decode workers' addresses (where session records live).
  std::vector<SessionStoreClient::DecodeWorker> DecodeWorkers() const;

  std::unique_ptr<engine::Tokenizer> tokenizer_;
  const GatewayOptions options_;
  WorkerPicker prefill_;
  WorkerPicker decode_;
  WorkerPace decode_pace_;  // by decode_ index: the progress deadline's pace
  rpc::ChannelCache channels_;
  kvtransfer::ReleaseClient releases_;
  kvtransfer::LeaseKeeper lease_keeper_;
  rpc::Admission admission_;
  KvBudget kv_budget_;
  GatewayMetrics metrics_;
  // After what its waiters' calls use: destroyed (its waiters ended) first.
  AdmissionQueue admission_queue_;
  // Slots: prefill picker index i; kDecodeSlotBase + decode picker index i.
  BlockIndex index_;
  KvRouter prefill_router_;
  KvRouter decode_router_;
  std::unique_ptr<BlockEventSubscriber> subscriber_;  // after what it feeds
  SessionStoreClient sessions_;
  absl::Mutex workers_mu_;  // orders membership updates from the resolvers
  absl::Mutex health_mu_;
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(health_mu_) = nullptr;
  // False once destruction began: worker reachability is no longer followed.
  bool attached_ ABSL_GUARDED_BY(health_mu_) = true;
  // Decode workers found down (by address) and not back since: a new one
  // has its sessions' records re-replicated.
  absl::flat_hash_set<std::string> decode_down_ ABSL_GUARDED_BY(health_mu_);
  std::atomic<bool> draining_{false};
  // The smallest max_context the synced workers report (0: none yet).
  std::atomic<int32_t> workers_max_context_{0};
  // SetSelfChannel's stub, read by calls that may already be arriving.
  std::unique_ptr<tandem::v1::Generation::Stub> self_owner_;
  std::atomic<tandem::v1::Generation::Stub*> self_{nullptr};
  // After the pickers and the subscriber they update.
  std::unique_ptr<WorkerResolver> prefill_resolver_;
  std::unique_ptr<WorkerResolver> decode_resolver_;
  LiveCalls live_;  // last member: the first to be waited for
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_GENERATION_SERVICE_H_
