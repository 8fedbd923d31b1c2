// The public tandem.v1.Generation service: validates each request into a
// ValidatedRequest and runs it as a GenerateCall over the workers; answers
// Tokenize and ListModels from the tokenizer it loaded (the gateway never
// loads weights). Handlers run on gRPC's sync-server threads. Thread-safe.
#ifndef TANDEM_GATEWAY_GENERATION_SERVICE_H_
#define TANDEM_GATEWAY_GENERATION_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "gateway/gateway_metrics.h"
#include "gateway/validated_request.h"
#include "gateway/worker_picker.h"
#include "prometheus/registry.h"
#include "rpc/channel_cache.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::gateway {

struct GatewayOptions {
  std::string model_name;
  std::string architecture;
  GatewayLimits limits;
  std::vector<std::string> prefill_workers;
  std::vector<std::string> decode_workers;
  // Applied to Generate calls whose client set no earlier deadline.
  absl::Duration request_timeout = absl::Minutes(10);
};

class GenerationService final : public tandem::v1::Generation::Service {
 public:
  GenerationService(std::unique_ptr<engine::Tokenizer> tokenizer, GatewayOptions options,
                    prometheus::Registry& registry);

  grpc::Status Generate(grpc::ServerContext* ctx, const tandem::v1::GenerateRequest* request,
                        grpc::ServerWriter<tandem::v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const tandem::v1::TokenizeRequest* request,
                        tandem::v1::TokenizeResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* ctx, const tandem::v1::ListModelsRequest* request,
                          tandem::v1::ListModelsResponse* response) override;

 private:
  grpc::Status Count(const char* method, const absl::Status& status);

  std::unique_ptr<engine::Tokenizer> tokenizer_;
  const GatewayOptions options_;
  WorkerPicker prefill_;
  WorkerPicker decode_;
  rpc::ChannelCache channels_;
  GatewayMetrics metrics_;
};

}  // namespace tandem::gateway

#endif  // TANDEM_GATEWAY_GENERATION_SERVICE_H_
